#!/usr/bin/env bash
# Issue 50's scale figures, printed (no assertions): (1) an overlay run's time (submit →
# pending_validation) with 0, 1,000 and 10,000 change sets already waiting, in one worker run;
# (2) `brainloop signatures` with 100,000 signatures; (3) output.db's size after the retention
# pass pruned 1,000,000 results, against the size of what remains (its rows alone, vacuumed).
# BIN: the binary (default target/release/brainloop); PARTS: which of 1 2 3 (default all).
# Needs sqlite3. Temp dirs only.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${BIN:-target/release/brainloop}")
RUNS=${RUNS:-5}
PARTS=${PARTS:-123}
T=$(mktemp -d)
trap 'kill "${PID:-0}" 2>/dev/null || true; rm -rf "$T"' EXIT
ms() { date +%s%3N; }
echo "machine: $(nproc) cores, $(uname -sr), $(date -u +%Y-%m-%d); binary $BIN"

# (1) overlay runs with waiting change sets.
D=$T/d1; W=$T/w1; mkdir -p "$W"
"$BIN" init --data-dir "$D" >/dev/null
BRAINLOOP_HEARTBEAT_INTERVAL_MS=1000 "$BIN" run --data-dir "$D" --workspace "$W" 2>"$T/log1" &
PID=$!
until [ -f "$D/brainloop.status.json" ]; do sleep 0.1; done
run_one() { # submits an overlay-captured edit and waits until it asks: ms
  local t0 id st
  t0=$(ms)
  id=$(BRAINLOOP_DATA_DIR=$D "$BIN" enqueue execute_bash --params "{\"command\": \"echo $1 > f$1\"}")
  until st=$(sqlite3 "$D/brainloop.output.db" "SELECT status FROM results WHERE job_id = $id") && [ "$st" = pending_validation ]; do sleep 0.005; done
  echo $(( $(ms) - t0 ))
}
seed=$(run_one 0)
first=$(ls "$D/changes" | head -1)
# Copies of its manifest count no bytes (else the client's budget for waiting change sets stops
# the runs), but every one is listed and (without the index) read and parsed at every run.
sed -E 's/"upper_bytes":[0-9]+/"upper_bytes":0/' "$D/changes/$first/manifest.json" >"$T/manifest.json"
n=0
for pending in 0 1000 10000; do
  while [ "$n" -lt "$pending" ]; do
    n=$((n + 1)); mkdir -p "$D/changes/$((900000000 + n))"
    cp "$T/manifest.json" "$D/changes/$((900000000 + n))/manifest.json"
  done
  # The first run after new change sets appeared reads their manifests once; the next ones.
  warm=$(run_one "${pending}w")
  total=0
  for i in $(seq 1 "$RUNS"); do total=$((total + $(run_one "$pending$i"))); done
  echo "overlay run with $pending waiting change sets: $((total / RUNS)) ms (mean of $RUNS after one run of $warm ms that read the new manifests; the worker's first run $seed ms)"
done
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=

# (2) signatures with 100,000 rows.
if [[ $PARTS == *2* ]]; then
D=$T/d2
"$BIN" init --data-dir "$D" >/dev/null
sqlite3 "$D/command_security.db" "
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${SIGS:-100000})
  INSERT INTO signatures(signature, program, learnable, approvals, first_seen, last_seen)
    SELECT 'sed -i EXPR WS_PATH/' || i, 'sed', 1, 1, 0, 0 FROM n;
  INSERT INTO signature_evidence(client_id, signature, approvals, denials, updated_at)
    SELECT 'local', signature, 1, 0, 0 FROM signatures;"
t0=$(ms); BRAINLOOP_DATA_DIR=$D "$BIN" signatures >/dev/null; t1=$(ms)
echo "signatures with ${SIGS:-100000} rows: $((t1 - t0)) ms"
fi

[[ $PARTS == *3* ]] || exit 0

# (3) output.db after retention prunes 1,000,000 results.
D=$T/d3; W=$T/w3; mkdir -p "$W"
"$BIN" init --data-dir "$D" >/dev/null
old=$(( $(ms) - 40 * 86400000 )); now=$(ms)
sqlite3 "$D/brainloop.output.db" "
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1010000)
  INSERT INTO results(job_id, action, client_id, status, result, attempts, started_at, finished_at)
    SELECT i, 'ping', 'local', 'succeeded', '{\"pong\": true, \"pad\": \"' || hex(randomblob(40)) || '\"}', 1,
           CASE WHEN i <= 1000000 THEN $old ELSE $now END, CASE WHEN i <= 1000000 THEN $old ELSE $now END FROM n;
  PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
before=$(stat -c %s "$D/brainloop.output.db")
BRAINLOOP_RETENTION_INTERVAL_MS=2000 "$BIN" run --data-dir "$D" --workspace "$W" 2>"$T/log3" &
PID=$!
until [ "$(sqlite3 "$D/brainloop.output.db" "SELECT count(*) FROM results" 2>/dev/null)" = 10000 ]; do sleep 0.5; done
# The vacuum steps and the checkpoint after the pass.
for _ in $(seq 1 60); do
  free=$(sqlite3 "$D/brainloop.output.db" "PRAGMA freelist_count" 2>/dev/null || echo x)
  [ "$free" = 0 ] && break; sleep 1
done
sleep 3
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
after=$(stat -c %s "$D/brainloop.output.db")
sqlite3 "$D/brainloop.output.db" "VACUUM INTO '$T/remains.db'"
remains=$(stat -c %s "$T/remains.db")
echo "output.db: $before bytes with 1010000 results; $after bytes after retention pruned 1000000; what remains alone: $remains bytes (ratio $(awk "BEGIN {printf \"%.2f\", $after / $remains}"); freelist $free pages)"
