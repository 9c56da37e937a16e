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
from typing import Any, Dict, List, Optional, Sequence, Union

import pandas as pd

from . import _arrow, _native
from ._errors import MmlabError
from ._source import Experiment, resolve
from ._sweep import sweep

__version__: str = _native.version()

__all__ = [
    "MmlabError",
    "Experiment",
    "builtin_experiments",
    "read_trace",
    "run",
    "run_document",
    "sweep",
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
    return json.loads(text)


def read_trace(path: Union[str, "os.PathLike[str]"]) -> pd.DataFrame:
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

    >>> ev = mmlab.read_trace("build.mmtrace")
    >>> ev.kind.value_counts()
    >>> ev[ev.kind == "exceptions:page_fault_user"].address
    """
    import os

    cols, header, trailer = _native.read_trace(os.fspath(path))
    df = _arrow.frame(_arrow.table(cols))
    df.attrs["header"] = json.loads(header)
    df.attrs["trailer"] = None if trailer is None else json.loads(trailer)
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
