"""The ``memindex`` command as an OpenClaw user meets it: ``openclaw memory status|index|search``
parity, global options anywhere, help, ``--version`` and shell completion.

The two parsers below are written from OpenClaw's documented output shapes
(``src/cli/memory-cli.ts``: ``status --json`` and the text of ``search``), not from
our code, and our output must go through them unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memindex.producers.cli.runner import build_parser
from memindex.producers.cli.options import command_parsers
from tests.conftest import module_server, run_cli
from tests.provider_server import ProviderServer

server = module_server(ProviderServer)

# --- parsers of OpenClaw's shapes ------------------------------------------------------------

_HEADER = re.compile(r"^(\d+\.\d{3}) (.+):(\d+)-(\d+)$")


def parse_openclaw_search(text: str) -> list[dict]:
    """``<score.toFixed(3)> <path>:<start>-<end>``, the snippet, a blank line; or ``No matches.``"""
    if text.strip() == "No matches.":
        return []
    out: list[dict] = []
    for line in text.rstrip("\n").split("\n"):
        m = _HEADER.match(line)
        if m:
            out.append({"score": float(m[1]), "path": m[2], "startLine": int(m[3]), "endLine": int(m[4]),
                        "snippet": []})
        else:
            assert out, f"snippet before the first result header: {line!r}"
            out[-1]["snippet"].append(line)
    for r in out:
        r["snippet"] = "\n".join(r["snippet"]).strip()
    assert out, "neither results nor 'No matches.'"
    return out


def _is(v, *types) -> bool:
    return isinstance(v, types)


def parse_openclaw_status(text: str) -> list[dict]:
    """``[{agentId, status:{…}, embeddingProbe, indexError, scan}]`` with OpenClaw's field types."""
    entries = json.loads(text)
    assert _is(entries, list) and entries
    for e in entries:
        assert {"agentId", "status", "embeddingProbe", "indexError", "scan"} <= set(e)
        s = e["status"]
        assert _is(e["agentId"], str) and s["backend"] in ("builtin", "qmd")
        for key in ("files", "chunks"):
            assert _is(s[key], int)
        assert _is(s["dirty"], bool)
        for key in ("workspaceDir", "dbPath", "provider", "requestedProvider"):
            assert _is(s[key], str), key
        assert s["model"] is None or _is(s["model"], str)
        assert _is(s["sources"], list) and _is(s["extraPaths"], list)
        for sc in s["sourceCounts"]:
            assert {"source", "files", "chunks"} <= set(sc)
        assert {"enabled", "entries", "maxEntries"} <= set(s["cache"])
        assert {"enabled", "available", "error"} <= set(s["fts"])
        assert s["fallback"] is None or {"from", "reason"} <= set(s["fallback"])
        assert {"enabled", "available", "extensionPath", "loadError", "dims"} <= set(s["vector"])
        assert {"enabled", "failures", "limit", "wait", "concurrency", "pollIntervalMs", "timeoutMs",
                "lastError", "lastProvider"} <= set(s["batch"])
        p = e["embeddingProbe"]
        assert p is None or (_is(p["ok"], bool) and (p["ok"] or _is(p["error"], str)))
        assert e["indexError"] is None or _is(e["indexError"], str)
        scan = e["scan"]
        assert {"sources", "totalFiles", "issues"} <= set(scan)
        for sc in scan["sources"]:
            assert {"source", "totalFiles", "issues"} <= set(sc)
    return entries


# --- a two-agent OpenClaw config ------------------------------------------------------------

@pytest.fixture
def two(tmp_path: Path) -> dict:
    """Agents main and ops with their own workspaces; ops has an extraPaths dir outside its workspace."""
    root = tmp_path
    for agent, note in (("main", "Mara fixed the kumquat router on Friday."),
                        ("ops", "The kumquat runbook says: restart the broker twice.")):
        (root / agent / "memory").mkdir(parents=True)
        (root / agent / "memory" / "2026-02-10.md").write_text(f"# 2026-02-10\n\n{note}\n")
    (root / "team").mkdir()
    (root / "team" / "t.md").write_text("# Team\n\nThe kumquat escalation goes to the team lead.\n")
    # (1536 hash buckets: at 384, "runbook" shares one with main's note, a cosine of 0.24 that is a
    # collision, not meaning, and stands far above the reference texts' background in a one-note store.)
    cfg = {"agents": {"defaults": {"memorySearch": {"provider": "hash", "outputDimensionality": 1536}},
                      "list": [{"id": "main", "workspace": str(root / "main")},
                               {"id": "ops", "workspace": str(root / "ops"),
                                "memorySearch": {"extraPaths": [str(root / "team")]}}]}}
    (root / "openclaw.json").write_text(json.dumps(cfg))
    (root / "cwd").mkdir()  # the CLI runs from a directory that is neither the repo nor a workspace
    return {"root": root, "base": ["--config", str(root / "openclaw.json"), "--state-dir", str(root / "state")],
            "cwd": root / "cwd"}


def _cli(two: dict, *args: str, ok: bool = True, env: dict | None = None):
    out = run_cli(*args, cwd=two["cwd"], env=env, timeout=120)
    if ok:
        assert out.returncode == 0, out.stderr
    return out


def test_index_and_status_cover_every_configured_agent(two):
    _cli(two, *two["base"], "index")
    entries = parse_openclaw_status(_cli(two, *two["base"], "status", "--json").stdout)
    by_agent = {e["agentId"]: e for e in entries}
    assert set(by_agent) == {"main", "ops"}
    assert by_agent["main"]["status"]["files"] == 1 and by_agent["ops"]["status"]["files"] == 2
    assert by_agent["ops"]["scan"]["totalFiles"] == 2 and not by_agent["ops"]["scan"]["issues"]
    assert by_agent["main"]["status"]["dirty"] is False and by_agent["main"]["embeddingProbe"] is None
    # --agent, before or after the command, narrows to one agent.
    for args in (["--agent", "ops", "status", "--json"], ["status", "--json", "--agent", "ops"]):
        (only,) = parse_openclaw_status(_cli(two, *two["base"], *args).stdout)
        assert only["agentId"] == "ops"


def test_search_for_a_session_searches_that_sessions_agent(two):
    """`search --session-key agent:ops:...` searched the default agent (main): the session's
    agent is the key's unless --agent names it (another one is a usage error), as over MCP/HTTP."""
    _cli(two, *two["base"], "index")

    def texts(*args: str) -> str:
        return " ".join(r["snippet"] for r in json.loads(_cli(two, *two["base"], "search", "--json", *args).stdout)["results"])

    assert "runbook" in texts("--session-key", "agent:Ops:telegram:direct:42", "runbook")  # ops' note
    assert "runbook" not in texts("--session-key", "agent:main:main", "runbook", "--min-score", "0")
    out = _cli(two, *two["base"], "--agent", "main", "search", "--session-key", "agent:ops:main", "x", ok=False)
    assert out.returncode == 2 and "does not match the session key's agent 'ops'" in out.stderr, out.stderr
    out = _cli(two, *two["base"], "search", "--session-key", "agent:zz:main", "x", ok=False)
    assert out.returncode == 2 and "--session-key: unknown agent 'zz'; configured: main, ops" in out.stderr


def test_a_query_starting_with_a_dash_is_told_how_to_search_it(two):
    out = _cli(two, *two["base"], "search", "-kumquat", ok=False)
    assert out.returncode == 2 and "put -- before it: memindex search -- -kumquat" in out.stderr, out.stderr
    out = _cli(two, *two["base"], "search", "--jsn", "x", ok=False)  # an option's typo: no such hint
    assert "did you mean --json?" in out.stderr and "put --" not in out.stderr, out.stderr
    assert _cli(two, *two["base"], "search", "--", "-kumquat").returncode == 0


def test_index_line_counts_the_files_it_had_to_skip(two):
    """A binary or oversized note used to vanish behind "indexed N file(s)" and exit 0: the line
    now says how many files the index holds nothing of."""
    (two["root"] / "main" / "memory" / "scan.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")
    out = _cli(two, *two["base"], "index")
    main_line = next(ln for ln in out.stdout.splitlines() if ln.startswith("main: "))
    assert main_line.endswith("; 1 skipped (binary, too large, ...: see `memindex status`)"), out.stdout
    # ...and does not count it among the files indexed (it said "indexed 2", status "1/2 files")
    assert main_line.startswith("main: indexed 1 file(s), removed 0, 0 unchanged"), main_line
    again = _cli(two, *two["base"], "index")  # nothing new: the skipped one is still said
    main_line = next(ln for ln in again.stdout.splitlines() if ln.startswith("main: "))
    assert main_line.startswith("main: indexed 0 file(s), removed 0, 2 unchanged; 1 skipped"), main_line
    ops_line = next(ln for ln in out.stdout.splitlines() if ln.startswith("ops: "))
    assert "skipped" not in ops_line, out.stdout


def test_search_text_parses_as_openclaw_and_matches_json(two):
    _cli(two, *two["base"], "index")
    text = _cli(two, *two["base"], "search", "--agent", "ops", "kumquat").stdout
    results = parse_openclaw_search(text)
    payload = json.loads(_cli(two, *two["base"], "--agent", "ops", "--json", "search", "kumquat").stdout)
    assert [(r["path"], r["startLine"], r["endLine"]) for r in results] == \
        [(r["path"], r["startLine"], r["endLine"]) for r in payload["results"]]
    assert [r["score"] for r in results] == [round(r["score"], 3) for r in payload["results"]]
    assert {r["path"] for r in results} == {"memory/2026-02-10.md", "../team/t.md"}
    assert "kumquat" in results[0]["snippet"]
    # Every path search returns reads back through get, the extraPaths one included.
    for r in results:
        got = _cli(two, *two["base"], "get", r["path"], "--agent", "ops").stdout
        assert "kumquat" in got
    refused = _cli(two, *two["base"], "--agent", "ops", "get", "../main/memory/2026-02-10.md", ok=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "outside" in refused.stderr
    # The default agent (the first configured) does not see ops' memory.
    assert parse_openclaw_search(_cli(two, *two["base"], "search", "runbook").stdout) == []
    assert _cli(two, *two["base"], "search", "runbook").stdout == "No matches.\n"


def test_status_deep_probes_the_provider(two, server):
    server.reset()
    cfg = json.loads((two["root"] / "openclaw.json").read_text())
    cfg["agents"]["defaults"]["memorySearch"] = {
        "provider": "openai", "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test"}}
    (two["root"] / "openclaw.json").write_text(json.dumps(cfg))
    (entry,) = parse_openclaw_status(_cli(two, *two["base"], "status", "--deep", "--agent", "main", "--json").stdout)
    probe = entry["embeddingProbe"]
    assert probe["ok"] is True and probe["provider"] == "openai" and probe["latencyMs"] >= 0
    assert server.count("openai") == 1  # one real request
    server.always("openai", {"status": 401, "message": "Incorrect API key provided"})
    try:
        out = _cli(two, *two["base"], "--agent", "main", "status", "--deep")
    finally:
        server.always("openai", None)
    assert "embeddings:   unavailable" in out.stdout and "401" in out.stdout


def test_status_index_indexes_first(two):
    (entry,) = parse_openclaw_status(_cli(two, *two["base"], "status", "--index", "--agent", "ops", "--json").stdout)
    assert entry["indexError"] is None and entry["status"]["files"] == 2
    assert entry["embeddingProbe"]["ok"] is True  # --index implies --deep


def test_status_scan_reports_missing_paths(two):
    cfg = json.loads((two["root"] / "openclaw.json").read_text())
    cfg["agents"]["list"][1]["memorySearch"]["extraPaths"].append(str(two["root"] / "gone"))
    (two["root"] / "openclaw.json").write_text(json.dumps(cfg))
    (entry,) = parse_openclaw_status(_cli(two, *two["base"], "status", "--agent", "ops", "--json").stdout)
    assert entry["scan"]["issues"] == [f"additional memory path missing ({two['root'] / 'gone'})"]
    assert entry["status"]["dirty"] is True  # never indexed


# --- the parser: global options anywhere, help, version, completion --------------------------

REQUIRED = {"get": ["MEMORY.md"], "completion": ["bash"]}


def _commands():
    return list(command_parsers(build_parser()))


@pytest.mark.parametrize("name", [n for n, _ in _commands()])
def test_global_options_before_or_after_every_command(name):
    parser = build_parser()
    opts = ["--config", "c.json", "--state-dir", "st", "--workspace", "ws", "--agent", "ops", "-v"]
    for argv in ([*opts, name, *REQUIRED.get(name, [])], [name, *REQUIRED.get(name, []), *opts]):
        a = parser.parse_args(argv)
        assert (a.command, a.config, a.state_dir, a.workspace, a.agent, a.verbose) == \
            (name, "c.json", "st", "ws", "ops", 1), argv
    a = parser.parse_args([name, *REQUIRED.get(name, [])])
    assert (a.config, a.state_dir, a.workspace, a.agent, a.verbose) == (None, None, None, None, 0)


def test_json_before_or_after_and_refused_where_it_does_not_apply(tmp_path):
    parser = build_parser()
    assert parser.parse_args(["--json", "status"]).json and parser.parse_args(["status", "--json"]).json
    assert not parser.parse_args(["status"]).json
    out = run_cli("--json", "watch", cwd=tmp_path)
    assert out.returncode == 2 and "--json does not apply to watch" in out.stderr
    assert "Traceback" not in out.stderr


def test_agent_and_all_together_is_one_line_error(tmp_path):
    out = run_cli("--agent", "ops", "batches", "--all", cwd=tmp_path)
    assert out.returncode == 2 and "not both" in out.stderr and "Traceback" not in out.stderr


_INTERNAL_ID = re.compile(r"\((?:[PF]\d+)(?:, ?[PF]\d+)*\)")


@pytest.mark.parametrize("name", [n for n, _ in _commands()])
def test_every_command_has_help_and_examples(name):
    parser = dict(_commands())[name]
    text = parser.format_help()
    assert re.search(r"examples:\n  (eval \"\$\()?memindex ", text), name
    # Each example's command stands apart from its description (a long one ran into it:
    # "... --lines 5 five lines from line 3"): two spaces at least, or a line of its own.
    lines = text.split("examples:\n", 1)[1].splitlines()
    for i, line in enumerate(lines):
        if re.match(r" {40,}\S", line):  # a description under its long command
            continue
        assert re.match(r"  \S.*?\S  +\S", line) or re.match(r" {40,}\S", lines[i + 1] if i + 1 < len(lines) else ""), line
    assert not _INTERNAL_ID.search(text), text
    assert not re.search(r"\bhash\b", text)  # the test-only provider is not offered to users
    for action in parser._actions:
        if action.option_strings or action.dest != "help":
            assert action.help and action.help != "==SUPPRESS==", (name, action.option_strings or action.dest)


def test_top_level_help_and_version(tmp_path):
    top = build_parser().format_help()
    assert not _INTERNAL_ID.search(top) and "examples:" in top and not re.search(r"\bhash\b", top)
    out = run_cli("--version", cwd=tmp_path)
    assert out.returncode == 0 and re.fullmatch(r"memindex \d+\.\d+\S*\n", out.stdout)


def test_completion_script_and_completions(tmp_path):
    script = run_cli("completion", "bash", cwd=tmp_path)
    assert script.returncode == 0 and "complete" in script.stdout and "memindex" in script.stdout
    # What the shell hook does: ask the program itself, through argcomplete's protocol.
    answer = tmp_path / "answer"
    line = "memindex sta"
    env = {"_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
    run_cli(cwd=tmp_path, env=env)
    assert [w.strip() for w in answer.read_text().split("\n")] == ["status"]
    line = "memindex status --de"
    env.update(COMP_LINE=line, COMP_POINT=str(len(line)))
    run_cli(cwd=tmp_path, env=env)
    assert [w.strip() for w in answer.read_text().split("\n")] == ["--deep"]


def test_compose_names_its_workspace_mounts_sessions_and_reads_keys_from_env_file():
    import json5
    import yaml

    from tests.conftest import REPO

    base = yaml.safe_load((REPO / "docker-compose.yml").read_text())["x-memindex"]
    mounts = {}  # source (may hold ${VAR:-default}) -> container path
    for v in base["volumes"]:
        dst = re.search(r":(/[^:]*)(?::ro)?$", v)[1]
        mounts[v[:v.rindex(":" + dst)]] = dst
    config_src = next(src for src, dst in mounts.items() if dst == base["environment"]["OPENCLAW_CONFIG_PATH"])
    cfg = json5.loads((REPO / config_src.split(":-", 1)[1].rstrip("}")).read_text())
    assert cfg["agents"]["defaults"]["workspace"] == "/state/workspace" in mounts.values()
    assert "/state/agents" in mounts.values()  # <state>/agents/<id>/sessions: the transcripts
    assert base["env_file"][0]["path"] == ".env"


# --- start-up cost (issue 19): a search or a no-change index imports only what it uses -----

_PROBE = """
import json, sys
from memindex.producers.cli.main import main
rc = main(sys.argv[1:])
heavy = ("dramatiq", "asyncio", "numpy", "llama_cpp", "json5", "dotenv", "difflib", "openai", "httpx")
other_commands = ("memindex.producers.cli.ops", "memindex.producers.cli.batch", "memindex.producers.cli.serve",
                  "memindex.producers.cli.status", "memindex.producers.cli.get")
print(json.dumps({"rc": rc, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in heavy
                                             or m in other_commands)}), file=sys.stderr)
"""


def test_search_and_no_change_index_import_no_queue_vector_or_sdk_code(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "ws" / "memory").mkdir(parents=True)
    (tmp_path / "ws" / "memory" / "n.md").write_text("# Notes\n\nThe kumquat router needs a reboot.\n")
    (tmp_path / "openclaw.json").write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "auto"}}}}))
    base = ["--config", str(tmp_path / "openclaw.json"), "--state-dir", str(tmp_path / "state"),
            "--workspace", str(tmp_path / "ws")]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "MEMINDEX_BROKER_URL"}

    def probe(*args: str) -> list[str]:
        r = subprocess.run([sys.executable, "-c", _PROBE, *base, *args], capture_output=True, text=True,
                           env=env, timeout=120, cwd=tmp_path)
        out = json.loads(r.stderr.strip().splitlines()[-1])
        assert out["rc"] == 0, r.stderr
        return out["loaded"]

    assert "dramatiq" in probe("index", "-q")  # the first index has work: the queue machinery runs
    # No-change resync: "auto" reads the local provider's auto_reason, never its numpy/llama code.
    assert probe("index", "-q") == []
    assert probe("search", "--json", "kumquat router") == []


def test_the_command_is_found_without_a_parser_or_left_to_the_full_one():
    from memindex.producers.cli.commands import COMMANDS, command_named

    assert command_named(["search", "x"]) == "search"
    assert command_named(["--agent", "ops", "-v", "--json", "status"]) == "status"
    assert command_named(["--config", "search", "index"]) == "index"  # an option's value is not the command
    assert command_named(["--agent=ops", "get", "MEMORY.md"]) == "get"
    assert command_named(["worker", "--writer"]) == "worker"
    for argv in ([], ["-h", "search"], ["--conf", "x", "search"], ["--", "search"], ["serch", "x"]):
        assert command_named(argv) is None, argv
    # Either way the same command line parses to the same arguments.
    argv = ["--agent", "ops", "search", "--json", "router", "vlan", "--max-results", "3"]
    assert vars(build_parser("search").parse_args(argv)) == vars(build_parser().parse_args(argv))
    argv = ["backfill", "--batch", "--wait", "--agent", "ops"]
    assert vars(build_parser("backfill").parse_args(argv)) == vars(build_parser().parse_args(argv))
    for cmd in (c.name for c in COMMANDS):  # each command alone
        assert [name for name, _ in command_parsers(build_parser(cmd))] == [cmd]


def test_help_version_and_one_command_import_no_other_commands_code(tmp_path):
    """The command table is the one place command code is loaded: --help and --version load none of
    it, and a command loads its own module and not the others' (their top-level imports are heavy)."""
    import subprocess
    import sys

    from memindex.producers.cli.commands import COMMANDS

    modules = sorted({c.run.split(":")[0] for c in COMMANDS} - {"memindex.producers.cli.runner"})
    code = ("import atexit, json, sys\n"
            f"mods = {modules!r}\n"
            "atexit.register(lambda: print(json.dumps(sorted(m for m in mods if m in sys.modules)), file=sys.stderr))\n"
            "from memindex.producers.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))")

    def loaded(*argv: str) -> list[str]:
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stderr.strip().splitlines()[-1])

    assert loaded("--help") == loaded("--version") == loaded("search", "--help") == []
    (tmp_path / "oc.json").write_text("{}")
    assert loaded("--config", str(tmp_path / "oc.json"), "--state-dir", str(tmp_path / "st"), "--workspace",
                  str(tmp_path), "get", "MEMORY.md") == ["memindex.producers.cli.get"]


def test_search_numbers_out_of_range_are_usage_errors(tmp_path) -> None:
    """--max-results 0 printed "No matches." and --min-score inf/nan passed every result or none."""
    base = ("--workspace", str(tmp_path / "ws"), "--state-dir", str(tmp_path / "state"), "search")
    for flag, value, needle in (("--max-results", "0", "at least 1"), ("--max-results", "-1", "at least 1"),
                                ("--min-score", "inf", "finite"), ("--min-score", "nan", "finite"),
                                # not "invalid _at_least_one value" (argparse names the type's function)
                                ("--max-results", "abc", "--max-results: not a whole number: 'abc'"),
                                ("--min-score", "high", "--min-score: not a number: 'high'"),
                                # scores are 0..1: 2 answered "No matches." every time
                                ("--min-score", "2", "between 0 and 1"), ("--min-score", "-0.5", "between 0 and 1")):
        r = run_cli(*base, flag, value, "kiwi")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, (flag, value, r.stderr)
    for blank in ("", "   "):  # "No matches." where a missing query is a usage error
        r = run_cli(*base, blank)
        assert r.returncode == 2 and "the query is empty" in r.stderr, r.stderr
    # get's numbers likewise (a negative --from exited 1 with memory_get's error, unlike search's)
    base = ("--workspace", str(tmp_path / "ws"), "--state-dir", str(tmp_path / "state"), "get", "MEMORY.md")
    for flag in ("--from", "--lines"):
        r = run_cli(*base, flag, "-1")
        assert r.returncode == 2 and "must be 0 or more, got -1" in r.stderr, (flag, r.stderr)


def test_disabled_agents_status_and_an_unknown_agent_flag_say_what_is_wrong(tmp_path):
    """A disabled agent's status told the user to run `memindex index`, which refuses it; an
    unknown --agent was called an invalid config, though the file is fine."""
    from tests.conftest import run_cli

    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = tmp_path / "openclaw.json"
    cfg.write_text('{"agents": {"list": [{"id": "main", "default": true, "workspace": "%s"},'
                   ' {"id": "off", "workspace": "%s", "memorySearch": {"enabled": false}}]}}' % (ws, tmp_path / "gone"))
    common = ["--config", str(cfg), "--state-dir", str(tmp_path / "state")]
    out = run_cli(*common, "status", "--agent", "off")
    assert out.returncode == 0 and "memory search disabled for this agent" in out.stdout, out.stdout
    assert "run `memindex index`" not in out.stdout
    assert "index refused" not in out.stdout, out.stdout  # its workspace is missing, but it is never indexed
    # OpenClaw's CLI prints this line for an agent with no memory manager; "No matches." read as a
    # search that ran and found nothing.
    out = run_cli(*common, "search", "--agent", "off", "anything")
    assert (out.returncode, out.stdout) == (0, "Memory search disabled.\n"), out
    out = run_cli(*common, "search", "--agent", "nope", "x")
    assert out.returncode == 2 and out.stderr.startswith("error: invalid option: --agent: unknown agent 'nope'"), out.stderr


def test_status_is_dirty_when_the_disk_changed_since_the_last_sync(agent):
    """With no watcher running, `status` said dirty: false (OpenClaw's status manager is dirty
    only before the first index) while a new note and an edit were not searchable."""
    from tests.test_mcp import cli_args

    args = cli_args(agent)[2:]
    agent.write("MEMORY.md", "# Memory\nfirst\n")
    agent.write("memory/2026-01-01.md", "a day\n")
    assert run_cli(*args, "index").returncode == 0

    def status() -> dict:
        out = run_cli(*args, "status", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)[0]["status"]

    assert status()["dirty"] is False and "diskChanges" not in status()
    agent.write("memory/2026-01-02.md", "a new note\n")
    agent.write("MEMORY.md", "# Memory\nfirst, edited\n")
    (agent.workspace / "memory" / "2026-01-01.md").unlink()
    st = status()
    assert st["dirty"] is True and st["diskChanges"] == {"toIndex": 2, "toDelete": 1}, st
    text = run_cli(*args, "status").stdout
    assert "changed:      2 file(s) new or changed on disk, 1 deleted since the last sync" in text, text
    assert run_cli(*args, "index").returncode == 0
    st = status()
    assert st["dirty"] is False and "diskChanges" not in st, st


def test_an_empty_path_option_is_a_one_line_usage_error(tmp_path):
    """`--config ""` (an unset shell variable) ran on the defaults with exit 0, as if no config file
    were meant; an empty --state-dir/--workspace exited 1 with the library's Context wording."""
    env = {"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    for flag in ("--config", "--state-dir", "--workspace"):
        for argv in ([flag, "", "status"], ["status", flag, " "]):
            out = run_cli(*argv, cwd=tmp_path, env=env)
            assert out.returncode == 2, (argv, out.returncode, out.stdout, out.stderr)
            assert out.stderr == f"error: {flag} must name a path, not an empty string\n", (argv, out.stderr)
            assert out.stdout == ""


def test_status_force_without_index_is_a_usage_error(tmp_path):
    """`status --force` alone was ignored (the old index's status, exit 0): --force only rebuilds with --index."""
    env = {"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    for argv in (["status", "--force"], ["--json", "status", "--force"]):
        out = run_cli(*argv, cwd=tmp_path, env=env)
        assert out.returncode == 2 and "status --force goes with --index" in out.stderr, (argv, out.stderr)
        assert out.stdout == "" and "Traceback" not in out.stderr
    assert build_parser().parse_args(["status", "--index", "--force"]).force  # together: still taken


def test_a_mistyped_option_gets_the_commands_usage_and_a_suggestion(tmp_path):
    """`search --max-resluts 3` printed the top-level usage block and no hint; `--max-result` (a
    prefix) was taken silently as --max-results; `status --force` showed the top-level usage."""
    env = {"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    for argv, says in ((["search", "--max-resluts", "3", "Redis"], "--max-resluts (did you mean --max-results?)"),
                       (["search", "--max-result", "3", "Redis"], "--max-result (did you mean --max-results?)"),
                       (["status", "--jsn"], "--jsn (did you mean --json?)"),
                       (["status", "--force"], "status --force goes with --index")):
        out = run_cli(*argv, cwd=tmp_path, env=env)
        assert out.returncode == 2 and out.stdout == "", (argv, out)
        assert out.stderr.startswith(f"usage: memindex {argv[0]} "), (argv, out.stderr)
        assert f"memindex {argv[0]}: error: " in out.stderr and says in out.stderr, (argv, out.stderr)


def test_files_skipped_for_their_content_are_not_promised_a_retry(agent):
    """The footer said "the next sync retries them" for files skipped for their content, which
    no sync retries until they change."""
    import io

    from memindex.pipeline.index.failures import failures_since
    from memindex.pipeline.index.records import FileRecord
    from memindex.producers.cli.failures import print_failures
    from memindex.workers.failures import note_record_failures

    agent.memory_config({"provider": "openai"})
    settings = agent.settings()
    settings.store_path.parent.mkdir(parents=True, exist_ok=True)
    recs = [FileRecord("sessions", "sessions/a.jsonl", "/x/a.jsonl", "error:TypeError", 1, 1, "session",
                       "could not be indexed (TypeError: boom); skipped"),
            FileRecord("memory", "memory/b.md", "/x/b.md", "h", 1, 1, "markdown",
                       "embedding pending (openai: 503: down); keyword-searchable until a later sync embeds it")]
    note_record_failures(settings, recs)
    out = io.StringIO()
    assert print_failures([("main", failures_since(settings.store_path, 0))], out) == 2
    text = out.getvalue()
    assert "1 file(s) not fully indexed (at most keyword-searchable); the next sync retries them" in text, text
    assert "1 file(s) skipped for their content; indexed once they change" in text, text
    assert "TypeError: boom (skipped until the file changes)" in text, text


def test_a_terminal_that_is_not_utf8_gets_escapes_not_a_traceback(agent):
    """helper-53: with an ISO-8859-1 locale (or PYTHONIOENCODING=ascii) an emoji in a note made
    `search` and `get` die with UnicodeEncodeError and print nothing; with Python's UTF-8 mode off
    in the C locale a query typed with "Über" held surrogates and matched nothing."""
    agent.write("memory/a.md", "# Owls\nthe \U0001f989 owl of the Über garden\n")
    agent.memory_config({"provider": "none"})
    agent.index()
    base = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    env = {"PYTHONIOENCODING": "ascii"}
    out = run_cli(*base, "search", "owl", env=env)
    assert out.returncode == 0 and "\\U0001f989 owl" in out.stdout and "Traceback" not in out.stderr, out.stderr
    out = run_cli(*base, "get", "memory/a.md", env=env)
    assert out.returncode == 0 and "\\U0001f989 owl" in out.stdout, out.stderr
    out = run_cli(*base, "search", "Über", env={"PYTHONUTF8": "0", "LC_ALL": "C", "LANG": "C"})
    assert out.returncode == 0 and "memory/a.md" in out.stdout, (out.stdout, out.stderr)


def test_status_text_says_whether_batch_embedding_is_on(agent):
    """helper-52: OpenClaw's text status prints "Batch: enabled|disabled"; ours said nothing (only
    --json had it)."""
    agent.write("memory/a.md", "# A\nkumquat\n")
    base = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    for enabled, word in ((False, "disabled"), (True, "enabled")):
        agent.memory_config({"provider": "none", "remote": {"batch": {"enabled": enabled}}})
        out = run_cli(*base, "status")
        assert out.returncode == 0 and f"batch:        {word}\n" in out.stdout, out.stdout


@pytest.mark.parametrize("args, says", [
    (["watch", "--max-watch-dirs", "0"], "must be at least 1, got 0"),  # its variable refuses 0 too
    (["watch", "--debounce-ms", "-5"], "must be 0 or more, got -5"),
])
def test_watch_numbers_out_of_range_are_usage_errors(tmp_path, args, says):
    r = run_cli("--state-dir", str(tmp_path / "state"), *args, timeout=60)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("args, says", [
    # helper-56: taken and ignored without a word
    (["backfill", "--timeout", "5"], "backfill --timeout goes with --wait"),
    (["queues", "--interval", "5"], "queues --interval goes with --watch"),
])
def test_an_option_that_needs_another_is_a_usage_error(tmp_path, args, says):
    r = run_cli("--state-dir", str(tmp_path / "state"), *args, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr


def test_a_worker_for_a_queue_that_does_not_exist_is_refused(tmp_path, redis_server):
    """helper-56: `worker --queues bogus` started a worker that consumed nothing, and said nothing."""
    r = run_cli("--state-dir", str(tmp_path / "state"), "worker", "--queues", "sync", "bogus",
                env={"MEMINDEX_BROKER_URL": redis_server.url}, timeout=60)
    assert r.returncode == 2 and "no queue named bogus; the queues are sync, embed, batch, write" in r.stderr, r.stderr


def test_completion_offers_agent_ids_and_memory_paths(tmp_path):
    """helper-18: Tab after --agent or `get` fell back to the files of the current directory."""
    from tests.conftest import Agent

    a = Agent(tmp_path / "a")
    a.write("MEMORY.md", "# Memory\n")
    a.write("memory/2026-02-10.md", "VLAN\n")
    a.write("memory/trips/lisbon.md", "Alfama\n")
    a.write("notes.md", "not memory\n")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace), "memorySearch": {"provider": "none"}},
                               "list": [{"id": "main", "default": True}, {"id": "ops"}, {"id": "office"}]}})
    answer = tmp_path / "answer"

    def complete(line: str) -> list[str]:
        answer.unlink(missing_ok=True)
        env = {"_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
        out = run_cli(cwd=tmp_path, env=env)
        assert out.stderr == "", out.stderr
        return sorted(w.strip() for w in answer.read_text().split("\n") if w.strip())

    base = f"memindex --config {a.config_path} --state-dir {a.state}"
    assert complete(f"{base} --agent ") == ["main", "office", "ops"]
    assert complete(f"{base} status --agent o") == ["office", "ops"]
    assert complete(f"{base} get memory/") == ["memory/2026-02-10.md", "memory/trips/lisbon.md"]
    offered = complete(f"{base} get ")  # (its options too)
    assert [w for w in offered if not w.startswith("-")] == ["MEMORY.md", "memory/2026-02-10.md",
                                                             "memory/trips/lisbon.md"]
    # A config that cannot be read offers nothing, and says nothing into the prompt.
    (tmp_path / "bad.json").write_text("{ broken")
    assert complete(f"memindex --config {tmp_path / 'bad.json'} --agent ") == []
