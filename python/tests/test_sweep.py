"""mmlab.sweep: each point is the experiment with its values written in;
rows in point order; a failing point is reported without losing the
others; the Ray backend gives the local backend's frame."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

import mmlab
from common import SMALL

GRID = {"vm.percpu_pagelist_high_fraction": [0, 8], "churn.burst": [20, 50]}


def _written(high: int, burst: int) -> str:
    """SMALL with the point's values written in (every kernel's knob)."""
    text = SMALL.replace("burst = 200", f"burst = {burst}")
    text = text.replace('"vm.percpu_pagelist_high_fraction" = 8', f'"vm.percpu_pagelist_high_fraction" = {high}')
    return text.replace(
        'name = "base"\npreset = "linux-6.6"\n',
        f'name = "base"\npreset = "linux-6.6"\nknobs = {{ "vm.percpu_pagelist_high_fraction" = {high} }}\n',
    )


def test_each_point_equals_a_run_with_its_values_written_in():
    df = mmlab.sweep(SMALL, grid=GRID, seeds=[1, 2], progress=False)
    assert list(df.columns[:2]) == list(GRID)
    assert len(df.groupby(list(GRID) + ["seed"])) == 2 * 2 * 2
    for high in GRID["vm.percpu_pagelist_high_fraction"]:
        for burst in GRID["churn.burst"]:
            ran = mmlab.run(_written(high, burst), seed=[1, 2])
            ran = ran[ran.source == "model"].drop(columns=["source"]).reset_index(drop=True)
            got = df[(df["vm.percpu_pagelist_high_fraction"] == high) & (df["churn.burst"] == burst)]
            got = got.drop(columns=list(GRID)).reset_index(drop=True)
            # run() orders by seed within (workload, kernel) pairs; a sweep point is one seed.
            key = ["seed", "kernel", "metric"]
            pd.testing.assert_frame_equal(
                got.sort_values(key, kind="stable").reset_index(drop=True),
                ran.sort_values(key, kind="stable").reset_index(drop=True),
            )


def test_rows_come_in_point_order_whatever_the_threads():
    one = mmlab.sweep(SMALL, grid=GRID, seeds=[1, 2], jobs=1, progress=False)
    many = mmlab.sweep(SMALL, grid=GRID, seeds=[1, 2], jobs=3, progress=False)
    pd.testing.assert_frame_equal(one, many)
    points = one[list(GRID) + ["seed"]].drop_duplicates().astype("int64").values.tolist()
    assert points == [[h, b, s] for h in [0, 8] for b in [20, 50] for s in [1, 2]]


def test_the_seed_defaults_to_the_experiments():
    df = mmlab.sweep(SMALL, grid={"churn.burst": [20]}, progress=False)
    assert set(df.seed.tolist()) == {3}


def test_a_failing_point_is_reported_and_the_others_kept():
    with pytest.warns(UserWarning, match="1 of 3 points failed"):
        df = mmlab.sweep(SMALL, grid={"vm.percpu_pagelist_high_fraction": [0, 3, 8]}, progress=False)
    assert sorted(set(df["vm.percpu_pagelist_high_fraction"].tolist())) == [0, 8]
    (failure,) = df.attrs["failures"]
    assert failure["vm.percpu_pagelist_high_fraction"] == 3
    assert "accepts 0, or an integer from 8" in failure["error"]


def test_on_error_raise_and_all_points_failing_raise():
    with pytest.raises(mmlab.MmlabError, match="1 of 2 sweep points failed"):
        mmlab.sweep(SMALL, grid={"vm.percpu_pagelist_high_fraction": [0, 3]}, on_error="raise", progress=False)
    with pytest.raises(mmlab.MmlabError, match="2 of 2 sweep points failed"):
        mmlab.sweep(SMALL, grid={"vm.percpu_pagelist_high_fraction": [1, 3]}, progress=False)


def test_a_grid_key_that_names_nothing_raises_before_running():
    with pytest.raises(mmlab.MmlabError, match="neither a kernel knob.*churn"):
        mmlab.sweep(SMALL, grid={"vm.no_such_knob": [1]})
    with pytest.raises(mmlab.MmlabError, match="expected a list"):
        mmlab.sweep(SMALL, grid={"churn.burst": 5})  # type: ignore[dict-item]
    with pytest.raises(mmlab.MmlabError, match="backend"):
        mmlab.sweep(SMALL, grid={"churn.burst": [5]}, backend="slurm")


def test_no_warning_when_every_point_runs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = mmlab.sweep(SMALL, grid={"churn.burst": [20, 30]}, progress=False)
    assert df.attrs["failures"] == []
