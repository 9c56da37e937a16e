"""mmlab: a laboratory for Linux memory-management policies, as a Python
library.

The same deterministic model as the ``mmlab`` command, called directly
(no subprocess): every function returns a pandas DataFrame whose columns
are Arrow-backed, with the same numbers as the command's results document.

>>> import mmlab
>>> df = mmlab.run("page-churn")                      # a built-in experiment
>>> df[df.metric == "zone_lock_pct"][["workload", "kernel", "value"]]
>>> df = mmlab.sweep("my.toml", grid={"vm.percpu_pagelist_high_fraction": [0, 8, 64]},
...                  seeds=range(5))                    # 15 runs on this machine's cores
>>> events = mmlab.read_trace("build.mmtrace")         # one row per traced event

Errors in the input raise :class:`MmlabError` with mmlab's message (file,
line or key, and what was expected).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, List, Literal, Optional, Sequence, Union, cast

import pandas as pd
import pyarrow as pa

from . import _arrow, _native
from ._errors import MmlabError
from ._source import Experiment, resolve
from ._sweep import sweep

__version__: str = _native.version()

ReplayMode = Literal["both", "alloc", "aspace"]
"""Which of a trace's streams a replay runs: ``"alloc"`` the page
allocator's (mode a), ``"aspace"`` the address space's through the fault
path (mode b), ``"both"`` whichever the trace has events for."""

PathLike = Union[str, "os.PathLike[str]"]
"""A file's path."""

__all__ = [
    "MmlabError",
    "Experiment",
    "PathLike",
    "ReplayMode",
    "builtin_experiments",
    "read_trace",
    "replay",
    "run",
    "run_document",
    "sweep",
    "validate",
    "__version__",
]


def _seeds(seed: Union[None, int, Sequence[int]]) -> List[int]:
    if seed is None:
        return []
    if isinstance(seed, int):
        return [seed]
    return [int(s) for s in seed]


def builtin_experiments() -> List[str]:
    """The names of the built-in experiments (``mmlab reproduce NAME``)."""
    return list(_native.builtin_names())


def run(
    experiment: Experiment,
    seed: Union[None, int, Sequence[int]] = None,
    jobs: Optional[int] = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Runs an experiment and returns its results as tidy rows.

    ``experiment`` is a path to an experiment file, its TOML text, a dict of
    the same shape, or a built-in experiment's name (a built-in name also
    runs its companions, as ``mmlab reproduce NAME`` does). ``seed`` is one
    seed or a list (every (kernel, workload) runs once per seed; default:
    the experiment's own); ``jobs`` simulations run at once (default: the
    machine's cores).

    One row per metric or counter of every run, then one per published
    figure, with the columns of ``mmlab run --format csv``: ``experiment,
    workload, kernel, seed, metric, value, unit, source`` (``source`` is
    ``model`` or ``published``; a published figure has no workload and a
    null seed). ``value`` is a float (integers are exact below 2**53).

    >>> df = mmlab.run({"name": "x", "profile": "haswell-ep",
    ...     "machine": {"name": "m", "nodes": 1, "cpus_per_node": 2, "memory_per_node": "256MiB"},
    ...     "kernel": [{"name": "6.6", "preset": "linux-6.6"}],
    ...     "workload": [{"name": "churn", "type": "page-churn", "params": {"iterations": 5}}]})
    >>> df.pivot_table(index="metric", columns="kernel", values="value")
    """
    cols = _native.run(*resolve(experiment), _seeds(seed), jobs, progress)
    return _arrow.frame(_arrow.table(cols))


def run_document(
    experiment: Experiment,
    seed: Union[None, int, Sequence[int]] = None,
    jobs: Optional[int] = None,
) -> Dict[str, Any]:
    """Runs an experiment and returns its whole results document (the
    ``mmlab-results`` schema of docs/results-schema.md: the machine, the
    kernels' knobs, every run's metrics, counters and PCP time series) as a
    dict, as ``mmlab run --format json`` prints it."""
    text = _native.run_document(*resolve(experiment), _seeds(seed), jobs)
    return cast(Dict[str, Any], json.loads(text))


def read_trace(path: PathLike) -> pd.DataFrame:
    """Reads an mmlab trace (``mmlab record``, ``mmlab import``) into a
    DataFrame with one row per event, in the trace's order.

    Columns: ``ts_ns, cpu, pid, tid, kind`` (the tracepoint's name, such
    as ``kmem:mm_page_alloc``), then one column per tracepoint field name
    (``pfn, order, migratetype, gfp_flags, percpu_refill, address, ip,
    error_code, addr, len, prot, flags, fd, off, brk, old_len, new_len,
    new_addr, start, len_in, behavior, ret, parent, child, target_pid,
    filename, vmas``), null where an event's kind has no such field.
    ``target_pid`` is the ``pid`` field of an exec, exit or exec-layout
    event; ``vmas`` lists an exec layout's mappings. Every column is
    Arrow-backed and typed (``uint64[pyarrow]``, ``int32[pyarrow]``...).

    ``DataFrame.attrs`` holds the trace's ``header`` and ``trailer`` (the
    machine, knobs and counters before and after the recording).

    The columns are built in Rust in Arrow's layout (no Python object per
    event): a million events load in about 0.2 s of CPU time
    (``python/benches/read_trace_speed.py``).

    >>> ev = mmlab.read_trace("build.mmtrace")
    >>> ev.kind.value_counts()
    >>> ev[ev.kind == "exceptions:page_fault_user"].address
    """
    cols, header, trailer = _native.read_trace(os.fspath(path))
    df = _arrow.frame(_arrow.table(cols))
    df.attrs["header"] = json.loads(header)
    df.attrs["trailer"] = None if trailer is None else json.loads(trailer)
    return df


def _unit(metric: str) -> str:
    return "ns" if metric.endswith("_ns") else "%" if metric.endswith("_pct") else ""


def _aspace_rows(doc: Dict[str, Any], seed: int) -> List[Dict[str, Any]]:
    """The address-space replay's per-kernel counters (the document's
    ``aspace.kernels``) as tidy rows; a per-size object becomes one row per
    size (``anon_fault_alloc_64kB``)."""
    rows: List[Dict[str, Any]] = []
    for e in doc["experiments"]:
        aspace = e.get("aspace") or {}
        workload = e["workloads"][0]["name"] if e.get("workloads") else ""
        for k in aspace.get("kernels", []):
            for key, v in k.items():
                items = v.items() if isinstance(v, dict) else [("", v)]
                for size, x in items:
                    if isinstance(x, bool) or not isinstance(x, (int, float)):
                        continue
                    metric = f"{key}_{size}" if size else key
                    rows.append(
                        {"mode": "aspace", "experiment": e["name"], "workload": workload, "kernel": k["kernel"],
                         "seed": seed, "metric": metric, "value": float(x), "unit": _unit(key)}
                    )
    return rows


def _mode(mode: str) -> str:
    if mode not in ("both", "alloc", "aspace"):
        raise MmlabError(f"mode={mode!r}: expected 'both', 'alloc' (replay mode a) or 'aspace' (mode b)")
    return mode


def replay(
    trace: PathLike,
    experiment: Optional[Experiment] = None,
    mode: ReplayMode = "both",
    seed: Optional[int] = None,
    warm_pcp: bool = False,
) -> pd.DataFrame:
    """Replays a recorded trace on the model, as ``mmlab replay`` does.

    ``experiment`` gives the machine, profile and kernels the replay uses
    (default: the recorded machine and configuration), as :func:`run`
    takes it: a path to an experiment file, its TOML text, a dict of the
    same shape or a built-in experiment's name (that one experiment, not
    its companions). Its ``[[workload]]`` may be left out: the trace
    stands for it.
    ``mode``: ``"alloc"`` replays the page-allocator stream (mode a),
    ``"aspace"`` the address-space stream through the fault path (mode b),
    ``"both"`` (default) whichever the trace has events for.
    ``warm_pcp``: start with the PCP lists as recorded (default: empty, as
    ``mmlab replay`` does; ``validate`` starts them warm, as ``mmlab
    validate`` does).

    Tidy rows: ``mode, experiment, workload, kernel, seed, metric, value,
    unit``; mode (a) rows are each kernel's metrics and counters (as
    ``mmlab replay --format csv``), mode (b) rows each kernel's fault and
    folio counters. ``DataFrame.attrs["document"]`` holds the whole results
    document (the recorded counts included); its warnings (what the
    recorded configuration hides) are also issued as Python warnings.

    >>> df = mmlab.replay("build.mmtrace", "examples/replay-folio-configs.toml", mode="aspace")
    >>> df[df.metric == "pgfault"][["kernel", "value"]]
    >>> mmlab.replay("build.mmtrace", {"name": "two", "profile": "host-epyc-zen3",
    ...     "machine": {"name": "m", "nodes": 1, "cpus_per_node": 2, "memory_per_node": "1GiB"},
    ...     "kernel": [{"name": "6.6", "preset": "linux-6.6"}, {"name": "6.18", "preset": "linux-6.18"}]})
    """
    spec = None if experiment is None else resolve(experiment)
    cols, text = _native.replay(os.fspath(trace), spec, seed, warm_pcp, _mode(mode))
    doc = json.loads(text)
    alloc = _arrow.table(cols)
    alloc = alloc.drop_columns(["source"]).add_column(0, "mode", pa.array(["alloc"] * alloc.num_rows, pa.string()))
    run_seed = seed if seed is not None else (doc["experiments"][0].get("seeds") or [1])[0]
    rows = _aspace_rows(doc, run_seed)
    if rows:
        aspace = pa.Table.from_pylist(rows, schema=alloc.schema)
        alloc = pa.concat_tables([alloc, aspace])
    for e in doc["experiments"]:
        for w in e.get("warnings", []):
            warnings.warn(f"mmlab.replay: {w}", stacklevel=2)
    df = _arrow.frame(alloc)
    df.attrs["document"] = doc
    return df


def validate(
    trace: PathLike,
    mode: ReplayMode = "both",
    seed: Optional[int] = None,
    warm_pcp: bool = True,
) -> pd.DataFrame:
    """Replays a trace under the recorded configuration and sets the
    recorded counters beside the model's, as ``mmlab validate`` does.

    One row per counter: ``mode`` (``alloc``: zone-locked allocations, PCP
    drains, allocations and frees; ``aspace``: page faults, THP and mTHP
    fault allocations), ``counter`` (the name ``mmlab validate`` prints),
    ``recorded`` (null where the recording has no such count), ``model``,
    ``error_pct`` (100 * (model - recorded) / recorded; null where it has no
    meaning). The command's explanations (what was replayed approximately,
    the whole machine's counts) are in ``DataFrame.attrs["text"]``; its
    warnings are issued as Python warnings.

    >>> v = mmlab.validate("build.mmtrace")
    >>> v[v.error_pct.abs() > 5]
    """
    rows, text, warns = _native.validate(os.fspath(trace), seed, warm_pcp, _mode(mode))
    for w in warns:
        warnings.warn(f"mmlab.validate: {w}", stacklevel=2)

    def err(rec: Optional[int], model: int) -> Optional[float]:
        if rec is None:
            return None
        if rec == 0:
            return 0.0 if model == 0 else None
        return 100.0 * (model - rec) / rec

    t = pa.table(
        {
            "mode": pa.array([r[0] for r in rows], pa.string()),
            "counter": pa.array([r[1] for r in rows], pa.string()),
            "recorded": pa.array([r[2] for r in rows], pa.uint64()),
            "model": pa.array([r[3] for r in rows], pa.uint64()),
            "error_pct": pa.array([err(r[2], r[3]) for r in rows], pa.float64()),
        }
    )
    df = _arrow.frame(t)
    df.attrs["text"] = text
    return df


sweep.__doc__ = """Runs an experiment at every point of a grid of knob and parameter
values and seeds, and returns all their results as one DataFrame.

``grid`` maps a kernel knob's name (``"vm.percpu_pagelist_high_fraction"``,
set on every kernel of the experiment; ``mmlab list`` shows the knobs) or
``"WORKLOAD.PARAM"`` (a parameter of the experiment's workload named
WORKLOAD) to the values to try. The points are the cartesian product of
the grid's values (in the order given, the last key varying fastest) and
``seeds`` (default: the experiment's own seed); each point is one
deterministic run of the whole experiment, exactly as if its values were
written in the file.

``backend="local"`` runs the points side by side on ``jobs`` threads
(default: the machine's cores); ``backend="ray"`` submits each point as a
Ray task to the cluster ``ray.init()`` connected to (it calls
``ray.init()`` if nothing is connected: a local cluster). Both give the
same DataFrame: one column per grid key, then ``experiment, workload,
kernel, seed, metric, value, unit`` (model rows only), rows in point
order. On a multi-machine Ray cluster every node needs this mmlab
installed, and a profile file named by a relative path must exist at the
same place on every node.

A point that fails (a value the knob does not accept, a crashed worker)
does not stop the others: with ``on_error="report"`` (default) the
DataFrame holds the points that ran, ``DataFrame.attrs["failures"]`` lists
the others with their errors, and a warning says how many; if every point
fails, or with ``on_error="raise"``, :class:`MmlabError` is raised. A grid
key that is neither a knob nor a workload parameter raises before anything
runs. ``progress`` shows a progress line on stderr once the sweep has run
for a second.

>>> df = mmlab.sweep("experiments/page-churn.toml",
...                  grid={"vm.percpu_pagelist_high_fraction": [0, 8, 32, 128],
...                        "small-high.iterations": [200, 400]},
...                  seeds=[1, 2, 3])
>>> df[df.metric == "zone_lock_pct"].groupby("vm.percpu_pagelist_high_fraction").value.mean()
"""
