#!/bin/bash
# build-initramfs.sh KROOT INIT OUT.cpio.gz [EXTRA_EXECUTABLE...]
#
#   KROOT  directory into which a Debian linux-image-<ver>-amd64 .deb was
#          unpacked with `dpkg-deb -x` (must contain lib/modules/<ver>/)
#   INIT   the /init script to put into the image
#   OUT    output file (gzip-compressed newc cpio)
#   EXTRA_EXECUTABLE...  extra dynamically linked programs (e.g. a gtest
#          binary); each is copied to /opt/tests/<basename> inside the image
#          together with every shared library `ldd` reports (at the library's
#          own path), and listed in /etc/rxe-tests so that /init runs it.
#
# Needs on the build machine (Debian 12): busybox-static kmod cpio
# rdma-core ibverbs-utils ibverbs-providers iproute2 [perftest].
set -euo pipefail

KROOT=$(readlink -f "$1"); INIT=$2; OUT=$3; shift 3
KVER=$(ls "$KROOT/lib/modules" | head -n1)
MODDIR=$KROOT/lib/modules/$KVER

W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W"/usr/bin "$W"/usr/sbin "$W"/usr/lib/x86_64-linux-gnu "$W"/usr/lib64 \
         "$W"/proc "$W"/sys "$W"/dev "$W"/tmp "$W"/run "$W"/etc "$W"/root "$W"/mnt
# merged-/usr layout, as on Debian 12
ln -s usr/bin "$W/bin"; ln -s usr/sbin "$W/sbin"
ln -s usr/lib "$W/lib"; ln -s usr/lib64 "$W/lib64"

# put FILE: copy FILE (symlinks followed) to the same path inside the image
put() { mkdir -p "$W$(dirname "$1")"; cp -L --remove-destination "$1" "$W$1"; }
# put_elf FILE: FILE plus all shared libraries it needs (per ldd)
put_elf() {
  put "$1"
  { ldd "$1" 2>/dev/null || true; } |
    awk '/=> \//{print $3} /^[ \t]*\/[^ ]+ \(0x/{print $1}' |
    while read -r lib; do put "$lib"; done
}

# ---- user space -----------------------------------------------------------
# real (glibc) tools first; busybox fills in the rest
for b in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong \
         rdma ip \
         ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat; do
  p=$(command -v "$b" || true)
  if [ -n "$p" ]; then put_elf "$p"; else echo "note: $b not installed, skipped" >&2; fi
done
# verbs providers are dlopen()ed, so ldd of the tools does not list them
for p in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do put_elf "$p"; done
put /etc/libibverbs.d/rxe.driver
# busybox (static) + applet links where no real tool was copied
put /usr/bin/busybox
for a in $(/usr/bin/busybox --list); do
  [ -e "$W/usr/bin/$a" ] || [ -e "$W/usr/sbin/$a" ] || ln -s busybox "$W/usr/bin/$a"
done

# ---- kernel modules, in dependency order ------------------------------------
[ -f "$MODDIR/modules.dep" ] || depmod -b "$KROOT" "$KVER"
: > "$W/etc/modules.list"
# crc32_generic: rdma_rxe allocates the "crc32" crypto hash (ICRC); without it
# `rdma link add` fails with ENOENT (no modprobe helper in the image).
# virtio_pci 9pnet_virtio 9p overlay: only for the optional RXE_JOB mode
# (host root shared read-only over virtio-9p, writable through an overlay).
# tcp_diag unix_diag: sock_diag, which the test bed (tools/testbed) uses to
# see that a gsyncd listens.
for m in crc32_generic crc32_pclmul rdma_rxe ib_uverbs rdma_ucm dummy veth \
         virtio_pci 9pnet_virtio 9p overlay tcp_diag unix_diag; do
  modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" |
  while read -r cmd path args; do
    [ "$cmd" = insmod ] || continue
    rel=${path#"$MODDIR"/}
    grep -q "^$rel\( \|$\)" "$W/etc/modules.list" && continue
    mkdir -p "$W/lib/modules/$KVER/$(dirname "$rel")"
    cp "$path" "$W/lib/modules/$KVER/$rel"
    echo "$rel $args" >> "$W/etc/modules.list"
  done
done

# ---- project test executables ---------------------------------------------
: > "$W/etc/rxe-tests"
mkdir -p "$W/opt/tests"
for x in "$@"; do
  put_elf "$(readlink -f "$x")"                      # pulls in its libraries
  t=/opt/tests/$(basename "$x")
  mv "$W$(readlink -f "$x")" "$W$t"; echo "$t" >> "$W/etc/rxe-tests"
done

install -m 0755 "$INIT" "$W/init"
(cd "$W" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$OUT"
echo "built $OUT ($(du -h "$OUT" | cut -f1)), kernel $KVER, modules:"
sed 's/^/  /' "$W/etc/modules.list"
