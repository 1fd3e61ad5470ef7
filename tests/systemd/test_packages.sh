#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The Debian packages, installed the way an operator installs them
# (issue #45; docs/packaging.md): builds them from this build directory
# (tools/package/build-deb.sh --prebuilt, lintian clean of errors), boots a
# container with systemd as PID 1 whose root is this machine's own file
# system under a throwaway overlay (systemd-nspawn --volatile=overlay:
# nothing it installs reaches the host), and inside it
# (packages/inside.sh): apt-get install ./*.deb, the unit enabled but not
# started, systemctl start gsyncd, a C program built with pkg-config and a
# Python allreduce with no PYTHONPATH against it, gsyncctl status, then
# apt-get purge and nothing left behind - files, the group, the unit.
#
# usage: test_packages.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2")
deadline_s=180  # the container's boot

if [ "${GSYNC_PKG_UNSHARED:-0}" != 1 ]; then
  # A mount namespace of its own: the bind mount below vanishes with it.
  GSYNC_PKG_UNSHARED=1 exec unshare --mount --propagation private -- "$0" "$@"
fi
for tool in systemd-nspawn dpkg-buildpackage dh lintian nsenter; do
  command -v "$tool" >/dev/null || {
    echo "test_packages: FAIL: $tool is missing (tools/setup-deps.sh --lab installs it)" >&2
    exit 1
  }
done
tmp=$(mktemp -d /tmp/gsync-pkgtest.XXXXXX)
nspawn=""
cleanup() {
  if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
    kill -TERM "$nspawn" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn" 2>/dev/null || true
  fi
  umount "$tmp/root" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== tools/package/build-deb.sh --prebuilt $build --lintian"
bash "$src/tools/package/build-deb.sh" --prebuilt "$build" --out "$tmp/debs" --lintian
ls "$tmp/debs"
for p in gsyncd gsyncd-dpdk libgsync0 libgsync-dev python3-gsync gsync-tools; do
  ls "$tmp/debs/${p}_"*.deb >/dev/null 2>&1 || { echo "test_packages: FAIL: no $p package" >&2; exit 1; }
done

echo "== boot a container of this machine's file system (systemd-nspawn --volatile=overlay)"
mkdir "$tmp/root"
mount --bind / "$tmp/root"
# --private-network: the container's services (and gsyncd) see only their
# own loopback, never the host's ports. --register=no and --keep-unit: the
# host need not run systemd itself.
systemd-nspawn -q -D "$tmp/root" --volatile=overlay --private-network --register=no \
  --keep-unit --link-journal=no -M "gsync-pkg-$$" --console=pipe \
  --bind-ro="$tmp/debs:/gsync-debs" --bind-ro="$src/tests/systemd/packages:/gsync-tests" \
  -b > "$tmp/console.log" 2>&1 &
nspawn=$!
init=""
end=$((SECONDS + deadline_s))
while [ -z "$init" ]; do
  kill -0 "$nspawn" 2>/dev/null || {
    echo "test_packages: FAIL: systemd-nspawn exited:" >&2; cat "$tmp/console.log" >&2; exit 1
  }
  [ $SECONDS -lt $end ] || { echo "test_packages: FAIL: no container init in ${deadline_s}s" >&2; exit 1; }
  init=$(pgrep -P "$nspawn" | head -n 1 || true)
  # The container's PID 1 once it has exec'd systemd (not nspawn's own child
  # setting the container up).
  [ -n "$init" ] && [ "$(cat "/proc/$init/comm" 2>/dev/null)" != systemd ] && init=""
  [ -n "$init" ] || sleep 0.2
done
inside() {
  nsenter -t "$init" -m -u -i -n -p -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 "$@"
}
# Booted: is-system-running --wait returns once start-up finished; a unit
# of this machine's that fails in a container (degraded) is not ours.
# Until systemd has made its socket, systemctl cannot ask at all (no state
# printed): asked again until the deadline.
state=""
while [ -z "$state" ] && [ $SECONDS -lt $end ]; do
  state=$(inside timeout "$deadline_s" systemctl is-system-running --wait 2>/dev/null || true)
  [ -n "$state" ] || sleep 0.2
done
case $state in
  running | degraded) echo "container: $state" ;;
  *) echo "test_packages: FAIL: the container's systemd did not come up ($state)" >&2
     cat "$tmp/console.log" >&2; exit 1 ;;
esac
inside bash /gsync-tests/inside.sh /gsync-debs /gsync-tests
echo "test_packages: OK"
