"""``MEMINDEX_*`` environment variables that tune a number, read in one place.

Each module keeps its own variable and default; this is the one reader, so a value it cannot
take is one ``EnvError`` (a ``ConfigError``) naming the variable, the value and what it takes,
said by the CLI in its one ``error:`` line (exit 2), never a ``ValueError`` traceback from an
``int()`` at import. Unset or blank is the default (an ``.env`` line ``MEMINDEX_POLL_MS=``).
"""

from __future__ import annotations

import math
import os
from typing import Mapping, TypeVar

from memindex.pipeline.errors import EnvError

N = TypeVar("N", int, float, None)


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

