"""mmlab.replay and mmlab.validate give `mmlab replay` and
`mmlab validate`'s numbers."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest

import mmlab
from conftest import REPO

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
