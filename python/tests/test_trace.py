"""mmlab.read_trace: one typed row per event, as `mmlab trace-stats`
counts them."""

from __future__ import annotations

import re

import pytest

import mmlab
from common import REPO

TRACE = REPO / "crates" / "trace" / "tests" / "fixtures" / "dd-gzip.mmtrace"


def test_events_per_kind_equal_trace_stats(mmlab_cli):
    ev = mmlab.read_trace(TRACE)
    stats = mmlab_cli("trace-stats", str(TRACE))
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\S+:\S+)\s+(\d+)$", stats, re.M)}
    assert counts, stats
    assert ev.kind.value_counts().to_dict() == counts
    assert ev.ts_ns.is_monotonic_increasing


def test_columns_are_typed_and_null_where_a_kind_has_no_field():
    ev = mmlab.read_trace(TRACE)
    assert str(ev["pfn"].dtype) == "uint64[pyarrow]"
    assert str(ev["order"].dtype) == "uint32[pyarrow]"
    assert str(ev["ret"].dtype) == "int64[pyarrow]"
    allocs = ev[ev.kind == "kmem:mm_page_alloc"]
    assert allocs.pfn.notna().all() and allocs.address.isna().all()
    faults = ev[ev.kind == "exceptions:page_fault_user"]
    assert faults.address.notna().all() and faults.pfn.isna().all()
    mmaps = ev[ev.kind == "syscalls:mmap"]
    assert (mmaps.len > 0).all()


def test_header_and_trailer_are_attrs():
    ev = mmlab.read_trace(TRACE)
    assert ev.attrs["header"]["kernel_release"].startswith("6.18")
    assert ev.attrs["trailer"] is not None


def test_a_file_that_is_not_a_trace_raises_naming_it(tmp_path):
    bad = tmp_path / "bad.mmtrace"
    bad.write_bytes(b"not a trace at all\n")
    with pytest.raises(mmlab.MmlabError, match="bad.mmtrace"):
        mmlab.read_trace(bad)


def test_a_field_no_event_has_is_a_typed_all_null_column():
    ev = mmlab.read_trace(TRACE)
    # dd-gzip was recorded from tracefs: no perf:comm records, so no comm.
    assert "perf:comm" not in set(ev.kind)
    assert str(ev["comm"].dtype) == "string[pyarrow]" and ev["comm"].isna().all()
    assert str(ev["pgoff"].dtype) == "uint64[pyarrow]" and ev["pgoff"].isna().all()
    assert len(ev["comm"]) == len(ev)
