"""Procfile and docker-compose.yml start the same processes; `honcho start` really indexes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, Agent, kill_groups

PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")  # honcho's own grammar


def procfile() -> dict[str, list[str]]:
    out = {}
    for line in (REPO / "Procfile").read_text().splitlines():
        m = PROCFILE_LINE.match(line)
        if m:
            out[m.group(1)] = shlex.split(m.group(2))
    return out


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _command(svc: dict) -> list[str]:
    cmd = svc["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def test_procfile_and_compose_start_the_same_commands():
    procs = procfile()
    services = {k: v for k, v in compose()["services"].items() if k != "redis" and not v.get("profiles")}
    assert set(procs) == set(services) == {"watcher", "worker", "compute", "batch", "writer0", "writer1"}
    for name, cmd in procs.items():
        assert _command(services[name]) == cmd, name


def test_the_writer_is_one_thread_and_workers_skip_the_write_queue():
    from memindex.producers.cli.runner import build_parser

    procs = procfile()
    parser = build_parser()
    for k in (0, 1):  # N = 2 write shards, one writer each
        writer = parser.parse_args(procs[f"writer{k}"][1:])
        assert writer.command == "worker" and writer.writer and writer.shard == f"{k}/2"
    for name in ("worker", "compute", "batch"):
        worker = parser.parse_args(procs[name][1:])
        assert worker.command == "worker" and not worker.writer and "write" not in (worker.queues or [])
    from memindex.workers.broker import QUEUES

    assert parser.parse_args(procs["compute"][1:]).queues == ["embed"]  # the filesystem-free kind (issue 18)
    consumed = {q for name in ("worker", "compute", "batch") for q in parser.parse_args(procs[name][1:]).queues}
    assert consumed | {"write"} == set(QUEUES)  # every queue has a consumer
    watcher = parser.parse_args(procs["watcher"][1:])
    assert watcher.command == "watch" and watcher.all


def test_compose_wiring():
    doc = compose()
    svcs = doc["services"]
    assert svcs["redis"]["healthcheck"]["test"]
    for name in ("watcher", "worker", "writer0", "writer1"):
        s = svcs[name]
        assert s["environment"]["MEMINDEX_WRITE_SHARDS"] == "2"
        assert s["environment"]["MEMINDEX_BROKER_URL"].startswith("redis://redis:")
        assert s["environment"]["OPENCLAW_STATE_DIR"] == "/state"
        vols = s["volumes"]
        assert any(v.endswith(":/state") for v in vols), "state volume"
        assert any(v.endswith(":/state/workspace") for v in vols), "workspace volume"
        assert s["depends_on"]["redis"]["condition"] == "service_healthy"
        assert s["healthcheck"]["test"]
        assert s["build"] == "."
    for name in ("compute", "batch"):  # compute side (issue 18): the deployment's env, no store or memory file
        compute = svcs[name]
        assert compute["environment"]["MEMINDEX_BROKER_URL"].startswith("redis://redis:") and compute["healthcheck"]
        assert not any("/state" in v for v in compute["volumes"])
    assert (REPO / "Dockerfile").is_file()
    assert set(doc["volumes"]) >= {"memindex-state"}


def _our_processes(marker: str) -> list[int]:
    """PIDs whose environment carries this test's unique broker URL (honcho's children)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker.encode() in (d / "environ").read_bytes():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def _honcho_env(a: Agent, redis_url: str, **extra: str) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return dict(os.environ, MEMINDEX_BROKER_URL=redis_url, MEMINDEX_WRITE_SHARDS="2",
                OPENCLAW_STATE_DIR=str(a.state), OPENCLAW_CONFIG_PATH=str(a.config_path),
                PATH=bindir + os.pathsep + os.environ.get("PATH", ""), **extra)


def _honcho_agent(tmp_path: Path) -> Agent:
    pytest.importorskip("honcho")
    a = Agent(tmp_path / "a")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace),
                                            "memorySearch": {"sync": {"watchDebounceMs": 300}}}}})
    return a


@contextlib.contextmanager
def running_honcho(tmp_path: Path, env: dict[str, str], log_name: str = "honcho.log"):
    """`honcho start` on the repository's Procfile; on exit honcho is stopped as an operator
    would (SIGTERM), and no process of this test (its broker URL in the environment) outlives it."""
    envfile = tmp_path / "empty.env"
    envfile.write_text("")
    log_path = tmp_path / log_name
    log = open(log_path, "wb")
    # honcho of this interpreter: a pyenv shim's `honcho` put its own Python first on PATH, and the
    # Procfile's `memindex` was then another installation's.
    proc = subprocess.Popen([sys.executable, "-m", "honcho", "-f", str(REPO / "Procfile"), "-e", str(envfile), "start"], cwd=REPO,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log_path = log_path  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        # honcho stops its children itself (SIGTERM, then SIGKILL after 5 s) ...
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        # ... but they run in sessions of their own: make sure none outlives the test.
        for pid in _our_processes(f"MEMINDEX_BROKER_URL={env['MEMINDEX_BROKER_URL']}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()


def _found(a: Agent, q: str) -> bool:
    return bool(a.search(q)["results"])


def _wait_found(a: Agent, proc: subprocess.Popen, q: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not _found(a, q):
        assert proc.poll() is None, proc.log_path.read_text()  # type: ignore[attr-defined]
        time.sleep(0.1)
    assert _found(a, q), proc.log_path.read_text()  # type: ignore[attr-defined]


@pytest.mark.redis
def test_honcho_start_runs_the_pipeline(tmp_path, redis_server):
    a = _honcho_agent(tmp_path)
    a.write("memory/2026-02-01.md", "honcho started this index of the lychee notes\n")
    with running_honcho(tmp_path, _honcho_env(a, redis_server.url)) as proc:
        _wait_found(a, proc, "lychee", 25)
        a.write("memory/2026-02-02.md", "a later note about rambutan\n")
        _wait_found(a, proc, "rambutan", 15)


# --- the image: what the Dockerfile copies builds, installs and runs -------------------------------

def dockerfile_copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY line of the Dockerfile, destination resolved against
    the WORKDIR in force (its grammar: ``COPY [--flag=...] SRC... DEST``, one instruction a line)."""
    workdir, out = "/", []
    lines = [ln for ln in (REPO / "Dockerfile").read_text().splitlines() if not ln.lstrip().startswith("#")]
    for line in "\n".join(lines).replace("\\\n", " ").splitlines():  # continuation lines joined
        words = shlex.split(line)
        if not words:
            continue
        op, rest = words[0].upper(), words[1:]
        if op == "WORKDIR":
            workdir = os.path.join(workdir, rest[0])
        elif op in ("COPY", "ADD"):
            assert not any(w.startswith("--from") for w in rest), "a multi-stage COPY: teach this parser"
            rest = [w for w in rest if not w.startswith("--")]
            dest = os.path.normpath(os.path.join(workdir, rest[-1]))
            out.append((rest[:-1], dest + "/" if rest[-1].endswith("/") else dest))
    return out


def _copy_like_docker(copies: list[tuple[list[str], str]], root: Path) -> Path:
    """Lay the build context's files out under ``root`` as ``COPY`` does in the image (a source
    folder's contents into DEST; files into DEST/ when it ends with a slash or there are several)."""
    for sources, dest in copies:
        target = root / dest.lstrip("/")
        for src in sources:
            path = REPO / src
            assert path.exists(), f"COPY {src}: not in the build context"
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    return root


@pytest.mark.slow
def test_a_wheel_built_from_exactly_what_the_dockerfile_copies_installs_and_runs(tmp_path):
    """No container runtime here: the image's `pip install .` is replayed on the files its COPY
    lines bring in (nothing else of the repository), in a fresh venv, run outside the repository."""
    copies = dockerfile_copies()
    workdir = {dest for _, dest in copies if dest.endswith("/")}
    assert workdir == {"/app/"}, workdir  # pyproject.toml lands where `RUN pip install .` runs
    app = _copy_like_docker(copies, tmp_path / "image") / "app"
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(dist), str(app)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = dist.glob("memindex-*.whl")
    venv = tmp_path / "venv"
    # The dependencies come from this interpreter's site-packages (no download in a test); memindex
    # itself only from the wheel: the venv's own site-packages come first on its path.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMINDEX_BROKER_URL")}
        return subprocess.run([str(venv / "bin" / "memindex"), *argv], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=120)

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import memindex.workers.actors as m; print(m.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), where.stdout + where.stderr
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == "memindex 0.1.0", version.stdout + version.stderr
    worker = run("worker", "--help")
    assert worker.returncode == 0 and "--queues" in worker.stdout and "--writer" in worker.stdout, worker.stderr


def test_the_dockerfile_copies_every_folder_the_package_maps():
    """The cheap half of the test above: every folder pyproject.toml installs is copied."""
    import tomllib

    mapped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    copied = {src.rstrip("/") for sources, _ in dockerfile_copies() for src in sources}
    assert set(mapped.values()) <= copied, set(mapped.values()) - copied
    assert {"pyproject.toml", "README.md"} <= copied  # the build reads both (readme = "README.md")


def _compose_schema() -> dict:
    """The Compose specification's JSON schema, as check-jsonschema vendors it (a test dependency)."""
    import json

    check_jsonschema = pytest.importorskip("check_jsonschema")
    path = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(path.read_text())


def test_compose_validates_against_the_compose_spec_schema():
    import jsonschema

    schema = _compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)  # the draft it declares (2020-12)
    doc = compose()
    validator.validate(doc)
    # ... and the check is real: a misspelt key is refused by the same schema.
    bad = dict(doc, services={**doc["services"], "worker": {**doc["services"]["worker"], "comand": "x"}})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


# --- operating the Procfile: JSON logs, supervisor death ------------------------------------------

HONCHO_LINE = re.compile(r"^\d\d:\d\d:\d\d (\S+)\s*\| ?(.*)$")  # "12:00:00 worker.1 | <the process's line>"


@pytest.mark.redis
@pytest.mark.slow
def test_every_line_of_every_procfile_process_is_json(tmp_path, redis_server):
    """MEMINDEX_LOG_FORMAT=json (the Procfile's .env): dramatiq's parent processes, the watcher's
    banner, the workers' lines from start to stop - each one a JSON object."""
    a = _honcho_agent(tmp_path)
    a.write("memory/2026-02-01.md", "json logs for the lychee notes\n")
    with running_honcho(tmp_path, _honcho_env(a, redis_server.url, MEMINDEX_LOG_FORMAT="json")) as proc:
        _wait_found(a, proc, "lychee", 25)
        a.write("memory/2026-02-02.md", "a later note about rambutan\n")
        _wait_found(a, proc, "rambutan", 15)
    lines, by_process = proc.log_path.read_text().splitlines(), {}
    for line in lines:
        m = HONCHO_LINE.match(line)
        assert m, f"not a honcho line: {line!r}"
        name, text = m.groups()
        if name == "system":  # honcho's own "started with pid", "stopping"
            continue
        try:
            record = json.loads(text)
        except ValueError:
            raise AssertionError(f"{name}: not JSON: {text!r}") from None
        assert {"time", "level", "logger", "message"} <= set(record), record
        by_process.setdefault(name.split(".")[0], []).append(record)
    assert set(by_process) == set(procfile()), set(by_process)  # every process spoke, and only JSON
    messages = [r["message"] for r in by_process["worker"]]
    assert any("booting up" in m for m in messages), messages  # dramatiq's parent process
    assert any(r["message"].startswith("watching 1 agent(s)") for r in by_process["watcher"])  # the banner
    assert any("Sending signal" in m for m in messages), messages  # the stop, parent side


def _procfile_processes(marker: str) -> list[int]:
    """Our processes but the `sh -c` wrappers honcho starts (they end with their command)."""
    out = []
    for pid in _our_processes(marker):
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if os.path.basename(argv0) not in (b"sh", b"dash", b"bash"):
            out.append(pid)
    return out


@pytest.mark.redis
@pytest.mark.slow
def test_a_sigkilled_honcho_leaves_no_process_behind_and_honcho_starts_again(tmp_path, redis_server):
    from tests.conftest import process_running, wait_for

    a = _honcho_agent(tmp_path)
    a.write("memory/2026-02-01.md", "the first honcho indexed the lychee notes\n")
    env = _honcho_env(a, redis_server.url)
    marker = f"MEMINDEX_BROKER_URL={redis_server.url}"
    with running_honcho(tmp_path, env, "first.log") as first:
        _wait_found(a, first, "lychee", 25)
        import redis

        client = redis.Redis.from_url(redis_server.url)
        beating = lambda: [k for k in client.scan_iter("memindex:proc:*") if not k.endswith(b":running")]  # noqa: E731
        assert wait_for(lambda: len(beating()) == 6 + 1, 30)  # every dramatiq worker process booted, and watch
        pids = [p for p in _procfile_processes(marker) if p != first.pid]
        os.kill(first.pid, signal.SIGKILL)  # honcho alone: its children are in sessions of their own
        first.wait(5)
        # Each one sees its supervisor gone within a second, stops as SIGTERM would have it (hand
        # back, release), and its dramatiq children follow their parent.
        assert wait_for(lambda: not any(process_running(p) for p in pids), 30), \
            [(p, Path(f"/proc/{p}/cmdline").read_bytes()[-60:]) for p in pids if process_running(p)]
    a.write("memory/2026-02-02.md", "the second honcho indexed the rambutan notes\n")
    with running_honcho(tmp_path, env, "second.log") as second:
        _wait_found(a, second, "rambutan", 30)  # its writers were not refused: no orphan held a shard
        assert second.poll() is None, (tmp_path / "second.log").read_text()


@pytest.mark.redis
def test_health_reports_a_worker_whose_supervisor_is_gone(tmp_path, redis_server):
    """The worker normally stops within a second of its supervisor; while it has not (here its
    dramatiq parent is held stopped), `health` names it, then it stops once it can."""
    from tests.conftest import process_running, run_cli, wait_for

    env = dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url, OPENCLAW_STATE_DIR=str(tmp_path / "state"))
    # A supervisor of our own: a process that starts `memindex worker` and waits for it.
    supervisor = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-m', 'memindex', "
         "'worker', '--queues', 'sync', '--processes', '1', '--threads', '1']))"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 30), run_cli("health", env=env).stdout
        (main,) = [int(p) for p in Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read_text().split()]
        children = [int(p) for p in Path(f"/proc/{main}/task/{main}/children").read_text().split()]
        assert children
        os.kill(main, signal.SIGSTOP)  # it cannot act on its supervisor's death yet; its worker still beats
        supervisor.kill()
        supervisor.wait(5)
        health = run_cli("health", env=env)
        assert health.returncode == 1, health.stdout + health.stderr
        assert f"its supervisor (pid {supervisor.pid}) is gone" in health.stderr, health.stderr
        os.kill(main, signal.SIGCONT)
        assert wait_for(lambda: not any(process_running(p) for p in (main, *children)), 20)
    finally:
        kill_groups([supervisor])


# --- the dashboard: every query names a series we export --------------------------------------------

DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "memindex.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",),
             "summary": ("_count", "_sum", "")}


def _series(families) -> dict[str, set[str]]:
    """sample name -> label names, from metric families (their samples' labels, else the labels the
    family declares: a labelled series with no child yet has no sample)."""
    out: dict[str, set[str]] = {}
    for fam in families:
        labels = {k for smp in fam.samples for k in smp.labels} or set(getattr(fam, "_labelnames", ()))
        for suffix in _SUFFIXES[fam.type]:
            out[fam.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


def exported_series() -> dict[str, set[str]]:
    """Every series memindex exports, read from the definitions themselves (workers/metrics.py,
    and dramatiq's Prometheus middleware as the worker processes boot it), not from a list."""
    from prometheus_client import CollectorRegistry

    from memindex.workers import metrics

    reg = CollectorRegistry()
    rec, search = metrics.Recorders(registry=reg), metrics.SearchRecorders(registry=reg)
    rec._request("openai", 0.1, "timeout")  # one child each: their samples carry the label names
    rec.retries.labels("openai").inc()
    rec._cache(1, 2)
    rec.writer.observe(0.01)
    search.observe("main", 0.01, True, "http")
    reg.register(metrics.PendingCollector([]))
    reg.register(metrics.QueueCollector(lambda: {"sync": {"ready": 1}}))
    out = _series(reg.collect())
    # dramatiq's series exist in a worker process after its boot (multiprocess mode): boot one.
    code = ("import json, os; from dramatiq.middleware.prometheus import Prometheus; p = Prometheus(); "
            "p.after_process_boot(None); "
            "print(json.dumps({m._name: [m._type, list(m._labelnames)] for m in vars(p).values() "
            "if hasattr(m, '_labelnames')}))")
    with tempfile.TemporaryDirectory() as db:
        env = dict(os.environ, dramatiq_prom_db=db, PROMETHEUS_MULTIPROC_DIR=db)
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode == 0, got.stderr
    for name, (kind, labels) in json.loads(got.stdout).items():
        for suffix in _SUFFIXES[kind]:
            out[name + suffix] = set(labels) | ({"le"} if suffix == "_bucket" else set())
    return out


METRIC_NAME = re.compile(r"\b((?:memindex|dramatiq)_[a-z0-9_]+)\b(\{[^}]*\})?")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def test_every_dashboard_query_names_a_series_we_export_with_its_labels():
    series = exported_series()
    assert {"memindex_queue_messages", "memindex_files_pending", "dramatiq_messages_total",
            "memindex_search_seconds_bucket"} <= set(series)  # the collection itself works
    dash = json.loads(DASHBOARD.read_text())
    exprs = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]
    assert exprs
    for title, expr in exprs:
        named = METRIC_NAME.findall(expr)
        assert named, f"{title}: {expr} names no memindex or dramatiq series"
        labels: set[str] = set()
        for name, selector in named:
            assert name in series, f"{title}: {name} is not a series memindex exports"
            labels |= series[name]
            used = set(re.findall(r"(\w+)\s*=~?", selector))
            assert used <= series[name], f"{title}: {name} has no label {used - series[name]}"
        for group in GROUPING.findall(expr):
            by = {g.strip() for g in group.split(",") if g.strip()}
            assert by <= labels, f"{title}: grouped by {by - labels}, which {[n for n, _ in named]} do not carry"


def test_the_dashboard_has_the_operators_panels():
    dash = json.loads(DASHBOARD.read_text())
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dash["panels"]}

    def panel(words: str, *needles: str) -> None:
        hits = [expr for title, expr in by_title.items() if words.lower() in title.lower()]
        assert hits, f"no panel titled like {words!r}: {list(by_title)}"
        assert all(n in hits[0] for n in needles), (words, hits[0])

    panel("queue depth per queue", "memindex_queue_messages", "by (queue)")
    panel("files pending per agent", "memindex_files_pending", "by (agent)")
    panel("oldest pending file per agent", "memindex_oldest_pending_seconds", "by (agent)")
    panel("embedding requests per provider", "memindex_embedding_requests_total", "by (provider)")
    panel("embedding errors per provider", "memindex_embedding_errors_total", "provider")
    panel("search latency p50 / p95 per agent and transport", "histogram_quantile(0.5",
          "histogram_quantile(0.95", "agent, transport")
    panel("writer transactions", "memindex_writer_transaction_seconds")
    uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
    import yaml as _yaml

    provisioned = _yaml.safe_load((REPO / "deploy" / "grafana" / "provisioning" / "datasources" /
                                   "prometheus.yml").read_text())
    assert uids == {d["uid"] for d in provisioned["datasources"]}  # the panels' datasource is the provisioned one


def test_the_monitoring_profile_scrapes_every_memindex_service():
    doc = compose()
    svcs = doc["services"]
    assert svcs["prometheus"]["profiles"] == svcs["grafana"]["profiles"] == ["monitoring"]
    memindex = {k for k, v in svcs.items() if v.get("image") == "memindex:local"}
    prom = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    (sd,) = job["dns_sd_configs"]
    assert set(sd["names"]) == memindex == set(procfile())
    for name in memindex:  # the port every service's processes serve on (--metrics-port's default)
        host, port = svcs[name]["environment"]["MEMINDEX_METRICS_ADDRESS"].rsplit(":", 1)
        assert (host, int(port)) == ("0.0.0.0", sd["port"])
    mounted = {v.split(":")[0] for v in svcs["prometheus"]["volumes"] + svcs["grafana"]["volumes"]}
    for path in mounted - {"prometheus-data", "grafana-data"}:
        assert (REPO / path).exists(), path


def test_the_metrics_address_variable_is_the_metrics_port_default(monkeypatch):
    from memindex.pipeline.errors import EnvError
    from memindex.producers.cli.runner import build_parser
    from memindex.producers.cli.ops import metrics_port

    monkeypatch.setenv("MEMINDEX_METRICS_ADDRESS", "0.0.0.0:9191")
    for argv in (["watch", "--all"], ["worker", "--queues", "sync"], ["mcp"]):
        assert metrics_port(build_parser().parse_args(argv)) == ("0.0.0.0", 9191)
    assert metrics_port(build_parser().parse_args(["watch", "--metrics-port", "9300"])) == ("127.0.0.1", 9300)
    monkeypatch.setenv("MEMINDEX_METRICS_ADDRESS", "0.0.0.0:http")
    with pytest.raises(EnvError, match="MEMINDEX_METRICS_ADDRESS"):
        metrics_port(build_parser().parse_args(["watch"]))
    monkeypatch.delenv("MEMINDEX_METRICS_ADDRESS")
    assert metrics_port(build_parser().parse_args(["watch"])) is None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc")
def test_the_supervisor_is_the_nearest_ancestor_that_is_not_a_wrapper():
    """A `sh -c` line (honcho's way) and a fork of its own parent are wrappers: the supervisor is
    this test process, found through them, by pid and start time."""
    from memindex.workers import supervisor

    probe = "from memindex.workers.supervisor import find; print(find())"
    # two commands: the shell cannot exec the last one, it stays the parent
    out = subprocess.run(["sh", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(probe)}; true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str((os.getpid(), supervisor.start_time(os.getpid())))
    assert not supervisor.gone(os.getpid(), supervisor.start_time(os.getpid()))
    assert supervisor.gone(os.getpid(), supervisor.start_time(os.getpid()) + 1)  # a reused pid is not it
    assert supervisor.parse(f"{os.getpid()}:12") == (os.getpid(), 12) and supervisor.parse("") is None
