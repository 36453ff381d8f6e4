#!/usr/bin/env bash
# Creates command_security.db (seed 001: scripts/init_command_security.sh [--force]).
#
# The schema lives in the binary (schema/command_security.sql, applied by `brainloop init`), so
# this script never writes SQL itself: it calls `brainloop init`, which creates whatever database
# of the data dir is missing and leaves the others untouched (and upgrades their schema if needed).
# With --force, the existing command_security.db (with its -wal/-shm files) is first moved to a
# timestamped backup next to it, so approvals, overrides, grants and the execution history start
# from scratch -- and can be restored by moving the backup back while the worker is stopped.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/init_command_security.sh [--force] [--data-dir DIR]

Creates command_security.db in the data dir with `brainloop init` if it does not exist.

Options:
  --force           move the existing command_security.db (and its -wal/-shm files) to
                    command_security.db.backup-YYYYmmdd-HHMMSS, then create a fresh one
  --data-dir DIR    data dir (default: $BRAINLOOP_DATA_DIR, else /var/lib/brainloop if it
                    exists, else ./brainloop-data as brainloop itself does)
  -h, --help        this help

Refuses while a worker runs on the data dir (it holds brainloop.lock; checked with flock -n, and
the lock is kept until the script ends so that no worker starts meanwhile). Stop it first:
  systemctl stop brainloop
Run as root, the script acts as the owner of the data dir, so new files belong to the worker.

Environment:
  BRAINLOOP_BIN     the brainloop binary (default: brainloop in PATH, /usr/local/bin/brainloop,
                    then target/release or target/debug of this repository)
EOF
}

die() { echo "init_command_security.sh: error: $*" >&2; exit 1; }
usage_error() { echo "init_command_security.sh: $*" >&2; echo "Try 'scripts/init_command_security.sh --help'." >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
force=false
data_dir=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --force) force=true; shift ;;
        --data-dir) [[ $# -ge 2 && -n $2 ]] || usage_error "--data-dir needs a directory"; data_dir=$2; shift 2 ;;
        --data-dir=*) data_dir=${1#--data-dir=}; [[ -n $data_dir ]] || usage_error "--data-dir needs a directory"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done

if [[ -z $data_dir ]]; then
    if [[ -n ${BRAINLOOP_DATA_DIR:-} ]]; then data_dir=$BRAINLOOP_DATA_DIR
    elif [[ -d /var/lib/brainloop ]]; then data_dir=/var/lib/brainloop
    else data_dir=./brainloop-data
    fi
fi
# Absolute, because commands run as another user start in / (see as_owner).
data_dir=$(realpath -m -- "$data_dir")

bin=${BRAINLOOP_BIN:-}
if [[ -z $bin ]]; then
    for candidate in "$(command -v brainloop || true)" /usr/local/bin/brainloop \
                     "$repo/target/release/brainloop" "$repo/target/debug/brainloop"; do
        if [[ -n $candidate && -x $candidate ]]; then bin=$candidate; break; fi
    done
    [[ -n $bin ]] || die "brainloop binary not found: build it (cargo build --release), install it (scripts/install.sh) or set BRAINLOOP_BIN"
fi
[[ -f $bin && -x $bin ]] || die "BRAINLOOP_BIN=$bin is not an executable file"
bin=$(realpath -- "$bin")
command -v flock >/dev/null 2>&1 || die "'flock' not found (util-linux): needed to check that no worker is running"

db_name=command_security.db
db=$data_dir/$db_name
lock=$data_dir/brainloop.lock
echo "data dir: $data_dir"

if [[ -e $data_dir && ! -d $data_dir ]]; then
    die "$data_dir exists but is not a directory"
fi

# As root, act as the data dir's owner: a database created by root would be unwritable by the
# worker (User=brainloop under systemd).
as_owner() { "$@"; }
if [[ -d $data_dir && $EUID -eq 0 ]]; then
    owner_uid=$(stat -c %u "$data_dir")
    if [[ $owner_uid -ne 0 ]]; then
        owner=$(stat -c %U "$data_dir")
        [[ $owner != UNKNOWN ]] || die "the owner (uid $owner_uid) of $data_dir has no user name"
        command -v runuser >/dev/null 2>&1 || die "'runuser' not found (util-linux): needed to act as $owner"
        echo "acting as $owner, the owner of $data_dir"
        as_owner() { (cd / && runuser -u "$owner" -- "$@"); }
    fi
fi

# --- Refuse while a worker runs; hold the lock until we exit so none starts meanwhile ----------
if [[ -d $data_dir ]]; then
    if [[ ! -e $lock ]]; then
        # Created as the owner (as the worker does), so the worker can open it read-write later.
        # shellcheck disable=SC2016 # $1 is expanded by the inner sh
        as_owner sh -c ': >>"$1"' sh "$lock" || die "cannot create $lock"
    fi
    exec 9<"$lock" || die "cannot open $lock"
    if ! flock -n 9; then
        pid=$(head -c 32 "$lock" | tr -dc '0-9' || true)
        die "a brainloop worker${pid:+ (pid $pid)} is running on $data_dir (it holds $lock).
Stop it first (systemctl stop brainloop, or kill -TERM ${pid:-PID}), then run this script again."
    fi
fi

# --- Existing database ----------------------------------------------------------------------------
if [[ -e $db ]]; then
    if ! $force; then
        echo "$db already exists: nothing to do."
        echo "To start over from an empty one (the current file is kept as a backup): $0 --force --data-dir $data_dir"
        exit 0
    fi
    stamp=$(date +%Y%m%d-%H%M%S)
    backup=$db.backup-$stamp
    n=1
    while [[ -e $backup || -e $backup-wal ]]; do
        backup=$db.backup-$stamp.$n
        n=$((n + 1))
    done
    # The -wal file may hold committed transactions not yet copied into the main file: it moves
    # with it (SQLite finds "<file>-wal" next to the backup), so the backup is complete.
    as_owner mv -- "$db" "$backup" 9<&- || die "cannot move $db to $backup"
    for ext in -wal -shm -journal; do
        if [[ -e $db$ext ]]; then
            as_owner mv -- "$db$ext" "$backup$ext" 9<&- || die "cannot move $db$ext to $backup$ext"
        fi
    done
    echo "backup: $backup"
elif $force; then
    echo "$db does not exist: creating it (no backup needed)"
fi

# --- Create (brainloop init creates only what is missing) ---------------------------------------
as_owner "$bin" init --data-dir "$data_dir" 9<&- || die "brainloop init failed (see above)"
[[ -f $db ]] || die "brainloop init did not create $db"
echo "created $db"
