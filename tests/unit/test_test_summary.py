#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tools/test-summary.py allows a skip only for the reasons its rule names
(issue #38, item 9; docs/testing.md, "Skips"), read against the real
tests/skip-allowlist.txt: a GPU case skipped because no NVIDIA driver is
loaded passes, the same case skipped because the build has no CUDA (a GPU
machine's misbuilt run) or because the driver is too old fails the run, and
a rule that names no reason is refused. Real meson testlog lines, written
to a temporary file; the script runs as CI runs it.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUMMARY = REPO / "tools" / "test-summary.py"
ALLOW = REPO / "tests" / "skip-allowlist.txt"
CASE = "GpuReduce.EveryDtypeAndOpGivesTheHostKernelsBits"


def gtest_log(reason: str) -> dict:
    out = (f"[ RUN      ] {CASE}\n../tests/gpu/test_gpu_reduce.cc:329: Skipped\n{reason}\n\n"
           f"[  SKIPPED ] {CASE} (0 ms)\n[ RUN      ] GpuLaunch.Rules\n"
           "[       OK ] GpuLaunch.Rules (0 ms)\n")
    return {"name": "gsync:gpu / gpu_reduce", "result": "OK", "stdout": out}


def script_log(line: str) -> dict:
    return {"name": "gsync:torch / torch_cuda", "result": "SKIP", "stdout": line + "\n"}


def summary(entries, allow=ALLOW):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")
    cp = subprocess.run([sys.executable, str(SUMMARY), f.name, "--strict", "--allow", str(allow)],
                        capture_output=True, text=True)
    Path(f.name).unlink()
    return cp.returncode, cp.stdout + cp.stderr


failures = []
checks = [0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


NO_DRIVER = ("no GPU: cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is "
             "insufficient for CUDA runtime version): no NVIDIA driver is loaded (no "
             "/proc/driver/nvidia/version)")
rc, out = summary([gtest_log(NO_DRIVER)])
check(rc == 0 and "1 passed, 0 failed, 1 skipped" in out and "allowed: no GPU" in out,
      f"no driver: allowed\n{out}")

for bad in ("no GPU: gsync was built without CUDA (meson found no nvcc)",
            "no GPU: cudaGetDeviceCount: cudaErrorInsufficientDriver (...): the NVIDIA driver "
            "loaded is older than this CUDA runtime (NVRM version: 535.1; CUDA 13 needs a newer "
            "one)",
            "needs 2 GPUs, has 1"):
    rc, out = summary([gtest_log(bad)])
    check(rc == 1 and "NOT ALLOWED" in out, f"'{bad}': not allowed\n{out}")

rc, out = summary([script_log("SKIPPED: torch 2.1.0 sees no GPU (CUDA build: None); CUDA "
                              "tensors need PyTorch built with CUDA and a GPU")])
check(rc == 0, f"torch_cuda on a CPU build: allowed\n{out}")
rc, out = summary([script_log("SKIPPED: torch 2.5.0 sees no GPU (CUDA build: 12.4); CUDA "
                              "tensors need PyTorch built with CUDA and a GPU")])
check(rc == 1, f"torch_cuda with a CUDA build that sees no GPU: not allowed\n{out}")

with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write("gpu/gpu_reduce:GpuReduce.* no GPU on the CI machine\n")
rc, out = summary([gtest_log(NO_DRIVER)], allow=f.name)
Path(f.name).unlink()
check(rc != 0 and "not 'GLOB | REASON-GLOB" in out, f"a rule without reasons: refused\n{out}")

print(f"{checks[0] - len(failures)} of {checks[0]} checks passed")
sys.exit(1 if failures else 0)
