#!/usr/bin/env bash
# The kernel matrix (issue 20, item 2): boots Debian's own kernels (6.1 = Debian 12, Landlock ABI
# 2; 6.12 = bookworm-security, ABI 6) and the host's under QEMU with virtme-ng, runs the sandbox
# process tests inside each as root and as an unprivileged user (uid 65534), and prints one
# table. Facts it relies on: ../shared/KERNELS.md (no KVM here: TCG, ~12 s a boot; QEMU and the
# kernels are extracted with `dpkg -x`, nothing is installed system-wide).
#
# Not run by .ci/run (downloads ~300 MB and boots 6 VMs under TCG: well over CI's budget).
# Usage: scripts/kernel_matrix.sh [--cache DIR] [--kernels "6.1 6.12 host"] [--tests "graded_sandbox sandbox"]
# Needs: apt-get (Debian bookworm sources incl. bookworm-security), python3-venv, network.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache="$repo/target/kernel-matrix"
kernels="6.1 6.12 host"
tests="graded_sandbox sandbox execute_bash overlay_adversarial"
while [[ $# -gt 0 ]]; do
    case $1 in
        --cache) cache=$2; shift 2 ;;
        --kernels) kernels=$2; shift 2 ;;
        --tests) tests=$2; shift 2 ;;
        -h|--help) sed -n 2,10p "$0"; exit 0 ;;
        *) echo "kernel_matrix.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
die() { echo "kernel_matrix.sh: error: $*" >&2; exit 1; }
mkdir -p "$cache/debs" "$cache/root" "$cache/logs"

# --- virtme-ng in a venv --------------------------------------------------------------------------
if [[ ! -x $cache/venv/bin/vng ]]; then
    python3 -m venv "$cache/venv" || die "python3 -m venv failed (apt-get install python3-venv)"
    "$cache/venv/bin/pip" install -q 'virtme-ng==1.42' || die "pip install virtme-ng failed"
fi
vng="$cache/venv/bin/vng"
# vng runs virtme-run from PATH, and depmod (kmod, extracted below).
export PATH="$cache/venv/bin:$PATH:$cache/root/sbin:$cache/root/usr/sbin:$cache/root/bin"

# --- QEMU, busybox and kernels extracted from Debian packages -------------------------------------
pkgs=(qemu-system-x86 qemu-system-common qemu-system-data seabios ipxe-qemu busybox-static kmod libkmod2
      libcapstone4 libfdt1 libpmem1 librdmacm1 libibverbs1 libslirp0 libvdeplug2 libnl-3-200
      libnl-route-3-200 libndctl6 libdaxctl1)
latest() { apt-cache search --names-only "$1" | awk '{print $1}' | sort -V | tail -1; }
declare -A kpkg
for k in $kernels; do
    case $k in
        6.1) kpkg[$k]=$(latest '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$') ;;
        6.12) kpkg[$k]=$(latest '^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$') ;;
        host) continue ;;
        *) die "unknown kernel $k (6.1, 6.12 or host)" ;;
    esac
    [[ -n ${kpkg[$k]} ]] || die "no Debian package found for kernel $k (apt-get update? bookworm-security in sources?)"
    pkgs+=("${kpkg[$k]}")
done
(cd "$cache/debs" && for p in "${pkgs[@]}"; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p" >/dev/null || die "apt-get download $p failed"
done)
if [[ ! -e $cache/root/.extracted ]] || [[ $(ls "$cache/debs" | wc -l) != $(cat "$cache/root/.extracted") ]]; then
    for d in "$cache"/debs/*.deb; do dpkg -x "$d" "$cache/root"; done
    ls "$cache/debs" | wc -l > "$cache/root/.extracted"
fi
qemu="$cache/qemu-wrapper"
cat > "$qemu" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$cache/root/usr/lib/x86_64-linux-gnu:$cache/root/lib/x86_64-linux-gnu" \\
exec "$cache/root/usr/bin/qemu-system-x86_64" -L "$cache/root/usr/share/seabios" -L "$cache/root/usr/lib/ipxe/qemu" -L "$cache/root/usr/share/qemu" "\$@"
WRAP
chmod +x "$qemu"
busybox="$cache/root/bin/busybox"
# virtme-ng runs depmod and modprobe; kmod's are absolute symlinks to /bin/kmod: wrap them.
mkdir -p "$cache/bin"
for tool in depmod modprobe; do
    cat > "$cache/bin/$tool" <<WRAP
#!/bin/bash
LD_LIBRARY_PATH="$cache/root/usr/lib/x86_64-linux-gnu:$cache/root/lib/x86_64-linux-gnu" \\
exec -a $tool "$cache/root/bin/kmod" "\$@"
WRAP
    chmod +x "$cache/bin/$tool"
done
export PATH="$cache/bin:$PATH"

# --- Test binaries (built on the host, run inside the guests over the read-only 9p root) -------
bins=()
for t in $tests; do
    b=$(cd "$repo" && cargo test --release --no-run --test "$t" --message-format=json 2>/dev/null \
        | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -1)
    [[ -n $b ]] || die "cargo test --no-run --test $t failed"
    bins+=("$t=$b")
done

# --- Boot each kernel as root and as uid 65534 ------------------------------------------------------
table=$(mktemp)
for k in $kernels; do
    if [[ $k == host ]]; then
        image="/boot/vmlinuz-$(uname -r)"
        [[ -r $image ]] || { echo "$k | - | - | SKIPPED: $image not readable" >> "$table"; continue; }
    else
        image=$(ls "$cache"/root/boot/vmlinuz-* | grep -F "$(echo "${kpkg[$k]}" | sed -e 's/^linux-image-//' -e 's/-unsigned$//')" | head -1)
    fi
    for user in root 65534; do
        # The guest's cgroup v2 root holds every process and is not delegated, so the worker gets
        # no job cgroups there (rlimit fallbacks): tests that need them run on the host only.
        prefix=""; skip="--skip _needs_writable_cgroups"
        if [[ $user != root ]]; then
            prefix="setpriv --reuid=65534 --regid=65534 --clear-groups"
            # The tests that switch to uid 65534 themselves need root: they run in the root pass.
            skip+=" --skip _65534_"
        fi
        # The guest's /tmp is an overlayfs (virtme-ng), which cannot hold an overlay's upper
        # layer: give the tests a fresh ext4 (a loop image in guest memory) as TMPDIR, as on a
        # server's disk (Debian builds loop and ext4 as modules: loaded from the extracted
        # package with the kmod wrapper below, visible in the guest); tmpfs has no user xattrs before 6.6, which an overlay's opaque
        # directories need (`rm d && mkdir d` fails with EIO there). tmpfs when no loop works.
        script="mkdir -p /run/lock && chmod 1777 /run/lock; mkdir -p /run/bl-tmp; $cache/bin/modprobe -d $cache/root -a loop ext4 2>/dev/null; if truncate -s 900M /run/bl-img && mkfs.ext4 -q -F /run/bl-img && mount -o loop /run/bl-img /run/bl-tmp; then echo TMPDIR ext4; else echo TMPDIR tmpfs; mount -t tmpfs tmpfs /run/bl-tmp; fi; chmod 1777 /run/bl-tmp; export TMPDIR=/run/bl-tmp BRAINLOOP_TEST_TIME_SCALE=8; cd /run/bl-tmp; echo KERNEL \$(uname -r) LANDLOCK \$(cat /sys/kernel/security/lsm 2>/dev/null);"
        for tb in "${bins[@]}"; do
            script+=" $prefix ${tb#*=} --test-threads=1 $skip > /tmp/out 2>&1; echo \"RESULT ${tb%%=*} rc=\$? \$(grep -h 'test result' /tmp/out | tail -1)\"; grep -E -A3 '^test .* FAILED|panicked' /tmp/out | head -30;"
        done
        log="$cache/logs/$k-$user.log"
        # The guest reads the script from the host's (read-only) root: passed inline, it goes
        # on the kernel command line, and past 2 KiB Debian's 6.1 panics at boot (fortify).
        guest="$cache/guest-$k-$user.sh"
        printf '%s\n' "$script" > "$guest"
        echo "= booting $k ($image) as $user; log: $log" >&2
        "$vng" --disable-kvm -v --run "$image" --qemu "$qemu" --busybox "$busybox" \
            --memory 2G --exec "bash $guest" 2>&1 | cat > "$log" || true
        kv=$(grep -m1 '^KERNEL ' "$log" | cut -d' ' -f2 || true)
        if ! grep -q '^RESULT' "$log"; then
            echo "$k | ${kv:-?} | $user | - | NO RESULT (see $log)" >> "$table"
            continue
        fi
        grep '^RESULT' "$log" | while read -r _ name rc rest; do
            echo "$k | ${kv:-?} | $user | $name | $rc ${rest#test result: }" >> "$table"
        done
    done
done
echo
echo "kernel | uname -r | user | tests | result"
echo "---|---|---|---|---"
cat "$table"
! grep -qE 'rc=[1-9]|NO RESULT' "$table"
