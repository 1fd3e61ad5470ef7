#!/usr/bin/env bash
# Installs what gsync needs, from Debian 12's apt repositories only.
# Idempotent: does nothing when all is present.
#
#   tools/setup-deps.sh         the core: build the daemon, the library and
#                               the tools, and run the main job (run-demo.sh)
#   tools/setup-deps.sh --lab   the core plus the test lab: what the test
#                               command (run-tests.sh) and the benchmarks use
#
# The main job installs the core only: on a fresh machine the lab (QEMU,
# clang, Chromium, DPDK, etcd, Open MPI, PyTorch) is most of the download
# and none of it is used there (issue #45).
set -euo pipefail

core=(
  meson ninja-build g++ pkg-config
  libspdlog-dev libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  liburing-dev libxxhash-dev libsystemd-dev libsodium-dev libmicrohttpd-dev
  # membership on etcd (daemon/cluster/etcd) speaks its JSON gateway over
  # libcurl; the verbs provider is built always (tools/build.sh)
  libcurl4-openssl-dev libibverbs-dev
  # the test bed: network namespaces, veth pairs, bridges, tc
  iproute2 procps python3
)
lab=(
  libgtest-dev libgmock-dev
  systemd
  openmpi-bin libopenmpi-dev libgloo-dev
  python3-torch python3-numpy
  # the soft-RoCE lane (tests/rxe, tools/rxe): a VM under qemu TCG with rxe0
  qemu-system-x86 busybox-static kmod cpio
  rdma-core ibverbs-utils ibverbs-providers libibverbs1 perftest
  # the DPDK provider (daemon/transport/dpdk) and its test lane on virtual
  # devices (net_memif, net_af_packet: no hugepages, no NIC)
  libdpdk-dev
  # a real etcd for the tests and the test bed (gsync-testbed up --etcd)
  etcd-server etcd-client
  # the fuzzing lane (tests/fuzz, tools/fuzz/run.sh): clang, its libFuzzer
  # and sanitizer runtimes
  clang libclang-rt-14-dev
  # the plots: gsync-perf --plot draws with gnuplot; the report test
  # (tests/integration/test_plots.cc) loads gsyncctl report in a headless
  # browser
  gnuplot-nox chromium-headless-shell
  # the Debian packages (debian/, tools/package/build-deb.sh) and their test
  # (tests/systemd/test_packages.sh: a container with systemd as PID 1)
  dpkg-dev debhelper dh-python lintian systemd-container
)

packages=("${core[@]}")
case ${1:-} in
  --lab) packages+=("${lab[@]}") ;;
  "") ;;
  *) echo "usage: tools/setup-deps.sh [--lab]" >&2; exit 2 ;;
esac

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
