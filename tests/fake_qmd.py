#!/usr/bin/env python3
"""A scripted stand-in for the ``qmd`` CLI (qmd 2.8.3 output shapes).

Used as ``memory.qmd.command`` in tests. It keeps its collections in
``$QMD_CONFIG_DIR/fake-state.json``, answers ``search|vsearch|query --json``
with qmd's recorded JSON shape (``docid``/``score``/``file`` as
``qmd://<collection>/<path>``/``line``/``title``/``snippet`` starting with an
``@@ -start,count @@`` header) by naive keyword matching over the files, and
prints ``collection list`` as qmd 2.8.3's table (which has no paths, even with
``--json``).

Failure modes come from a control file (``$FAKE_QMD_CONTROL`` or
``$QMD_CONFIG_DIR/fake-control.json``): ``{"mode": M, "only": [subcommands]}``
with M one of ``ok``, ``exit`` (non-zero exit), ``hang`` (sleeps, with a child
process, until killed), ``badjson``, ``empty`` (prints nothing),
``noresults`` (prints qmd's "No results found."), ``unknown-flag`` (search and
vsearch reject ``--json``; query works). Every call is appended to
``$FAKE_QMD_LOG`` or ``$QMD_CONFIG_DIR/fake-calls.jsonl`` as JSON (argv, cwd,
qmd env vars, pid).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ENV_KEYS = ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "QMD_CONFIG_DIR", "NO_COLOR")


def config_dir() -> Path:
    d = os.environ.get("QMD_CONFIG_DIR") or os.path.join(os.environ.get("XDG_CONFIG_HOME", "."), "qmd")
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    return p


def load_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def log_call(argv: list[str], extra: dict | None = None) -> None:
    path = Path(os.environ.get("FAKE_QMD_LOG") or config_dir() / "fake-calls.jsonl")
    rec = {"argv": argv, "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in ENV_KEYS},
           "pid": os.getpid(), **(extra or {})}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def control() -> dict:
    path = Path(os.environ.get("FAKE_QMD_CONTROL") or config_dir() / "fake-control.json")
    return load_json(path, {})


def state_path() -> Path:
    return config_dir() / "fake-state.json"


def load_state() -> dict:
    return load_json(state_path(), {"collections": {}})


def save_state(st: dict) -> None:
    state_path().write_text(json.dumps(st, indent=2))
    cache = Path(os.environ.get("XDG_CACHE_HOME", ".")) / "qmd"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "index.sqlite").write_bytes(b"fake")


def opt(args: list[str], *names: str) -> list[str]:
    vals = []
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            vals.append(args[i + 1])
    return vals


def positional(args: list[str]) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "--":
            out.extend(args[i + 1:])
            break
        if a in ("-n", "-c", "--name", "--mask", "--index", "--min-score"):
            skip = True
            continue
        if a.startswith("-"):
            continue
        out.append(a)
    return out


def files_of(coll: dict) -> list[str]:
    root = coll["path"]
    found: set[str] = set()
    for pat in [p.strip() for p in coll["pattern"].split(",") if p.strip()]:
        for f in glob.glob(os.path.join(root, pat), recursive=True):
            if os.path.isfile(f):
                found.add(os.path.relpath(f, root))
    return sorted(found)


# --- commands ---------------------------------------------------------------------

def cmd_collection(args: list[str]) -> int:
    st = load_state()
    colls = st["collections"]
    sub = args[0] if args else "list"
    rest = args[1:]
    if sub == "list":
        if not colls:
            print("No collections found. Run 'qmd collection add .' to create one.")
            return 0
        print(f"Collections ({len(colls)}):\n")
        for name, c in colls.items():
            print(f"{name} (qmd://{name}/)\n  Pattern:  {c['pattern']}\n  Files:    {len(files_of(c))}\n"
                  f"  Updated:  1s ago\n")
        return 0
    if sub == "show":
        name = rest[0] if rest else ""
        if name not in colls:
            print(f"Collection not found: {name}", file=sys.stderr)
            return 1
        c = colls[name]
        print(f"Collection: {name}\n  Path:     {c['path']}\n  Pattern:  {c['pattern']}\n  Include:  yes (default)")
        return 0
    if sub == "add":
        pos = positional(rest)
        path = os.path.abspath(pos[0] if pos else ".")
        name = (opt(rest, "--name") or [os.path.basename(path)])[0]
        mask = (opt(rest, "--mask") or ["**/*.md"])[0]
        if name in colls:
            print(f"Collection '{name}' already exists.\nUse a different name with --name <name>", file=sys.stderr)
            return 1
        for other, c in colls.items():
            if c["path"] == path and c["pattern"] == mask:
                print(f"A collection already exists for this path and pattern:\n  Name: {other} (qmd://{other}/)\n"
                      f"  Pattern: {mask}\n\nUse 'qmd update' to re-index it, or remove it first with "
                      f"'qmd collection remove {other}'", file=sys.stderr)
                return 1
        colls[name] = {"path": path, "pattern": mask}
        save_state(st)
        print(f"Creating collection '{name}'...\nCollection: {path} ({mask})\n\n"
              f"Indexed: {len(files_of(colls[name]))} new, 0 updated, 0 unchanged, 0 removed\n"
              f"✓ Collection '{name}' created successfully")
        return 0
    if sub == "remove":
        name = rest[0] if rest else ""
        if name not in colls:
            print(f"Collection not found: {name}\nRun 'qmd collection list' to see available collections.",
                  file=sys.stderr)
            return 1
        del colls[name]
        save_state(st)
        print(f"✓ Removed collection '{name}'")
        return 0
    print(f"Unknown collection subcommand: {sub}", file=sys.stderr)
    return 1


def cmd_search(mode: str, args: list[str]) -> int:
    st = load_state()
    colls = st["collections"]
    wanted = opt(args, "-c", "--collection")
    for name in wanted:
        if name not in colls:
            print(f"Collection not found: {name}", file=sys.stderr)
            return 1
    limit = int((opt(args, "-n") or ["5"])[0])
    query = " ".join(positional(args))
    terms = [t for t in re.findall(r"\w+", query.lower()) if len(t) > 1]
    hits = []
    for name in wanted or list(colls):
        c = colls[name]
        for rel in files_of(c):
            try:
                lines = Path(c["path"], rel).read_text(encoding="utf-8").split("\n")
            except (OSError, UnicodeDecodeError):
                continue
            matched = [i for i, line in enumerate(lines) if any(t in line.lower() for t in terms)]
            if not matched:
                continue
            first = matched[0]
            start = max(0, first - 1)
            window = lines[start:start + 4]
            n_terms = sum(1 for t in terms if any(t in line.lower() for line in lines))
            score = round(n_terms / (1 + n_terms) * (0.5 + 0.5 * n_terms / max(1, len(terms))), 4)
            header = f"@@ -{start + 1},{len(window)} @@ ({first - start} before, {len(window) - 1 - (first - start)} after)"
            title = next((ln.lstrip("# ").strip() for ln in lines if ln.startswith("#")), Path(rel).stem)
            hits.append({
                "docid": "#" + hashlib.sha1(f"{name}/{rel}".encode()).hexdigest()[:6],
                "score": score,
                "file": f"qmd://{name}/{rel}",
                "line": first + 1,
                "title": title,
                "snippet": header + "\n" + "\n".join(window) + "\n",
            })
    hits.sort(key=lambda h: -h["score"])
    print(json.dumps(hits[:limit], indent=2, ensure_ascii=False))
    return 0


def hang() -> int:
    # A child in the same process group: the runner must kill the whole group.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    log_call(["<hang>"], {"child_pid": child.pid})
    time.sleep(600)
    return 0


def main(argv: list[str]) -> int:
    log_call(argv)
    ctl = control()
    cmd = argv[0] if argv else ""
    mode = ctl.get("mode", "ok")
    only = ctl.get("only")
    if only is not None and cmd not in only:
        mode = "ok"
    if mode == "exit":
        print("fake qmd: simulated failure (SQLITE_CORRUPT)", file=sys.stderr)
        return int(ctl.get("code", 2))
    if mode == "hang":
        return hang()
    if cmd in ("search", "vsearch", "query"):
        if mode == "badjson":
            print("Loading models... [1/3 {\"docid\": \"#12\", \"score\":")
            return 0
        if mode == "empty":
            return 0
        if mode == "noresults":
            print("No results found.")
            return 0
        if mode == "unknown-flag" and cmd in ("search", "vsearch"):
            print(f"error: unknown option '--json' for '{cmd}'", file=sys.stderr)
            return 1
        return cmd_search(cmd, argv[1:])
    if cmd == "collection":
        return cmd_collection(argv[1:])
    if cmd in ("update", "embed"):
        st = load_state()
        print(f"{cmd}: {len(st['collections'])} collection(s)")
        return 0
    if cmd == "status":
        st = load_state()
        print(f"QMD Status\n\nCollections: {len(st['collections'])}")
        return 0
    if cmd in ("--version", "version"):
        print("qmd 2.8.3 (fake)")
        return 0
    print(f"Unknown command: {cmd}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
