"""Input size: the token estimate and splitting to a limit.

Per-model limits and known vector sizes are rows of the provider registry
(registry.max_input_tokens / registry.known_dims; reference §1.4 table).
"""

from __future__ import annotations

# Absolute ceiling for one input, whatever a provider claims (reference: 8000).
HARD_MAX_INPUT_TOKENS = 8000


def estimate_tokens(text: str) -> int:
    """Upper bound on tokens: UTF-8 bytes.

    BPE/WordPiece/SentencePiece tokens are at least one byte each for normal
    text, so bytes never under-count (English runs ~4 bytes per token, CJK ~3
    bytes per character, ~1-2 tokens). Conservative on purpose: an input is
    never sent above the provider's limit, at the price of some extra splits.
    """
    return len(text.encode("utf-8"))


def split_to_limit(text: str, max_tokens: int) -> list[str]:
    """Cut text into pieces whose estimate (UTF-8 bytes) is <= max_tokens.

    Cuts never fall inside a UTF-8 sequence (so never inside a character or a
    surrogate pair) and prefer a newline/space in the last quarter of a piece.
    Whitespace-only pieces are dropped: providers reject empty input.
    """
    data = text.encode("utf-8")
    if len(data) <= max_tokens:
        return [text]
    limit = max(4, int(max_tokens))
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        if end < len(data):
            while end > start and (data[end] & 0xC0) == 0x80:  # continuation byte: back off
                end -= 1
            window = data[start:end]
            brk = max(window.rfind(b"\n"), window.rfind(b" "))
            if brk >= len(window) * 3 // 4:
                end = start + brk + 1
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return [p for p in pieces if p.strip()]
