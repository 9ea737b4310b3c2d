#!/usr/bin/env python3
"""kernel-times.py NCU_CSV_LOG [TOP]: where one profiled step's GPU time goes, kernel by kernel.

Reads the output of

    MEGACPP_PROFILE_STEP=1 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv BENCH

(the benches' MEGACPP_PROFILE_STEP=1 marks one step with cudaProfilerStart/Stop; the bench's own
lines and ncu's ==PROF== lines before the CSV are skipped) and prints the TOP (default 25) kernels
by total time: launches, total and mean microseconds, share of the step's kernel time, then the
sum over every kernel. Kernels are grouped by name without their argument lists, so one template
instance is one row (scripts/cuda-check.sh runs it on the Mamba and train-step benches).
"""
import csv
import sys

TO_MICROSECONDS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
                   "second": 1e6, "s": 1e6}


def short_name(kernel):
    """The kernel's name without 'void ' and without its argument list (the first '(' outside
    template brackets): one row per template instance."""
    name = kernel[5:] if kernel.startswith("void ") else kernel
    name = name.replace("(anonymous namespace)", "{anonymous}")  # not an argument list
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def kernel_times(lines):
    """{short name: [launches, total microseconds]} from ncu's CSV rows of gpu__time_duration.sum."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit("kernel-times.py: no ncu CSV header (\"ID\",...) in the log: did ncu profile any kernel? "
                         "(the bench must run with MEGACPP_PROFILE_STEP=1, ncu with --profile-from-start off --csv)")
    times = {}
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "")
        if unit not in TO_MICROSECONDS:
            raise SystemExit(f"kernel-times.py: unknown time unit {unit!r} for kernel {row.get('Kernel Name')!r}")
        value = float(row["Metric Value"].replace(",", "")) * TO_MICROSECONDS[unit]
        entry = times.setdefault(short_name(row["Kernel Name"]), [0, 0.0])
        entry[0] += 1
        entry[1] += value
    if not times:
        raise SystemExit("kernel-times.py: the CSV holds no gpu__time_duration.sum row")
    return times


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 25
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        lines = [line for line in f.read().splitlines() if line.startswith('"')]
    times = kernel_times(lines)
    total = sum(us for _, us in times.values())
    launches = sum(n for n, _ in times.values())
    ranked = sorted(times.items(), key=lambda item: -item[1][1])
    print(f"{'launches':>8} {'total us':>10} {'mean us':>9} {'share':>6}  kernel")
    for name, (n, us) in ranked[:top]:
        print(f"{n:8d} {us:10.1f} {us / n:9.2f} {us / total:6.1%}  {name}")
    if len(ranked) > top:
        rest = ranked[top:]
        print(f"{sum(n for _, (n, _) in rest):8d} {sum(us for _, (_, us) in rest):10.1f} {'':9} "
              f"{sum(us for _, (_, us) in rest) / total:6.1%}  ({len(rest)} more kernels)")
    print(f"{launches:8d} {total:10.1f} {'':9} {1:6.1%}  every kernel of the profiled step")


if __name__ == "__main__":
    main()
