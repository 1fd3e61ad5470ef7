#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole suite and
# ends with meson's summary plus one "N passed, N failed, N skipped" line.
#
# Run without arguments (CI, .ci/run) it runs every lane (docs/testing.md):
#   - the release build: suites systemd, rxe, torch, the soak (its
#     resident-set check means nothing under ASan), demo (the README's
#     main job, as a user runs it), dpdk (DPDK's virtual devices) and etcd
#     (membership on a real etcd) and gpu (the GPU kernels: SKIPPED with
#     the reason without a GPU, their host-side rules run everywhere);
#   - the sanitizer lane (tools/sanitize/run.sh): unit and integration with
#     ASan and UBSan, which stands in for the release run of those two
#     (issue #15 allows it: two builds of them do not fit the budget);
#   - the fuzzing lane (tools/fuzz/run.sh): every fuzz target, 15 s each.
# Each lane builds only what its suites run (tools/suite-targets.py): on
# two cores the build is most of the time.
# With arguments they go to `meson test` on the release build only
# (tools/run-tests.sh integration, tools/run-tests.sh multihost).
#
# A green run means what it says: it fails on a skip that
# tests/skip-allowlist.txt does not allow, and (run without arguments) on a
# suite that did not run at all. GSYNC_ALLOW_SKIPS=1 lists them without
# failing, for a partial local run on a machine that lacks something.
# GSYNC_LANES=0 runs integration in the release build instead of the two
# lanes (a quicker local run; not what CI runs).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-deps.sh --lab || exit 1
build=${BUILD_DIR:-build}
release_suites=(soak systemd rxe torch demo dpdk etcd gpu)
if [ $# -gt 0 ] || [ "${GSYNC_LANES:-1}" = 0 ]; then
  bash tools/build.sh || exit 1
else
  GSYNC_CONFIGURE_ONLY=1 bash tools/build.sh || exit 1
  targets=$(python3 tools/suite-targets.py "$build" "${release_suites[@]}") || exit 1
  # shellcheck disable=SC2086 # one target per word
  ninja -C "$build" -j "$(nproc)" $targets || exit 1
fi
sanitize=${SANITIZE_BUILD_DIR:-build-sanitize}
strict=(--strict)
[ "${GSYNC_ALLOW_SKIPS:-0}" = 1 ] && strict=()
start=$(date +%s)

if [ $# -gt 0 ]; then
  meson test -C "$build" --print-errorlogs --num-processes 1 "$@"
  rc=$?
  python3 tools/test-summary.py "$build/meson-logs/testlog.json" "${strict[@]}" \
    --allow tests/skip-allowlist.txt || rc=1
  exit $rc
fi

rc=0
logs=("$build/meson-logs/testlog.json")
if [ "${GSYNC_LANES:-1}" = 0 ]; then
  meson test -C "$build" --print-errorlogs --num-processes 1 || rc=1
else
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 \
    "${release_suites[@]/#/--suite=}" || rc=1
  released=$(date +%s)
  SANITIZE_BUILD_DIR=$sanitize bash tools/sanitize/run.sh || rc=1
  sanitized=$(date +%s)
  logs+=("$sanitize/meson-logs/testlog.json")
  bash tools/fuzz/run.sh 15 || rc=1
  fuzzed=$(date +%s)
  echo "run-tests: release suites $((released - start)) s, sanitizer lane" \
    "$((sanitized - released)) s, fuzzing lane $((fuzzed - sanitized)) s"
fi
python3 tools/test-summary.py "${logs[@]}" "${strict[@]}" --allow tests/skip-allowlist.txt \
  --expect-suites unit,integration,systemd,rxe,torch,demo,dpdk,etcd,gpu || rc=1
exit $rc
