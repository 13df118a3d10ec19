#!/usr/bin/env bash
# Install the real qmd CLI (npm @tobilu/qmd, pinned) with the Bun runtime it
# needs here (Node 20's SQLite binding segfaults under qmd 2.x), then write a
# `qmd` wrapper. Idempotent: an existing install of the pinned version returns
# at once. Prints the wrapper path on stdout (last line).
#
#   MEMINDEX_TOOLS  cache root (default ~/.cache/memindex-tools); installs into $MEMINDEX_TOOLS/qmd
set -euo pipefail

QMD_VERSION="2.8.3"
DIR="${MEMINDEX_TOOLS:-$HOME/.cache/memindex-tools}/qmd"
WRAPPER="$DIR/qmd"
BUN="$DIR/node_modules/bun/bin/bun.exe"
CLI="$DIR/node_modules/@tobilu/qmd/dist/cli/qmd.js"
STAMP="$DIR/.installed-$QMD_VERSION"

if [[ -f "$STAMP" && -x "$WRAPPER" && -x "$BUN" && -f "$CLI" ]] && "$WRAPPER" --version >/dev/null 2>&1; then
  echo "$WRAPPER"
  exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "install-qmd: npm not found (needed to fetch @tobilu/qmd and bun)" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
[[ -f package.json ]] || echo '{"name": "memindex-qmd-tools", "private": true}' > package.json
# bun's postinstall moves the binary shipped by @oven/bun-linux-x64 into bun/bin/bun.exe.
npm install --no-audit --no-fund --loglevel=error \
  bun @oven/bun-linux-x64 "@tobilu/qmd@$QMD_VERSION" >&2

if ! "$BUN" --version >/dev/null 2>&1; then
  # Postinstall skipped (e.g. npm ignore-scripts=true): link the platform binary into place.
  PLATFORM_BUN="$DIR/node_modules/@oven/bun-linux-x64/bin/bun"
  [[ -x "$PLATFORM_BUN" ]] || { echo "install-qmd: no bun binary in @oven/bun-linux-x64" >&2; exit 1; }
  mkdir -p "$(dirname "$BUN")"
  ln -sf "$PLATFORM_BUN" "$BUN"
  "$BUN" --version >/dev/null || { echo "install-qmd: bun does not run on this machine" >&2; exit 1; }
fi
[[ -f "$CLI" ]] || { echo "install-qmd: $CLI missing after npm install" >&2; exit 1; }

cat > "$WRAPPER.tmp" <<WRAP
#!/bin/sh
# qmd $QMD_VERSION under Bun (written by memindex scripts/install-qmd.sh)
exec "$BUN" "$CLI" "\$@"
WRAP
chmod +x "$WRAPPER.tmp"
mv "$WRAPPER.tmp" "$WRAPPER"
touch "$STAMP"
echo "$WRAPPER"
