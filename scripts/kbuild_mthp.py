#!/usr/bin/env python3
"""How a real build's kernel time responds to large anonymous folios on this
host (issue 14, seed 004): the small kernel build of docs/kbuild-recording.md
(`make -j2 mm/` in Debian's linux-source-6.1 tree after `make defconfig
prepare`) timed under folio configurations of scripts/corpus.py (`4k`, `64k`,
`all`), alternating, `--runs` times each.

    sudo scripts/kbuild_mthp.py TREE [--runs 2] [--configs 4k,64k] [--perf DIR]
    scripts/kbuild_mthp.py --split DIR/4k-0.data:USER_S [...]

For each run: the build's own user and system time (`RUSAGE_CHILDREN` of the
make it waits for, which includes every process make waited for), its page
faults (`ru_minflt`), and the system-wide `/proc/vmstat` pgfault and the
per-size `anon_fault_alloc` deltas (these count everyone on a shared host:
a check that the configuration took effect, not the build's own counts).
Before each run the objects of `mm/` are deleted so that the same files are
compiled every time. Prints one JSON document on stdout.

With --perf each build runs under `perf record -g -e cpu-clock` and --split
prints, for each recording, where its kernel time went: the anonymous fault
path (`asm_exc_page_fault` with its callees, less `do_fault()`'s file-backed
and file-COW faults), the rest of the sampled kernel time (system calls with
exec and the page cache, file faults, interrupts), both in ms and in per
mille of the build's user time (USER_S, from the same run's JSON line).
Linux 6.18's `do_exit()` stops a task's perf events before `exit_mm()`, so
the exit's unmapping is not in the samples (it is in the rusage `sys_s`).

Knobs: changed only under /tmp/mmlab-live-kernel.lock and put back to the
host's defaults on every way out, with the journal scripts/corpus.py keeps
(a run killed by SIGKILL is undone by the next run of either script).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402  (LiveKernel, apply_config, CONFIGS, SIZES_KB)


def vmstat_pgfault():
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k == "pgfault":
                return int(v)
    raise RuntimeError("/proc/vmstat has no pgfault")


def mthp_fault_allocs():
    out = {}
    for kb in corpus.SIZES_KB:
        path = os.path.join(corpus.THP, f"hugepages-{kb}kB", "stats", "anon_fault_alloc")
        if os.path.exists(path):
            with open(path) as f:
                out[kb] = int(f.read())
    return out


def clean_mm(tree):
    """Deletes the objects of mm/ (and its archives) so make compiles them again."""
    for d, _, files in os.walk(os.path.join(tree, "mm")):
        for f in files:
            if f.endswith((".o", ".a")):
                os.unlink(os.path.join(d, f))


def run_build(tree, perf_out=None):
    """One `make -j2 mm/`: its own user/sys seconds and faults; with
    `perf_out`, under `perf record -g -e cpu-clock` (the build's own processes:
    perf follows make's children) into that file."""
    clean_mm(tree)
    cmd = ["make", "-j2", "-s", "mm/"]
    if perf_out:
        cmd = ["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", "1999", "-o", perf_out, "--"] + cmd
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pf0, th0, t0 = vmstat_pgfault(), mthp_fault_allocs(), time.monotonic()
    subprocess.run(cmd, cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    th1 = mthp_fault_allocs()
    return {
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
        "minflt": after.ru_minflt - before.ru_minflt,
        "wall_s": wall,
        "vmstat_pgfault": vmstat_pgfault() - pf0,
        "anon_fault_alloc": {kb: th1[kb] - th0.get(kb, 0) for kb in th1 if th1[kb] != th0.get(kb, 0)},
        "loadavg": os.getloadavg()[0],
    }


def perf_report(data, *args):
    r = subprocess.run(["perf", "report", "-i", data, "--stdio", "-n"] + list(args),
                       check=True, capture_output=True, text=True)
    return r.stdout


def split(data, user_s):
    """Kernel time of one perf recording split into the anonymous fault
    path and the rest, in ms and in per mille of `user_s`."""
    total_ns = None
    for line in perf_report(data, "--sort", "dso").splitlines():
        if line.startswith("# Event count (approx.):"):
            total_ns = int(line.split(":")[1])
    if total_ns is None:
        raise RuntimeError(f"{data}: perf report gave no event count")
    kernel = children = None
    for line in perf_report(data, "--sort", "dso", "-q").splitlines():
        if "[kernel.kallsyms]" in line:
            kernel = float(line.split()[0].rstrip("%")) / 100
    children = {}
    for line in perf_report(data, "--children", "--sort", "sym", "-g", "none", "-q").splitlines():
        f = line.split()
        if len(f) >= 5 and f[-2] == "[k]":
            children[f[-1]] = float(f[0].rstrip("%")) / 100
    if kernel is None or "asm_exc_page_fault" not in children:
        raise RuntimeError(f"{data}: no kernel samples or no page-fault entry in the profile (recorded without -g callchains?)")
    fault = children["asm_exc_page_fault"] * total_ns
    file_fault = children.get("do_fault", 0.0) * total_ns
    anon = fault - file_fault
    rest = kernel * total_ns - anon
    pm = lambda ns: round(ns / (user_s * 1e9) * 1000, 1)  # noqa: E731
    return {"file": data, "kernel_ms": round(kernel * total_ns / 1e6), "anon_fault_ms": round(anon / 1e6),
            "file_fault_ms": round(file_fault / 1e6), "rest_ms": round(rest / 1e6),
            "anon_fault_permille": pm(anon), "rest_permille": pm(rest)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", nargs="?", help="a kernel tree after make defconfig prepare")
    ap.add_argument("--split", nargs="+", metavar="DATA:USER_S",
                    help="print the kernel-time split of these perf recordings and exit")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--configs", default="4k,64k")
    ap.add_argument("--perf", metavar="DIR",
                    help="record each run with perf into DIR/<config>-<run>.data (perf's own time is in the rusage)")
    args = ap.parse_args()
    if args.split:
        for arg in args.split:
            data, _, user = arg.rpartition(":")
            if not data or not os.path.exists(data):
                sys.exit(f"--split {arg}: expected an existing perf.data file, a colon and its user seconds")
            try:
                user_s = float(user)
            except ValueError:
                sys.exit(f"--split {arg}: {user!r} is not a number of seconds")
            print(json.dumps(split(data, user_s)))
        return
    if not args.tree:
        sys.exit("a kernel tree is needed (or --split)")
    configs = args.configs.split(",")
    for c in configs:
        if c not in corpus.CONFIGS:
            sys.exit(f"unknown configuration {c!r} (known: {', '.join(corpus.CONFIGS)})")
    if not os.path.isdir(os.path.join(args.tree, "mm")):
        sys.exit(f"{args.tree}: no mm/ directory (a kernel tree is needed)")
    runs = []
    with corpus.LiveKernel():
        for i in range(args.runs):
            for c in configs:
                corpus.apply_config(c)
                out = os.path.join(args.perf, f"{c}-{i}.data") if args.perf else None
                r = run_build(args.tree, out)
                r.update(config=c, run=i)
                runs.append(r)
                print(json.dumps(r), file=sys.stderr)
    json.dump({"kernel": os.uname().release, "runs": runs}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
