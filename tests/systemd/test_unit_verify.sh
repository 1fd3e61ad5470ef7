#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Lints the configured gsyncd.service with `systemd-analyze verify`.
# usage: test_unit_verify.sh CONFIGURED_UNIT GSYNCD_BINARY
#
# systemd-analyze reports unknown keys and unparsable values only as warnings
# with exit status 0 (shared/research/probe-infra.md section 8), so besides
# the exit status the test fails on "Failed to parse" / "Unknown" in what it
# says about our unit. Lines about other units (dependencies it loads from the
# host) are shown but do not fail the test. Exit 77 tells meson "skipped".
set -eu

unit=$1
gsyncd=$2
# ExecStart= takes absolute paths only.
case $gsyncd in
  /*) ;;
  *) gsyncd=$(pwd)/$gsyncd ;;
esac

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not installed"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync-unit-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
test_unit=$tmp/gsyncd.service

# The configured unit starts the *installed* binary, which need not exist at
# test time, and verify fails on a missing ExecStart binary. Point ExecStart
# at the binary just built and keep its arguments.
escaped=$(printf '%s' "$gsyncd" | sed 's/[&|\\]/\\&/g')
sed "s|^ExecStart=[^ ]*/gsyncd |ExecStart=$escaped |" "$unit" >"$test_unit"
if ! grep -q "^ExecStart=$gsyncd " "$test_unit"; then
  echo "FAIL: no 'ExecStart=.../gsyncd ' line to rewrite in $unit"
  exit 1
fi

rc=0
systemd-analyze verify "$test_unit" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
cat "$tmp/stdout" "$tmp/stderr"

if [ "$rc" -ne 0 ]; then
  echo "FAIL: systemd-analyze verify exited with $rc"
  exit 1
fi
if grep 'gsyncd\.service' "$tmp/stderr" | grep -E 'Failed to parse|Unknown'; then
  echo "FAIL: systemd-analyze verify found problems in $unit (above)"
  exit 1
fi
# The devices gsyncd opens behind DevicePolicy=closed: the verbs devices and
# the NVIDIA GPU's (issue #39: without them every device registration
# failed under systemctl start, and nothing said why).
for allow in "char-infiniband_verbs rw" "/dev/infiniband/rdma_cm rw" \
  "char-nvidia-frontend rw" "char-nvidia-uvm rw" "char-nvidia-caps rw"; do
  if ! grep -qx "DeviceAllow=$allow" "$test_unit"; then
    echo "FAIL: $unit does not allow $allow (DeviceAllow=)"
    exit 1
  fi
done
echo "OK: $unit verifies (ExecStart tested as $gsyncd) and allows the RDMA and GPU devices"
