"""Ranking math for memory search (F10 hybrid merge, F11 decay, F12 MMR).

Pure functions only: no I/O, no SQLite, no clock. Callers pass ``now`` and
file mtimes in, which keeps every step testable with hand-computed numbers.

Pipeline order (F12)::

    vector + keyword -> weighted merge -> temporal decay -> sort -> MMR
    -> minScore filter (on the score before decay) -> top maxResults
"""

from __future__ import annotations

import calendar
import datetime as _dt
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from memindex.pipeline.config import defaults as D
from memindex.pipeline.store.fts_text import has_spaceless_script, is_mark, script_family

SECONDS_PER_DAY = 86400.0

# fusion "calibrated" (issue 41): each arm's evidence on one 0..1 scale, learnt from this index.
# Vector: how many spreads a chunk's cosine stands above what this model gives the index's chunks
# in general (``cosine_background``): ``tanh(max(0, z - Z_FLOOR) / Z_SCALE)``. Keyword:
# ``tanh(KEYWORD_GAIN * ((1-BM25_SHARE) * idf coverage + BM25_SHARE * bm25 / sum of the terms' idf))``.
# The two tanh scales were set together (their ratio orders the arms; their level puts the default
# minScore 0.35 where it keeps ~all LoCoMo dev answers: the top-10 R@10 drops 0.843 -> 0.837).
# Tuned on half of the meaning dev set and three LoCoMo dev conversations, both local models,
# and checked on the rest (bench/README.md, "Search by meaning"): z is the model's own scale, so
# the same constants serve MiniLM (cosines of unrelated text ~0.08 +- 0.08) and e5 (0.77 +- 0.02).
Z_FLOOR = 1.0  # a cosine one spread above the index's typical one is no evidence yet
Z_SCALE = 1.6
BM25_SHARE = 0.9
KEYWORD_GAIN = 2.0
# Small samples (a workspace of a few notes) cannot say how widely this model's cosines spread;
# their spread is shrunk toward PRIOR_SPREAD * (1 - centre) as if PRIOR_WEIGHT more chunks had
# shown it (MiniLM and e5 both spread ~0.08 of the room their centre leaves below 1).
PRIOR_SPREAD = 0.08
PRIOR_WEIGHT = 20
# Fewer sampled chunks than this cannot say what the model gives text in general (in a workspace of
# three notes about Rod every note is "related"): their cosines then count as they are.
MIN_BACKGROUND = 20
TIE_BM25 = 1e-3


class Candidate(NamedTuple):
    """One chunk on its way through ranking. ``score`` is the current score.

    A tuple (``c._replace(score=...)`` for a changed copy): every search builds and
    re-scores ~50 of them, and a frozen dataclass's ``replace`` was a tenth of ranking."""

    chunk_id: str
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    vector_score: float = 0.0
    text_score: float = 0.0
    score: float = 0.0
    has_vector: bool = False
    has_text: bool = False


def _finite(x: float, default: float = 0.0) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


def _clamp01(x: float) -> float:
    return min(1.0, max(0.0, _finite(x)))


# --------------------------------------------------------------- F10 hybrid


def relative_text_score(rank: float, best_rank: float) -> float:
    """BM25 relative to the query's best keyword hit: ``bm25 / best bm25``.

    Absolute BM25 depends on corpus statistics (IDF), so ``r/(1+r)`` crowds a
    query's hits into 0.8..0.95 and its grading barely moves the fused score.
    Dividing by the best hit of the query (min-max with the theoretical
    minimum 0) puts the best keyword match at 1.0 and keeps ratios; on the
    LoCoMo dev split it raised hybrid MRR from 0.55 to 0.62. Non-matches and
    bad values map to 0.0.
    """
    r, best = -_finite(rank), -_finite(best_rank)
    if r <= 0 or best <= 0:
        return 0.0
    return min(1.0, r / best)


class CosineBackground(NamedTuple):
    """What this index's embedding model gives a query against its chunks in general."""

    centre: float
    spread: float


def cosine_background(cosines: Iterable[float]) -> CosineBackground | None:
    """The median and spread of a query's cosines against a sample of the index's chunks.

    The median, not the mean: the few chunks that do answer the query must not move it. The
    spread is the standard deviation, shrunk toward ``PRIOR_SPREAD * (1 - centre)`` for small
    samples (``PRIOR_WEIGHT``), so a small workspace does not read noise as evidence. None for
    fewer than ``MIN_BACKGROUND`` finite cosines (the cosine itself is the evidence then)."""
    xs = sorted(x for x in (_finite(c, math.nan) for c in cosines) if not math.isnan(x))
    n = len(xs)
    if n < MIN_BACKGROUND:
        return None
    mid = n // 2
    centre = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    var = sum((x - centre) ** 2 for x in xs) / n
    prior = PRIOR_SPREAD * max(1e-3, 1.0 - centre)
    spread = math.sqrt((n * var + PRIOR_WEIGHT * prior ** 2) / (n + PRIOR_WEIGHT))
    return CosineBackground(centre, max(spread, 1e-6))


def vector_evidence(cosine: float, background: CosineBackground | None) -> float:
    """A cosine as evidence, 0..1: how far it stands above the index's typical cosine, in spreads.

    Without a background (a library caller ranking bare hits) the cosine itself, clamped to 0..1."""
    if background is None:
        return _clamp01(cosine)
    z = (_finite(cosine) - background.centre) / background.spread
    return math.tanh(max(0.0, z - Z_FLOOR) / Z_SCALE)


def term_idf(n_chunks: int, df: int) -> float:
    """BM25's idf of a term held by ``df`` of ``n_chunks`` chunks, never below 0."""
    n, d = max(0, int(n_chunks)), max(0, int(df))
    return math.log(1.0 + (n - d + 0.5) / (d + 0.5))


def fts_idf(n_chunks: int, df: int) -> float:
    """SQLite FTS5's own idf (``bm25()``'s): the scale of its ranks, floored as FTS5 floors it."""
    n, d = max(0, int(n_chunks)), max(0, int(df))
    return max(1e-6, math.log((n - d + 0.5) / (d + 0.5)))


def term_weights(n_chunks: int, dfs: Iterable[int]) -> tuple[list[float], list[float] | None]:
    """(idf, FTS5 idf) of the query's terms for :func:`keyword_evidence`. An index of fewer than
    ``MIN_BACKGROUND`` chunks is too small for rarity to mean much (in a one-note workspace every
    word of it is in every note): its idf counts as if it had that many chunks, the others holding
    none of the terms, and FTS5's ranks, floored at ~0 there, give no BM25 scale (None)."""
    dfs = list(dfs)
    if n_chunks < MIN_BACKGROUND:
        return [term_idf(MIN_BACKGROUND, d) for d in dfs], None
    return [term_idf(n_chunks, d) for d in dfs], [fts_idf(n_chunks, d) for d in dfs]


def keyword_evidence(rank: float, held: Iterable[bool], idfs: Iterable[float], fts_idfs: Iterable[float] | None) -> float:
    """A keyword hit as evidence, 0..1, in absolute terms (never relative to the query's best hit).

    ``held[i]``: whether the chunk holds the query's ``i``-th content term; ``idfs`` the terms'
    idf in this index. Coverage weighted by rarity: a hit holding only "home" of "which machine
    filters ads for my home LAN" covers little of it. BM25 strength: ``-rank`` over the sum of
    the terms' FTS5 idf is ~1 for a chunk holding every term once at average length. A term
    every chunk holds weighs ~nothing on either count (FTS5 floors its idf at ~0). ``fts_idfs`` None
    (a tiny index, :func:`term_weights`): the coverage stands for the strength."""
    w = list(idfs)
    total = sum(w)
    cov = sum(x for x, h in zip(w, held) if h) / total if total > 0 else 0.0
    if fts_idfs is None:  # no BM25 scale (term_weights): the coverage is the strength too, and a
        strength = cov + TIE_BM25 * max(0.0, -_finite(rank))  # trace of BM25 orders equal coverage
    else:
        fts_total = sum(fts_idfs)
        strength = max(0.0, -_finite(rank)) / fts_total if fts_total > 0 else 0.0
    return math.tanh(KEYWORD_GAIN * ((1 - BM25_SHARE) * cov + BM25_SHARE * strength))


def arm_factors(vw: float, tw: float) -> tuple[float, float]:
    """What each arm's evidence counts for under calibrated fusion, from the (normalised) weights:
    1 and 1 at OpenClaw's default shares 0.7/0.3; moving the weights discounts the arm that lost
    share by the change in odds (0.9/0.1: keywords count 0.26; 0.5/0.5: the cosine counts 0.43);
    a weight of 0 switches its arm off."""
    if tw <= 0:
        return 1.0, 0.0
    if vw <= 0:
        return 0.0, 1.0
    r = (vw / tw) / (D.VECTOR_WEIGHT / D.TEXT_WEIGHT)
    return min(1.0, r), min(1.0, 1.0 / r)


def normalize_weights(vector_weight: float, text_weight: float) -> tuple[float, float]:
    """Clamp each weight to [0,1] and rescale to sum 1; (0,0) -> defaults."""
    vw, tw = _clamp01(vector_weight), _clamp01(text_weight)
    total = vw + tw
    if total <= 0:
        return D.VECTOR_WEIGHT, D.TEXT_WEIGHT
    return vw / total, tw / total


def _sort_key(c: Candidate) -> tuple[float, str]:
    return (-c.score, c.chunk_id)


def sort_candidates(cands: Iterable[Candidate]) -> list[Candidate]:
    """Score descending; ties broken by chunk id so output is deterministic."""
    return sorted(cands, key=_sort_key)


def _union(vector_hits: list[Candidate], text_hits: list[Candidate]) -> dict[str, list[Any]]:
    """Both arms' hits by chunk id, as ``[hit, vector_score, text_score, has_vector, has_text, text]``
    (``hit`` holds the chunk's other fields). :func:`merge_hybrid` builds each candidate once from
    this: a ``_replace`` here and another for its score were half of ``rank_pipeline``'s time."""
    merged: dict[str, list[Any]] = {}  # a list, not a record: updated in place, on the hot path
    for hit in vector_hits:
        vs = _finite(hit.vector_score)
        old = merged.get(hit.chunk_id)
        if old is None or vs > old[1]:
            merged[hit.chunk_id] = [hit, vs, 0.0, True, False, hit.text]
    for hit in text_hits:
        ts = _clamp01(hit.text_score)
        old = merged.get(hit.chunk_id)
        if old is None:
            merged[hit.chunk_id] = [hit, 0.0, ts, False, True, hit.text]
        elif ts >= old[2]:
            # Same chunk; keep the vector hit's fields but prefer non-empty text.
            old[2], old[4], old[5] = ts, True, old[5] or hit.text
    return merged


def merge_hybrid(
    vector_hits: list[Candidate],
    text_hits: list[Candidate],
    vector_weight: float,
    text_weight: float,
    *,
    vector_enabled: bool | None = None,
    text_enabled: bool | None = None,
    unseen_vector_bound: float | None = None,
    fusion: str = D.FUSION,
    background: CosineBackground | None = None,
) -> list[Candidate]:
    """Union both arms by chunk id and score them; sorted best first.

    ``fusion`` "calibrated" (the default; issue 41): a chunk scores the stronger of its two
    arms' evidence, each on the same 0..1 scale in every mode and with every model::

        score = max(fv * vector_evidence(vs, background), ft * ts)

    ``ts`` is the keyword evidence the caller computed (:func:`keyword_evidence`: coverage of
    the query's terms weighted by rarity, and BM25 strength in absolute terms); the vector
    evidence is the cosine's standing above this index's typical cosine for the query
    (``background``, :func:`cosine_background`). ``fv, ft`` are :func:`arm_factors` of the
    weights (1, 1 at the default 0.7/0.3). The stronger arm, not a sum: a note that shares a
    word or two with the question gains nothing from that word when another note answers it
    by meaning, and an exact rare token (an id, an error string) covers the query on its own.
    A sum, or a bonus when the arms agree, lifted the notes that share a common word with the
    question *and* sit near its topic above the note that answers it (bench/README.md). With
    one arm the working arm's evidence alone. ``minScore`` thus means "this much evidence on
    at least one arm" everywhere (query.minScore in the README).

    "weighted" is OpenClaw's formula: ``score = vw*vector_score + tw*text_score`` with
    normalised weights.

    Degraded modes use the working arm at full scale instead of the
    reference's weighted formula (which would cap BM25-only at 0.3 and
    vector-only at 0.7, below the usual minScore): no vector arm (no
    embeddings, zero query vector) -> ``text_score``; no text arm (no FTS5) ->
    ``vector_score``. An arm counts as absent when its ``*_enabled`` flag is
    False, or - when the flag is None - when it returned no hits. Callers
    that know an arm ran but matched nothing pass True to keep the weighted
    formula, so scores do not jump just because nothing matched.

    Keyword-only rescue ("weighted"). With both arms running, a chunk found *only* by the
    keyword arm would score ``tw*text_score <= 0.3`` and could never pass
    minScore 0.35 - yet that is exactly the exact-ID / error-string case that
    embeddings miss. Such a chunk was not in the vector arm's top-K, so its
    cosine is unknown. We let keyword evidence stand in for it: the chunk
    scores as if it had the best vector score seen for this query, discounted
    by its own keyword confidence::

        score = max(tw*ts, ts * best_vs)      (best_vs = max vector score, >= 0)

    Properties: the rescued score is at most ``ts``, so a weak keyword hit
    (ts < 0.35) can never pass minScore 0.35; a strong one (bm25 -9 -> 0.9)
    passes whenever the query has reasonable semantic hits at all (best_vs
    >= 0.39); and it never scores above a chunk that is at least as good on
    both arms, because ``vw*best_vs + tw*ts >= ts*best_vs`` for ts, best_vs in
    [0,1]. With ``text_weight`` 0 the user switched keywords off, so there is
    no rescue.

    Unseen-cosine bound. When the vector arm returned a full top-K, a chunk
    it did not return has cosine <= the K-th score; the caller passes that
    as ``unseen_vector_bound`` and a keyword-only chunk may also score
    ``vw*bound + tw*ts`` - the spec's formula at the best cosine it could
    have. Still never above a chunk found by both arms that is at least as
    good on text (its cosine is >= the bound).
    """
    vw, tw = normalize_weights(vector_weight, text_weight)
    merged = _union(vector_hits, text_hits)
    has_vec = bool(vector_hits) if vector_enabled is None else vector_enabled
    has_txt = bool(text_hits) if text_enabled is None else text_enabled
    if not has_vec:
        vw, tw = 0.0, 1.0
    elif not has_txt:
        vw, tw = 1.0, 0.0
    out: list[Candidate] = []
    if fusion == "calibrated":
        fv, ft = arm_factors(vw, tw)
        for hit, vs, ts, has_vector, has_text, text in merged.values():
            v = fv * vector_evidence(vs, background) if has_vector and fv > 0 else 0.0
            score = max(v, ft * ts if has_text else 0.0)
            out.append(Candidate(hit.chunk_id, hit.path, hit.source, hit.start_line, hit.end_line, text,
                                 vs, ts, score, has_vector, has_text))
        return sort_candidates(out)

    best_vs = max((m[1] for m in merged.values() if m[3]), default=0.0)
    anchor = max(0.0, min(1.0, best_vs))
    bound = None if unseen_vector_bound is None else _clamp01(unseen_vector_bound)
    for hit, vs, ts, has_vector, has_text, text in merged.values():
        score = vw * vs + tw * ts
        if has_text and not has_vector and tw > 0 and vw > 0:
            score = max(score, ts * anchor)
            if bound is not None:
                score = max(score, vw * bound + tw * ts)
        out.append(Candidate(hit.chunk_id, hit.path, hit.source, hit.start_line, hit.end_line, text,
                             vs, ts, score, has_vector, has_text))
    return sort_candidates(out)


# ---------------------------------------------------------- F11 temporal decay

# The reference's dated-path regex, except that ``.md`` matches in any case: memindex indexes
# ``memory/2026-09-04.MD`` (workspace.is_markdown_name), so it ages like its ``.md`` twin.
_DATED_PATH = re.compile(r"(?:^|/)memory/(?:[^/]+/)*(\d{4})-(\d{2})-(\d{2})(?i:\.md)$")


def _norm_path(path: str) -> str:
    p = path.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def decay_multiplier(age_days: float, half_life_days: float) -> float:
    """``exp(-ln2/halfLife * age)``; future dates count as age 0; a
    non-positive or non-finite half-life disables decay (1.0)."""
    hl = _finite(half_life_days)
    if hl <= 0:
        return 1.0
    age = max(0.0, _finite(age_days))
    return math.exp(-math.log(2) / hl * age)


def dated_path_date(path: str) -> _dt.date | None:
    """The date of a daily log ``memory/[...]/YYYY-MM-DD.md``, if a real date."""
    m = _DATED_PATH.search(_norm_path(path))
    if not m:
        return None
    try:
        return _dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:  # 2026-02-30 and friends are not dates
        return None


def is_evergreen(path: str, source: str) -> bool:
    """Curated memory never decays: ``MEMORY.md``/``memory.md`` and undated
    files under ``memory/`` (only for the ``memory`` source).

    A daily-note name with an impossible date (``memory/2026-02-30.md``) is not
    undated: as in the reference (its regex test, not the date check), it is
    aged by its mtime rather than kept at full score forever.
    """
    if source != "memory":
        return False
    p = _norm_path(path)
    if p in ("MEMORY.md", "memory.md"):
        return True
    return p.startswith("memory/") and _DATED_PATH.search(p) is None


def result_timestamp(path: str, source: str, mtime: float | None) -> float | None:
    """Epoch seconds to age a result from, or None for "never decay".

    Dated daily files -> UTC midnight of the file name's date; evergreen
    files -> None; everything else (sessions, extraPaths) -> ``mtime``.
    """
    day = dated_path_date(path)
    if day is not None:
        return float(calendar.timegm(day.timetuple()))
    if is_evergreen(path, source):
        return None
    if mtime is None:
        return None
    mt = _finite(mtime, default=math.nan)
    return None if math.isnan(mt) else mt


def apply_temporal_decay(
    cands: list[Candidate],
    now: float,
    half_life_days: float,
    mtimes: Mapping[tuple[str, str], float],
) -> list[Candidate]:
    """Multiply each score by its age multiplier; order is unchanged.

    ``mtimes`` maps ``(source, path)`` to the file's mtime. Session results
    are aged by their transcript mtime (the reference looked it up relative
    to the workspace, failed, and never decayed sessions).
    """
    out: list[Candidate] = []
    for c in cands:
        f = age_factor(c, now, half_life_days, mtimes)
        out.append(c if f == 1.0 else c._replace(score=c.score * f))
    return out


def age_factor(c: Candidate, now: float, half_life_days: float, mtimes: Mapping[tuple[str, str], float]) -> float:
    """The decay multiplier of one candidate (1.0 for evergreen or undatable results)."""
    ts = result_timestamp(c.path, c.source, mtimes.get((c.source, c.path)))
    if ts is None:
        return 1.0
    return decay_multiplier((now - ts) / SECONDS_PER_DAY, half_life_days)


# --------------------------------------------------------------------- F12 MMR

# Numbers with internal separators (IPs, versions, times like 14:15) are one
# token: their pieces alone ("192", "168", "10") are meaningless and would
# make unrelated notes look alike.
_COMPOUND_NUMBER = re.compile(r"\d+(?:[.:,]\d+)+")


def _is_word_char(ch: str) -> bool:
    return ch == "_" or unicodedata.category(ch)[0] in "LMN"


# For ASCII text \w is [A-Za-z0-9_], exactly _is_word_char; twice as fast as the full class below.
_ASCII_TOKEN = re.compile(rf"(?<!\w){_COMPOUND_NUMBER.pattern}|\w+", re.ASCII)
_fast_token_re: re.Pattern[str] | None = None


def _fast_tokens_pattern() -> re.Pattern[str]:
    """The per-character loop of :func:`mmr_tokens` as one regex, for texts
    without spaceless scripts (MMR tokenises every candidate on every search;
    the loop cost ~4 ms per 1,600-char chunk). ``\\w`` plus every combining
    mark is exactly :func:`_is_word_char` (checked over all code points);
    marks exist only in planes 0, 1 and 14. Built once, on first use (~60 ms).
    """
    global _fast_token_re
    if _fast_token_re is None:
        ranges: list[tuple[int, int]] = []
        for cp in (*range(0x20000), *range(0xE0000, 0xE1000)):
            if unicodedata.category(chr(cp))[0] == "M":
                if ranges and ranges[-1][1] == cp - 1:
                    ranges[-1] = (ranges[-1][0], cp)
                else:
                    ranges.append((cp, cp))
        word = r"\w" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
        _fast_token_re = re.compile(rf"(?<![{word}]){_COMPOUND_NUMBER.pattern}|[{word}]+")
    return _fast_token_re


def mmr_tokens(text: str) -> frozenset[str]:
    """Token set for Jaccard similarity.

    NFC + lowercase, tokens are runs of letters, marks, numbers and ``_``
    (the reference's ``[\\p{L}\\p{M}\\p{N}_]+``), except that compound numbers
    stay whole and spaceless scripts (CJK, kana, Thai, ...) yield one token per
    character cluster, so texts without spaces still get useful overlap.
    """
    text = unicodedata.normalize("NFC", text).lower()
    if text.isascii():
        return frozenset(_ASCII_TOKEN.findall(text))
    if not has_spaceless_script(text):
        return frozenset(_fast_tokens_pattern().findall(text))
    return _scan_tokens(text)


def _scan_tokens(text: str) -> frozenset[str]:
    """:func:`mmr_tokens` on normalised text, character by character."""
    tokens: set[str] = set()
    buf: list[str] = []

    def flush() -> None:
        if buf:
            tokens.add("".join(buf))
            buf.clear()

    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if not buf and ch.isdigit() and (i == 0 or not _is_word_char(text[i - 1])):
            m = _COMPOUND_NUMBER.match(text, i)
            if m:
                tokens.add(m.group())
                i = m.end()
                continue
        if script_family(ch) is not None and not is_mark(ch):
            flush()
            j = i + 1
            while j < n and is_mark(text[j]):
                j += 1
            tokens.add(text[i:j])
            i = j
            continue
        if _is_word_char(ch):
            buf.append(ch)
        else:
            flush()
        i += 1
    flush()
    return frozenset(tokens)


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|a∩b| / |a∪b|; two empty sets are identical (1.0), one empty -> 0.0."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _relevance(scores: list[float]) -> list[float]:
    """Scores divided by the best score (all equal or best <= 0 -> 1.0).

    The reference min-max normalises, which stretches a tight top cluster
    (0.78..0.92 in the seed) over the whole 0..1 range: the lowest candidate
    always gets relevance 0 and a 0.04 score gap outweighs any realistic
    redundancy penalty, so the seed's Omada example cannot come out as
    documented (the seed says results are weighed by their *original*
    relevance). Dividing by the max keeps ratios, puts the best at 1 and is
    independent of how much decay has shrunk all scores. With it the seed's
    example selects 2026-02-10, 2026-02-05, network.md for the top 3 (in the
    Indonesian, Vietnamese and English texts); min-max selects 2026-02-08.
    """
    clean = [max(0.0, _finite(s)) for s in scores]
    top = max(clean, default=0.0)
    if top <= 0 or all(s == clean[0] for s in clean):
        return [1.0] * len(clean)
    return [s / top for s in clean]


def mmr_rerank(
    cands: list[Candidate], lambda_: float, *, stop_after: int | None = None,
    passes: Callable[[Candidate], bool] | None = None,
) -> list[Candidate]:
    """Reorder by Maximal Marginal Relevance; never drops, never rescores.

    Greedily picks ``argmax lambda*rel - (1-lambda)*max_jaccard_to_picked``;
    ties go to the higher original score, then to input order. ``lambda_`` is
    clamped to [0,1]; with 1 (or <= 1 candidate) this is a plain score sort.
    ``stop_after``: stop picking once that many picks that ``passes`` (all by
    default) are made and append the rest by score - a caller that shows only those
    (rank_pipeline) gets the same results for a fraction of the pairwise
    similarity work.
    """
    lam = min(1.0, max(0.0, _finite(lambda_, default=1.0)))
    ordered = sort_candidates(cands)
    if len(ordered) <= 1 or lam >= 1.0:
        return ordered
    rel = _relevance([c.score for c in ordered])  # non-increasing, like ``ordered``
    n = len(ordered)
    toks: list[frozenset[str] | None] = [None] * n  # tokenised on first use
    max_sim = [0.0] * n  # max similarity of each item to the picks it has been compared with
    compared = [0] * n  # how many of ``picked`` that is
    remaining = list(range(n))
    picked: list[int] = []
    shown = 0

    def tokens(i: int) -> frozenset[str]:
        t = toks[i]
        if t is None:
            t = toks[i] = mmr_tokens(ordered[i].text)
        return t

    while remaining:
        if stop_after is not None and shown >= stop_after:
            picked.extend(remaining)  # still in score order
            break
        # Lazy argmax: an item's MMR value is at most lam*rel, and rel only falls along
        # ``remaining``, so once lam*rel <= the best value so far nothing later can win
        # (ties go to the earlier, higher-scored item). Only the items looked at are
        # tokenised and compared - the same picks as the eager loop, a fraction of the work.
        best, best_val = -1, -math.inf
        for i in remaining:
            if lam * rel[i] <= best_val:
                break
            if compared[i] < len(picked):
                ti = tokens(i)
                for p in picked[compared[i]:]:
                    max_sim[i] = max(max_sim[i], jaccard(ti, tokens(p)))
                compared[i] = len(picked)
            val = lam * rel[i] - (1 - lam) * max_sim[i]
            if val > best_val:
                best, best_val = i, val
        picked.append(best)
        remaining.remove(best)
        shown += passes is None or passes(ordered[best])
    return [ordered[i] for i in picked]


# ------------------------------------------------------------------- pipeline


def rank_pipeline(
    vector_hits: list[Candidate],
    text_hits: list[Candidate],
    *,
    vector_weight: float = D.VECTOR_WEIGHT,
    text_weight: float = D.TEXT_WEIGHT,
    min_score: float = D.MIN_SCORE,
    max_results: int = D.MAX_RESULTS,
    temporal_decay: bool = False,
    half_life_days: float = D.HALF_LIFE_DAYS,
    now: float | None = None,
    mtimes: Mapping[tuple[str, str], float] | None = None,
    mmr: bool = False,
    mmr_lambda: float = D.MMR_LAMBDA,
    vector_enabled: bool | None = None,
    text_enabled: bool | None = None,
    unseen_vector_bound: float | None = None,
    fusion: str = D.FUSION,
    background: CosineBackground | None = None,
) -> list[Candidate]:
    """Merge -> decay (optional) -> sort -> MMR (optional) -> minScore -> top-K.

    minScore is a relevance bar: it applies to the score before decay, so
    decay orders results by age (the seed's example) without cutting a note
    that answers the question just because it is old; the score shown is the
    decayed one. With MMR on, the top-K are taken in MMR order and then shown by score.
    ``vector_enabled``/``text_enabled``: see :func:`merge_hybrid`.
    ``now`` (epoch seconds) is required when ``temporal_decay`` is on.
    """
    cands = merge_hybrid(
        vector_hits, text_hits, vector_weight, text_weight, vector_enabled=vector_enabled, text_enabled=text_enabled,
        unseen_vector_bound=unseen_vector_bound, fusion=fusion, background=background,
    )
    threshold = _finite(min_score)
    relevant = {c.chunk_id for c in cands if c.score >= threshold}
    if temporal_decay:  # merge_hybrid's order holds until decay changes the scores
        if now is None:
            raise ValueError("rank_pipeline: temporal_decay needs 'now'")
        cands = sort_candidates(apply_temporal_decay(cands, now, half_life_days, mtimes or {}))
    limit = max(0, int(max_results))
    if mmr:
        cands = mmr_rerank(cands, mmr_lambda, stop_after=limit, passes=lambda c: c.chunk_id in relevant)
    kept = [c for c in cands if c.chunk_id in relevant][:limit]
    # MMR decides *which* results make the cut; they are still presented best
    # first, as in the seed's Omada example (both of its lists are score-ordered).
    kept = sort_candidates(kept) if mmr else kept
    return kept + keyword_fill(cands, kept, threshold, limit - len(kept))


def keyword_fill(
    cands: list[Candidate], kept: list[Candidate], threshold: float, slots: int,
) -> list[Candidate]:
    """Strong keyword matches that fill slots the fused score left empty.

    An exact ID or error string that the embeddings miss scores low on the
    fused scale (its cosine is poor or unknown). When its own keyword score
    passes minScore it may still take a *spare* slot - after every result that
    passed on the fused score, so semantic ranking is never disturbed. Like
    minScore, the bar applies before decay.
    """
    if slots <= 0:
        return []
    taken = {c.chunk_id for c in kept}
    extra = [c for c in cands if c.has_text and c.chunk_id not in taken and c.text_score >= threshold]
    extra.sort(key=lambda c: (-c.text_score, -c.score, c.chunk_id))
    return extra[:slots]
