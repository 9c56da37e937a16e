"""Parameter sweeps: the cartesian product of knob and parameter values
and seeds, each point one deterministic run, on this machine's cores or
as Ray tasks."""

from __future__ import annotations

import itertools
import sys
import time
import warnings
from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import pandas as pd
import pyarrow as pa

from . import _arrow, _native
from ._errors import MmlabError
from ._source import Experiment, Spec, portable, resolve

Value = Union[int, str, bool]
"""A grid value: what the knob or parameter takes in an experiment file."""
Point = Tuple[List[Tuple[str, Value]], Optional[int]]
Backend = Literal["local", "ray"]
OnError = Literal["report", "raise"]


class _Progress:
    """A progress line on stderr, shown once a sweep has run for a second
    (as the ``mmlab`` command does): in place on a terminal or notebook,
    every tenth otherwise."""

    def __init__(self, total: int, enabled: bool, what: str) -> None:
        self.total, self.enabled, self.what = total, enabled, what
        self.start = time.monotonic()
        self.shown = False
        self.last_tenth = -1
        try:
            self.inline = sys.stderr.isatty() or "ipykernel" in sys.modules
        except (AttributeError, ValueError):
            self.inline = False

    def __call__(self, done: int) -> None:
        elapsed = time.monotonic() - self.start
        if not self.enabled or elapsed < 1.0:
            return
        tenth = 10 * done // max(self.total, 1)
        if not self.inline and tenth == self.last_tenth:
            return
        self.last_tenth = tenth
        self.shown = True
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f", {(self.total - done) / rate:.0f} s left" if rate > 0 and done < self.total else ""
        width = 30
        bar = "=" * (width * done // max(self.total, 1))
        line = f"{self.what}: [{bar:<{width}}] {done}/{self.total} points, {elapsed:.1f} s{eta}"
        if self.inline:
            sys.stderr.write("\r" + line.ljust(100))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def finish(self, failed: int) -> None:
        if self.shown:
            end = "\n" if self.inline else ""
            sys.stderr.write(
                f"{end}{self.what}: {self.total} points in {time.monotonic() - self.start:.1f} s"
                + (f", {failed} failed" if failed else "")
                + "\n"
            )
            sys.stderr.flush()


def _check_values(grid: Mapping[str, Iterable[Value]]) -> Dict[str, List[Value]]:
    out: Dict[str, List[Value]] = {}
    for key, values in grid.items():
        if not isinstance(key, str):
            raise MmlabError(f"grid key {key!r}: expected a knob's kernel name or WORKLOAD.PARAM (a str)")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise MmlabError(f"grid[{key!r}] = {values!r}: expected a list of values")
        vals = [v.item() if hasattr(v, "item") else v for v in values]
        if not vals:
            raise MmlabError(f"grid[{key!r}] is empty: expected at least one value")
        kinds = {bool if isinstance(v, bool) else int if isinstance(v, int) else str if isinstance(v, str) else None for v in vals}
        if None in kinds or len(kinds) > 1:
            raise MmlabError(
                f"grid[{key!r}] = {vals!r}: expected values of one kind, all integers, all strings or all booleans"
            )
        out[key] = vals
    return out


def points(grid: Mapping[str, Sequence[Value]], seeds: Optional[Iterable[int]]) -> List[Point]:
    """The sweep's points in their order: the grid's keys in the order
    given, the last varying fastest, then the seeds."""
    keys = list(grid)
    seed_list: List[Optional[int]] = [None] if seeds is None else [int(s) for s in seeds]
    if seeds is not None and not seed_list:
        raise MmlabError("seeds is empty: expected at least one seed, or None for the experiment's own")
    combos = itertools.product(*(grid[k] for k in keys)) if keys else [()]
    return [(list(zip(keys, combo)), seed) for combo in combos for seed in seed_list]


# The columns of the native sweep tables (frames::sweep_table).
_EMPTY = pa.schema(
    [
        ("point", pa.uint32()),
        ("experiment", pa.string()),
        ("workload", pa.string()),
        ("kernel", pa.string()),
        ("seed", pa.uint64()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("unit", pa.string()),
    ]
)


def _frame(spec: Spec, keys: List[str], pts: List[Point], tables: Dict[int, pa.Table]) -> pa.Table:
    """The tables of the points that ran, in point order, with one column
    per grid key in front."""
    order = sorted(tables)
    if order:
        t = pa.concat_tables([tables[i] for i in order])
    else:
        t = _EMPTY.empty_table()
    idx = t.column("point")
    for pos, key in enumerate(keys):
        values = pa.array([p[0][pos][1] for p in pts])
        t = t.add_column(pos, key, values.take(idx))
    return t.drop_columns(["point"])


def _run_local(spec: Spec, todo: List[Tuple[int, Point]], jobs: Optional[int], progress: _Progress) -> Tuple[Dict[int, pa.Table], List[Tuple[int, str]]]:
    cols, failed = _native.sweep_local(*spec, [p for _, p in todo], jobs, progress)
    t = _arrow.table(cols)
    # Back to the sweep's point numbers.
    index = pa.array([i for i, _ in todo], pa.uint32())
    t = t.set_column(0, "point", index.take(t.column("point")))
    return {0: t} if t.num_rows else {}, [(todo[i][0], msg) for i, msg in failed]


def _ray_point(spec: Spec, index: int, point: Point) -> Tuple[str, Any]:
    """One point as a Ray task: ("ok", columns) or ("error", message)."""
    try:
        return ("ok", _native.sweep_point(*spec, index, point))
    except MmlabError as e:
        return ("error", str(e))


def _run_ray(spec: Spec, todo: List[Tuple[int, Point]], progress: _Progress) -> Tuple[Dict[int, pa.Table], List[Tuple[int, str]]]:
    try:
        import ray
    except ImportError as e:
        raise MmlabError(f"backend='ray' needs the ray package (pip install 'mmlab[ray]'): {e}") from None
    if not ray.is_initialized():
        ray.init()
    task = ray.remote(num_cpus=1)(_ray_point)
    spec = portable(spec)
    spec_ref = ray.put(spec)
    refs = {task.remote(spec_ref, i, p): i for i, p in todo}
    tables: Dict[int, pa.Table] = {}
    failed: List[Tuple[int, str]] = []
    pending = list(refs)
    done = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.2)
        for ref in ready:
            i = refs[ref]
            try:
                status, value = ray.get(ref)
            except Exception as e:  # the task's worker died, the node was lost...
                status, value = "error", f"the Ray task failed: {type(e).__name__}: {e}"
            if status == "ok":
                tables[i] = _arrow.table(value)
            else:
                failed.append((i, value))
            done += 1
        progress(done)
    return tables, sorted(failed)


def sweep(
    experiment: Experiment,
    grid: Optional[Mapping[str, Iterable[Value]]] = None,
    seeds: Optional[Iterable[int]] = None,
    backend: Backend = "local",
    jobs: Optional[int] = None,
    progress: bool = True,
    on_error: OnError = "report",
) -> pd.DataFrame:
    """Runs ``experiment`` at every point of ``grid`` × ``seeds``."""
    if backend not in ("local", "ray"):
        raise MmlabError(f"backend={backend!r}: expected 'local' or 'ray'")
    if on_error not in ("report", "raise"):
        raise MmlabError(f"on_error={on_error!r}: expected 'report' or 'raise'")
    values = _check_values(grid or {})
    keys = list(values)
    pts = points(values, seeds)
    spec = resolve(experiment)
    # Every key must name something before anything runs. Ray tasks are
    # costly to submit, so points whose experiment is invalid are found here
    # for Ray; locally they fail in the run with the same message.
    invalid = dict(_native.sweep_check(*spec, keys, pts if backend == "ray" else []))
    todo = [(i, p) for i, p in enumerate(pts) if i not in invalid]
    bar = _Progress(len(pts), progress, f"sweep ({backend})")
    bar(len(invalid))
    if not todo:
        tables: Dict[int, pa.Table] = {}
        failed: List[Tuple[int, str]] = []
    elif backend == "local":
        tables, failed = _run_local(spec, todo, jobs, bar)
    else:
        tables, failed = _run_ray(spec, todo, bar)
    failures = sorted(list(invalid.items()) + failed)
    bar.finish(len(failures))
    report = [
        {**dict(pts[i][0]), "seed": pts[i][1], "error": msg} for i, msg in failures
    ]
    if failures and (on_error == "raise" or len(failures) == len(pts)):
        i, msg = failures[0]
        raise MmlabError(
            f"{len(failures)} of {len(pts)} sweep points failed; the first, {_describe(pts[i])}: {msg}"
        )
    if failures:
        i, msg = failures[0]
        warnings.warn(
            f"mmlab.sweep: {len(failures)} of {len(pts)} points failed (their errors are in "
            f"DataFrame.attrs['failures']); the first, {_describe(pts[i])}: {msg}",
            stacklevel=2,
        )
    df = _arrow.frame(_frame(spec, keys, pts, tables))
    df.attrs["failures"] = report
    return df


def _describe(p: Point) -> str:
    parts = [f"{k}={v!r}" for k, v in p[0]]
    if p[1] is not None:
        parts.append(f"seed={p[1]}")
    return ", ".join(parts) or "the experiment as written"
