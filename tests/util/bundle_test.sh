# shellcheck shell=bash
# Sourced by the bundle tests (tests/gpu/test_bundle.sh,
# tests/torch/test_cores_bundle.sh).
#
# made_and_checked ROOT MAKER BUILD_DIR OUT_DIR: MAKER (a bundle script of
# tools/common/bundle-lib.sh's kind, relative to the source ROOT) makes
# the bundle from BUILD_DIR in OUT_DIR and proves it with its --check;
# prints the check's lines and exits 1 with a FAIL line unless both worked.
made_and_checked() {
  local root=$1 maker=$2 build=$3 out=$4 rc=0
  if ! bash "$root/$maker" "$build" "$out" >"$out.make.txt" 2>&1; then
    cat "$out.make.txt"
    echo "FAIL: $maker could not make the bundle"
    exit 1
  fi
  grep -E '^bundle: ' "$out.make.txt"
  bash "$root/$maker" --check "$out" >"$out.check.txt" 2>&1 || rc=$?
  cat "$out.check.txt"
  if [ "$rc" -ne 0 ] || ! tail -1 "$out.check.txt" | grep -q '^bundle check: PASS'; then
    echo "FAIL: the bundle is not self-contained (exit status $rc)"
    exit 1
  fi
}
