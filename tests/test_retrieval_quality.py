"""Issue 17: snippets that show the match, one score scale across modes.

End to end through the real pipeline (sync -> chunk -> embed -> writer) and
``MemorySearch``; the local-GGUF cases are skipped without llama-cpp-python.
"""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

import pytest

from memindex.pipeline.index.chunking import chunk_markdown, file_context, sha256_hex, with_context
from memindex.pipeline.search.engine import MemorySearch
from memindex.pipeline.search.get import memory_get
from memindex.pipeline.search.snippet import SNIPPET_MAX_CHARS, centred_snippet
from memindex.pipeline.store.fts_text import query_keywords
from tests.test_hybrid_search import HASH, LOCAL, needs_gguf

FEB_10 = float(calendar.timegm(dt.date(2026, 2, 10).timetuple()))
FILLER = [f"Routine entry {i}: watered the plants and checked the mailbox before lunch." for i in range(30)]


def _search(agent, query: str, clock: float | None = None, **kw: Any) -> dict[str, Any]:
    eng = MemorySearch(agent.settings(), **({"clock": lambda: clock} if clock is not None else {}))
    try:
        return eng.search(query, **kw).as_dict()
    finally:
        eng.close()


@pytest.mark.parametrize("ms", [{}, HASH], ids=["keyword-only", "hybrid-hash"])
def test_snippet_shows_a_match_past_the_first_700_characters(agent, ms):
    agent.memory_config(ms)
    agent.write("memory/2026-02-09.md", "# 2026-02-09\n" + "\n".join(FILLER[:14])
                + "\nThe locksmith code for the shed is QUILLFEATHER-77.\n" + "\n".join(FILLER[14:18]) + "\n")
    agent.index()
    res = _search(agent, "shed locksmith code", session_key="agent:main:direct:alice")
    top = res["results"][0]
    assert top["path"] == "memory/2026-02-09.md"
    chunk = memory_get(agent.settings(), top["path"], from_line=top["startLine"],
                       lines=top["endLine"] - top["startLine"] + 1).text
    assert chunk.index("QUILLFEATHER-77") > SNIPPET_MAX_CHARS  # past the old prefix snippet
    body, footer = top["snippet"].split("\n\nSource: ")
    assert "QUILLFEATHER-77" in body and len(body) <= SNIPPET_MAX_CHARS
    start, end = top["snippetStartLine"], top["snippetEndLine"]
    assert top["startLine"] <= start <= 16 <= end <= top["endLine"]  # the match is line 16
    assert footer == f"memory/2026-02-09.md#L{start}-L{end}" == top["citation"]
    got = memory_get(agent.settings(), top["path"], from_line=start, lines=end - start + 1)
    assert got.text == body


@pytest.mark.parametrize("query", ["creme brulee", "cafe segur", "Zoe", "crème brûlée"])
def test_snippet_shows_a_match_spelt_without_its_accents(agent, query):
    """helper-55: "creme brulee" matched "crème brûlée" (the FTS table folds diacritics) but the
    snippet, looking for the unfolded word, showed other lines, and the citation pointed there."""
    agent.write("memory/food.md", "# Food\n" + "\n".join(FILLER[:14])
                + "\nZoë recommended the crème brûlée at Café Ségur.\n" + "\n".join(FILLER[14:18]) + "\n")
    agent.index()
    [top] = _search(agent, query, session_key="agent:main:direct:alice")["results"][:1]
    assert top["path"] == "memory/food.md" and top["startLine"] == 1  # the match is past 700 characters
    assert "crème brûlée at Café Ségur" in top["snippet"], top["snippet"]
    assert top["snippetStartLine"] <= 16 <= top["snippetEndLine"]  # the matching line


@needs_gguf
def test_a_vector_hit_scores_the_same_whether_or_not_another_note_shares_a_query_word(agent):
    """helper-55: "internet filtering ad blocker" found the AdGuard note at its cosine (0.42) alone,
    but once an unrelated note held the word "blocker" it scored 0.7 x cosine (0.29) and fell
    under minScore: a vector hit's score depended on other notes. It is its vector evidence either way
    (read against the store's chunks and the reference texts, which one more note moves by a hair)."""
    agent.memory_config(LOCAL)
    agent.write("memory/2026-11-28.md", "Set up AdGuard DNS on 192.168.10.2\n")
    agent.index()
    query = "internet filtering ad blocker"

    def adguard() -> float | None:
        res = _search(agent, query, min_score=0)["results"]
        return next((r["score"] for r in res if r["path"] == "memory/2026-11-28.md"), None)

    alone = adguard()
    assert alone is not None and alone > 0
    agent.write("memory/2026-11-27.md", "Sprint blocker: the CI runner is out of disk.\n")
    agent.index()
    assert adguard() == pytest.approx(alone, abs=0.01)  # not 0.7x
    paths = [r["path"] for r in _search(agent, query)["results"]]
    assert ("memory/2026-11-28.md" in paths) is (alone >= 0.35), paths  # minScore judges it alike


def test_snippet_of_a_hit_without_a_matching_line_starts_at_the_chunk() -> None:
    text = "\n".join(FILLER)
    snip = centred_snippet(text, 5, 5 + len(FILLER) - 1, query_keywords("zebra quartz"))
    assert snip.start_line == 5 and text.startswith(snip.text) and len(snip.text) <= SNIPPET_MAX_CHARS
    assert snip.end_line == 5 + snip.text.count("\n")


def test_snippet_of_one_long_line_is_cut_around_the_match() -> None:
    line = "x" * 1000 + " the walrus anthem " + "y" * 1000
    snip = centred_snippet(line, 3, 3, query_keywords("walrus"))
    assert "walrus" in snip.text and len(snip.text) == SNIPPET_MAX_CHARS
    assert (snip.start_line, snip.end_line) == (3, 3)


def test_snippet_cap_counts_utf16_units_as_openclaw() -> None:
    """800 emoji and a word: the snippet was 700 code points, 1,391 UTF-16 units (OpenClaw's 700
    counts a JavaScript string's length)."""
    from memindex.pipeline.search.snippet import units

    line = "\U0001F600" * 800 + " marzipan"
    snip = centred_snippet(line, 1, 1, query_keywords("marzipan"))
    assert "marzipan" in snip.text and units(snip.text) <= SNIPPET_MAX_CHARS and units(snip.text) >= SNIPPET_MAX_CHARS - 1
    lines = ["\U0001F600" * 100 + f" filler {i}" for i in range(10)] + ["the lemur line"]
    snip = centred_snippet("\n".join(lines), 1, len(lines), query_keywords("lemur"))
    assert "lemur" in snip.text and units(snip.text) <= SNIPPET_MAX_CHARS


def test_transcript_snippet_is_whole_messages_around_the_match() -> None:
    """A transcript chunk has one text line per message and a range in JSONL lines with tool
    records between: its snippet was its first 700 characters, cut mid-message, so it neither
    showed the match nor the lines it cited."""
    msgs = [f"Assistant: small talk message {i} " + "blah " * 20 for i in range(12)]
    msgs[9] = "User: the cabin wifi password is hunter2"
    snip = centred_snippet("\n".join(msgs), 2, 30, query_keywords("cabin wifi password"))
    assert "hunter2" in snip.text and len(snip.text) <= SNIPPET_MAX_CHARS
    assert all(line in msgs for line in snip.text.split("\n"))  # whole messages only
    assert (snip.start_line, snip.end_line) == (2, 30)  # the chunk's JSONL range holds the lines shown


def test_snippet_prefers_the_line_with_the_rarer_term() -> None:
    lines = [f"Rod note {i}" for i in range(12)] + ["Rod moved the standup to 14:15"] + ["pad " * 40] * 20
    snip = centred_snippet("\n".join(lines), 1, len(lines), query_keywords("Rod's standup"))
    assert "standup" in snip.text and snip.start_line <= 13 <= snip.end_line


ROD = {
    "memory/2025-09-15.md": "Rod works Mon-Fri, standup at 10am, pairing at 2pm\n",
    "memory/2026-02-10.md": "Rod has standup at 14:15, 1:1 with Zeb at 14:45\n",
    "memory/2026-02-03.md": "Rod started new team, standup moved to 14:15\n",
}
MODES = [
    pytest.param({}, id="keyword-only"),
    pytest.param(HASH, id="hybrid-hash"),
    pytest.param(LOCAL, id="hybrid-local-gguf", marks=needs_gguf),
]


@pytest.mark.parametrize("ms", MODES)
@pytest.mark.parametrize("decay", [False, True], ids=["no-decay", "decay"])
def test_three_notes_about_the_subject_all_come_back(agent, ms, decay):
    agent.memory_config({**ms, "query": {"hybrid": {"temporalDecay": {"enabled": decay}}}})
    for rel, text in ROD.items():
        agent.write(rel, text)
    agent.index()
    res = _search(agent, "What is Rod's work schedule?", clock=FEB_10)  # default minScore 0.35
    paths = [r["path"] for r in res["results"]]
    assert sorted(paths) == sorted(ROD), res
    if decay:  # decay still orders by age (the seed's example): the 148-day-old note comes last
        assert paths[-1] == "memory/2025-09-15.md"


def test_file_context_names_the_title_and_the_daily_notes_date() -> None:
    assert file_context("memory/2023-07-07.md", "\n# Standups\nbody\n") == "Standups 2023-07-07 Friday 7 July 2023"
    assert file_context("notes/router.md", "# Router notes ##\nVLAN 20\n") == "Router notes"
    assert file_context("memory/2026-02-30.md", "no heading\n") == ""  # not a date, no title
    # memindex indexes .MD files: a daily note named so carries its date too (it carried none)
    assert file_context("memory/2023-07-07.MD", "no heading\n") == "2023-07-07 Friday 7 July 2023"
    chunks = with_context(chunk_markdown("# T\n" + "\n".join(FILLER), 50, 10), "T")
    assert len(chunks) > 1 and all(c.context == "T" for c in chunks)
    assert all(c.hash == sha256_hex(c.text) for c in chunks)  # the embedding cache key ignores the context


@pytest.mark.parametrize("ms", [{}, HASH], ids=["keyword-only", "hybrid-hash"])
def test_a_later_chunk_of_a_daily_note_is_found_by_its_date(agent, ms):
    """The date lives in the file name and chunk 1's heading; every chunk is keyword-indexed with it,
    while snippets, citations and memory_get still show the file's own lines."""
    agent.memory_config({**ms, "chunking": {"tokens": 60, "overlap": 0}})
    body = "\n".join(FILLER[:12]) + "\nPainted the garden fence green.\n"
    agent.write("memory/2023-07-07.md", "# 2023-07-07\n" + body)
    agent.write("memory/2023-08-09.md", "# 2023-08-09\n" + body)
    agent.index()
    res = _search(agent, "fence painting in July", session_key="agent:main:direct:alice", max_results=1)
    top = res["results"][0]
    assert top["path"] == "memory/2023-07-07.md" and top["startLine"] > 1  # not the chunk with the heading
    snippet_lines = top["snippet"].split("\n\nSource: ")[0]
    assert "July" not in snippet_lines and "fence" in snippet_lines
    start, end = top["snippetStartLine"], top["snippetEndLine"]
    assert memory_get(agent.settings(), top["path"], from_line=start, lines=end - start + 1).text == snippet_lines


def test_a_snippet_window_does_not_end_on_a_heading_without_its_body() -> None:
    """A window grown down to a chunk's next section ended on "## Oncall notes" with no body."""
    lines = [f"filler line {i} " + "pad " * 12 for i in range(8)] + ["the tapir escaped the pen"] + \
            [f"more filler {i} " + "pad " * 12 for i in range(3)] + ["", "## Oncall notes", ""] + \
            ["oncall body " + "pad " * 30] * 6
    snip = centred_snippet("\n".join(lines), 1, len(lines), query_keywords("tapir"))
    shown = snip.text.split("\n")
    assert "tapir" in snip.text and shown[-1].strip() and not shown[-1].startswith("#"), shown[-3:]
    assert snip.end_line == snip.start_line + len(shown) - 1
