"""Issue 19: the warm search's fast paths answer exactly what the plain definitions answer."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from memindex.pipeline.search.ranking import Candidate, rank_pipeline, sort_candidates
from memindex.pipeline.store.fts_text import (
    _fold, build_match_query, keyword_tokens, keys_by_line, match_key, match_query_and_keywords, query_keywords,
)

_TEXT = st.lists(st.sampled_from(
    ["gateway", "Gateways", "reload", "reloaded", "configure", "configuring", "ab", "e", "x9", " ", "  ", "\n",
     ".", "-", "_", "'s", "the", "and", "é", "đ", "Đ", "—", "中", "文", "ไทย", "İ", "\u0301", "K"]),
    max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_one_parse_gives_the_match_and_the_keys(query):
    # The engine parses a query once for its MATCH string and the keys coverage and snippets use.
    assert match_query_and_keywords(query) == (build_match_query(query), query_keywords(query))


@settings(max_examples=300, deadline=None)
@given(_TEXT, _TEXT)
def test_keys_by_line_repeats_and_line_ends(text, query):
    # keys_by_line takes only each line's first occurrence of a key and jumps to the next line:
    # repeats on a line, keys at a line's end and on the last line must all still count.
    text = f"{text} {text}\n{text}"
    keys = query_keywords(query) | frozenset({"gateway", "reload"})
    assert keys_by_line(text, keys) == [keys & {match_key(t) for t in keyword_tokens(line)}
                                        for line in text.split("\n")]


@given(_TEXT)
def test_fold_only_translates_when_there_is_a_fold(text):
    assert _fold(text) == _fold(text).replace("đ", "d").replace("Đ", "D")


def _cand(cid: str, ts: float = 0.0, vs: float | None = None) -> Candidate:
    return Candidate(cid, f"{cid}.md", "memory", 1, 2, f"text {cid}", vector_score=vs or 0.0,
                     text_score=ts, has_vector=vs is not None, has_text=vs is None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-1, max_value=2, allow_nan=False), max_size=12),
       st.lists(st.floats(min_value=-1, max_value=1, allow_nan=False), max_size=12))
def test_rank_pipeline_without_decay_is_score_ordered_with_the_merged_fields(text_scores, vector_scores):
    # merge_hybrid builds every candidate once and rank_pipeline no longer re-sorts its output
    # when nothing (decay) changed the scores.
    text = [_cand(f"c{i}", ts=s) for i, s in enumerate(text_scores)]
    vec = [_cand(f"c{i * 2}", vs=s) for i, s in enumerate(vector_scores)]
    for fusion in ("weighted", "calibrated"):
        out = rank_pipeline(vec, text, min_score=0.0, max_results=50, fusion=fusion)
        head = [c for c in out if c.score >= 0.0]
        assert head == sort_candidates(head)
        for c in out:
            assert c.has_text == any(t.chunk_id == c.chunk_id for t in text)
            assert c.has_vector == any(v.chunk_id == c.chunk_id for v in vec)
            assert 0.0 <= c.text_score <= 1.0 and math.isfinite(c.vector_score)
            assert c.text == f"text {c.chunk_id}"
