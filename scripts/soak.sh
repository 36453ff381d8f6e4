#!/usr/bin/env bash
# Bounded soak under faults (issue 13): a producer, a second process answering validations, and
# the worker killed with SIGKILL / SIGTERM at seeded random points; checks every job ends exactly
# once, nothing is left running, files stay bounded, heartbeats only stop while the worker is down.
# Usage: scripts/soak.sh [--minutes N (30)] [--seed S (1)] [--rate JOBS_PER_S (4)] [--keep] ...
#        (all flags: python3 scripts/soak.py --help). BRAINLOOP_BIN=path skips the build.
# Exit 0: no violation; 1: violations (the temp dir is kept and named).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${BRAINLOOP_BIN:-}" ]]; then
  cargo build --release --locked --bin brainloop >&2
  BRAINLOOP_BIN="${CARGO_TARGET_DIR:-target}/release/brainloop"
fi
echo "machine: $(nproc) cores, $(uname -sr), $(date -u '+%Y-%m-%d %H:%M UTC')"
exec python3 scripts/soak.py --bin "$BRAINLOOP_BIN" "$@"
