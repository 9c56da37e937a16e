"""The Ray backend on a local two-CPU cluster gives the local backend's
frame, failures included."""

from __future__ import annotations

import pandas as pd
import pytest

import mmlab
from common import SMALL

ray = pytest.importorskip("ray", reason="pip install 'mmlab[ray]' for the Ray backend's test")


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    # Ray's session files go to pytest's temporary directory, not /tmp/ray.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    ray.shutdown()


def test_ray_and_local_give_equal_frames(local_cluster):
    grid = {"vm.percpu_pagelist_high_fraction": [0, 3, 8], "churn.burst": [20, 50]}
    with pytest.warns(UserWarning, match="2 of 6 points failed"):
        local = mmlab.sweep(SMALL, grid=grid, seeds=[1], backend="local", progress=False)
    with pytest.warns(UserWarning, match="2 of 6 points failed"):
        remote = mmlab.sweep(SMALL, grid=grid, seeds=[1], backend="ray", progress=False)
    pd.testing.assert_frame_equal(local, remote)
    assert local.attrs["failures"] == remote.attrs["failures"]
    assert len(local) > 0


def test_a_file_experiment_runs_on_ray_workers(local_cluster, small_path):
    local = mmlab.sweep(small_path, grid={"churn.burst": [20, 30]}, backend="local", progress=False)
    remote = mmlab.sweep(small_path, grid={"churn.burst": [20, 30]}, backend="ray", progress=False)
    pd.testing.assert_frame_equal(local, remote)
