#!/usr/bin/env bash
# Installs brainloop as a systemd service (DESIGN.md §9). Idempotent: run it again after a
# rebuild to update the binary and the unit; existing configuration, credentials and data are
# never overwritten.
set -euo pipefail

NAME=brainloop
BIN_DEST=/usr/local/bin/brainloop
ETC_DIR=/etc/brainloop
CONFIG=$ETC_DIR/brainloop.toml
ENV_FILE=$ETC_DIR/brainloop.env
CREDENTIAL=$ETC_DIR/cerebras_api_key
DATA_DIR=/var/lib/brainloop
WORKSPACE=/var/lib/brainloop-workspace
UNIT_DEST=/etc/systemd/system/brainloop.service

usage() {
    cat <<EOF
Usage: sudo scripts/install.sh [--dry-run] [BINARY]

Installs brainloop as a systemd service:
  - creates the system user and group '$NAME' (producers join the group to write input.db);
  - installs BINARY (default: target/dist/brainloop of this repository, the lean build;
    else target/release/brainloop) as $BIN_DEST;
  - creates $ETC_DIR/ with a fully commented $CONFIG generated from
    'brainloop run --print-config' and $ENV_FILE pointing the service at it
    (both kept if they already exist);
  - creates $DATA_DIR (data dir) and $WORKSPACE (workspace), mode 1770;
  - runs 'brainloop init --data-dir $DATA_DIR' as the $NAME user;
  - installs the unit as $UNIT_DEST and runs 'systemctl daemon-reload'.
It does not enable or start the service; it prints the commands to do so.

Options:
  --dry-run    print what would be done, change nothing (works without root)
  -h, --help   this help

Build the binary first: cargo build --profile dist (no debug info; --release works too,
with every dependency's line tables: a binary five times bigger)
EOF
}

die() { echo "install.sh: error: $*" >&2; exit 1; }
usage_error() { echo "install.sh: $*" >&2; echo "Try 'scripts/install.sh --help'." >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
unit_src="$repo/systemd/brainloop.service"
dry_run=false
bin_src=""

orig_args="$*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) dry_run=true; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; [[ $# -le 1 ]] || usage_error "only one BINARY argument"; bin_src=${1:-}; shift $# ;;
        -*) usage_error "unknown option: $1" ;;
        *) [[ -z $bin_src ]] || usage_error "only one BINARY argument"; bin_src=$1; shift ;;
    esac
done
if [[ -z $bin_src ]]; then
    bin_src="$repo/target/dist/brainloop"
    [[ -f $bin_src || ! -f $repo/target/release/brainloop ]] || bin_src="$repo/target/release/brainloop"
fi

if [[ $EUID -ne 0 ]] && ! $dry_run; then
    die "must be run as root (it creates the '$NAME' user and writes /usr/local/bin, /etc and /var/lib).
Run: sudo $0${orig_args:+ $orig_args}   (or add --dry-run to see what it would do)"
fi

# Prints a command, then runs it unless --dry-run.
run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    $dry_run || "$@"
}

# write_file MODE OWNER GROUP PATH < content: atomic (temp file in the same dir + rename).
write_file() {
    local mode=$1 owner=$2 group=$3 path=$4 tmp
    if $dry_run; then
        echo "+ write $path (mode $mode, $owner:$group):"
        sed 's/^/    | /'
        return
    fi
    tmp=$(mktemp "$path.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    chown "$owner:$group" "$tmp"
    mv -f "$tmp" "$path"
    echo "+ wrote $path"
}

systemd_running() { [[ -d /run/systemd/system ]]; }

# --- Checks before changing anything -----------------------------------------------------------
[[ -f $unit_src ]] || die "unit file not found: $unit_src"
if [[ ! -f $bin_src ]]; then
    die "binary not found: $bin_src
Build it first (cargo build --profile dist) or pass its path: sudo $0 PATH/TO/brainloop"
fi
[[ -x $bin_src ]] || die "$bin_src is not executable"
version=$("$bin_src" --version 2>&1) || die "$bin_src --version failed: $version"
for tool in install getent runuser cmp; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (needed to install)"
done
if ! getent passwd "$NAME" >/dev/null; then
    for tool in groupadd useradd; do
        command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (needed to create the $NAME user; install the 'passwd' package)"
    done
fi
# A config that already exists must be valid for the new binary (keys = fields of Config).
if [[ -f $CONFIG ]]; then
    err=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$bin_src" run --config "$CONFIG" \
              --data-dir "$DATA_DIR" --print-config 2>&1 >/dev/null) \
        || die "the existing $CONFIG is not valid for $version:
$err
Fix it (see 'brainloop run --print-config' for the keys) and run install.sh again."
fi

$dry_run && echo "install.sh: dry run: nothing is changed"
size_mb=$(( $(stat -c %s "$bin_src") / 1048576 ))
echo "installing $version ($size_mb MiB) from $bin_src"
# What ships is the dist profile's build (no debug info, issue 36); a release build carries every
# dependency's line tables (about 190 MiB).
if (( size_mb > 100 )); then
    echo "install.sh: warning: $bin_src is $size_mb MiB, with every dependency's debug info: 'cargo build --profile dist' builds the lean one (target/dist/brainloop)" >&2
fi

# --- User and group ------------------------------------------------------------------------
if getent group "$NAME" >/dev/null; then
    echo "= group $NAME exists"
else
    run groupadd --system "$NAME"
fi
if getent passwd "$NAME" >/dev/null; then
    echo "= user $NAME exists"
else
    nologin=$(command -v nologin || echo /usr/sbin/nologin)
    [[ -x $nologin ]] || nologin=/bin/false
    run useradd --system --gid "$NAME" --home-dir "$DATA_DIR" --no-create-home \
        --shell "$nologin" --comment "brainloop worker" "$NAME"
fi

# --- Binary: copy next to the destination, then rename (a running worker keeps its inode) -------
if [[ -f $BIN_DEST ]] && cmp -s "$bin_src" "$BIN_DEST"; then
    echo "= $BIN_DEST is up to date"
else
    run install -m 0755 -o root -g root "$bin_src" "$BIN_DEST.new"
    run mv -f "$BIN_DEST.new" "$BIN_DEST"
fi

# --- /etc/brainloop: configuration (optional for the unit, see brainloop.service) ------------------
# 0750 root:brainloop: the worker (group) reads the config; only root changes it.
run install -d -m 0750 -o root -g "$NAME" "$ETC_DIR"
if [[ -f $CONFIG ]]; then
    echo "= $CONFIG exists (kept; it is valid)"
else
    sample=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin BRAINLOOP_WORKSPACE="$WORKSPACE" \
                 "$bin_src" run --data-dir "$DATA_DIR" --print-config) \
        || die "$bin_src run --print-config failed"
    {
        cat <<EOF
# brainloop configuration, read by brainloop.service through BRAINLOOP_CONFIG in
# $ENV_FILE. Generated by scripts/install.sh from \`brainloop run --print-config\`
# ($version): every key is shown with its default value, commented out.
# Uncomment and change what you need, then: systemctl restart brainloop
#
# Precedence: built-in defaults < this file < BRAINLOOP_* variables < command-line flags.
# Under systemd, data_dir comes from the unit's --data-dir flag and workspace from
# BRAINLOOP_WORKSPACE (set in the unit; override it in $ENV_FILE, and add a
# ReadWritePaths= drop-in for a workspace outside /var/lib/brainloop-workspace): setting them here
# has no effect for the service.
# Check a change without restarting: brainloop run --config $CONFIG --print-config

EOF
        printf '%s\n' "$sample" | sed -e 's/^\(.\)/# \1/'
    } | write_file 0640 root "$NAME" "$CONFIG"
fi
if [[ -f $ENV_FILE ]]; then
    echo "= $ENV_FILE exists (kept)"
else
    write_file 0640 root "$NAME" "$ENV_FILE" <<EOF
# Environment of brainloop.service (EnvironmentFile=-$ENV_FILE: optional).
# KEY=VALUE lines; values here override the unit's Environment= lines.
# Remove the next line to run with built-in defaults only.
BRAINLOOP_CONFIG=$CONFIG
# BRAINLOOP_WORKSPACE=/workspace   # also needs: systemctl edit brainloop -> ReadWritePaths=/workspace
# BRAINLOOP_LOG=debug
EOF
fi
if [[ -e $CREDENTIAL ]]; then
    # Read by PID 1 only (LoadCredential=); the worker gets its own copy.
    run chown root:root "$CREDENTIAL"
    run chmod 0600 "$CREDENTIAL"
    echo "= Cerebras key: $CREDENTIAL"
fi

# --- Data dir and workspace (systemd's StateDirectory= would create them too, at first start) ----
run install -d -m 1770 -o "$NAME" -g "$NAME" "$DATA_DIR"
run install -d -m 1770 -o "$NAME" -g "$NAME" "$WORKSPACE"
# As the service user, so that every database belongs to it; clean environment so that no
# BRAINLOOP_* variable of the caller leaks in; umask of the unit (UMask=0007).
echo "+ (umask 0007; cd /; runuser -u $NAME -- $BIN_DEST init --data-dir $DATA_DIR)"
if ! $dry_run; then
    (
        umask 0007
        cd /
        runuser -u "$NAME" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
            BRAINLOOP_WORKSPACE="$WORKSPACE" "$BIN_DEST" init --data-dir "$DATA_DIR"
    ) || die "brainloop init failed (see above)"
fi

# --- Unit -------------------------------------------------------------------------------------
if [[ -f $UNIT_DEST ]] && cmp -s "$unit_src" "$UNIT_DEST"; then
    echo "= $UNIT_DEST is up to date"
else
    run install -m 0644 -o root -g root "$unit_src" "$UNIT_DEST"
fi
if systemd_running; then
    run systemctl daemon-reload
    if ! $dry_run && command -v systemd-analyze >/dev/null 2>&1; then
        if ! out=$(systemd-analyze verify "$UNIT_DEST" 2>&1) || [[ -n $out ]]; then
            echo "install.sh: warning: systemd-analyze verify $UNIT_DEST reported:" >&2
            printf '%s\n' "$out" | sed 's/^/  /' >&2
        fi
    fi
else
    echo "= systemd is not running on this machine: skipped 'systemctl daemon-reload'"
fi

# --- AppArmor (Ubuntu >= 23.10 restricts unprivileged user namespaces) --------------------------
# Only where AppArmor is present: the profile allows `userns` for the binary, which the command
# sandbox needs for every command (systemd/apparmor/brainloop explains it).
apparmor_src="$repo/systemd/apparmor/brainloop"
APPARMOR_DEST=/etc/apparmor.d/brainloop
if [[ -d /sys/kernel/security/apparmor ]] && command -v apparmor_parser >/dev/null 2>&1; then
    if [[ -f $APPARMOR_DEST ]] && cmp -s "$apparmor_src" "$APPARMOR_DEST"; then
        echo "= $APPARMOR_DEST is up to date"
    else
        run install -m 0644 -o root -g root "$apparmor_src" "$APPARMOR_DEST"
    fi
    run apparmor_parser -r "$APPARMOR_DEST" \
        || echo "install.sh: warning: apparmor_parser could not load $APPARMOR_DEST (AppArmor < 4.0 has no 'userns' rule and needs no profile)" >&2
else
    echo "= AppArmor is not active on this machine: no profile installed"
fi

cat <<EOF

brainloop is installed$($dry_run && echo " (dry run: nothing was changed)"). Next steps:
  let a user produce jobs:   usermod -aG $NAME USER   (then log in again)
  Cerebras key (optional):   install -m 0600 -o root -g root /dev/stdin $CREDENTIAL   (paste, Ctrl-D)
  start at boot and now:     systemctl enable --now $NAME
  after a rebuild:           sudo scripts/install.sh && systemctl restart $NAME
  health:                    $BIN_DEST status --data-dir $DATA_DIR
  logs:                      journalctl -u $NAME -f
EOF
