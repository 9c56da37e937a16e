#!/usr/bin/env python3
"""The Python package's speed against the `mmlab` command, side by side.

    python python/benches/sweep_speed.py [--points 1000] [--mmlab target/release/mmlab]
    python python/benches/sweep_speed.py --ray-workers 1    # then 2: one process per cluster size

Default mode prints, for the same N points of a small experiment (each
point one seed of a two-kernel page-churn run: the tests' small
experiment, crates/cli/tests/fixtures/small.toml):

- ``cli``: the ``mmlab run FILE --seed S --format json --quiet`` command once
  per point, as a shell or Slurm script would drive it, two at a time (the
  host's cores), wall time per point;
- ``sweep``: ``mmlab.sweep(FILE, seeds=range(N))`` on the local backend
  (jobs = the host's cores), wall time per point;
- ``native``: the same points through ``mmlab._native.sweep_local`` with one
  thread (the Rust runs and the Rust-built columns, no DataFrame), against
  ``sweep(jobs=1)``: what the Python side adds per point.

Every figure is the best of ``--repeat`` rounds, the contenders interleaved
in each round (the host is shared). With ``--ray-workers W`` it runs the
sweep on a local Ray cluster of W CPUs instead and prints points/s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List

import mmlab
from mmlab import _native
from mmlab._source import resolve
from mmlab._sweep import points

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import SMALL_PATH, mmlab_bin  # noqa: E402  (the tests' small experiment)


def best(f: Callable[[], float], repeat: int) -> float:
    return min(f() for _ in range(repeat))


def timed(f: Callable[[], object]) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def cli_points(exe: str, path: str, n: int, jobs: int) -> None:
    def one(seed: int) -> None:
        subprocess.run([exe, "run", path, "--seed", str(seed), "--format", "json", "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)

    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(one, range(1, n + 1)))


def ray_sweep(path: str, n: int, workers: int, repeat: int) -> None:
    import ray

    seeds = range(1, n + 1)
    # Ray's session files go to a private directory removed afterwards, not /tmp/ray.
    with tempfile.TemporaryDirectory() as d:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, _temp_dir=d)
        try:
            mmlab.sweep(path, seeds=range(1, 2 * workers + 1), backend="ray", progress=False)  # warm the workers
            t = best(lambda: timed(lambda: mmlab.sweep(path, seeds=seeds, backend="ray", progress=False)), repeat)
        finally:
            ray.shutdown()
    print(f"ray, {workers} worker CPU(s): {n} points in {t:.2f} s = {n / t:.1f} points/s ({1e3 * t / n:.2f} ms a point)")


def local_sweep(exe: str, path: str, n: int, repeat: int) -> None:
    cores = os.cpu_count() or 1
    seeds = range(1, n + 1)
    spec = resolve(path)
    pts = points({}, list(seeds))
    res: Dict[str, List[float]] = {"cli": [], "sweep": [], "native1": [], "sweep1": []}
    for _ in range(repeat):
        res["cli"].append(timed(lambda: cli_points(exe, path, n, cores)))
        res["sweep"].append(timed(lambda: mmlab.sweep(path, seeds=seeds, progress=False)))
        res["native1"].append(timed(lambda: _native.sweep_local(*spec, pts, 1, lambda done: None)))
        res["sweep1"].append(timed(lambda: mmlab.sweep(path, seeds=seeds, jobs=1, progress=False)))
    b = {k: min(v) for k, v in res.items()}
    ms = {k: 1e3 * v / n for k, v in b.items()}
    print(f"{n} points of a two-kernel page-churn experiment; best of {repeat}, {cores} cores; ms a point:")
    print(f"  cli    (mmlab run --seed S, one process a point, {cores} at a time): {ms['cli']:.3f}")
    print(f"  sweep  (mmlab.sweep, local backend, {cores} threads):             {ms['sweep']:.3f}"
          f"  = {100 * b['sweep'] / b['cli']:.1f} % of the command's time")
    print(f"  native (mmlab._native.sweep_local, 1 thread: Rust only):        {ms['native1']:.3f}")
    print(f"  sweep  (mmlab.sweep, jobs=1):                                   {ms['sweep1']:.3f}"
          f"  = Python adds {100 * (b['sweep1'] - b['native1']) / b['native1']:+.1f} %")
    print("  rounds (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.2f}" for x in v) for k, v in res.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mmlab", default=None, help="the mmlab command (default: target/release/mmlab or $MMLAB_BIN)")
    ap.add_argument("--ray-workers", type=int, default=0)
    args = ap.parse_args()
    if args.ray_workers:
        ray_sweep(str(SMALL_PATH), args.points, args.ray_workers, args.repeat)
    else:
        local_sweep(args.mmlab or str(mmlab_bin()), str(SMALL_PATH), args.points, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
