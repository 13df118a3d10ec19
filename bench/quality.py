"""Retrieval quality of ``memory_search`` on the LoCoMo dev split.

    python bench/quality.py [--tokens default 256 512] [--state /tmp/memindex-quality]

For each conversation folder of ``../shared/bench/locomo-dev`` (read at run
time, never copied) the folder is the agent's workspace; the index is built
through the real pipeline (sync -> chunk -> local GGUF embed -> writer) in a
scratch state dir under /tmp, once per ``local.maxInputTokens`` setting (the
store's embedding cache makes re-runs cheap). Every question then goes
through ``MemorySearch.search`` (maxResults 10) under several ranking configs,
at minScore 0 and at the default minScore (with the share of questions left
with no result at all), scored per the data set's README: hit@k = every evidence
turn's line lies inside the line range of one of the top-k results in the
same file; MRR = 1/first such k (0 past 10).
"""

from __future__ import annotations

import argparse
import calendar
import datetime as dt
import json
import logging
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

from memindex.pipeline.config.records import MemorySearchSettings  # noqa: E402
from memindex.pipeline.config.settings import AgentSettings, Context  # noqa: E402
from memindex.pipeline.search.ranking import dated_path_date  # noqa: E402
from memindex.pipeline.search.engine import MemorySearch, QueryEmbedder  # noqa: E402

DATA = REPO.parent / "shared" / "bench" / "locomo-dev"
MODELS_DIR = REPO.parent / "shared" / "models"
# --model name -> GGUF file (the two local models the bench has)
MODELS = {"minilm": MODELS_DIR / "all-MiniLM-L6-v2.F16.gguf", "e5": MODELS_DIR / "multilingual-e5-small.Q4_0.gguf"}
MEANING = REPO / "bench" / "meaning"
PARAPHRASE, KEYWORD = 5, 6  # the meaning set's two kinds of question, as categories
ELSEWHERE = 7  # the tiny set: a paraphrase whose note is not in the workspace (the right answer is none)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", PARAPHRASE: "paraphrase",
              KEYWORD: "keyword", ELSEWHERE: "answer elsewhere"}
TINY_NOTES = 4  # notes per workspace of the tiny set: far below ranking.MIN_BACKGROUND chunks
KS = (1, 3, 5, 10)

# name -> overrides of memorySearch.query.hybrid (weights 1/0 and 0/1 switch an arm off)
VARIANTS: dict[str, dict[str, Any]] = {
    "keyword-only": {"vectorWeight": 0.0, "textWeight": 1.0},
    "keyword-only (weighted)": {"vectorWeight": 0.0, "textWeight": 1.0, "fusion": "weighted"},
    "vector-only": {"vectorWeight": 1.0, "textWeight": 0.0},
    "hybrid": {},
    "hybrid (weighted)": {"fusion": "weighted"},
    "hybrid+decay": {"temporalDecay": {"enabled": True}},
    "hybrid+mmr": {"mmr": {"enabled": True}},
    "hybrid+decay+mmr": {"temporalDecay": {"enabled": True}, "mmr": {"enabled": True}},
}


@dataclass
class Question:
    id: str
    text: str
    category: int
    evidence: list[tuple[str, int]]  # (path, 1-based line)


def load_questions(conv_dir: Path) -> list[Question]:
    truth = json.loads((conv_dir / "truth.json").read_text(encoding="utf-8"))
    out = []
    for line in (conv_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        ev = [(truth[d]["path"], int(truth[d]["line"])) for d in q["evidence"] if d in truth]
        if ev:
            out.append(Question(q["id"], q["question"], int(q["category"]), ev))
    return out


def first_hit(results: list[dict[str, Any]], evidence: list[tuple[str, int]]) -> int | None:
    """The smallest k such that every evidence line is inside one of the top-k results."""
    for k in range(1, len(results) + 1):
        top = results[:k]
        if all(any(r["path"] == p and r["startLine"] <= ln <= r["endLine"] for r in top) for p, ln in evidence):
            return k
    return None


def write_config(path: Path, gguf: Path, max_tokens: int | None, extra: dict[str, Any] | None = None) -> None:
    local: dict[str, Any] = {"modelPath": str(gguf)}
    if max_tokens is not None:  # None: the provider's default for this model
        local["maxInputTokens"] = max_tokens
    ms = {
        "provider": "local",
        "local": local,
        "sync": {"watch": False, "onSearch": False, "onSessionStart": False},
        **(extra or {}),
    }
    path.write_text(json.dumps({"agents": {"defaults": {"memorySearch": ms}}}), encoding="utf-8")


def build_index(conv_dir: Path, state: Path, gguf: Path, max_tokens: int | None,
                extra: dict[str, Any] | None = None) -> Context:
    from memindex.producers.enqueue import sync_and_wait

    state.mkdir(parents=True, exist_ok=True)
    cfg = state / "openclaw.json"
    write_config(cfg, gguf, max_tokens, extra)
    ctx = Context("main", str(cfg), str(state), str(conv_dir))
    t0 = time.perf_counter()
    counts = sync_and_wait(ctx, timeout=3600)
    print(f"  {conv_dir.name} tokens={max_tokens}: {counts['to_index']} files (re)indexed "
          f"in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return ctx


def variant_settings(base: AgentSettings, overrides: dict[str, Any]) -> AgentSettings:
    ms = base.memory_search.to_dict()
    hy = ms["query"]["hybrid"]
    for k, v in overrides.items():
        if k == "fusion":
            ms["query"][k] = v
        elif isinstance(v, dict):
            hy[k].update(v)
        else:
            hy[k] = v
    return replace(base, memory_search=MemorySearchSettings.from_dict(ms))


class MemoQueryEmbedder(QueryEmbedder):
    """Wraps the agent's query embedder with an unbounded cache: each question is embedded once per index."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self._cache: dict[str, list[float] | None] = {}

    def embed_query(self, text: str, fp: Any = None) -> list[float] | None:
        if text not in self._cache:
            self._cache[text] = self.inner.embed_query(text, fp)
        return self._cache[text]

    def is_fallback_index(self, fp: Any) -> bool:
        return self.inner.is_fallback_index(fp)


def last_session_clock(conv_dir: Path) -> float:
    """'now' for decay: the day after the conversation's last session (when the agent would be asked)."""
    days = [d for p in (conv_dir / "memory").glob("*.md") if (d := dated_path_date(f"memory/{p.name}"))]
    return float(calendar.timegm((max(days) + dt.timedelta(days=1)).timetuple()))


def evaluate(settings: AgentSettings, qe: QueryEmbedder, questions: list[Question], clock: float,
             ) -> dict[str, list[tuple[int, int | None]]]:
    """"variant @minScore" -> [(category, first hit k or None; -1 = no result at all)]"""
    out: dict[str, list[tuple[int, int | None]]] = {}
    for name, ov in VARIANTS.items():
        eng = MemorySearch(variant_settings(settings, ov), query_embedder=qe, clock=lambda: clock)
        try:
            for label, min_score in (("0", 0.0), ("default", None)):
                rows = []
                for q in questions:
                    res = eng.search(q.text, max_results=10, min_score=min_score).as_dict()["results"]
                    rows.append((q.category, first_hit(res, q.evidence) if res else -1))
                out[f"{name} @{label}"] = rows
        finally:
            eng.close()
    return out


def metrics(rows: Iterable[tuple[int, int | None]]) -> tuple[int, list[float], float]:
    rows = list(rows)
    n = len(rows)
    if not n:
        return 0, [0.0] * len(KS), 0.0
    rec = [sum(1 for _, k in rows if k is not None and 0 < k <= K) / n for K in KS]
    mrr = sum(1.0 / k for _, k in rows if k is not None and k > 0) / n
    return n, rec, mrr


def print_table(title: str, results: dict[str, list[tuple[int, int | None]]]) -> None:
    print(f"\n### {title}")
    print("| method @minScore | n | " + " | ".join(f"R@{k}" for k in KS) + " | MRR | no result |")
    print("|---|---|" + "---|" * len(KS) + "---|---|")
    for name, rows in results.items():
        n, rec, mrr = metrics(rows)
        empty = sum(1 for _, k in rows if k == -1) / max(1, n)
        print(f"| {name} | {n} | " + " | ".join(f"{r:.3f}" for r in rec) + f" | {mrr:.3f} | {empty:.3f} |")
    print("\nper category, R@1 / R@10 / MRR:")
    cats = sorted({c for rows in results.values() for c, _ in rows})
    print("| method | " + " | ".join(f"{CATEGORIES.get(c, c)} ({c})" for c in cats) + " |")
    print("|---|" + "---|" * len(cats))
    for name, rows in results.items():
        cells = []
        for c in cats:
            n, rec, mrr = metrics((cc, k) for cc, k in rows if cc == c)
            cells.append(f"{rec[0]:.3f} / {rec[-1]:.3f} / {mrr:.3f} (n={n})")
        print(f"| {name} | " + " | ".join(cells) + " |")


def prefix_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--prefixes off``: no query/document prefixes even where the model family asks for them."""
    return {"queryPrefix": "", "documentPrefix": ""} if args.prefixes == "off" else {}


def state_name(args: argparse.Namespace, model: str) -> str:
    return model if args.prefixes == "auto" else f"{model}-prefixes-{args.prefixes}"


def load_meaning(root: Path = MEANING) -> list[Question]:
    """The meaning dev set's questions; the evidence is the note's line in its daily file."""
    out = []
    for line in (root / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            out.append(Question(q["id"], q["question"], PARAPHRASE if q["kind"] == "paraphrase" else KEYWORD,
                                [(q["path"], 3)]))
    return out


def run_meaning(args: argparse.Namespace, model: str) -> dict[str, list[tuple[int, int | None]]]:
    """The meaning dev set (bench/meaning) indexed with ``model`` and searched under every variant."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.embeddings.embedder import query_embedder_for

    ctx = build_index(MEANING / "workspace", args.state / state_name(args, model) / "meaning", MODELS[model], None,
                      prefix_config(args))
    settings = settings_for(ctx)
    inner = query_embedder_for(settings)
    if inner is None:
        raise SystemExit("no query embedder (is llama-cpp-python installed?)")
    return evaluate(settings, MemoQueryEmbedder(inner), load_meaning(), last_session_clock(MEANING / "workspace"))


def run_tiny(args: argparse.Namespace, model: str) -> dict[str, list[tuple[int, int | None]]]:
    """The tiny set: the meaning set's 156 notes split, in date order, into workspaces of
    ``TINY_NOTES`` notes (a new user's memory), each indexed on its own. Each workspace is asked its
    own notes' questions and, as ``ELSEWHERE``, the paraphrases of the next workspace's notes (whose
    right answer is no result at all)."""
    import shutil

    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.embeddings.embedder import query_embedder_for

    notes = sorted((MEANING / "workspace" / "memory").glob("*.md"))
    groups = [notes[i:i + TINY_NOTES] for i in range(0, len(notes), TINY_NOTES)]
    by_path: dict[str, list[Question]] = defaultdict(list)
    for q in load_meaning():
        by_path[q.evidence[0][0]].append(q)
    clock = last_session_clock(MEANING / "workspace")
    combined: dict[str, list[tuple[int, int | None]]] = defaultdict(list)
    for i, group in enumerate(groups):
        ws = args.state / state_name(args, model) / "tiny" / f"g{i:02d}" / "workspace"
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        for note in group:
            shutil.copy2(note, ws / "memory" / note.name)
        own = [q for n in group for q in by_path[f"memory/{n.name}"]]
        nxt = groups[(i + 1) % len(groups)]
        elsewhere = [replace(q, category=ELSEWHERE) for n in nxt for q in by_path[f"memory/{n.name}"]
                     if q.category == PARAPHRASE]
        if not own and not elsewhere:
            continue
        ctx = build_index(ws, ws.parent / "state", MODELS[model], None, prefix_config(args))
        settings = settings_for(ctx)
        inner = query_embedder_for(settings)
        if inner is None:
            raise SystemExit("no query embedder (is llama-cpp-python installed?)")
        for name, rows in evaluate(settings, MemoQueryEmbedder(inner), own + elsewhere, clock).items():
            combined[name].extend(rows)
    return combined


def print_tiny(title: str, results: dict[str, list[tuple[int, int | None]]]) -> None:
    """Per method: R@1 and "no result" of the workspace's own questions, and how often a question
    answered elsewhere still got a result (a false alarm: every result it gets is wrong)."""
    print(f"\n### {title}")
    print("| method @minScore | paraphrase R@1 | paraphrase no result | keyword R@1 | "
          "answer elsewhere: any result |")
    print("|---|---|---|---|---|")
    for name, rows in results.items():
        def share(cat: int, pred: Any) -> str:
            ks = [k for c, k in rows if c == cat]
            return f"{sum(1 for k in ks if pred(k)) / max(1, len(ks)):.3f} (n={len(ks)})"
        print(f"| {name} | {share(PARAPHRASE, lambda k: k == 1)} | {share(PARAPHRASE, lambda k: k == -1)} | "
              f"{share(KEYWORD, lambda k: k == 1)} | {share(ELSEWHERE, lambda k: k != -1)} |")


def run_locomo(args: argparse.Namespace, model: str, label: str) -> dict[str, list[tuple[int, int | None]]]:
    """Every LoCoMo dev conversation indexed with ``model`` and searched under every variant."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.embeddings.embedder import query_embedder_for

    tokens = None if label == "default" else int(label)
    convs = sorted(p for p in args.data.glob("conv-*") if p.is_dir() and (not args.convs or p.name in args.convs))
    combined: dict[str, list[tuple[int, int | None]]] = defaultdict(list)
    for conv in convs:
        ctx = build_index(conv, args.state / state_name(args, model) / f"t{label}" / conv.name, MODELS[model], tokens,
                          prefix_config(args))
        settings = settings_for(ctx)
        inner = query_embedder_for(settings)
        if inner is None:
            raise SystemExit("no query embedder (is llama-cpp-python installed?)")
        res = evaluate(settings, MemoQueryEmbedder(inner), load_questions(conv), last_session_clock(conv))
        for name, rows in res.items():
            combined[name].extend(rows)
    return combined


def check_targets(res: dict[tuple[str, str], dict[str, list[tuple[int, int | None]]]]) -> list[tuple[bool, str]]:
    """Issue 41's "done when" numbers at default settings, from ``(model, set) -> variant rows``."""
    out: list[tuple[bool, str]] = []

    def m(model: str, which: str, variant: str) -> tuple[list[float], float]:
        _, rec, mrr = metrics(res[(model, which)][variant])
        return rec, mrr

    for model in sorted({k[0] for k in res}):
        if (model, "meaning") in res:
            (h1, h3, *_), _ = m(model, "meaning", "hybrid @default")
            (v1, v3, *_), _ = m(model, "meaning", "vector-only @default")
            out.append((h1 >= v1 - 0.03, f"{model} meaning: hybrid R@1 {h1:.3f} >= vector R@1 {v1:.3f} - 0.03"))
            out.append((h3 >= v3, f"{model} meaning: hybrid R@3 {h3:.3f} >= vector R@3 {v3:.3f}"))
    if ("minilm", "locomo") in res:
        rec, mrr = m("minilm", "locomo", "hybrid @default")
        out.append((rec[-1] >= 0.83 and mrr >= 0.65, f"minilm LoCoMo: hybrid R@10 {rec[-1]:.3f} >= 0.83, MRR {mrr:.3f} >= 0.65"))
        if ("e5", "locomo") in res:
            erec, emrr = m("e5", "locomo", "hybrid @default")
            out.append((erec[-1] >= rec[-1] and emrr >= mrr,
                        f"e5 LoCoMo at least MiniLM's: R@10 {erec[-1]:.3f} >= {rec[-1]:.3f}, MRR {emrr:.3f} >= {mrr:.3f}"))
            kept = {mo: m(mo, "locomo", "hybrid @default")[0][-1] / max(1e-9, m(mo, "locomo", "hybrid @0")[0][-1])
                    for mo in ("minilm", "e5")}
            out.append((abs(kept["minilm"] - kept["e5"]) <= 0.02, "minScore keeps the same share of LoCoMo answers: "
                        f"{kept['minilm']:.3f} (MiniLM) vs {kept['e5']:.3f} (e5), within 0.02"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--state", type=Path, default=Path("/tmp/memindex-quality"))
    ap.add_argument("--model", nargs="+", choices=sorted(MODELS), default=sorted(MODELS, reverse=True),
                    help="local GGUF models to compare (default: both)")
    ap.add_argument("--sets", nargs="+", choices=("locomo", "meaning", "tiny"),
                    default=["locomo", "meaning", "tiny"])
    ap.add_argument("--prefixes", choices=("auto", "off"), default="auto",
                    help="query/document prefixes: the model family's (auto) or none (off)")
    ap.add_argument("--tokens", nargs="+", default=["default"],
                    help="local.maxInputTokens settings to compare ('default': not set, the model's own)")
    ap.add_argument("--convs", nargs="*", default=None, help="conversation folders (default: all)")
    ap.add_argument("--check", action="store_true",
                    help="check issue 41's targets at default settings (exit 1 when one is missed)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for model in args.model:
        if not MODELS[model].is_file():
            print(f"missing {MODELS[model]}", file=sys.stderr)
            return 2
    results: dict[tuple[str, str], dict[str, list[tuple[int, int | None]]]] = {}
    for model in args.model:
        name = MODELS[model].name
        for set_name, run, show, title in (
                ("meaning", run_meaning, print_table, "meaning dev set ({n} questions)"),
                ("tiny", run_tiny, print_tiny, f"tiny workspaces ({TINY_NOTES} notes each, meaning set)")):
            if set_name in args.sets:
                t0 = time.perf_counter()
                res = results[(model, set_name)] = run(args, model)
                show(title.format(n=len(next(iter(res.values())))) + f", local {name}, prefixes {args.prefixes}", res)
                print(f"({time.perf_counter() - t0:.0f}s incl. indexing)", file=sys.stderr)
        if "locomo" in args.sets:
            for label in args.tokens:
                t0 = time.perf_counter()
                combined = run_locomo(args, model, label)
                results[(model, "locomo")] = combined
                print_table(f"LoCoMo dev, local {name}, prefixes {args.prefixes}, maxInputTokens {label}, "
                            "chunks 400/80, maxResults 10",
                            combined)
                print(f"({time.perf_counter() - t0:.0f}s incl. indexing)", file=sys.stderr)
    if args.check:
        verdicts = check_targets(results)
        print("\n### Issue 41 targets (default settings)")
        for ok, line in verdicts:
            print(f"- {'met' if ok else 'NOT met'}: {line}")
        return 0 if all(ok for ok, _ in verdicts) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
