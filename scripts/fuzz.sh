#!/usr/bin/env bash
# Runs brainloop's cargo-fuzz targets on the stable toolchain (RUSTC_BOOTSTRAP=1 unlocks the
# nightly-only sanitizer flags cargo-fuzz passes). Needs `cargo install cargo-fuzz`.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]    # default: 600 s each, all targets, one at a time
#   FUZZ_JOBS=2 scripts/fuzz.sh 600 classify  # libFuzzer -fork=2 (two processes)
#
# New inputs go to fuzz/corpus/<target>/ (hand-written seeds are read from fuzz/seeds/<target>/);
# crashes to fuzz/artifacts/<target>/. Minimise a corpus afterwards with
#   RUSTC_BOOTSTRAP=1 cargo fuzz cmin <target>  (run in fuzz/)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(classify params input_row infer)
fi
export RUSTC_BOOTSTRAP=1
# the bundled SQLite C globals trip ASan's ODR check (a false positive for duplicate symbols)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0}
target_dir=${CARGO_TARGET_DIR:-target}
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "seeds/$t"
    extra=()
    if [ -f "dicts/$t.dict" ]; then
        extra+=("-dict=dicts/$t.dict")
    fi
    if [ -n "${FUZZ_JOBS:-}" ]; then
        extra+=("-fork=$FUZZ_JOBS")
    fi
    echo "== $t: ${secs}s" >&2
    cargo fuzz run --target-dir "$target_dir" "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 "${extra[@]}"
done
