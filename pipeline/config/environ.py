"""``MEMINDEX_*`` environment variables that tune a number or pick a mode, read in one place.

Each module keeps its own variable and default; this is the one reader, so a value it cannot
take is one ``EnvError`` (a ``ConfigError``) naming the variable, the value and what it takes,
said by the CLI in its one ``error:`` line (exit 2), never a ``ValueError`` traceback from an
``int()`` at import. Unset or blank is the default (an ``.env`` line ``MEMINDEX_POLL_MS=``).
"""

from __future__ import annotations

import math
import os
from typing import Mapping, Sequence, TypeVar

from memindex.pipeline.errors import EnvError

N = TypeVar("N", int, float, None)

# The Redis URL every process of a deployment shares (unset: the embedded broker). Read here too,
# without importing the broker module, whose import asks Redis for the write-shard count.
BROKER_ENV = "MEMINDEX_BROKER_URL"


def broker_configured() -> bool:
    """Does this process use Redis (``MEMINDEX_BROKER_URL`` set), as the broker module decides?"""
    return bool(os.environ.get(BROKER_ENV, "").strip())


def env_number(name: str, default: N, *, whole: bool | None = None, minimum: float | None = None,
               above: float | None = None, env: Mapping[str, str] | None = None) -> N:
    """``name`` as a number (a whole one when ``whole``, which a default of type int implies), at
    least ``minimum`` or more than ``above`` (one bound, or none); ``default`` when unset or blank.
    ``env`` replaces os.environ (a provider's environment)."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    whole = isinstance(default, int) if whole is None else whole
    what = "a whole number" if whole else "a number"
    bound = f" of at least {minimum:g}" if minimum is not None else f" above {above:g}" if above is not None else ""
    try:
        value: float = int(raw) if whole else float(raw)
    except ValueError:
        raise EnvError(name, f"must be {what}{bound}, not {raw!r}") from None
    # nan passes every comparison, and inf overflows the timers these values feed
    if (not math.isfinite(value) or (minimum is not None and value < minimum)
            or (above is not None and value <= above)):
        raise EnvError(name, f"must be {what}{bound}, not {raw!r}")
    return value  # type: ignore[return-value]


def env_choice(name: str, choices: Mapping[str, str] | Sequence[str], default: str | None = None, *,
               env: Mapping[str, str] | None = None) -> str | None:
    """``name`` (case and surrounding blanks aside) when it is one of ``choices``, else an ``EnvError``
    listing them; ``default`` when unset or blank. A mapping's keys are the spellings accepted and
    its values what each means (the error lists those): ``{"0": "off", "off": "off", ...}``."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    table = choices if isinstance(choices, Mapping) else {c: c for c in choices}
    meaning = table.get(raw.lower())
    if meaning is None:
        raise EnvError(name, f"must be one of {', '.join(dict.fromkeys(table.values()))}, not {raw!r}")
    return meaning
