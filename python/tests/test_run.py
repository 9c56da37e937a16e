"""mmlab.run and mmlab.run_document give the `mmlab` command's numbers;
bad input raises MmlabError with mmlab's message."""

from __future__ import annotations

import io
import json
import tomllib

import pandas as pd
import pytest

import mmlab
from common import SMALL


def test_run_rows_equal_the_commands_tidy_csv(small_path, mmlab_cli):
    df = mmlab.run(small_path)
    cli = pd.read_csv(io.StringIO(mmlab_cli("run", str(small_path), "--format", "csv", "--quiet")))
    assert list(df.columns) == list(cli.columns)
    assert len(df) == len(cli) > 0
    for col in ["experiment", "workload", "kernel", "metric", "unit", "source"]:
        assert df[col].fillna("").astype(str).tolist() == cli[col].fillna("").astype(str).tolist(), col
    assert df["seed"].astype("float64").fillna(-1).tolist() == cli["seed"].astype("float64").fillna(-1).tolist()
    assert df["value"].astype("float64").tolist() == pytest.approx(cli["value"].astype("float64").tolist(), rel=1e-12)
    assert set(df.kernel) == {"base", "big-high"}
    assert "zone_lock_pct" in set(df.metric)


def test_run_document_equals_the_commands_json(small_path, mmlab_cli):
    doc = mmlab.run_document(small_path)
    cli = json.loads(mmlab_cli("run", str(small_path), "--format", "json", "--quiet"))
    assert doc == cli


def test_a_path_toml_text_and_a_dict_give_the_same_frame(small_path):
    by_path = mmlab.run(small_path)
    by_text = mmlab.run(SMALL)
    by_dict = mmlab.run(tomllib.loads(SMALL))
    by_str_path = mmlab.run(str(small_path))
    pd.testing.assert_frame_equal(by_path, by_text)
    pd.testing.assert_frame_equal(by_path, by_dict)
    pd.testing.assert_frame_equal(by_path, by_str_path)


def test_columns_are_arrow_backed_and_typed(small_path):
    df = mmlab.run(small_path)
    assert all(isinstance(t, pd.ArrowDtype) for t in df.dtypes)
    assert str(df["value"].dtype) == "double[pyarrow]"
    assert str(df["seed"].dtype) == "uint64[pyarrow]"


def test_seeds_run_every_pair_once_per_seed(small_path, mmlab_cli):
    df = mmlab.run(small_path, seed=[1, 2])
    model = df[df.source == "model"]
    assert sorted(set(model.seed.tolist())) == [1, 2]
    for seed in (1, 2):
        cli = pd.read_csv(io.StringIO(mmlab_cli("run", str(small_path), "--seed", str(seed), "--format", "csv", "--quiet")))
        cli = cli[cli.source == "model"]
        mine = model[model.seed == seed]
        assert mine.metric.tolist() == cli.metric.tolist()
        assert mine["value"].astype("float64").tolist() == pytest.approx(cli["value"].tolist(), rel=1e-12)


def test_same_seed_same_frame(small_path):
    pd.testing.assert_frame_equal(mmlab.run(small_path, seed=7, jobs=1), mmlab.run(small_path, seed=7, jobs=2))


def test_a_builtin_experiment_by_name():
    assert "page-churn" in mmlab.builtin_experiments()


def test_a_toml_error_names_the_line():
    with pytest.raises(mmlab.MmlabError) as e:
        mmlab.run(SMALL.replace('nodes = 1', 'nodes = "one"'))
    msg = str(e.value)
    assert "<string>" in msg and "line 9" in msg, msg


def test_a_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(mmlab.MmlabError, match="nope.toml"):
        mmlab.run(missing)


def test_a_dicts_error_names_the_key():
    d = tomllib.loads(SMALL)
    d["kernel"][1]["presett"] = d["kernel"][1].pop("preset")
    with pytest.raises(mmlab.MmlabError, match=r"kernel\[1\].*presett"):
        mmlab.run(d)


def test_an_invalid_knob_value_says_what_the_kernel_accepts():
    with pytest.raises(mmlab.MmlabError, match="percpu_pagelist_high_fraction.*accepts"):
        mmlab.run(SMALL.replace('"vm.percpu_pagelist_high_fraction" = 8', '"vm.percpu_pagelist_high_fraction" = 3'))


def test_a_wrong_argument_type_is_a_type_error():
    with pytest.raises(TypeError):
        mmlab.run(42)  # type: ignore[arg-type]
