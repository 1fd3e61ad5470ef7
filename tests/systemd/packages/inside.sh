#!/usr/bin/env bash
# Runs inside the container that test_packages.sh boots (systemd as PID 1,
# the host's own file system under a throwaway overlay): installs the
# packages as an operator would, uses them, purges them, and checks that
# nothing is left behind. usage: inside.sh DEBS_DIR TESTS_DIR
set -euo pipefail
debs=$1 tests=$2
export DEBIAN_FRONTEND=noninteractive
packages=(gsyncd gsyncd-dpdk libgsync0 libgsync-dev python3-gsync gsync-tools)
step() { echo "== $*"; }
fail() {
  echo "test_packages: FAIL: $*" >&2
  journalctl -u gsyncd --no-pager -n 30 >&2 || true
  exit 1
}

# A container image's policy-rc.d (Docker's answers 101: no service may be
# started or stopped by a package) is not what a host has; this overlay is
# thrown away, so the host keeps its own.
rm -f /usr/sbin/policy-rc.d

step "gsyncd needs no DPDK: its provider is the package gsyncd-dpdk"
deps=$(dpkg-deb -f "$debs"/gsyncd_*.deb Depends)
grep -q "librte" <<<"$deps" && fail "gsyncd depends on DPDK's libraries: $deps"

step "apt-get install ./*.deb"
apt-get install -y -q --no-install-recommends "$debs"/*.deb || fail "apt-get install of the packages"

step "the unit is enabled, not started (Debian policy: the operator starts it)"
[ "$(systemctl is-enabled gsyncd.service)" = enabled ] || fail "gsyncd.service is not enabled"
state=$(systemctl is-active gsyncd.service || true)
[ "$state" = inactive ] || fail "gsyncd.service is $state right after install, want inactive"
getent group gsync >/dev/null || fail "the install did not create group gsync (sysusers)"
[ -f /etc/gsync/gsyncd.toml ] || fail "no /etc/gsync/gsyncd.toml"

step "systemctl start gsyncd"
timeout 60 systemctl start gsyncd.service || fail "systemctl start gsyncd"
[ "$(systemctl is-active gsyncd.service)" = active ] || fail "gsyncd.service is not active"
[ -S /run/gsync/gsyncd.sock ] || fail "no client socket /run/gsync/gsyncd.sock"

step "the DPDK plugin's libraries resolve"
plugin=$(dpkg -L gsyncd-dpdk | grep '/gsync-transport-dpdk\.so$') || fail "gsyncd-dpdk holds no plugin"
ldd "$plugin" | grep -q "not found" && fail "the DPDK plugin lacks libraries: $(ldd "$plugin")"

step "a C program built with pkg-config --cflags --libs libgsync"
cflags=$(pkg-config --cflags --libs libgsync) || fail "pkg-config knows no libgsync"
work=$(mktemp -d)
# shellcheck disable=SC2086 # pkg-config's words
cc -o "$work/allreduce" "$tests/allreduce.c" $cflags || fail "the C program does not build"
timeout 60 "$work/allreduce" || fail "the C program's allreduce"

step "a Python allreduce with no PYTHONPATH"
timeout 60 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root python3 "$tests/allreduce.py" ||
  fail "the Python allreduce"

step "gsyncctl status"
out=$(timeout 30 gsyncctl status) || fail "gsyncctl status"
echo "$out" | head -n 5
grep -q "ops_completed\|ops completed\|completed" <<<"$out" || fail "gsyncctl status says no ops"

step "apt-get purge"
files=()
for p in "${packages[@]}"; do
  # Files and links only: dpkg -L lists every directory on the way too
  # (/lib, /usr/bin), which other packages share.
  while read -r f; do
    [ -d "$f" ] && continue
    [ -f "$f" ] || [ -L "$f" ] && files+=("$f")
  done < <(dpkg -L "$p")
done
apt-get purge -y -q "${packages[@]}" || fail "apt-get purge"

step "nothing left behind"
for f in "${files[@]}"; do [ -e "$f" ] || [ -L "$f" ] && fail "$f is left after purge"; done
for d in /etc/gsync /var/lib/gsync /run/gsync /usr/lib/python3/dist-packages/gsync \
  /usr/include/gsync /usr/share/doc/gsync; do
  [ -e "$d" ] && fail "$d is left after purge"
done
getent group gsync >/dev/null && fail "group gsync is left after purge"
[ -e /etc/systemd/system/multi-user.target.wants/gsyncd.service ] &&
  fail "the unit's enablement link is left after purge"
systemctl daemon-reload
load=$(systemctl show -p LoadState --value gsyncd.service)
[ "$load" = not-found ] || fail "systemd still knows gsyncd.service after purge ($load)"
left=$(dpkg -l "${packages[@]}" 2>/dev/null | awk '/^[a-z][a-z] /{print $1, $2}' | grep -v '^un ' || true)
[ -z "$left" ] || fail "dpkg still lists: $left"
rm -rf "$work"
echo "inside: OK"
