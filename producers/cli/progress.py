"""The progress bar every long CLI command shares: tqdm on a terminal, silence otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any

# How often a bar with no new file done is redrawn (its elapsed time moves on).
REFRESH_S = 1.0


class Progress:
    """Callable as ``progress(done, total)``; advances by deltas so tqdm's rate stays true."""

    def __init__(self, desc: str, enabled: bool):
        self.bar: Any = None
        self.desc = desc
        self.enabled = enabled
        self._drawn = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            # (tqdm ships no type information: pyproject's mypy override lets it be untyped)
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.desc, unit="file", file=sys.stderr)
        if total != self.bar.total:
            self.bar.total = total
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)
        elif time.monotonic() - self._drawn >= REFRESH_S:
            # tqdm draws on updates only: between two files (30-45 s for a big one on a local
            # model) its elapsed time and ETA stood still, and the bar looked hung.
            self.bar.refresh()
        else:
            return
        self._drawn = time.monotonic()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
