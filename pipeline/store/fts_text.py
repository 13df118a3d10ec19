"""Multilingual keyword search over FTS5 (F10 keyword arm).

The FTS table uses ``unicode61 remove_diacritics 2``. That tokenizer splits on
anything that is not a letter/number, so it cannot find words in scripts that
do not put spaces between words (Chinese, Japanese, Thai, ...): a whole
sentence would become one token. We therefore store :func:`index_text` of each
chunk (such runs spaced out into single characters) and build queries with the
same transformation, so both sides agree on the tokens.

:func:`build_match_query` turns arbitrary user text into an FTS5 MATCH string
that cannot raise: every term is emitted as a double-quoted phrase made only of
letters/numbers, so FTS5 operators in the input (``AND``, ``NEAR(``, ``*``,
``:``, ``^``, quotes, parentheses) are never interpreted as syntax.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterator

# Inputs beyond this are cut before tokenising: memory queries are short and a
# bounded input keeps the work (and the MATCH string) bounded.
MAX_QUERY_CHARS = 4000
MAX_TERMS = 32
MAX_PHRASE_TOKENS = 64

# Code point ranges of scripts written without spaces between words.
# "han" = CJK ideographs + kana (each char is roughly a morpheme, so bigrams
# are the classic IR unit); "sea" = Southeast Asian abugidas (a char is a
# letter, so we use trigrams of clusters for partial matches).
_HAN_RANGES = (
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3031, 0x3035),  # kana repeat marks
    (0x3038, 0x303C),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x1B000, 0x1B16F),  # kana supplement / extended
    (0x20000, 0x323AF),  # CJK extensions B..H + compatibility supplement
)
_SEA_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
)

# Letters remove_diacritics does not fold because Unicode has no decomposition
# for them; Vietnamese users routinely type "d" for "đ".
_EXTRA_FOLDS = str.maketrans({"đ": "d", "Đ": "D"})

# Function words that only add noise to an OR query. Kept short on purpose:
# dropping a content word costs recall, keeping a stop word only costs a bit of
# BM25 precision (its IDF is low anyway).
STOP_WORDS = frozenset(
    """
    a about above after again all am an and any are as at be been before being
    below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers him his how i if in
    into is it its itself just me more most my no nor not now of off on once
    only or other our ours out over own same she should so some such than that
    the their theirs them then there these they this those through to too under
    until up very was we were what when where which while who whom why will
    with would you your yours s t d ll m re ve don doesn didn isn aren wasn
    weren won can't cannot couldn shouldn wouldn hasn haven hadn
    please tell know remember recall anything something thing things
    yang dan di ke dari untuk dengan adalah ini itu apa atau juga pada akan
    tidak sudah saya kamu kita kami mereka bagaimana kapan mana siapa
    el la los las un una unos unas de del y o que en es por para con se su
    le les des et ou est une du au aux ce qui dans pour sur pas
    der die das und ist ein eine zu den dem mit von nicht auf
    o os as um uma do da dos das em no na é com
    """.split()
)


def _in_ranges(cp: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def script_family(ch: str) -> str | None:
    """``"han"``, ``"sea"`` or None for characters of spaced scripts."""
    cp = ord(ch)
    if cp < 0x0E00:  # fast path: Latin, Cyrillic, Greek, Arabic, Indic, ...
        return None
    if _in_ranges(cp, _SEA_RANGES):
        return "sea"
    if _in_ranges(cp, _HAN_RANGES):
        return "han"
    return None


def is_mark(ch: str) -> bool:
    return unicodedata.category(ch).startswith("M")


def _is_token_char(ch: str) -> bool:
    # unicode61's default token classes (L*, N*, Co) plus combining marks,
    # which it folds into the preceding letter or drops; either way a mark
    # must not start a new token on our side.
    cat = unicodedata.category(ch)
    return cat[0] in "LNM" or cat == "Co"


# Substring tests: a regex character class scanned a 1.4 KB chunk in ~8 us, ``in`` ~0.2 us.
_EXTRA_FOLD_CHARS = tuple(map(chr, _EXTRA_FOLDS))


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    # str.translate looks up every character in a dict: only pay it when there is a fold to do.
    return text.translate(_EXTRA_FOLDS) if any(ch in text for ch in _EXTRA_FOLD_CHARS) else text


@functools.cache
def _spaceless_re() -> re.Pattern[str]:
    # Compiled on first use: the character class spans ~200k code points and takes ~12 ms to
    # compile, which every CLI start-up paid (an ASCII query and ASCII chunks never need it).
    return re.compile("[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _HAN_RANGES + _SEA_RANGES) + "]")


def has_spaceless_script(text: str) -> bool:
    """Whether *text* has a character of a script written without spaces (CJK, Thai, ...)."""
    return _spaceless_re().search(text) is not None


def index_text(text: str) -> str:
    """Text to store in the FTS column for *text*.

    NFC-normalises, folds ``đ``→``d``, and puts a space between consecutive
    characters of spaceless scripts (and between such a character and an
    adjacent word) so unicode61 indexes them as unigrams. Combining marks stay
    attached to their base character. Only spaces are inserted, so line
    structure is unchanged; everything else is left to the tokenizer.
    """
    if text.isascii():  # most chunks: NFC, the folds and the spacing cannot change ASCII
        return text
    text = _fold(text)
    if not _spaceless_re().search(text):  # fast path: nothing to space out
        return text
    out: list[str] = []
    prev_spaceless = False  # the current cluster belongs to a spaceless script
    prev_word = False  # the previous char was not whitespace
    for ch in text:
        if ch.isspace():
            out.append(ch)
            prev_spaceless = prev_word = False
            continue
        if is_mark(ch):  # stays glued to its base, inherits its script
            out.append(ch)
            prev_word = True
            continue
        spaceless = script_family(ch) is not None
        if prev_word and (spaceless or prev_spaceless):
            out.append(" ")
        out.append(ch)
        prev_spaceless, prev_word = spaceless, True
    return "".join(out)


_ASCII_TOKEN_RE = re.compile(r"[a-z0-9]+")
# Never part of a unicode61 token: ASCII other than letters and digits, and whitespace.
# Splitting on these first leaves the per-character walk only the words that hold a
# non-ASCII character (a chunk with one "é" or "—" is otherwise walked in full).
_SEPARATORS_RE = re.compile(r"[\x00-/:-@\[-`{-\x7f\s]+")


def keyword_tokens(text: str) -> list[str]:
    """Approximate unicode61 tokens of ``index_text(text)``, lowercased.

    Spaceless-script characters come out as one token each (with their
    marks). Tokens consisting only of marks are dropped: FTS5 would not index
    anything for them.
    """
    if text.isascii():  # unicode61's token characters in ASCII are exactly letters and digits
        return _ASCII_TOKEN_RE.findall(text.lower())
    if _spaceless_re().search(text):  # spacing between scripts: walk the whole text
        return _walk_tokens(index_text(text))
    tokens: list[str] = []
    # Fold first, whole: NFC may compose a separator with a following mark ("=" + U+0338 is "≠").
    for piece in _SEPARATORS_RE.split(_fold(text)):
        if piece.isascii():
            if piece:
                tokens.append(piece.lower())
        else:
            tokens.extend(_walk_tokens(piece))
    return tokens


def _walk_tokens(text: str) -> list[str]:
    """Tokens of already index-ready text, one character at a time (the reference rule)."""
    tokens: list[str] = []
    buf: list[str] = []

    def flush() -> None:
        if buf and not all(is_mark(c) for c in buf):
            tokens.append("".join(buf).lower())
        buf.clear()

    for ch in text:
        if _is_token_char(ch):
            buf.append(ch)
        else:
            flush()
    flush()
    return tokens


def _quote(tokens: list[str]) -> str:
    # Tokens hold only letters, numbers and marks, so there is never a '"' to
    # escape; the quotes make FTS5 treat the content as a plain phrase.
    return '"' + " ".join(tokens[:MAX_PHRASE_TOKENS]) + '"'


def _spaceless_runs(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """Maximal runs of single-cluster tokens of one spaceless family."""
    runs: list[tuple[str, list[str]]] = []
    fam_prev: str | None = None
    for tok in tokens:
        fam = script_family(tok[0])
        if fam is not None and fam == fam_prev:
            runs[-1][1].append(tok)
        elif fam is not None:
            runs.append((fam, [tok]))
        fam_prev = fam
    return runs


def _ngrams(tokens: list[str], n: int) -> list[list[str]]:
    return [tokens[i : i + n] for i in range(len(tokens) - n + 1)]


def _sub_phrases(tokens: list[str]) -> list[list[str]]:
    """Overlapping n-grams of a term's spaceless runs, so a question written
    without spaces still matches a chunk containing only part of it (BM25
    favours chunks matching more of them)."""
    phrases: list[list[str]] = []
    for fam, run in _spaceless_runs(tokens):
        n = 2 if fam == "han" else 3
        if len(run) > n:
            phrases.extend(_ngrams(run, n))
    return phrases


def _is_stop_term(tokens: list[str]) -> bool:
    return all(t in STOP_WORDS for t in tokens)


# English possessives: "Rod's" must search for "rod", not the phrase "rod s" (which only
# matches text that itself says "Rod's").
_POSSESSIVE = re.compile(r"['\u2019][sS]$")


def _query_terms(query: str) -> tuple[list[list[str]], list[list[str]]]:
    """(content terms, stop-word terms) of a query, each term a list of its tokens."""
    kept: list[list[str]] = []
    stops: list[list[str]] = []
    for term in query[:MAX_QUERY_CHARS].split():
        tokens = keyword_tokens(_POSSESSIVE.sub("", term))
        if tokens:
            (stops if _is_stop_term(tokens) else kept).append(tokens)
    return kept, stops


def query_keywords(query: str) -> frozenset[str]:
    """The query's content tokens as :func:`match_key` sees them (for locating matches in text)."""
    return _keywords(_query_terms(query)[0])


def content_terms(query: str) -> list[tuple[str, frozenset[str]]]:
    """The query's content terms as ``(FTS5 phrase, match keys)``, one per term, in query order
    and without repeats: what keyword evidence weighs by rarity (``ranking.keyword_evidence``)."""
    out: dict[str, frozenset[str]] = {}
    for term in _query_terms(query)[0]:
        keys = _keywords([term])
        if keys:
            out.setdefault(_quote(term), keys)
    return list(out.items())


def _keywords(kept: list[list[str]]) -> frozenset[str]:
    return frozenset(match_key(t) for term in kept for t in term if t not in STOP_WORDS)


_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "es", "s", "ly")


@functools.lru_cache(maxsize=1 << 16)  # pure, and a workspace's vocabulary repeats across chunks
def match_key(token: str) -> str:
    """A crude stem, so that text tokens and query tokens the FTS table's porter stemmer
    conflates mostly compare equal here too ("works"/"work", "standups"/"standup").
    Only used to *locate* matches in a chunk, never to decide what matches."""
    if not token.isascii():
        token = token.translate(_LATIN_BASE)  # as the FTS table folds diacritics
    for suf in _SUFFIXES:
        if token.endswith(suf) and len(token) - len(suf) >= 3:
            token = token[: -len(suf)]
            break
    return token[:-1] if token.endswith("e") and len(token) > 4 else token


def _joins_token(ch: str) -> bool:
    """Whether ``ch``, next to an ASCII word, makes it part of a longer token (``keys_in``)."""
    if ch.isascii():
        return ch.isalnum()
    # A spaceless-script character is a token of its own (index_text spaces it out).
    return _is_token_char(ch) and script_family(ch) is None


@functools.lru_cache(maxsize=256)  # one query's keys are checked against many chunks and lines
def _all_ascii(keys: frozenset[str]) -> bool:
    return all(k.isascii() for k in keys)


def _token_starts_at(low: str, i: int) -> bool:
    """Whether a token starts at ``i`` of ``low``: the character before cannot continue one.

    A combining mark belongs to the character it follows: after a spaceless-script character
    (a token of its own, marks included) the next token starts fresh; after anything else the
    mark carries that token on.
    """
    if i == 0:
        return True
    ch = low[i - 1]
    if ch.isascii():
        return not ch.isalnum()
    if is_mark(ch):
        j = i - 1
        while j > 0 and is_mark(low[j]):
            j -= 1
        if script_family(low[j]) is not None:
            return True
    return not _joins_token(ch)


class _LatinBase(dict[int, str]):
    """str.translate table: a Latin letter with diacritics -> its ASCII base ("é" -> "e"), one
    character for one (offsets stay put), filled as characters are met. The FTS table folds them
    the same way (``remove_diacritics 2``): "creme brulee" matched "crème brûlée", and the snippet,
    looking for the unfolded key, showed other lines than the match."""

    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        d = unicodedata.normalize("NFD", ch)
        base = d[0] if len(d) > 1 and d[0].isascii() and d[0].isalpha() and all(map(is_mark, d[1:])) else ch
        self[cp] = base
        return base


_LATIN_BASE = _LatinBase()


def _lowered(text: str) -> str:
    return text.lower() if text.isascii() else _fold(text).lower().translate(_LATIN_BASE)


_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]")


@functools.lru_cache(maxsize=4096)
def _inert(ch: str) -> bool:
    """Neither a token character nor a mark: punctuation, symbols, spaces, format characters."""
    cat = unicodedata.category(ch)
    return cat[0] not in "LNM" and cat != "Co"


def _ascii_lowered(text: str) -> str | None:
    """``text.lower()`` when the tokens of ``_lowered(text)`` are exactly its ``[a-z0-9]`` runs, else None.

    True of ASCII text, and of text whose other characters are all inert (an em dash, a middle
    dot, curly quotes, emoji: 14% of the chunks of a docs corpus). Folding leaves those alone or
    maps one to another (NFC composes only around marks and letters), lowercasing keeps their
    length, and next to a word each ends it as any ASCII punctuation does. Such text takes the
    ASCII path, about three times cheaper than folding it and looking around every match.
    """
    if not text.isascii():
        rest = text  # the common inert characters are ruled out by substring tests: a regex scan of
        for ch in _COMMON_INERT:  # the whole text costs ~10x more
            if ch in rest:
                rest = rest.replace(ch, "")
        if not rest.isascii() and not all(map(_inert, set(_NON_ASCII_RE.findall(rest)))):
            return None
    return text.lower()


# The non-ASCII characters of a docs corpus's chunks, most frequent first (all inert).
_COMMON_INERT = ("\u2014", "\u2192", "\u00b7", "\u2026", "\u2019", "\u2013", "\u201c", "\u201d", "\u2018",
                 "\u00a0", "\u2022")


# In lowercased ASCII text a token is a maximal run of [a-z0-9]: the lookbehind is the whole
# "a token starts here" test (``_token_starts_at``) and the run always ends the token.
_ASCII_TOKEN_AT_RE = re.compile(r"(?<![a-z0-9])[a-z0-9]+")


def _occurrences(low: str, key: str, *, per_line: bool = False) -> Iterator[int]:
    """Offsets in ``low`` where a whole token starts whose ``match_key`` is the ASCII ``key``.

    ``low`` is ``_lowered`` text that is not ``_ascii_lowered`` (those take the inlined loops
    of ``keys_in`` and ``keys_by_line``). Every token a key matches starts with the key itself,
    so only the places where the key occurs are looked at, never the whole text tokenised.
    ``per_line``: only the first such offset of each line.
    """
    find, n = low.find, len(low)
    i = find(key)
    while i >= 0:
        tok = None
        if _token_starts_at(low, i):
            tok = _ASCII_TOKEN_RE.match(low, i)
            if tok is not None and tok.end() < n and _joins_token(low[tok.end()]):
                tok = None
        if tok is not None and match_key(tok.group()) == key:
            yield i
            if per_line and (i := find("\n", i)) < 0:
                return
        i = find(key, i + 1)


def keys_in(text: str, keys: frozenset[str]) -> frozenset[str]:
    """``keys & {match_key(t) for t in keyword_tokens(text)}``: which query keys ``text`` holds.

    For ASCII keys (most queries) without tokenising the text: only where a key occurs is
    looked at. A search calls this on each of its ~24 keyword candidates.
    """
    if not keys:
        return frozenset()
    if not _all_ascii(keys):
        return keys & {match_key(t) for t in keyword_tokens(text)}
    low = _ascii_lowered(text)
    if low is None:
        low = _lowered(text)
        return frozenset(k for k in keys if next(_occurrences(low, k), None) is not None)
    # The loop of _occurrences inlined: a key's false hits ("open" in "openclaw") each cost a
    # few bytecodes here, not a generator round trip.
    find, at, out = low.find, _ASCII_TOKEN_AT_RE.match, []
    for k in keys:
        i = find(k)
        while i >= 0:
            if (tok := at(low, i)) is not None and match_key(tok.group()) == k:
                out.append(k)
                break
            i = find(k, i + 1)
    return frozenset(out)


_NO_KEYS: frozenset[str] = frozenset()


def keys_by_line(text: str, keys: frozenset[str]) -> list[frozenset[str]]:
    r"""``[keys_in(line, keys) for line in text.split("\n")]``, in one pass over the text
    (a snippet scores every line of its chunk: ~30 calls per result otherwise)."""
    n = text.count("\n") + 1
    found = lines_holding_keys(text, keys)
    if found is None:
        return [keys_in(line, keys) for line in text.split("\n")]
    by_line = [_NO_KEYS] * n
    for line, hit in found.items():
        by_line[line] = frozenset(hit)
    return by_line


def lines_holding_keys(text: str, keys: frozenset[str]) -> dict[int, set[str]] | None:
    """``keys_by_line`` as {line index: its keys} for the lines holding any (most hold none);
    None when the text needs the per-line path (non-ASCII keys, or folding moved a newline)."""
    if not keys or not _all_ascii(keys):
        return None
    ascii_low = _ascii_lowered(text)
    slow = ascii_low is None
    if ascii_low is None:
        low = _lowered(text)
        if low.count("\n") != text.count("\n"):  # folding never adds or drops a newline; be sure
            return None
    else:
        low = ascii_low
    found: dict[int, set[str]] = {}
    find, count, at = low.find, low.count, _ASCII_TOKEN_AT_RE.match
    for k in keys:
        line = prev = 0
        if slow:
            for i in _occurrences(low, k, per_line=True):
                line += count("\n", prev, i)
                prev = i
                found.setdefault(line, set()).add(k)
            continue
        i = find(k)
        while i >= 0:  # the first whole-token occurrence on each line (_occurrences, inlined)
            if (tok := at(low, i)) is not None and match_key(tok.group()) == k:
                line += count("\n", prev, i)
                found.setdefault(line, set()).add(k)
                if (prev := find("\n", i)) < 0:
                    break
                line += 1
                prev += 1
                i = find(k, prev)
            else:
                i = find(k, i + 1)
    return found


def build_match_query(query: str) -> str | None:
    """A safe FTS5 MATCH expression for arbitrary user text, or None.

    Each whitespace-separated term becomes a quoted phrase of its tokens, so
    ``ERR_CONN_4521`` or ``foo-bar.baz`` must match as adjacent tokens. Runs in
    spaceless scripts become a phrase of their characters plus overlapping
    n-gram phrases. Terms are OR-ed: a natural-language question matches
    chunks sharing only some of its words, and BM25 ranks chunks matching more
    and rarer terms higher. A trailing possessive 's is dropped; stop words unless nothing else is
    left; phrases are de-duplicated and capped at :data:`MAX_TERMS`.
    Returns None when the input has no searchable token (empty, punctuation,
    emoji, control characters only).
    """
    if not isinstance(query, str):
        return None
    return _match_query(*_query_terms(query))


def match_query_and_keywords(query: str) -> tuple[str | None, frozenset[str]]:
    """``(build_match_query(query), query_keywords(query))``, tokenising the query once."""
    kept, stops = _query_terms(query)
    return _match_query(kept, stops), _keywords(kept)


def _match_query(kept: list[list[str]], stops: list[list[str]]) -> str | None:
    subs = [sub for tokens in kept for sub in _sub_phrases(tokens)]
    # Whole terms first so n-grams never push a real term past the cap.
    phrases = kept + subs if kept else stops
    seen: set[tuple[str, ...]] = set()
    parts: list[str] = []
    for phrase in phrases:
        key = tuple(phrase[:MAX_PHRASE_TOKENS])
        if key in seen:
            continue
        seen.add(key)
        parts.append(_quote(phrase))
        if len(parts) >= MAX_TERMS:
            break
    return " OR ".join(parts) if parts else None
