"""mmlab.replay and mmlab.validate give `mmlab replay` and
`mmlab validate`'s numbers."""

from __future__ import annotations

import io
import json
import re
import tomllib

import pandas as pd
import pytest

import mmlab
from common import REPO

TRACE = REPO / "crates" / "trace" / "tests" / "fixtures" / "dd-gzip.mmtrace"
FOLIOS = REPO / "examples" / "replay-folio-configs.toml"


def test_replay_rows_equal_the_commands(mmlab_cli):
    with pytest.warns(UserWarning, match="outside modelled anonymous memory"):
        df = mmlab.replay(TRACE)
    cli = pd.read_csv(io.StringIO(mmlab_cli("replay", str(TRACE), "--format", "csv", "--quiet")))
    alloc = df[df["mode"] == "alloc"]
    assert len(alloc) == len(cli) > 0
    assert alloc.metric.tolist() == cli.metric.tolist()
    assert alloc["value"].astype("float64").tolist() == pytest.approx(cli["value"].tolist(), rel=1e-12)
    doc = json.loads(mmlab_cli("replay", str(TRACE), "--format", "json", "--quiet"))
    assert df.attrs["document"] == doc
    # Mode (b)'s per-kernel counters are rows too, as the document has them.
    aspace = df[df["mode"] == "aspace"]
    (kernel,) = doc["experiments"][0]["aspace"]["kernels"]
    pgfault = aspace[aspace.metric == "pgfault"]["value"].tolist()
    assert pgfault == [kernel["pgfault"]]


def test_replay_under_an_experiments_kernels():
    with pytest.warns(UserWarning):
        df = mmlab.replay(TRACE, FOLIOS, mode="aspace")
    assert set(df["mode"]) == {"aspace"}
    kernels = [k["kernel"] for k in df.attrs["document"]["experiments"][0]["aspace"]["kernels"]]
    assert len(kernels) > 1 and df.kernel.unique().tolist() == kernels


def test_validate_rows_are_the_commands_table(mmlab_cli):
    with pytest.warns(UserWarning):
        v = mmlab.validate(TRACE)
    text = mmlab_cli("validate", str(TRACE))
    assert v.attrs["text"] == text
    assert set(v["mode"]) == {"alloc", "aspace"}
    for r in v.itertuples():
        rec = "-" if pd.isna(r.recorded) else str(r.recorded)
        assert re.search(rf"^{re.escape(r.counter)}\s+{rec}\s+{r.model}\s", text, re.M), r.counter
    allocs = v[v.counter == "page allocations (mm_page_alloc)"].iloc[0]
    assert allocs.recorded == allocs.model == 311 and allocs.error_pct == 0.0


def test_a_bad_mode_and_a_missing_trace_raise(tmp_path):
    with pytest.raises(mmlab.MmlabError, match="mode"):
        mmlab.validate(TRACE, mode="fast")
    with pytest.raises(mmlab.MmlabError, match="nope.mmtrace"):
        mmlab.replay(tmp_path / "nope.mmtrace")


def test_replay_takes_the_experiment_as_a_path_toml_text_a_dict_or_a_name():
    text = FOLIOS.read_text()
    frames = []
    for experiment in (FOLIOS, str(FOLIOS), text, tomllib.loads(text)):
        with pytest.warns(UserWarning):
            frames.append(mmlab.replay(TRACE, experiment, mode="aspace"))
    for df in frames[1:]:
        pd.testing.assert_frame_equal(df, frames[0])
    # A built-in experiment's machine and kernels (that one, not its companions).
    with pytest.warns(UserWarning):
        df = mmlab.replay(TRACE, "page-churn", mode="aspace")
    doc = mmlab.run_document("page-churn")
    kernels = [k["name"] for k in doc["experiments"][0]["kernels"]]
    assert df.kernel.unique().tolist() == kernels


def test_replay_of_a_bad_toml_text_or_dict_raises_with_mmlabs_message():
    text = FOLIOS.read_text()
    with pytest.raises(mmlab.MmlabError, match=r"<string>.*line"):
        mmlab.replay(TRACE, text.replace("nodes = 1", "nodes = \"one\"", 1), mode="aspace")
    d = tomllib.loads(text)
    d["kernel"][0]["presett"] = d["kernel"][0].pop("preset")
    with pytest.raises(mmlab.MmlabError, match=r"<dict>: kernel\[0\].*presett"):
        mmlab.replay(TRACE, d, mode="aspace")
