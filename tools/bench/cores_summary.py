#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The figures of a tools/bench/device-cores.sh run, from its output folder.

  tools/bench/cores_summary.py OUT

Per size and ranks per host, one line per round of gsync-perf's: gsync's
time, Open MPI's and Gloo's in the same run (gsync-perf prints them as
ratios: vs_mpi = MPI's time / gsync's, above 1 is gsync faster), and the CPU
per op of each (ranks and daemons for gsync, the ranks for the peers). Per
bench_ddp.py run: each phase's step time, exposed fraction and CPU per step.
Then the issue's two targets: 4 KiB across 4 hosts at least 1.0x Open MPI's
time (the median of the rounds), the DDP step across hosts at least 1.15x
gloo's. Markdown tables, for docs/performance.md. Standard library only (any
python3 of the machine).
"""
import json
import re
import statistics
import sys
from pathlib import Path


def json_lines(path: Path):
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def fmt_us(us):
    if us is None:
        return "-"
    return f"{us / 1000:.1f} ms" if us >= 10000 else f"{us:.1f} us"


def verdict(met: bool, dry: bool) -> str:
    if dry:
        return "no verdict (a dry run)"
    return "met" if met else "NOT met"


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def perf_table(out: Path, lines: list) -> dict:
    """One row per perf-nN-SIZE-rR.json; {(size, n): [vs_mpi, ...]}."""
    lines += ["| size | ranks/host | round | gsync | Open MPI | Gloo | vs MPI | vs Gloo | "
              "CPU/op gsync (ranks + daemons) | MPI | Gloo |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios = {}
    pat = re.compile(r"perf-n(\d+)-(\w+)-r(\d+)\.json$")
    found = sorted((m for m in map(pat.search, map(str, out.glob("perf-*.json"))) if m),
                   key=lambda m: (int(m.group(1)), ["4K", "1M", "64M"].index(m.group(2))
                                  if m.group(2) in ("4K", "1M", "64M") else 9,
                                  int(m.group(3))))
    for m in found:
        n, size, r = int(m.group(1)), m.group(2), int(m.group(3))
        recs = json_lines(Path(m.string))
        row = next((x for x in recs if "bytes" in x and "time_us" in x), None)
        tail = next((x for x in recs if "isa" in x), {})
        if row is None:
            why = tail.get("mpi_error") or tail.get("gloo_error") or \
                f"no row: see {Path(m.string).stem}.err"
            lines.append(f"| {size} | {n} | {r} | failed: {why} |||||||||")
            continue
        t = row["time_us"]
        mpi = row.get("vs_mpi") or None  # 0: no peer figure at this size
        gloo = row.get("vs_gloo") or None
        ratios.setdefault((size, n), []).append(mpi)
        cpu = row.get("cpu_us_per_op")
        split = ""
        if cpu is not None:
            split = (f" ({fmt_us(row.get('rank_cpu_us_per_op', 0))} + "
                     f"{fmt_us(row.get('daemon_cpu_us_per_op', 0))})")
        lines.append(
            f"| {size} | {n} | {r} | {fmt_us(t)} | {fmt_us(mpi * t if mpi else None)} | "
            f"{fmt_us(gloo * t if gloo else None)} | {fmt(mpi)} | {fmt(gloo)} | "
            f"{fmt_us(cpu)}{split} | {fmt_us(row.get('mpi_cpu_us_per_op'))} | "
            f"{fmt_us(row.get('gloo_cpu_us_per_op'))} |")
        for key in ("mpi_error", "gloo_error"):
            if tail.get(key):
                lines.append(f"|  |  |  | {key}: {tail[key]} |||||||||")
    return ratios


def ddp_table(out: Path, lines: list) -> dict:
    """One row per phase of each ddp-hH.json; {hosts: summary object}."""
    lines += ["| hosts | phase | step | exposed | rank CPU/step | daemon CPU/step | "
              "comm CPU/step |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    summaries = {}
    for path in sorted(out.glob("ddp-h*.json")):
        h = int(re.search(r"ddp-h(\d+)", path.name).group(1))
        recs = json_lines(path)
        if not recs:
            lines.append(f"| {h} | failed: no output, see {path.stem}.err ||||||")
            continue
        for x in recs:
            if "phase" in x:
                lines.append(
                    f"| {h} | {x['phase']} | {x['step_ms']:.2f} ms | {x['exposed']:.3f} | "
                    f"{fmt(x.get('rank_cpu_ms_per_step'))} ms | "
                    f"{fmt(x.get('daemon_cpu_ms_per_step'))} ms | "
                    f"{fmt(x.get('comm_cpu_ms_per_step'))} ms |")
            elif "gsync_vs_gloo" in x:
                summaries[h] = x
    return summaries


def op_breakdown(path: Path, lines: list) -> None:
    """Median times of h1's recent 4 KiB ops (gsyncctl --json ops), each from
    the op's first rank arrival: the stages' begin and end and marks, the
    first chunk h1 sent and the last it received, the end."""
    try:
        ops = [o for o in json.loads(path.read_text()).get("recent", [])
               if o.get("bytes") == 4096 and o.get("code") == 0 and o.get("arrivals")]
    except (OSError, json.JSONDecodeError):
        return
    if not ops:
        return
    points = {}
    for o in ops:
        t0 = min(a["ns"] for a in o["arrivals"])
        at = {"started": o["started_ns"], "finished": o["finished_ns"],
              "last rank arrival": max(a["ns"] for a in o["arrivals"])}
        for st in o.get("stages", []):
            at[f"{st['stage']} begun"] = st["begun_ns"]
            at[f"{st['stage']} finished"] = st["finished_ns"]
            for mark, ns in st.get("marks_ns", {}).items():
                at[f"{st['stage']} {mark}"] = ns
        links = o.get("wire", {}).get("links", [])
        sent = [c[2] for ln in links if ln["from"] == o.get("host", "h1") for c in ln["chunks"]]
        got = [c[2] for ln in links if ln["to"] == o.get("host", "h1") for c in ln["chunks"]]
        if sent:
            at["first chunk sent"] = min(sent)
        if got:
            at["last chunk received"] = max(got)
        for k, ns in at.items():
            points.setdefault(k, []).append((ns - t0) / 1000)
    lines.append(f"h1's last {len(ops)} 4 KiB ops (ops-4k-h1.json), median us from the first "
                 f"rank's arrival:")
    for k, v in sorted(points.items(), key=lambda kv: statistics.median(kv[1])):
        lines.append(f"  {statistics.median(v):8.1f}  {k}")


def steps_said(out: Path, lines: list) -> None:
    """The steps that were skipped or did not exit 0, with their stderr's last line."""
    path = out / "steps.txt"
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        m = re.match(r"device-cores: (\S+): exit status (\d+)", line)
        if "skipped" in line:
            lines.append(line)
        elif m and m.group(2) != "0":
            err = out / f"{m.group(1)}.err"
            last = err.read_text(errors="replace").strip().splitlines()[-1:] if err.exists() \
                else []
            lines.append(line + (f": {last[0]}" if last else ""))


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    machine = (out / "machine.txt").read_text() if (out / "machine.txt").exists() else ""
    mode = (out / "mode.txt").read_text().strip() if (out / "mode.txt").exists() else "?"
    lines = []
    if "dry run: yes" in machine:
        lines.append("DRY RUN (few ops, a small model): the harness, not the measurement.")
    lines += [machine.strip(), f"hosts: {mode}", ""]
    ratios = perf_table(out, lines)
    lines.append("")
    ddp = ddp_table(out, lines)
    lines.append("")
    for h, x in sorted(ddp.items()):
        lines.append(f"DDP {h} hosts: gloo's step / gsync's: hook {fmt(x.get('gsync_vs_gloo'))}, "
                     f"DataParallel {fmt(x.get('gsync_dp_vs_gloo'))}; communication CPU vs "
                     f"gloo's: hook {fmt(x.get('gsync_comm_cpu_vs_gloo'))}, DataParallel "
                     f"{fmt(x.get('gsync_dp_comm_cpu_vs_gloo'))}")
    op_breakdown(out / "ops-4k-h1.json", lines)
    steps_said(out, lines)
    dry = "dry run: yes" in machine
    four = [v for v in ratios.get(("4K", 1), []) if v is not None]
    if four:
        med = statistics.median(four)
        lines.append(f"target 4 KiB, 4 hosts x 1 rank, at least 1.0x Open MPI: median "
                     f"{med:.2f}x over {len(four)} rounds: " +
                     verdict(med >= 1.0, dry))
    else:
        lines.append("target 4 KiB at least 1.0x Open MPI: no figure")
    for h in (2, 4):
        v = ddp.get(h, {}).get("gsync_vs_gloo")
        lines.append(f"target DDP {h} hosts at least 1.15x gloo's step: " +
                     ("no figure" if v is None else f"{v:.2f}x: " + verdict(v >= 1.15, dry)))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
