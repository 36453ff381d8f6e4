#!/usr/bin/env bash
# Queue benchmark against peers: brainloop vs apalis (SQLite backend, crates.io) vs huey
# (SqliteHuey, PyPI) vs the raw SQLite floor, plus commands through brainloop vs a plain bash loop
# and every daemon's idle CPU and RSS. Prints ONE table (figures, no assertions).
#
# It installs what it needs itself: huey into a venv under the target dir, apalis built from
# crates.io in its own Cargo project (benches/peers/apalis, not part of brainloop's package),
# and brainloop in release mode.
#
#   scripts/bench_peers.sh            # 10,000 jobs, 1,000 commands, 60 s idle, 200,000-job drain
#   scripts/bench_peers.sh --quick    # 2,000 jobs, 200 commands, 10 s idle, 20,000-job drain
#   PEERS_JOBS / PEERS_COMMANDS / PEERS_IDLE_SECS / PEERS_DRAIN_JOBS override;
#   PEERS_ONLY=floor,brainloop-default,... (a name selects its rows in both tables; `drain`
#   selects every drain row)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
jobs=${PEERS_JOBS:-10000} commands=${PEERS_COMMANDS:-1000} idle=${PEERS_IDLE_SECS:-60}
drain=${PEERS_DRAIN_JOBS:-200000}
if [[ ${1:-} == --quick ]]; then
  jobs=${PEERS_JOBS:-2000} commands=${PEERS_COMMANDS:-200} idle=${PEERS_IDLE_SECS:-10}
  drain=${PEERS_DRAIN_JOBS:-20000}
fi

export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the repository
venv=$target/peers-venv
if [[ ! -x $venv/bin/huey_consumer ]]; then
  echo "installing huey 3.5.4 into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'huey==3.5.4'
fi

echo "building brainloop and the raw SQLite floor (release)" >&2
cargo build --release --locked --quiet
cargo build --release --locked --quiet --example sqlite_floor --example bookkeeping_floor
echo "building the apalis peer (benches/peers/apalis, release)" >&2
CARGO_TARGET_DIR=$target/peers-apalis cargo build --release --locked --quiet \
  --manifest-path benches/peers/apalis/Cargo.toml

exec "$venv/bin/python" benches/peers/peers.py \
  --brainloop "$target/release/brainloop" \
  --apalis "$target/peers-apalis/release/apalis-peer" \
  --floor "$target/release/examples/sqlite_floor" \
  --bookkeeping "$target/release/examples/bookkeeping_floor" \
  --venv "$venv" --jobs "$jobs" --commands "$commands" --idle "$idle" --drain "$drain" --only "${PEERS_ONLY:-}"
