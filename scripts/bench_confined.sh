#!/usr/bin/env bash
# One confined command against bubblewrap's bare start (issue 39): bash -c, bwrap, a ping job,
# execute_bash in the readonly and filesystem sets and an asked overlay run, interleaved, medians;
# then the per-stage breakdown from the daemon's timing record and bwrap's steps under strace.
# Prints figures, asserts nothing. Needs bwrap (Debian: apt-get install bubblewrap) and strace.
#
#   scripts/bench_confined.sh            # 150 rounds
#   CONFINED_ROUNDS=50 scripts/bench_confined.sh
#   CONFINED_BIN=/path/to/brainloop      # measure another build, skipping the build
#   CONFINED_BASELINE=/path/to/brainloop # A/B: a second daemon measured in the same rounds
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=${CONFINED_BIN:-}
if [[ -z $bin ]]; then
  echo "building brainloop (release)" >&2
  cargo build --release --locked --quiet
  bin=$target/release/brainloop
fi
exec python3 benches/peers/confined.py --brainloop "$bin" --rounds "${CONFINED_ROUNDS:-150}" \
  --strace-runs "${CONFINED_STRACE_RUNS:-20}" --label "${CONFINED_LABEL:-}" \
  ${CONFINED_BASELINE:+--baseline "$CONFINED_BASELINE"}
