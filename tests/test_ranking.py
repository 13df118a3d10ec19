"""Ranking math: hybrid merge (F10), temporal decay (F11), MMR (F12)."""

from __future__ import annotations

import calendar
import datetime as dt
import math

import pytest

from memindex.pipeline.search.ranking import (
    Z_FLOOR,
    Z_SCALE,
    Candidate,
    CosineBackground,
    apply_temporal_decay,
    arm_factors,
    cosine_background,
    fts_idf,
    keyword_evidence,
    term_idf,
    term_weights,
    vector_evidence,
    dated_path_date,
    decay_multiplier,
    is_evergreen,
    jaccard,
    merge_hybrid,
    mmr_rerank,
    mmr_tokens,
    normalize_weights,
    rank_pipeline,
    result_timestamp,
)

DAY = 86400.0


def cand(cid: str, *, path: str | None = None, source: str = "memory", text: str = "", vs: float = 0.0,
         ts: float = 0.0, score: float = 0.0) -> Candidate:
    return Candidate(chunk_id=cid, path=path or f"memory/{cid}.md", source=source, start_line=1, end_line=1,
                     text=text, vector_score=vs, text_score=ts, score=score)


def midnight(y: int, m: int, d: int) -> float:
    return float(calendar.timegm(dt.date(y, m, d).timetuple()))


# --------------------------------------------------------------- weights


@pytest.mark.parametrize(
    ("vw", "tw", "expected"),
    [
        (0.7, 0.3, (0.7, 0.3)),
        (2, 2, (0.5, 0.5)),
        (1, 1, (0.5, 0.5)),
        (0.6, 0.2, (0.75, 0.25)),
        (-1, 0.5, (0.0, 1.0)),
        (0, 0, (0.7, 0.3)),
        (-3, -3, (0.7, 0.3)),
        (math.nan, 0.3, (0.0, 1.0)),
        (5, 0, (1.0, 0.0)),
    ],
)
def test_normalize_weights(vw: float, tw: float, expected: tuple[float, float]) -> None:
    got = normalize_weights(vw, tw)
    assert got == pytest.approx(expected)
    assert sum(got) == pytest.approx(1.0)


# ----------------------------------------------------------- hybrid merge


def test_merge_hand_computed() -> None:
    vec = [cand("a", vs=0.8, text="A"), cand("b", vs=0.6, text="B")]
    txt = [cand("a", ts=0.5, text="A"), cand("c", ts=0.2, text="C")]
    out = merge_hybrid(vec, txt, 0.7, 0.3, fusion="weighted")
    by_id = {c.chunk_id: c for c in out}
    assert [c.chunk_id for c in out] == ["a", "b", "c"]
    assert by_id["a"].score == pytest.approx(0.7 * 0.8 + 0.3 * 0.5)  # 0.71
    assert by_id["b"].score == pytest.approx(0.7 * 0.6)  # 0.42
    # keyword-only weak hit: max(0.3*0.2, 0.2*0.8) = 0.16
    assert by_id["c"].score == pytest.approx(0.16)
    assert by_id["a"].has_vector and by_id["a"].has_text
    assert by_id["b"].has_vector and not by_id["b"].has_text
    assert by_id["c"].has_text and not by_id["c"].has_vector
    assert by_id["a"].vector_score == 0.8 and by_id["a"].text_score == 0.5


def test_merge_weights_are_normalised() -> None:
    vec = [cand("a", vs=0.8)]
    txt = [cand("a", ts=0.4)]
    assert merge_hybrid(vec, txt, 2, 2, fusion="weighted")[0].score == pytest.approx(0.6)


def test_merge_ties_are_deterministic() -> None:
    vec = [cand("z", vs=0.5), cand("m", vs=0.5), cand("a", vs=0.5)]
    assert [c.chunk_id for c in merge_hybrid(vec, [cand("q", ts=0.1)], 0.7, 0.3, fusion="weighted")][:3] == ["a", "m", "z"]


def test_keyword_only_best_match_passes_min_score() -> None:
    # "ERR_CONN_4521": embeddings return vaguely related notes, the exact ID
    # is only found by BM25 (text score 0.9; a weak hit 1/3).
    vec = [cand("net", vs=0.45), cand("dns", vs=0.40)]
    txt = [cand("err", ts=0.9), cand("weak", ts=1 / 3)]
    out = merge_hybrid(vec, txt, 0.7, 0.3, fusion="weighted")
    by_id = {c.chunk_id: c for c in out}
    assert out[0].chunk_id == "err"
    assert by_id["err"].score == pytest.approx(0.9 * 0.45)  # 0.405 >= 0.35
    assert by_id["err"].score >= 0.35
    assert by_id["weak"].score < 0.35  # 1/3 * 0.45 = 0.15
    kept = rank_pipeline(vec, txt, min_score=0.35, fusion="weighted")
    assert [c.chunk_id for c in kept] == ["err"]


def test_keyword_rescue_never_beats_a_chunk_as_good_on_both_arms() -> None:
    vec = [cand("both", vs=0.6)]
    txt = [cand("both", ts=0.9), cand("kw", ts=0.9)]
    out = merge_hybrid(vec, txt, 0.7, 0.3, fusion="weighted")
    assert [c.chunk_id for c in out] == ["both", "kw"]
    assert out[1].score == pytest.approx(0.54)


def test_no_rescue_when_text_weight_is_zero() -> None:
    out = merge_hybrid([cand("v", vs=0.5)], [cand("kw", ts=0.9)], 1.0, 0.0, fusion="weighted")
    assert {c.chunk_id: c.score for c in out}["kw"] == 0.0


def test_bm25_only_when_no_vectors() -> None:
    txt = [cand("a", ts=0.9), cand("b", ts=0.4)]
    out = merge_hybrid([], txt, 0.7, 0.3, fusion="weighted")
    assert [(c.chunk_id, c.score) for c in out] == [("a", 0.9), ("b", 0.4)]
    assert [c.chunk_id for c in rank_pipeline([], txt, min_score=0.35, fusion="weighted")] == ["a", "b"]


def test_vector_only_when_no_text_hits() -> None:
    vec = [cand("a", vs=0.5), cand("b", vs=0.36)]
    out = merge_hybrid(vec, [], 0.7, 0.3, fusion="weighted")
    assert [(c.chunk_id, c.score) for c in out] == [("a", 0.5), ("b", 0.36)]
    assert len(rank_pipeline(vec, [], min_score=0.35, fusion="weighted")) == 2


def test_enabled_arm_with_no_hits_keeps_weighted_formula() -> None:
    vec = [cand("a", vs=0.5)]
    assert merge_hybrid(vec, [], 0.7, 0.3, text_enabled=True, fusion="weighted")[0].score == pytest.approx(0.35)
    assert merge_hybrid(vec, [], 0.7, 0.3, text_enabled=False, fusion="weighted")[0].score == pytest.approx(0.5)
    txt = [cand("b", ts=0.8)]
    assert merge_hybrid([], txt, 0.7, 0.3, vector_enabled=True, fusion="weighted")[0].score == pytest.approx(0.24)
    assert merge_hybrid([], txt, 0.7, 0.3, fusion="weighted")[0].score == pytest.approx(0.8)
    assert rank_pipeline(vec, [], text_enabled=True, min_score=0.36, fusion="weighted") == []


def test_calibrated_fusion_honours_the_weights() -> None:
    """At OpenClaw's 0.7/0.3 both arms count fully; moving the weights discounts the arm that lost
    share by the change in odds, and 0 switches an arm off."""
    assert arm_factors(0.7, 0.3) == pytest.approx((1.0, 1.0))
    assert arm_factors(0.9, 0.1) == pytest.approx((1.0, (0.1 / 0.9) / (0.3 / 0.7)))
    assert arm_factors(0.5, 0.5) == pytest.approx((0.5 / 0.5 / (0.7 / 0.3), 1.0))
    assert arm_factors(0.0, 1.0) == (0.0, 1.0) and arm_factors(1.0, 0.0) == (1.0, 0.0)
    vec = [cand("a", vs=0.5), cand("b", vs=0.8)]
    txt = [cand("a", ts=0.7), cand("b", ts=0.1)]

    def order(vw: float, tw: float) -> list[str]:
        return [c.chunk_id for c in merge_hybrid(vec, txt, vw, tw, fusion="calibrated")]

    assert order(0.7, 0.3) == ["b", "a"]  # 0.8 (its cosine, no background) vs 0.7 (its keywords)
    assert order(0.2, 0.8) == ["a", "b"]  # the cosine counts 0.107 of itself: 0.7 vs 0.1
    top = merge_hybrid(vec, txt, 0.7, 0.3, fusion="calibrated")[0]
    assert top.score == pytest.approx(0.8)


def test_merge_keeps_vector_snippet_and_fills_empty_text() -> None:
    out = merge_hybrid([cand("a", vs=0.5, text="")], [cand("a", ts=0.5, text="from fts")], 0.7, 0.3, fusion="weighted")
    assert out[0].text == "from fts"


# ---------------------------------------------------------- temporal decay


@pytest.mark.parametrize(
    ("days", "expected", "tol"),
    [(0, 1.0, 1e-12), (7, 0.851, 0.001), (30, 0.5, 1e-9), (90, 0.125, 1e-9), (180, 0.015625, 1e-9)],
)
def test_decay_seed_percentages(days: float, expected: float, tol: float) -> None:
    assert decay_multiplier(days, 30) == pytest.approx(expected, abs=tol)


def test_decay_seed_rounding() -> None:
    assert round(decay_multiplier(7, 30) * 100) == 85  # seed: "~84%" / "0.85"
    assert round(decay_multiplier(180, 30) * 100, 1) == 1.6


@pytest.mark.parametrize("hl", [0, -5, math.nan, math.inf])
def test_decay_disabled_half_life(hl: float) -> None:
    assert decay_multiplier(100, hl) == 1.0


def test_decay_future_is_not_boosted() -> None:
    assert decay_multiplier(-10, 30) == 1.0


def test_dated_paths() -> None:
    assert dated_path_date("memory/2026-02-10.md") == dt.date(2026, 2, 10)
    assert dated_path_date("memory/2026-02/2026-02-15.md") == dt.date(2026, 2, 15)
    assert dated_path_date("/abs/ws/memory/2025-09-15.md") == dt.date(2025, 9, 15)
    assert dated_path_date("memory/2026-02-30.md") is None
    assert dated_path_date("memory/2026-13-01.md") is None
    assert dated_path_date("notes/2026-02-10.md") is None
    assert dated_path_date("memory/2026-02-10.txt") is None
    assert dated_path_date("xmemory/2026-02-10.md") is None


def test_evergreen_rules() -> None:
    assert is_evergreen("MEMORY.md", "memory")
    assert is_evergreen("memory.md", "memory")
    assert is_evergreen("memory/network.md", "memory")
    assert is_evergreen("memory/projects/alpha.md", "memory")
    assert not is_evergreen("memory/2026-02-30.md", "memory")  # dated name, impossible date: aged by mtime
    assert not is_evergreen("memory/2026-02/2026-02-15.md", "memory")
    assert not is_evergreen("sessions/abc.jsonl", "sessions")
    assert not is_evergreen("MEMORY.md", "sessions")
    assert not is_evergreen("notes/ideas.md", "memory")  # extraPaths file -> mtime


def test_invalid_and_upper_case_daily_names_are_not_evergreen() -> None:
    """memory/2026-02-30.md, memory/2026-13-45.md and memory/2026-09-04.MD scored 1.000 with decay on,
    for ever: the first two are dated names (the reference's regex matches them, so they age by their
    mtime), and memindex indexes .MD files, so the third ages by its name's date like its .md twin."""
    for bad in ("memory/2026-02-30.md", "memory/2026-13-45.md", "memory/2026-02/2026-02-30.Md"):
        assert not is_evergreen(bad, "memory") and dated_path_date(bad) is None
        assert result_timestamp(bad, "memory", 123.0) == 123.0
    for upper in ("memory/2026-09-04.MD", "memory/2026-09-04.Md", "memory/2026-09/2026-09-04.mD"):
        assert dated_path_date(upper) == dt.date(2026, 9, 4) and not is_evergreen(upper, "memory")
        assert result_timestamp(upper, "memory", 123.0) == midnight(2026, 9, 4)
    assert is_evergreen("memory/Network.MD", "memory")  # undated stays evergreen in any case
    assert dated_path_date("MEMORY/2026-09-04.md") is None  # only the extension's case is free


def test_result_timestamp_sources() -> None:
    assert result_timestamp("memory/2026-02-10.md", "memory", 123.0) == midnight(2026, 2, 10)
    assert result_timestamp("MEMORY.md", "memory", 123.0) is None
    assert result_timestamp("memory/network.md", "memory", 123.0) is None
    assert result_timestamp("notes/x.md", "memory", 123.0) == 123.0
    assert result_timestamp("notes/x.md", "memory", None) is None
    assert result_timestamp("sessions/s1.jsonl", "sessions", 456.0) == 456.0


def test_rod_standup_seed_example() -> None:
    now = midnight(2026, 2, 10)
    cands = [
        cand("sep", path="memory/2025-09-15.md", score=0.91,
             text="Rod bekerja Sen-Jum, standup jam 10 pagi, pairing jam 2 siang"),
        cand("today", path="memory/2026-02-10.md", score=0.82,
             text="Rod ada standup jam 14:15, 1:1 dengan Zeb jam 14:45"),
        cand("week", path="memory/2026-02-03.md", score=0.80,
             text="Rod memulai tim baru, standup pindah ke 14:15"),
    ]
    decayed = sorted(apply_temporal_decay(cands, now, 30, {}), key=lambda c: -c.score)
    assert [c.path for c in decayed] == ["memory/2026-02-10.md", "memory/2026-02-03.md", "memory/2025-09-15.md"]
    assert decayed[0].score == pytest.approx(0.82)
    assert decayed[1].score == pytest.approx(0.68, abs=0.005)
    assert decayed[2].score == pytest.approx(0.03, abs=0.005)
    # the seed's "0.85" multiplier and 148-day age
    assert decayed[1].score / 0.80 == pytest.approx(0.85, abs=0.005)
    assert (now - midnight(2025, 9, 15)) / DAY == 148


def test_evergreen_never_decays_and_sessions_use_mtime() -> None:
    now = midnight(2026, 2, 10)
    cands = [
        cand("root", path="MEMORY.md", score=0.5),
        cand("net", path="memory/network.md", score=0.5),
        cand("sess", path="sessions/s1.jsonl", source="sessions", score=0.5),
        cand("extra", path="notes/x.md", score=0.5),
        cand("nomtime", path="sessions/s2.jsonl", source="sessions", score=0.5),
    ]
    mtimes = {("sessions", "sessions/s1.jsonl"): now - 30 * DAY, ("memory", "notes/x.md"): now - 60 * DAY}
    out = {c.chunk_id: c.score for c in apply_temporal_decay(cands, now, 30, mtimes)}
    assert out["root"] == 0.5 and out["net"] == 0.5
    assert out["sess"] == pytest.approx(0.25)  # the reference never decayed sessions
    assert out["extra"] == pytest.approx(0.125)
    assert out["nomtime"] == 0.5  # unknown age: leave alone


def test_nested_dated_file_decays() -> None:
    now = midnight(2026, 3, 17)
    out = apply_temporal_decay([cand("n", path="memory/2026-02/2026-02-15.md", score=1.0)], now, 30, {})
    assert out[0].score == pytest.approx(0.5)


# ---------------------------------------------------------------------- MMR


def test_mmr_tokens() -> None:
    assert mmr_tokens("Router: Omada ER605, AdGuard: 192.168.10.2") == {
        "router", "omada", "er605", "adguard", "192.168.10.2"}
    assert mmr_tokens("FOO_bar baz-1") == {"foo_bar", "baz", "1"}
    assert mmr_tokens("Cafe\u0301") == {"café"}  # NFC; the mark stays in the token
    assert mmr_tokens("cấu hình") == {"cấu", "hình"}
    assert mmr_tokens("東京で会議") == {"東", "京", "で", "会", "議"}
    assert "ตั้" in mmr_tokens("ตั้งค่า")  # Thai marks stay on their base
    assert mmr_tokens("!!! ...") == frozenset()


def test_jaccard() -> None:
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert jaccard(frozenset({"a"}), frozenset()) == 0.0
    assert jaccard(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)
    assert jaccard(frozenset({"a"}), frozenset({"a"})) == 1.0


OMADA = [  # the seed's texts and scores (query "pengaturan jaringan rumah")
    cand("d10", path="memory/2026-02-10.md", score=0.92,
         text="Mengonfigurasi router Omada, set VLAN 10 untuk perangkat IoT"),
    cand("d08", path="memory/2026-02-08.md", score=0.89,
         text="Mengonfigurasi router Omada, memindahkan IoT ke VLAN 10"),
    cand("d05", path="memory/2026-02-05.md", score=0.78,
         text="Menyiapkan DNS AdGuard di 192.168.10.2"),
    cand("net", path="memory/network.md", score=0.85,
         text="Router: Omada ER605, AdGuard: 192.168.10.2, VLAN 10: IoT"),
]

def _with_texts(texts: list[str]) -> list[Candidate]:
    return [c._replace(text=t) for c, t in zip(OMADA, texts)]


def test_omada_without_mmr() -> None:
    out = sorted(OMADA, key=lambda c: -c.score)[:3]
    assert [c.path for c in out] == ["memory/2026-02-10.md", "memory/2026-02-08.md", "memory/network.md"]


@pytest.mark.parametrize(
    "texts",
    [
        [c.text for c in OMADA],
        [  # Vietnamese seed
            "Đã cấu hình router Omada, đặt VLAN 10 cho thiết bị IoT",
            "Đã cấu hình router Omada, chuyển IoT sang VLAN 10",
            "Đã thiết lập DNS AdGuard trên 192.168.10.2",
            "Router: Omada ER605, AdGuard: 192.168.10.2, VLAN 10: IoT",
        ],
        [  # English
            "Configured Omada router, set VLAN 10 for IoT devices",
            "Configured Omada router, moved IoT to VLAN 10",
            "Set up AdGuard DNS on 192.168.10.2",
            "Router: Omada ER605, AdGuard: 192.168.10.2, VLAN 10: IoT",
        ],
    ],
    ids=["id", "vi", "en"],
)
def test_omada_mmr_seed_example(texts: list[str]) -> None:
    cands = _with_texts(texts)
    out = mmr_rerank(cands, 0.7)
    # MMR selection order: the near-duplicate 2026-02-08 falls out of the top 3
    assert [c.chunk_id for c in out] == ["d10", "d05", "net", "d08"]
    assert {c.chunk_id: c.score for c in out} == {c.chunk_id: c.score for c in OMADA}  # scores untouched
    # the pipeline presents the selected top 3 best first, exactly as the seed lists them
    vec = [c._replace(vector_score=c.score, score=0.0) for c in cands]
    top = rank_pipeline(vec, [], mmr=True, mmr_lambda=0.7, min_score=0.0, max_results=3)
    assert [(c.path, c.score) for c in top] == [
        ("memory/2026-02-10.md", 0.92), ("memory/network.md", 0.85), ("memory/2026-02-05.md", 0.78)]
    plain = rank_pipeline(vec, [], min_score=0.0, max_results=3)
    assert [c.path for c in plain] == ["memory/2026-02-10.md", "memory/2026-02-08.md", "memory/network.md"]


def test_mmr_lambda_one_is_plain_sort_and_never_drops() -> None:
    plain = sorted(OMADA, key=lambda c: -c.score)
    assert mmr_rerank(OMADA, 1.0) == plain
    assert mmr_rerank(OMADA, 7.0) == plain  # clamped to 1
    for lam in (0.0, 0.3, 0.5, 0.7, -2.0):
        out = mmr_rerank(OMADA, lam)
        assert sorted(c.chunk_id for c in out) == sorted(c.chunk_id for c in OMADA)
        assert out[0].chunk_id == "d10"  # nothing picked yet: pure relevance
    assert mmr_rerank([], 0.7) == []
    assert mmr_rerank(OMADA[:1], 0.7) == OMADA[:1]


def test_mmr_equal_scores_ties_follow_score_order() -> None:
    a = cand("a", score=0.5, text="alpha beta")
    b = cand("b", score=0.5, text="gamma delta")
    assert [c.chunk_id for c in mmr_rerank([b, a], 0.7)] == ["a", "b"]


def test_mmr_lambda_zero_prefers_diverse() -> None:
    out = mmr_rerank(OMADA, 0.0)
    # after d10, the least similar text is the DNS note
    assert out[1].chunk_id == "d05"


# ----------------------------------------------------------------- pipeline


def test_rank_pipeline_order_decay_then_mmr_then_filter() -> None:
    now = midnight(2026, 2, 10)
    vec = [
        cand("d10", path="memory/2026-02-10.md", vs=0.92, text=OMADA[0].text),
        cand("d08", path="memory/2026-02-08.md", vs=0.89, text=OMADA[1].text),
        cand("d05", path="memory/2026-02-05.md", vs=0.78, text=OMADA[2].text),
        cand("net", path="memory/network.md", vs=0.85, text=OMADA[3].text),
        cand("old", path="memory/2025-09-15.md", vs=0.95, text="Omada router VLAN 10 lama"),
    ]
    out = rank_pipeline(vec, [], temporal_decay=True, now=now, half_life_days=30, mmr=True,
                        mmr_lambda=0.7, min_score=0.35, max_results=3)
    # the September note decays to ~0.03 and is filtered; MMR drops the near-duplicate
    assert [c.chunk_id for c in out] == ["d10", "net", "d05"]
    assert out[0].score == pytest.approx(0.92)
    assert out[1].score == pytest.approx(0.85)  # evergreen
    assert out[2].score == pytest.approx(0.78 * decay_multiplier(5, 30))

    plain = rank_pipeline(vec, [], min_score=0.35, max_results=10)
    assert [c.chunk_id for c in plain] == ["old", "d10", "d08", "net", "d05"]
    assert rank_pipeline(vec, [], min_score=0.9, max_results=10)[-1].chunk_id == "d10"
    assert rank_pipeline(vec, [], max_results=0) == []


def test_rank_pipeline_decay_needs_now() -> None:
    with pytest.raises(ValueError):
        rank_pipeline([cand("a", vs=0.5)], [], temporal_decay=True)


# ------------------------------------------------------------ calibrated fusion, both arms


def test_calibrated_fusion_scores_the_stronger_arm_on_the_index_s_scale() -> None:
    """Issue 41: the cosine counts by how far it stands above this index's typical cosine (the
    background), so the same evidence scores alike whatever the model's scale."""
    minilm = CosineBackground(0.08, 0.08)
    e5 = CosineBackground(0.77, 0.018)
    # The same standing (4 spreads above the centre) under two models' scales
    assert vector_evidence(0.08 + 4 * 0.08, minilm) == pytest.approx(vector_evidence(0.77 + 4 * 0.018, e5))
    assert vector_evidence(0.08 + 4 * 0.08, minilm) == pytest.approx(math.tanh((4 - Z_FLOOR) / Z_SCALE))
    assert vector_evidence(0.08 + 0.5 * 0.08, minilm) == 0.0  # within a spread of typical: no evidence
    # "sem" answers by meaning (5 spreads up) and shares no word; "word" shares one word and sits
    # near the typical cosine: the stronger arm, not a sum, decides.
    vec = [cand("sem", vs=0.77 + 5 * 0.018), cand("word", vs=0.78)]
    txt = [cand("word", ts=0.3)]
    out = merge_hybrid(vec, txt, 0.7, 0.3, fusion="calibrated", background=e5)
    assert [c.chunk_id for c in out] == ["sem", "word"]
    assert out[1].score == pytest.approx(0.3)  # its keyword evidence; the cosine adds nothing
    assert out[0].vector_score == pytest.approx(0.77 + 5 * 0.018)  # the raw cosine is still reported
    # Without the vector arm the same keyword scores keep their own order and values.
    kw = merge_hybrid([], [cand("a", ts=0.9), cand("b", ts=0.6)], 0.7, 0.3, fusion="calibrated")
    assert [(c.chunk_id, c.score) for c in kw] == [("a", 0.9), ("b", 0.6)]


def test_cosine_background_is_robust_and_shrunk_for_small_samples() -> None:
    big = [0.1 + 0.001 * (i % 50) for i in range(500)] + [0.9] * 5  # a few answers do not move it
    bg = cosine_background(big)
    assert bg is not None and bg.centre == pytest.approx(0.1245, abs=0.002)
    assert cosine_background([]) is None and cosine_background([float("nan")]) is None
    flat = cosine_background([0.30] * 20)  # no spread seen: the prior's, not zero
    assert flat is not None and flat.spread == pytest.approx(math.sqrt(20 / 40) * 0.08 * 0.7)
    assert cosine_background([0.30, 0.5, 0.1]) is None  # too few to say: the cosine itself counts


def test_keyword_evidence_weighs_terms_by_rarity_in_absolute_terms() -> None:
    n = 1000
    idf = [term_idf(n, 600), term_idf(n, 3)]  # "home" in 600 chunks, "adguard" in 3
    fidf = [fts_idf(n, 600), fts_idf(n, 3)]
    common_only = keyword_evidence(-0.1, [True, False], idf, fidf)
    rare_only = keyword_evidence(-5.5, [False, True], idf, fidf)
    both = keyword_evidence(-5.8, [True, True], idf, fidf)
    assert common_only < 0.15 < 0.9 < rare_only < both <= 1.0
    # Absolute: a hit's evidence does not depend on how strong the best other hit is.
    assert keyword_evidence(-0.1, [True, False], idf, fidf) == common_only
    assert keyword_evidence(0.0, [], [], []) == 0.0


def test_a_tiny_index_weighs_terms_as_if_it_had_twenty_chunks() -> None:
    """In a one-note workspace its every word is in every note (idf ~0, FTS5's bm25 ~0): "papaya"
    still counts there, as a term held by 1 of 20 chunks, and coverage stands for BM25 strength."""
    idfs, fts = term_weights(1, [1, 0])
    assert fts is None and idfs == [term_idf(20, 1), term_idf(20, 0)]
    assert keyword_evidence(-1e-6, [True, False], idfs, fts) > 0.35  # passes the default minScore
    assert keyword_evidence(-2e-6, [True, False], idfs, fts) > keyword_evidence(-1e-6, [True, False], idfs, fts)
    assert term_weights(100, [1])[1] == [fts_idf(100, 1)]


def test_calibrated_fusion_a_strong_vector_hit_ranks_above_weak_keyword_hits() -> None:
    vec = [cand("sem", vs=0.80), cand("kw", vs=0.10)]
    txt = [cand("kw", ts=0.40)]
    out = merge_hybrid(vec, txt, 0.7, 0.3, fusion="calibrated")
    assert [c.chunk_id for c in out] == ["sem", "kw"]
    assert out[0].score == pytest.approx(0.80)  # its cosine, as with the vector arm alone
    kept = rank_pipeline(vec, txt, min_score=0.35, max_results=5, fusion="calibrated")
    assert [c.chunk_id for c in kept] == ["sem", "kw"]


def test_calibrated_fusion_a_negative_cosine_never_scores_below_its_keywords() -> None:
    """A weak embedder: best cosine 0.04, two chunks with a slightly negative one. Relative to the
    best they were -6x once, and chunks matching half the query's terms scored -0.25; a chunk's
    score is at least its keyword evidence, and minScore applies to that."""
    vec = [cand("n3", vs=0.04), cand("n4", vs=0.02), cand("n2", vs=-0.010), cand("n1", vs=-0.012)]
    txt = [cand("n3", ts=0.8), cand("n4", ts=0.5), cand("n2", ts=0.5), cand("n1", ts=0.5)]
    out = merge_hybrid(vec, txt, 0.7, 0.3, fusion="calibrated", background=CosineBackground(0.0, 0.02))
    assert [c.chunk_id for c in out][0] == "n3"
    assert all(c.score >= c.text_score - 1e-12 for c in out)
    assert {c.chunk_id: c.score for c in out}["n2"] == pytest.approx(0.5)
    kept = rank_pipeline(vec, txt, min_score=0.46, max_results=5, fusion="calibrated")
    assert all(c.score >= 0 for c in kept)
