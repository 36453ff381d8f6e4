#!/usr/bin/env bash
# Fault-injection pass (issue 34): the real release worker on throwaway data dirs, one fault after
# another (locked databases, a full disk, a hung model, SIGSTOP, an immutable output file,
# wall-clock steps, kill -9 around apply, SIGTERM with everything locked, concurrent producers,
# a 200k backlog); each prints a table row with its figures and a verdict (pass / FAIL: what broke),
# then a markdown table for docs/reliability.md with the date, commit and machine load.
# Usage: scripts/faults.sh [--only NAME[,NAME]] [--quick] [--keep] [--apply-knob VAR=VALUE]
#        (all flags and scenario names: python3 scripts/faults.py --help).
#        BRAINLOOP_BIN=path skips the build (then say which commit it was built from with
#        FAULTS_COMMIT=sha, or the table names the checkout's HEAD).
# Root is needed for the full-disk scenario (tmpfs) and chattr; without it they say so.
# Exit 0: every scenario passed or was skipped; 1: at least one FAIL (its temp dir is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exec python3 scripts/faults.py --help
fi
python3 scripts/faults.py --parse-only "$@"   # an unknown flag or scenario: exit 2 before building
if [[ -z "${BRAINLOOP_BIN:-}" ]]; then
  cargo build --release --locked --bin brainloop >&2
  BRAINLOOP_BIN="${CARGO_TARGET_DIR:-target}/release/brainloop"
fi
commit="${FAULTS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
if [[ -z "${FAULTS_COMMIT:-}" ]] && ! git diff --quiet HEAD -- src 2>/dev/null; then
  commit="$commit+dirty"
fi
echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC'), $(id -un)"
exec python3 scripts/faults.py --bin "$BRAINLOOP_BIN" --commit "$commit" "$@"
