"""How an experiment argument (a path, TOML text, a dict or a built-in
experiment's name) is handed to the native module."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Tuple, Union

from . import _native

Experiment = Union[str, "os.PathLike[str]", Mapping[str, Any]]
"""A path to an experiment file, its TOML text, a dict of the same shape,
or the name of a built-in experiment (``mmlab.builtin_experiments()``)."""

# (kind, payload, origin): what the native functions take.
Spec = Tuple[str, str, str]


def _plain(v: Any) -> Any:
    # numpy scalars and the like, as JSON values.
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, Path):
        return str(v)
    raise TypeError(f"{type(v).__name__} value {v!r} in an experiment dict: expected an int, str, bool, list or dict")


def resolve(experiment: Experiment) -> Spec:
    """The native module's form of ``experiment``.

    A ``str`` is a path if such a file exists, else a built-in experiment's
    name if it is one, else TOML text if it looks like TOML (it has a line
    break or ``=``), else a path (whose error then names it).
    """
    if isinstance(experiment, Mapping):
        return ("json", json.dumps(experiment, default=_plain), "<dict>")
    if isinstance(experiment, os.PathLike):
        p = os.fspath(experiment)
        return ("path", p, p)
    if not isinstance(experiment, str):
        raise TypeError(
            f"experiment: expected a path, TOML text, a dict or a built-in experiment's name; got {type(experiment).__name__}"
        )
    if os.path.isfile(experiment):
        return ("path", experiment, experiment)
    if experiment in _native.builtin_names():
        return ("builtin", experiment, f"experiments/{experiment}.toml")
    if "\n" in experiment or "=" in experiment:
        return ("toml", experiment, "<string>")
    return ("path", experiment, experiment)


def portable(spec: Spec) -> Spec:
    """The spec with a file's text instead of its path, for tasks that may
    run on another machine (a profile given by a relative path must still
    be found there, beside the same absolute path)."""
    kind, payload, origin = spec
    if kind != "path":
        return spec
    try:
        text = Path(payload).read_text()
    except OSError:
        return spec  # the worker reports the same error the CLI would
    return ("toml", text, os.path.abspath(payload))
