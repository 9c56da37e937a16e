"""Shared fixtures: a small experiment, the `mmlab` command to compare
with, and the repository's paths."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A small experiment (two kernels, one workload): a run takes milliseconds.
SMALL = """
name = "small"
profile = "haswell-ep"
seed = 3
[machine]
name = "m"
nodes = 1
cpus_per_node = 2
memory_per_node = "256MiB"
[[kernel]]
name = "6.6"
preset = "linux-6.6"
[[kernel]]
name = "6.6-high8"
preset = "linux-6.6"
knobs = { "vm.percpu_pagelist_high_fraction" = 8 }
[[workload]]
name = "churn"
type = "page-churn"
params = { iterations = 5, burst = 50, think_ns = 1000 }
"""


@pytest.fixture
def small_path(tmp_path: Path) -> Path:
    p = tmp_path / "small.toml"
    p.write_text(SMALL)
    return p


def _mmlab_bin() -> Path:
    env = os.environ.get("MMLAB_BIN")
    p = Path(env) if env else REPO / "target" / "release" / "mmlab"
    if not p.is_file():
        raise RuntimeError(
            f"the mmlab command is needed to compare with: {p} does not exist "
            "(cargo build --release -p mmlab, or set MMLAB_BIN)"
        )
    return p


@pytest.fixture(scope="session")
def mmlab_cli():
    """Runs the `mmlab` command; returns its stdout."""
    exe = _mmlab_bin()

    def run(*args: str) -> str:
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise AssertionError(f"mmlab {' '.join(args)} failed: {out.stderr}")
        return out.stdout

    return run
