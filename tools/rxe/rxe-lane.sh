#!/bin/bash
# rxe-lane.sh TEST_BINARY
#
# The soft-RoCE CI lane (meson test --suite rxe): boots a Debian kernel under
# qemu TCG with the host's / shared read-only over virtio-9p ("job mode",
# docs/transport.md), creates rxe0 on lo and runs, inside the VM, from this
# very build tree:
#   1. TEST_BINARY (tests/rxe/test_verbs_rxe: the verbs provider on rxe0),
#      then each feature over verbs (test_compose_verbs), and the same with
#      membership on an etcd started in the VM (test_compose_etcd_verbs),
#   2. ib_write_bw (perftest) as the device's reference figure,
#   3. three gsyncd with transport = "verbs" on 127.0.0.1 in two racks
#      ({h0,h1}, {h2}: verbs between h0 and h1, TCP to h2) and gsync-perf
#      allreducing through them, every element checked.
# Prints "N passed, N failed"; exits 0 only when nothing failed, 77 with
# "SKIPPED: <reason>" where QEMU (or the kernel package) is not to be had.
#
# Env: GSYNC_BUILD_DIR (required), RXE_CACHE (kernel, default
#      /var/cache/gsync-rxe or BUILD/rxe-cache), RXE_VM_TIMEOUT (s, 600),
#      RXE_PERF_ARGS (gsync-perf's sizes and counts in step 3, default
#      "-b 4K -e 16M -f 4 --iters 3 --warmup 1"; docs/performance.md uses
#      more iterations to time small ops over verbs).
# Follows /work/shared/research/probe-rxe.md: the kernel .deb is fetched with
# apt-get download and unpacked, never installed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TEST_BIN=$(readlink -f "$1")
BUILD=$(readlink -f "${GSYNC_BUILD_DIR:?GSYNC_BUILD_DIR not set}")
WORK=$BUILD/rxe-work
mkdir -p "$WORK"
skip() { echo "SKIPPED: $*"; exit 77; }
t0=$(date +%s)

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed (tools/setup-deps.sh --lab)"
for t in busybox cpio depmod modprobe rdma ibv_devinfo ib_write_bw; do
  command -v "$t" >/dev/null || [ -x /usr/bin/$t ] || skip "$t not installed (tools/setup-deps.sh --lab)"
done
[ -x "$TEST_BIN" ] || { echo "0 passed, 1 failed"; echo "no test binary $TEST_BIN"; exit 1; }

# --- kernel: downloaded once into the cache, unpacked, never installed ---------
if [ -z "${RXE_CACHE:-}" ]; then
  if mkdir -p /var/cache/gsync-rxe 2>/dev/null && [ -w /var/cache/gsync-rxe ]; then
    RXE_CACHE=/var/cache/gsync-rxe
  else
    RXE_CACHE=$BUILD/rxe-cache
  fi
fi
mkdir -p "$RXE_CACHE"
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[ -n "$KPKG" ] || KPKG=$(ls "$RXE_CACHE"/linux-image-*-amd64_*.deb 2>/dev/null | head -n1 | sed 's|.*/||; s|_.*||')
[ -n "$KPKG" ] || skip "no linux-image-amd64 package known to apt and none cached in $RXE_CACHE"
KVER=${KPKG#linux-image-}
KROOT=$RXE_CACHE/kroot
if [ ! -f "$KROOT/boot/vmlinuz-$KVER" ]; then
  ( cd "$RXE_CACHE" && ls "$KPKG"_*.deb >/dev/null 2>&1 || apt-get download -qq "$KPKG" 2>/dev/null ) ||
    skip "apt-get download $KPKG failed (no apt mirror reachable?)"
  rm -rf "$KROOT"; mkdir -p "$KROOT"
  dpkg-deb -x "$RXE_CACHE"/"$KPKG"_*.deb "$KROOT" && depmod -b "$KROOT" "$KVER" ||
    { echo "0 passed, 1 failed"; echo "unpacking $KPKG failed"; exit 1; }
fi
t1=$(date +%s)

# --- initramfs (the probe's builder and /init) ----------------------------------
bash "$HERE/build-initramfs.sh" "$KROOT" "$HERE/init" "$WORK/initramfs.cpio.gz" > "$WORK/initramfs.log" 2>&1 ||
  { echo "0 passed, 1 failed"; cat "$WORK/initramfs.log"; exit 1; }
t2=$(date +%s)

# --- the job, run in the VM in the host's root (read-only + tmpfs overlay) ------
JOB=$WORK/job.sh
cat > "$JOB" <<JOBEOF
#!/bin/sh
# Written by tools/rxe/rxe-lane.sh; runs inside the VM (cwd: the build tree).
export GTEST_COLOR=no
check() { if [ "\$2" = 0 ]; then echo "RXE-CHECK: \$1 PASS"; else echo "RXE-CHECK: \$1 FAIL (rc=\$2)"; fi; }

echo "RXE-STEP: verbs provider tests"
timeout 600 "$TEST_BIN"
echo "RXE-GTEST-EXIT: \$?"

echo "RXE-STEP: each feature over verbs (test_compose_verbs)"
GSYNCD=\$PWD/daemon/gsyncd timeout 600 ./tests/rxe/test_compose_verbs
echo "RXE-COMPOSE-EXIT: \$?"

echo "RXE-STEP: each feature over verbs, membership on etcd (test_compose_etcd_verbs)"
GSYNCD=\$PWD/daemon/gsyncd timeout 600 ./tests/rxe/test_compose_etcd_verbs
echo "RXE-COMPOSE-ETCD-EXIT: \$?"

echo "RXE-STEP: ib_write_bw 1 MiB x 200 (reference)"
timeout 120 ib_write_bw -d rxe0 -x \$RXE_GID_INDEX -F -s 1048576 -n 200 > /tmp/bw-srv.log 2>&1 &
SRV=\$!; sleep 1
timeout 120 ib_write_bw -d rxe0 -x \$RXE_GID_INDEX -F -s 1048576 -n 200 127.0.0.1 | sed 's/^/ib_write_bw: /'
rc=\$?; wait \$SRV; check ib_write_bw \$rc

echo "RXE-STEP: three gsyncd in two racks allreducing over verbs and tcp"
# Under TCG emulation a daemon's loop can stall for seconds (a large
# registration, a loaded host): a 3 s silence is no lost peer here.
printf '[cluster]\ntransport = "verbs"\npeer_timeout_ms = 10000\n' > /tmp/verbs.toml
timeout 400 ./tools/perf/gsync-perf --hosts 3 --racks 2 --loopback -n 1 --daemon-arg=--config=/tmp/verbs.toml \
  ${RXE_PERF_ARGS:--b 4K -e 16M -f 4 --iters 3 --warmup 1} > /tmp/perf.log 2>&1
rc=\$?
sed 's/^/gsync-perf: /' /tmp/perf.log
grep -q '^# wrong elements in total: 0 (' /tmp/perf.log || rc=1
check allreduce_over_verbs \$rc
exit 0
JOBEOF

LOG=$WORK/vm.log
RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-600} bash "$HERE/run-vm.sh" "$KROOT/boot/vmlinuz-$KVER" \
  "$WORK/initramfs.cpio.gz" "$LOG" tcg RXE_PERF=0 "RXE_JOB=$JOB" "RXE_CWD=$BUILD" > "$WORK/run-vm.out" 2>&1
vm_rc=$?
t3=$(date +%s)
tr -d '\r' < "$LOG" > "$WORK/vm.txt"
cat "$WORK/vm.txt"

# --- verdict: one line per check, gtest's per test ------------------------------
passed=$(grep -cE '^\[       OK \] ' "$WORK/vm.txt")
failed=$(grep -cE '^\[  FAILED  \] [A-Za-z].*\([0-9]+ ms\)' "$WORK/vm.txt")
skipped=$(grep -cE '^\[  SKIPPED \] [A-Za-z].*\([0-9]+ ms\)' "$WORK/vm.txt")
passed=$((passed + $(grep -c '^RXE-CHECK: .* PASS' "$WORK/vm.txt")))
failed=$((failed + $(grep -c '^RXE-CHECK: .* FAIL' "$WORK/vm.txt")))
# A skip in the VM means rxe0 was not usable: that is a failure here.
failed=$((failed + skipped))
grep -q '^RXE-GTEST-EXIT: 0' "$WORK/vm.txt" || { [ "$failed" -gt 0 ] || failed=1; }
grep -q 'RXE-VM-RESULT: PASS' "$WORK/vm.txt" || { [ "$failed" -gt 0 ] || failed=1; echo "VM verdict not PASS ($(cat "$WORK/run-vm.out"))"; }
echo "rxe-lane: kernel $((t1-t0)) s, initramfs $((t2-t1)) s, vm $((t3-t2)) s ($(cat "$WORK/run-vm.out" | head -1))"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
