"""``memindex get``: a memory file read the way the memory_get tool reads it."""

from __future__ import annotations

import argparse
import json
import sys

from memindex.pipeline.errors import MemoryGetError
from memindex.pipeline.search.get import memory_get
from memindex.producers.cli.agents import command_settings
from memindex.producers.cli.options import say, say_error


def run(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    try:
        res = memory_get(settings, args.path, args.from_line, args.lines)
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
