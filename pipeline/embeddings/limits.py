"""Per-model input limits and known vector sizes (reference §1.4 table)."""

from __future__ import annotations

# Absolute ceiling for one input, whatever a provider claims (reference: 8000).
HARD_MAX_INPUT_TOKENS = 8000

_MAX_INPUT_TOKENS: dict[tuple[str, str], int] = {
    ("openai", "text-embedding-3-small"): 8192,
    ("openai", "text-embedding-3-large"): 8192,
    ("openai", "text-embedding-ada-002"): 8191,
    ("gemini", "gemini-embedding-2-preview"): 8192,
    ("voyage", "voyage-3"): 32000,
    ("voyage", "voyage-3-lite"): 16000,
    ("voyage", "voyage-code-3"): 32000,
}
_PROVIDER_DEFAULT_TOKENS = {
    "gemini": 2048,
    "local": 2048,
    # Ollama's default context window (num_ctx) is 2048 tokens whatever the model allows.
    "ollama": 2048,
}

_KNOWN_DIMS: dict[tuple[str, str], int] = {
    ("openai", "text-embedding-3-small"): 1536,
    ("openai", "text-embedding-3-large"): 3072,
    ("openai", "text-embedding-ada-002"): 1536,
    ("mistral", "mistral-embed"): 1024,
}


def max_input_tokens(provider: str, model: str) -> int:
    return _MAX_INPUT_TOKENS.get((provider, model), _PROVIDER_DEFAULT_TOKENS.get(provider, 8192))


def known_dims(provider: str, model: str) -> int | None:
    return _KNOWN_DIMS.get((provider, model))


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
