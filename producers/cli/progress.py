"""The progress bar every long CLI command shares: tqdm on a terminal, silence otherwise."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Callable as ``progress(done, total)``; advances by deltas so tqdm's rate stays true."""

    def __init__(self, desc: str, enabled: bool):
        self.bar: Any = None
        self.desc = desc
        self.enabled = enabled

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.desc, unit="file", file=sys.stderr)
        if total != self.bar.total:
            self.bar.total = total
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
