"""Shared fixtures: the small experiment as a file and the `mmlab`
command to compare with (see common.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable

import pytest

from common import SMALL, mmlab_bin


@pytest.fixture
def small_path(tmp_path: Path) -> Path:
    p = tmp_path / "small.toml"
    p.write_text(SMALL)
    return p


@pytest.fixture(scope="session")
def mmlab_cli() -> Callable[..., str]:
    """Runs the `mmlab` command; returns its stdout."""
    exe = mmlab_bin()

    def run(*args: str) -> str:
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise AssertionError(f"mmlab {' '.join(args)} failed: {out.stderr}")
        return out.stdout

    return run
