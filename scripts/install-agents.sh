#!/usr/bin/env bash
# Install the agent CLIs Airlock runs, pinned, from npm, into a root-owned directory
# (/usr/local/lib/airlock-agents) that every jail sees read-only. airlockd's config names
# each provider's program there by default (`agents` in airlock.yaml). Idempotent: a
# package already at its pinned version is left alone. Run as root.
set -euo pipefail
DIR=/usr/local/lib/airlock-agents
pins=(
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
)
# Both packages ship native binaries through platform packages (optional dependencies);
# no install script is needed or run.
"$(dirname "$0")/npm-pins.sh" --ignore-scripts "$DIR" "${pins[@]}"
# The programs a launch runs: both must be there and answer.
"$DIR/node_modules/@anthropic-ai/claude-code-linux-x64/claude" --version >/dev/null
"$DIR/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex" --version >/dev/null
