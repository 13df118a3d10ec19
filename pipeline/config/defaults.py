"""Every search and chunking default, defined once.

The config schema (``settings.py``) takes its defaults from here, and so do the pure functions
that have a default of their own (the chunker, the ranking pipeline, the snippet builder), so a
library caller who skips the settings gets the same behaviour as one who loads them. Values are
OpenClaw's (openclaw-behaviour.md §0.2) unless said otherwise. No imports: the lowest layer.
"""

from __future__ import annotations

CHUNK_TOKENS = 400
CHUNK_OVERLAP = 80

MAX_RESULTS = 6
MIN_SCORE = 0.35
# memindex's own (issue 17): "calibrated" puts every mode on one score scale; "weighted" is the
# spec's 0.7/0.3 sum. bench/README.md has the numbers behind the choice.
FUSION = "calibrated"
VECTOR_WEIGHT = 0.7
TEXT_WEIGHT = 0.3
CANDIDATE_MULTIPLIER = 4
MMR_LAMBDA = 0.7
HALF_LIFE_DAYS = 30

# OpenClaw caps a snippet at 700 characters (UTF-16 code units), its qmd backend's limit too.
SNIPPET_CHARS = 700

# `memindex search|get --server`: how long the caller waits for the server's whole answer
# (connect included) before it says so and exits 1 (producers/cli/remote.py).
SERVER_TIMEOUT_S = 30.0
