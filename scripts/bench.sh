#!/usr/bin/env bash
# Builds in release mode and prints every benchmark table (figures, no assertions): worker core,
# execute_bash overhead, sandbox cost, classification, inference, agent-session prompts, prompts
# over the agent-session corpus (learn_corpus: ~10 min; CORPUS_KINDS / CORPUS_QUICK to shorten).
# Env: BENCH_JOBS (10000), BENCH_IDLE_SECS (60), BENCH_CONCURRENCY (4).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(uname -sr), $(date -u +%Y-%m-%d)"
cargo bench --bench core_throughput "$@"
cargo bench --bench bash_throughput "$@"
cargo bench --bench sandbox_overhead "$@"
cargo bench --bench classify "$@"
cargo bench --bench infer "$@"
cargo bench --bench agent_session "$@"
cargo bench --bench learn_corpus "$@"
