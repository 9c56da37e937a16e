"""Type stubs for the native module (Rust, PyO3): mmlab._native.

Every function takes an experiment as ``(kind, payload, origin)`` (see
``mmlab._source.resolve``) and returns columns as tuples
``(name, type, length, null_count, validity, a, b, extra)`` in Arrow's
memory layout (``mmlab._arrow`` wraps them). Errors raise
``mmlab.MmlabError``.
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

__all__ = [
    "version",
    "builtin_names",
    "run",
    "run_document",
    "sweep_check",
    "sweep_local",
    "sweep_point",
    "read_trace",
    "replay",
    "validate",
]

_Column = Tuple[str, str, int, int, Optional[bytes], bytes, Optional[bytes], Any]
_Value = Union[bool, int, str]
_Point = Tuple[Sequence[Tuple[str, _Value]], Optional[int]]

def version() -> str: ...
def builtin_names() -> List[str]: ...
def run(
    kind: str, payload: str, origin: str, seeds: Sequence[int], jobs: Optional[int], progress: bool
) -> List[_Column]: ...
def run_document(
    kind: str, payload: str, origin: str, seeds: Sequence[int], jobs: Optional[int]
) -> str: ...
def sweep_check(
    kind: str, payload: str, origin: str, keys: Sequence[str], points: Sequence[_Point]
) -> List[Tuple[int, str]]: ...
def sweep_local(
    kind: str,
    payload: str,
    origin: str,
    points: Sequence[_Point],
    jobs: Optional[int],
    progress: Callable[[int], Any],
) -> Tuple[List[_Column], List[Tuple[int, str]]]: ...
def sweep_point(
    kind: str, payload: str, origin: str, index: int, p: _Point
) -> List[_Column]: ...
def read_trace(path: str) -> Tuple[List[_Column], str, Optional[str]]: ...
def replay(
    trace: str,
    experiment: Optional[Tuple[str, str, str]],
    seed: Optional[int],
    warm: bool,
    mode: str,
) -> Tuple[List[_Column], str]: ...
def validate(
    trace: str, seed: Optional[int], warm: bool, mode: str
) -> Tuple[List[Tuple[str, str, Optional[int], int]], str, List[str]]: ...
