#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The admin socket's group is created by deploy/systemd/gsync.sysusers:
# systemd-sysusers, run on it against an empty root, must write group gsync
# and nothing else into that root's /etc/group.
# usage: test_sysusers.sh SYSUSERS_FILE
set -eu

file=$1
# With --root, systemd-sysusers reads a relative path under that root.
case $file in
  /*) ;;
  *) file=$(pwd)/$file ;;
esac
if ! command -v systemd-sysusers >/dev/null 2>&1; then
  echo "SKIP: systemd-sysusers not installed"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync-sysusers-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/etc"
if ! systemd-sysusers --root="$tmp" "$file"; then
  echo "FAIL: systemd-sysusers refused $file"
  exit 1
fi
cat "$tmp/etc/group"
if ! grep -q '^gsync:x:[0-9][0-9]*:$' "$tmp/etc/group"; then
  echo "FAIL: $file did not create group gsync"
  exit 1
fi
if [ "$(grep -c '' "$tmp/etc/group")" -ne 1 ] || [ -s "$tmp/etc/passwd" ]; then
  echo "FAIL: $file created more than group gsync"
  exit 1
fi
echo "OK: $file creates group gsync"
