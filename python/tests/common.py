"""What the tests and the benchmarks (python/benches/) share: the
repository's paths, the small experiment and the `mmlab` command to
compare with. No pytest here: the benchmarks import it too."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The small experiment every test suite of the repository uses (two
# kernels, `base` and `big-high`, page churn on 4 CPUs): a run takes
# milliseconds.
SMALL_PATH = REPO / "crates" / "cli" / "tests" / "fixtures" / "small.toml"
SMALL = SMALL_PATH.read_text()


def mmlab_bin() -> Path:
    """The `mmlab` command: $MMLAB_BIN, else the release build's."""
    env = os.environ.get("MMLAB_BIN")
    p = Path(env) if env else REPO / "target" / "release" / "mmlab"
    if not p.is_file():
        raise RuntimeError(
            f"the mmlab command is needed to compare with: {p} does not exist "
            "(cargo build --release -p mmlab, or set MMLAB_BIN)"
        )
    return p
