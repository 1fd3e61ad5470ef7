#!/bin/bash
# run-vm.sh VMLINUZ INITRAMFS LOG [ACCEL] [extra kernel args...]
#   ACCEL: tcg (default) or kvm (kvm does NOT work on this machine kind, see notes)
#   extra kernel args name=value reach /init as environment variables, e.g.
#   RXE_NETDEV=lo|dummy|veth  RXE_PERF=0|1  RXE_JOB=/abs/path/job.sh RXE_CWD=/abs/dir
#   With RXE_JOB the host's / is shared read-only with the guest over virtio-9p.
# Boots the VM with no NIC, console on ttyS0 captured to LOG; exits non-zero
# unless the guest printed "RXE-VM-RESULT: PASS".
set -uo pipefail
K=$1; I=$2; LOG=$3; ACCEL=${4:-tcg}; shift 4 2>/dev/null || shift $#
case "$ACCEL" in
  kvm) A=(-enable-kvm -cpu host,-arch-capabilities) ;;
  *)   A=(-accel tcg -cpu max) ;;
esac
start=$(date +%s.%N)
SHARE=()
case " $* " in *" RXE_JOB="*)
  SHARE=(-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap) ;;
esac
timeout "${RXE_VM_TIMEOUT:-3600}" qemu-system-x86_64 "${A[@]}" -m "${RXE_VM_MEM:-4096}" -smp 2 \
  -nographic -no-reboot -nic none "${SHARE[@]}" -kernel "$K" -initrd "$I" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 $*" </dev/null > "$LOG" 2>&1
rc=$?
end=$(date +%s.%N)
echo "qemu exit $rc, wall $(awk "BEGIN{printf \"%.1f\", $end - $start}") s"
grep -q 'RXE-VM-RESULT: PASS' "$LOG"
