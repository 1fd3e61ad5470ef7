#!/usr/bin/env bash
# Installs everything gsync needs to build, test and benchmark, from Debian 12's
# apt repositories only. Idempotent: does nothing when all is present.
set -euo pipefail

packages=(
  meson ninja-build g++ pkg-config
  libspdlog-dev libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  liburing-dev libxxhash-dev libsystemd-dev libibverbs-dev libsodium-dev libmicrohttpd-dev
  libgtest-dev libgmock-dev
  systemd python3 procps
  openmpi-bin libopenmpi-dev libgloo-dev
  python3-torch python3-numpy
  # the soft-RoCE lane (tests/rxe, tools/rxe): a VM under qemu TCG with rxe0
  qemu-system-x86 busybox-static kmod cpio iproute2
  rdma-core ibverbs-utils ibverbs-providers libibverbs1 perftest
  # the DPDK provider (daemon/transport/dpdk) and its test lane on virtual
  # devices (net_memif, net_af_packet: no hugepages, no NIC)
  libdpdk-dev
  # membership on etcd (daemon/cluster/etcd): its JSON gateway over libcurl,
  # and a real etcd for the tests and the test bed (gsync-testbed up --etcd)
  libcurl4-openssl-dev etcd-server etcd-client
  # the fuzzing lane (tests/fuzz, tools/fuzz/run.sh): clang, its libFuzzer
  # and sanitizer runtimes
  clang libclang-rt-14-dev
  # the plots: gsync-perf --plot draws with gnuplot; the report test
  # (tests/integration/test_plots.cc) loads gsyncctl report in a headless
  # browser
  gnuplot-nox chromium-headless-shell
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
