#!/usr/bin/env bash
# Install the real OpenClaw CLI (npm `openclaw`, pinned by the caller) with a Node runtime it accepts
# (2026.9 needs Node >= 24.16; this machine's may be older), and build the memindex OpenClaw plugin
# (integrations/openclaw: npm ci + tsc). Idempotent: a cached install returns at once.
# Prints "<node binary> <openclaw.mjs>" on stdout (last line).
#
#   scripts/install-openclaw.sh 2026.9.6
#   MEMINDEX_TOOLS  cache root (default ~/.cache/memindex-tools); installs into $MEMINDEX_TOOLS/openclaw-<version>
set -euo pipefail

VERSION="${1:?usage: install-openclaw.sh OPENCLAW_VERSION}"
NODE_VERSION="24.21.0"
ROOT="${MEMINDEX_TOOLS:-$HOME/.cache/memindex-tools}"
NODE_DIR="$ROOT/node-$NODE_VERSION"
NODE="$NODE_DIR/node_modules/node/bin/node"
OC_DIR="$ROOT/openclaw-$VERSION"
OC="$OC_DIR/node_modules/openclaw/openclaw.mjs"
PLUGIN="$(cd "$(dirname "$0")/../integrations/openclaw" && pwd)"

command -v npm >/dev/null 2>&1 || { echo "install-openclaw: npm not found (needed to fetch openclaw and node)" >&2; exit 1; }
mkdir -p "$ROOT"
if ! [[ -x "$NODE" ]] || ! "$NODE" --version >/dev/null 2>&1; then
  # The `node` package ships the official binary for this platform (its postinstall fetches it).
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "node@$NODE_VERSION" >&2
  "$NODE" --version >/dev/null || { echo "install-openclaw: node $NODE_VERSION does not run here" >&2; exit 1; }
fi
# npm's scripts (openclaw's preinstall checks the Node version) run with this Node first on PATH.
export PATH="$(dirname "$NODE"):$PATH"
if ! [[ -f "$OC_DIR/.installed" && -f "$OC" ]]; then
  npm install --prefix "$OC_DIR" --no-audit --no-fund --loglevel=error "openclaw@$VERSION" >&2
  [[ -f "$OC" ]] || { echo "install-openclaw: $OC missing after npm install" >&2; exit 1; }
  touch "$OC_DIR/.installed"
fi
# The plugin: its pinned dependencies (package-lock.json), then the TypeScript build (npm's prepare).
if ! [[ -d "$PLUGIN/node_modules" && "$PLUGIN/node_modules/.package-lock.json" -nt "$PLUGIN/package-lock.json" ]]; then
  (cd "$PLUGIN" && npm ci --no-audit --no-fund --loglevel=error --ignore-scripts >&2)
fi
(cd "$PLUGIN" && npm run --silent build >&2)
echo "$NODE $OC"
