#!/usr/bin/env bash
# Removes what scripts/install.sh installed. Keeps the data (databases, workspace), the
# configuration, the credential and the brainloop user unless --purge is given.
set -euo pipefail

NAME=brainloop
BIN_DEST=/usr/local/bin/brainloop
ETC_DIR=/etc/brainloop
DATA_DIR=/var/lib/brainloop
WORKSPACE=/var/lib/brainloop-workspace
UNIT=brainloop.service
UNIT_DEST=/etc/systemd/system/$UNIT
DROPIN_DIR=/etc/systemd/system/$UNIT.d

usage() {
    cat <<EOF
Usage: sudo scripts/uninstall.sh [--purge] [--dry-run]

Stops and disables $UNIT, removes $UNIT_DEST and $BIN_DEST.
Kept unless --purge: $DATA_DIR (the databases), $WORKSPACE, $ETC_DIR
(configuration and Cerebras key), drop-ins in $DROPIN_DIR, the '$NAME' user and group.

Options:
  --purge      also delete everything listed as kept above (irreversible)
  --dry-run    print what would be done, change nothing (works without root)
  -h, --help   this help
EOF
}

die() { echo "uninstall.sh: error: $*" >&2; exit 1; }
usage_error() { echo "uninstall.sh: $*" >&2; echo "Try 'scripts/uninstall.sh --help'." >&2; exit 2; }

purge=false
dry_run=false
orig_args="$*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --purge) purge=true; shift ;;
        --dry-run) dry_run=true; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done

if [[ $EUID -ne 0 ]] && ! $dry_run; then
    die "must be run as root (it stops a system service and deletes files in /usr/local/bin and /etc).
Run: sudo $0${orig_args:+ $orig_args}   (or add --dry-run to see what it would do)"
fi

run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    $dry_run || "$@"
}

systemd_running() { [[ -d /run/systemd/system ]]; }

# Prints the PID of a worker holding the data dir's instance lock, if any.
worker_pid() {
    local lock=$DATA_DIR/brainloop.lock
    [[ -f $lock ]] || return 1
    command -v flock >/dev/null 2>&1 || return 1
    if flock -n -s "$lock" true 2>/dev/null; then
        return 1
    fi
    head -c 32 "$lock" 2>/dev/null | tr -dc '0-9' || true
    return 0
}

$dry_run && echo "uninstall.sh: dry run: nothing is changed"

# --- Stop the service (SIGTERM; the worker drains and exits within 60 s) ------------------------
if systemd_running; then
    if systemctl cat "$UNIT" >/dev/null 2>&1; then
        run systemctl disable --now "$UNIT"
    else
        echo "= $UNIT is not known to systemd"
    fi
else
    echo "= systemd is not running on this machine: nothing to stop"
fi
if pid=$(worker_pid); then
    die "a brainloop worker (pid ${pid:-?}) still holds $DATA_DIR/brainloop.lock; stop it first (kill -TERM ${pid:-PID}), then run uninstall.sh again"
fi

# --- Unit and binary ----------------------------------------------------------------------------
if [[ -f /etc/apparmor.d/brainloop ]] && command -v apparmor_parser >/dev/null 2>&1; then
    run apparmor_parser -R /etc/apparmor.d/brainloop || true
fi
for f in "$UNIT_DEST" "$BIN_DEST" /etc/apparmor.d/brainloop; do
    if [[ -e $f || -L $f ]]; then run rm -f "$f"; else echo "= $f already absent"; fi
done
if $purge && [[ -d $DROPIN_DIR ]]; then
    run rm -rf "$DROPIN_DIR"
fi
if systemd_running; then
    run systemctl daemon-reload
    run systemctl reset-failed "$UNIT" 2>/dev/null || true
fi

# --- Data, configuration, user --------------------------------------------------------------------
if $purge; then
    for d in "$DATA_DIR" "$WORKSPACE" "$ETC_DIR"; do
        if [[ -e $d ]]; then run rm -rf --one-file-system "$d"; else echo "= $d already absent"; fi
    done
    if getent passwd "$NAME" >/dev/null; then run userdel "$NAME"; fi
    # userdel removes the user's private group on most systems; remove it if it is still there.
    if getent group "$NAME" >/dev/null; then run groupdel "$NAME"; fi
    echo
    echo "brainloop is uninstalled and purged$($dry_run && echo " (dry run: nothing was changed)")."
else
    echo
    echo "brainloop is uninstalled$($dry_run && echo " (dry run: nothing was changed)"). Kept:"
    for d in "$DATA_DIR" "$WORKSPACE" "$ETC_DIR" "$DROPIN_DIR"; do
        if [[ -e $d ]]; then echo "  $d"; fi
    done
    if getent passwd "$NAME" >/dev/null; then echo "  user and group $NAME"; fi
    echo "Delete them too with: sudo scripts/uninstall.sh --purge"
fi
