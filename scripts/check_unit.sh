#!/usr/bin/env bash
# Checks systemd/brainloop.service with systemd-analyze (systemd 252 here):
#   1. `systemd-analyze verify`, failing on ANY output on stderr: verify exits 0 on many
#      mistakes (unknown keys, typos in values, unknown syscall names are only "ignoring" warnings).
#   2. `systemd-analyze security --offline=true --threshold=N`: fails if the exposure score is
#      above N/10, and prints the score.
#
# verify refuses a unit whose ExecStart binary does not exist. When /usr/local/bin/brainloop is
# not installed, the unit is checked from a temporary copy whose ExecStart binary is rewritten to
# an executable that exists ($BRAINLOOP_BIN, else target/{release,debug}/brainloop, else `true`);
# nothing else in the unit is changed, and the copy keeps the name brainloop.service.
set -euo pipefail

# Measured 2.6 ("OK") with systemd-analyze 252 on this unit; 26 = that score x 10, so any
# weakening of the hardening fails the check. Lower it when the unit gets stricter.
DEFAULT_THRESHOLD=26

# 26 -> "2.6"
x10() { printf '%d.%d' $(( $1 / 10 )) $(( $1 % 10 )); }

usage() {
    cat <<EOF
Usage: scripts/check_unit.sh [--unit FILE] [--threshold N] [--help]

Checks a brainloop systemd unit with systemd-analyze:
  verify      fails on any warning printed on stderr (systemd-analyze exits 0 on typos)
  security    --offline=true --threshold=N; prints the overall exposure score

Options:
  --unit FILE      unit file to check (default: systemd/brainloop.service of this repository)
  --threshold N    highest accepted exposure, x10 (default: $DEFAULT_THRESHOLD, i.e. $(x10 $DEFAULT_THRESHOLD))
  -h, --help       this help

Environment:
  BRAINLOOP_BIN    an existing binary to put in ExecStart= for verify when
                   /usr/local/bin/brainloop is not installed

Exit status: 0 all checks pass, 1 a check failed, 2 usage error or systemd-analyze missing.
EOF
}

die() { echo "check_unit.sh: $*" >&2; exit 1; }
usage_error() { echo "check_unit.sh: $*" >&2; echo "Try 'scripts/check_unit.sh --help'." >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
unit="$repo/systemd/brainloop.service"
threshold=$DEFAULT_THRESHOLD

while [[ $# -gt 0 ]]; do
    case "$1" in
        --unit) [[ $# -ge 2 ]] || usage_error "--unit needs a file"; unit=$2; shift 2 ;;
        --unit=*) unit=${1#--unit=}; shift ;;
        --threshold) [[ $# -ge 2 ]] || usage_error "--threshold needs a number"; threshold=$2; shift 2 ;;
        --threshold=*) threshold=${1#--threshold=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done

if ! [[ $threshold =~ ^[0-9]+$ ]] || (( threshold > 100 )); then
    usage_error "--threshold must be an integer from 0 to 100 (exposure x10), got '$threshold'"
fi
[[ -f $unit ]] || usage_error "unit file not found: $unit"
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "check_unit.sh: systemd-analyze not found (install the systemd package)" >&2
    exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
checked="$tmp/brainloop.service"

installed=/usr/local/bin/brainloop
exec_bin=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit" | head -n1)
[[ -n $exec_bin ]] || die "$unit has no ExecStart= line"
if [[ -x $exec_bin ]]; then
    cp "$unit" "$checked"
else
    stand_in=""
    for candidate in "${BRAINLOOP_BIN:-}" "$repo/target/release/brainloop" "$repo/target/debug/brainloop" "$(command -v true)"; do
        if [[ -n $candidate && -x $candidate ]]; then stand_in=$candidate; break; fi
    done
    [[ -n $stand_in ]] || die "no executable found to stand in for $exec_bin"
    [[ $exec_bin == "$installed" ]] || echo "note: ExecStart binary is $exec_bin, not $installed"
    echo "note: $exec_bin is not installed; verifying a copy with ExecStart=$stand_in"
    # Only the first word of ExecStart= changes; the escaped path is a literal in sed.
    esc_from=$(printf '%s' "$exec_bin" | sed 's/[][\.*^$/]/\\&/g')
    esc_to=$(printf '%s' "$stand_in" | sed 's/[\&/]/\\&/g')
    sed "s/^ExecStart=$esc_from/ExecStart=$esc_to/" "$unit" > "$checked"
fi

echo "== systemd-analyze verify $(basename "$unit")"
verify_rc=0
systemd-analyze verify "$checked" >"$tmp/verify.out" 2>"$tmp/verify.err" || verify_rc=$?
cat "$tmp/verify.out"
if [[ -s $tmp/verify.err || $verify_rc -ne 0 ]]; then
    sed 's/^/  /' "$tmp/verify.err" >&2
    die "verify failed (exit $verify_rc, stderr above; any warning counts as a failure)"
fi
echo "verify: OK (no warnings)"

echo "== systemd-analyze security --offline=true --threshold=$threshold"
security_rc=0
systemd-analyze security --offline=true --threshold="$threshold" --no-pager "$checked" \
    >"$tmp/security.out" 2>"$tmp/security.err" || security_rc=$?
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/security.out" | tail -n1)
if [[ -z $score ]]; then
    cat "$tmp/security.out" "$tmp/security.err" >&2
    die "could not read the exposure score from systemd-analyze security"
fi
# The settings that cost exposure, for the record.
grep '✗' "$tmp/security.out" | sed 's/  */ /g; s/^/  /' || true
if [[ -s $tmp/security.err ]]; then
    sed 's/^/  /' "$tmp/security.err" >&2
    die "security printed warnings (above)"
fi
limit=$(x10 "$threshold")
echo "exposure score: $score (threshold $limit)"
if [[ $security_rc -ne 0 ]]; then
    die "exposure $score is above the threshold $limit (systemd-analyze exit $security_rc)"
fi
echo "check_unit.sh: OK"
