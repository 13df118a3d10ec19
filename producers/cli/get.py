"""``memindex get``: a memory file read the way the memory_get tool reads it."""

from __future__ import annotations

import argparse
import json
import sys

from memindex.pipeline.display import unescape_controls
from memindex.pipeline.errors import MemoryGetError
from memindex.pipeline.search.get import memory_get
from memindex.producers.cli.agents import command_settings
from memindex.producers.cli.options import say, say_error


def run(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    try:
        res = memory_get(settings, args.path, args.from_line, args.lines)
        shown = unescape_controls(args.path)
        if res.missing and shown != args.path:
            # A name with a control character (a newline) is printed escaped by `search`: the path
            # copied from its line names that file (a file really named so is found first, above).
            again = memory_get(settings, shown, args.from_line, args.lines)
            res = res if again.missing else again
    except MemoryGetError as exc:
        if args.json:
            print(json.dumps({"path": args.path, "text": "", "disabled": True, "error": str(exc)}))  # OpenClaw's tool error
        else:
            say_error(f"{exc}")
        return 1
    if args.json:
        print(json.dumps(res.as_dict(), ensure_ascii=False))
    else:
        if res.missing:  # not an error (nothing recorded yet, as in OpenClaw), but not silence either
            say(f"{res.path} does not exist ({res.warning or 'nothing recorded yet'})")
        sys.stdout.write(res.text + ("" if res.text.endswith("\n") or not res.text else "\n"))
    return 0
