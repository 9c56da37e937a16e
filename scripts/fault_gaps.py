#!/usr/bin/env python3
"""On-CPU time between a program's consecutive page faults, and what a cold
fault path would add (issue 14, seed 004; docs/kbuild-recording.md).

Record every page fault of a build with its context switches (software
events only: no tracefs, no hardware counters, no knob touched):

    perf record --switch-events -e page-faults -c 1 -d -o pf.data -- make mm/memory.o ...
    scripts/fault_gaps.py pf.data [--comm cc1] [--fault-us 1.2]
        [--code-kb-per-us 6.58] [--l2-kb-per-us 0.92]
        [--code-curve 0:0,8:140,16:220,32:270,64:330,128:320,256:350]
        [--l2-penalty-ns 796] [--l2-kb 1024]

For each process it keeps an on-CPU clock (time between its switch-in and
switch-out records), so a gap is the time the process ran between two of
its faults: the previous fault itself (about --fault-us), then its own
code. It prints the gaps' distribution for every program with at least
1000 faults, then, for --comm, the expected cost a fault adds over a
back-to-back one when the program's code between faults has pushed the
fault path's code and branch history out of the core (--code-curve: ns
added against KiB of other code run, as scripts/cold_fault.c measures it
with C > 0; the program runs --code-kb-per-us of code through its L1I per
microsecond, from cachegrind's I1 misses) and, past a whole L2
(--l2-kb entering it at --l2-kb-per-us, cachegrind's LL misses with LL set
to the L2), its data (--l2-penalty-ns, cold_fault.c's 1 MiB data sweep).
"""
import argparse
import collections
import subprocess
import sys


def fault_gaps(data):
    """{comm: [[on-CPU microseconds between consecutive faults] per thread]}
    (each thread has its own on-CPU clock: `pid` below is perf's tid)."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "--show-switch-events", "-F", "comm,tid,time,event"],
        capture_output=True, text=True, check=True).stdout
    since = {}                            # pid -> switch-in time, None when off CPU
    ran = collections.defaultdict(float)  # pid -> on-CPU seconds before `since`
    last = {}                             # pid -> on-CPU clock at its last fault
    gaps = collections.defaultdict(list)
    for line in out.splitlines():
        f = line.split()
        if len(f) < 3 or not f[1].isdigit():
            continue
        comm, pid, t = f[0], int(f[1]), float(f[2].rstrip(":"))
        if "PERF_RECORD_SWITCH" in line:
            if " IN" in line:
                since[pid] = t
            else:
                if since.get(pid) is not None:
                    ran[pid] += t - since[pid]
                since[pid] = None
            continue
        if since.get(pid) is None:
            since[pid] = t  # its first record: on CPU from here
        clock = ran[pid] + t - since[pid]
        if pid in last:
            gaps[(comm, pid)].append((clock - last[pid]) * 1e6)
        last[pid] = clock
    by_comm = collections.defaultdict(list)
    for (comm, _), g in sorted(gaps.items()):
        by_comm[comm].append(g)
    return by_comm


def print_distribution(comm, g):
    g = sorted(g)
    n, tot = len(g), sum(g)
    q = lambda p: g[min(n - 1, int(p * n))]
    print(f"{comm}: {n} faults, on-CPU us between faults: mean {tot / n:.1f}, "
          f"p10 {q(.1):.0f} p25 {q(.25):.0f} p50 {q(.5):.0f} p75 {q(.75):.0f} "
          f"p90 {q(.9):.0f} p99 {q(.99):.0f}")
    for thr in (5, 20, 100, 500):
        k = [x for x in g if x > thr]
        print(f"  gap > {thr:3d} us: {100 * len(k) / n:5.1f} % of faults")


def interpolate(curve, x):
    if x >= curve[-1][0]:
        return curve[-1][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return curve[0][1]


def expected_excess(per_pid, a, curve, m=1):
    """Mean ns a fault adds over a back-to-back one when it comes m of the
    program's faults after the last (a folio of m pages: the m - 1 faults
    between do not happen, so their own time is not user time), and the
    share of those faults that come after a whole L2 of its lines."""
    total, past_l2, n = 0.0, 0, 0
    for g in per_pid:
        for i in range(m - 1, len(g)):
            user = max(0.0, sum(g[i - m + 1:i + 1]) - m * a.fault_us)
            ns = interpolate(curve, user * a.code_kb_per_us)
            if user * a.l2_kb_per_us >= a.l2_kb:
                ns, past_l2 = max(ns, a.l2_penalty_ns), past_l2 + 1
            total, n = total + ns, n + 1
    if n == 0:
        return None
    return total / n, past_l2 / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--comm", default="cc1")
    ap.add_argument("--fault-us", type=float, default=1.2)
    ap.add_argument("--code-kb-per-us", type=float, default=6.58)
    ap.add_argument("--l2-kb-per-us", type=float, default=0.92)
    ap.add_argument("--code-curve", default="0:0,8:140,16:220,32:270,64:330,128:320,256:350")
    ap.add_argument("--l2-penalty-ns", type=float, default=796)
    ap.add_argument("--l2-kb", type=float, default=1024)
    ap.add_argument("--per-pages", type=int, default=1,
                    help="also the excess of a fault m = 1..N faults after the last")
    a = ap.parse_args()
    try:
        curve = [tuple(map(float, p.split(":"))) for p in a.code_curve.split(",")]
        if any(len(p) != 2 for p in curve):
            raise ValueError
    except ValueError:
        sys.exit(f"--code-curve: expected KiB:ns pairs separated by commas, got {a.code_curve!r}")
    if len(curve) < 2 or any(x1 <= x0 for (x0, _), (x1, _) in zip(curve, curve[1:])):
        sys.exit("--code-curve: at least two points, KiB increasing")
    gaps = fault_gaps(a.data)
    for comm, per_pid in sorted(gaps.items(), key=lambda x: -sum(map(len, x[1]))):
        g = [x for p in per_pid for x in p]
        if len(g) >= 1000:
            print_distribution(comm, g)
    if not any(gaps.get(a.comm, [])):
        sys.exit(f"{a.data}: no two faults of a process named {a.comm!r}")
    for m in range(1, max(1, a.per_pages) + 1):
        excess = expected_excess(gaps[a.comm], a, curve, m)
        if excess is None:
            print(f"{a.comm}: no run of {m} faults in a row")
            continue
        ns, past = excess
        print(f"{a.comm}: a fault {m} fault(s) after the last: expected excess over a "
              f"back-to-back fault {ns:.0f} ns ({100 * past:.2f} % after a whole L2 of its lines)")


if __name__ == "__main__":
    main()
