#!/usr/bin/env python3
"""How long ``mmlab.read_trace`` takes to load a large trace, in CPU time.

    python python/benches/read_trace_speed.py [--events 1000000] [--repeat 5]
    python python/benches/read_trace_speed.py --trace build.mmtrace    # a recorded trace

Without ``--trace`` it writes a synthetic trace of ``--events`` events
(``cargo run --release -p trace --example trace_stats -- --synthetic N``:
page allocations, frees, user page faults and mmaps in turn, so a quarter
of the rows have each kind's fields and the rest are null) to a private
temporary directory, removed afterwards.

Prints, best of ``--repeat`` rounds, in CPU time (user + system of this
process, all threads; the host is shared, so wall time would measure the
neighbours):

- ``read_trace``: the whole call, path to DataFrame;
- ``native``: ``mmlab._native.read_trace`` alone (decoding and building the
  columns in Rust, Arrow's layout);
- ``arrow``: wrapping those columns as a pyarrow Table (no copy);
- ``pandas``: the Table as a DataFrame of Arrow-backed columns;
- ``trace-stats``: the ``mmlab trace-stats`` command (the Rust reader
  counting events, no columns; a child process's CPU time), for scale.

The issue's goal: a million-event trace loads in well under a second.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple, TypeVar

import mmlab
from mmlab import _arrow, _native

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import REPO, mmlab_bin  # noqa: E402

T = TypeVar("T")


def cpu_time(f: Callable[[], T]) -> Tuple[float, T]:
    """CPU seconds (user + system, every thread of this process) of f()."""
    t = time.process_time()
    out = f()
    return time.process_time() - t, out


def child_cpu_time(args: List[str]) -> float:
    """CPU seconds of a child process (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def synthetic(n: int, out: Path) -> None:
    subprocess.run(
        ["cargo", "run", "--release", "--quiet", "-p", "trace", "--example", "trace_stats", "--",
         "--synthetic", str(n), str(out)],
        cwd=REPO, check=True,
    )


def measure(path: Path, repeat: int, exe: str) -> Dict[str, List[float]]:
    res: Dict[str, List[float]] = {"read_trace": [], "native": [], "arrow": [], "pandas": [], "trace-stats": []}
    for _ in range(repeat):
        t, df = cpu_time(lambda: mmlab.read_trace(path))
        res["read_trace"].append(t)
        rows = len(df)
        del df
        t, (cols, _h, _t) = cpu_time(lambda: _native.read_trace(str(path)))
        res["native"].append(t)
        t, table = cpu_time(lambda: _arrow.table(cols))
        res["arrow"].append(t)
        t, df = cpu_time(lambda: _arrow.frame(table))
        res["pandas"].append(t)
        assert len(df) == rows
        del cols, table, df
        res["trace-stats"].append(child_cpu_time([exe, "trace-stats", str(path)]))
    res["rows"] = [float(rows)]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--trace", type=Path, help="a trace to read instead of a synthetic one")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mmlab", default=None, help="the mmlab command (default: target/release/mmlab or $MMLAB_BIN)")
    args = ap.parse_args()
    exe = args.mmlab or str(mmlab_bin())
    with tempfile.TemporaryDirectory() as d:
        path = args.trace
        what = str(path)
        if path is None:
            path = Path(d) / "synthetic.mmtrace"
            synthetic(args.events, path)
            what = f"a synthetic trace of {args.events} events"
        size = os.path.getsize(path)
        res = measure(path, args.repeat, exe)
    rows = int(res.pop("rows")[0])
    best = {k: min(v) for k, v in res.items()}
    print(f"{what}: {rows} events, {size / 1e6:.1f} MB; CPU time (user+sys), best of {args.repeat}:")
    print(f"  read_trace (path -> DataFrame): {best['read_trace']:.3f} s = {rows / best['read_trace'] / 1e6:.2f} M events/s")
    print(f"    native (Rust: decode, columns): {best['native']:.3f} s")
    print(f"    arrow  (wrap the buffers):      {best['arrow']:.3f} s")
    print(f"    pandas (ArrowDtype frame):      {best['pandas']:.3f} s")
    print(f"  mmlab trace-stats (Rust reader, counts only, a process): {best['trace-stats']:.3f} s")
    print("  rounds (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.3f}" for x in v) for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
