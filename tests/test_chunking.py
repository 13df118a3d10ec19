from hypothesis import given, settings, strategies as st

from memindex.pipeline.index.chunking import LINE_BREAK, break_lines, chunk_limits, chunk_markdown, split_lines

line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=300)
doc = st.lists(st.one_of(line, st.text(alphabet="ab \t", min_size=1200, max_size=5000)), max_size=80).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(doc, st.sampled_from([(400, 80), (50, 10), (8, 0), (100, 99)]))
def test_chunks_cover_every_line_and_respect_limits(text, params):
    tokens, overlap = params
    max_chars, overlap_chars = chunk_limits(tokens, overlap)
    chunks = chunk_markdown(text, tokens, overlap)
    lines = split_lines(text)
    # OpenClaw's numbering: a final line break ends with an empty line the last chunk may hold.
    last = len(lines) + (len(text) > 1 and text[-1] == "\n")
    covered = set()
    for c in chunks:
        assert len(c.text) <= max_chars
        assert 1 <= c.start_line <= c.end_line <= last
        covered.update(range(c.start_line, c.end_line + 1))
    for no, ln in enumerate(lines, 1):
        if ln.strip():
            assert no in covered, f"line {no} lost"
    # Nothing of any line is lost: every non-blank line's text appears in the chunks.
    joined = "\n".join(c.text for c in chunks)
    for ln in lines:
        for piece in (ln[i:i + max_chars] for i in range(0, len(ln), max_chars)):
            if piece.strip():
                assert piece in joined


def test_end_line_counts_the_empty_line_after_a_final_newline_as_openclaw_does():
    """OpenClaw 2026.3.28 indexed this 4-line note (recorded from its store: MEMORY.md 1-5) as one
    chunk 1-5 whose text ends with the newline; memindex said 1-4 (issue 42's off-by-one)."""
    text = "# Notes\n\nThe deploy key rotates every Tuesday.\nAsk Dana about the staging cluster.\n"
    [c] = chunk_markdown(text)
    assert (c.start_line, c.end_line, c.text) == (1, 5, text)
    [c] = chunk_markdown(text.rstrip("\n"))  # no final newline: no empty line to count
    assert (c.start_line, c.end_line) == (1, 4)
    [c] = chunk_markdown(text.replace("\n", "\r\n"))  # CRLF: the same lines
    assert (c.start_line, c.end_line) == (1, 5)


def test_overlap_is_about_80_tokens():
    text = "\n".join(f"line {i:04d} " + "word " * 8 for i in range(400))
    chunks = chunk_markdown(text, 400, 80)
    assert len(chunks) > 5
    for a, b in zip(chunks, chunks[1:]):
        shared = set(range(a.start_line, a.end_line + 1)) & set(range(b.start_line, b.end_line + 1))
        shared_chars = sum(len(split_lines(text)[n - 1]) + 1 for n in shared)
        assert 200 <= shared_chars <= 320  # ~80 tokens at 4 chars/token, whole lines only
        assert b.start_line > a.start_line


def test_long_line_pieces_are_consecutive_not_duplicated():
    long = "".join(chr(ord("a") + i % 26) for i in range(5000))
    chunks = chunk_markdown(f"intro\n{long}\noutro", 400, 80)
    pieces = [c.text.removeprefix("intro\n").removesuffix("\noutro")
              for c in chunks if c.start_line <= 2 <= c.end_line]
    assert "".join(pieces) == long  # nothing lost, nothing repeated
    assert len(set(pieces)) == len(pieces)
    assert chunks[0].text == "intro" and chunks[-1].text.endswith("outro")


def test_line_numbers_crlf_and_unicode():
    text = "# Titel\r\n\r\nCấu hình router\r\nตั้งค่าเราเตอร์\r\n東京で会議"
    (c,) = chunk_markdown(text)
    assert (c.start_line, c.end_line) == (1, 5)
    assert "\r" not in c.text and "東京で会議" in c.text


def test_empty_and_blank_input():
    assert chunk_markdown("") == []
    assert chunk_markdown("\n\n   \n") == []


@given(st.text(alphabet=st.sampled_from(["a", "b", " ", "\n", "\r", "\u2028", "é"]), max_size=60))
def test_break_lines_is_the_line_break_split_with_or_without_cr(text):
    # The str.split fast path (no CR in the text) and the regex agree everywhere.
    assert break_lines(text) == LINE_BREAK.split(text)
    assert break_lines(text.replace("\r", "")) == LINE_BREAK.split(text.replace("\r", ""))
