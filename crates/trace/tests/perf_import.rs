//! perf.data import, on fixtures recorded on this project's host with
//! perf 6.1 (kernel 6.18):
//!
//! - `kmem.perf.data`: `perf record -e kmem:mm_page_alloc -e kmem:mm_page_free
//!   -- sh -c 'echo x >/dev/null'`; `perf script` shows 38 mm_page_alloc and
//!   2 mm_page_free, the first at pfn 0x13bca8, order 0.
//! - `mixed.perf.data`: `perf record -e kmem:mm_page_alloc -e sched:sched_switch
//!   -e syscalls:sys_enter_mmap -e syscalls:sys_exit_mmap
//!   -e exceptions:page_fault_user -- /bin/true`; 41 allocations, 47 user
//!   faults, 8 mmap entries and exits, 1 sched_switch.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use trace::perf::{import, import_from, import_from_with, ImportOptions, PerfImportError};
use trace::{EventKind, TraceReader};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn import_bytes(bytes: &[u8]) -> Result<(trace::perf::ImportSummary, Vec<u8>), PerfImportError> {
    import_from(
        Cursor::new(bytes),
        Path::new("mem.perf.data"),
        "mem",
        Vec::new(),
        Path::new("mem.mmtrace"),
    )
}

#[test]
fn kmem_fixture_imports_every_page_event() {
    let bytes = std::fs::read(fixture("kmem.perf.data")).expect("fixture present");
    let (s, out) = import_bytes(&bytes).expect("imports");
    assert_eq!(s.nr_events_by_kind.get("kmem:mm_page_alloc"), Some(&38));
    assert_eq!(s.nr_events_by_kind.get("kmem:mm_page_free"), Some(&2));
    assert!(s.ignored_events.is_empty(), "{:?}", s.ignored_events);
    assert!(s
        .missing_event_kinds
        .iter()
        .any(|k| k == "exceptions:page_fault_user"));
    assert!(!s
        .missing_event_kinds
        .iter()
        .any(|k| k == "kmem:mm_page_alloc"));
    let report = s.report().join("\n");
    assert!(
        report.contains("page faults cannot be replayed"),
        "{report}"
    );

    let events: Vec<_> = TraceReader::new(&out[..])
        .expect("valid trace")
        .collect::<Result<_, _>>()
        .expect("whole");
    // 40 allocator events, and perf's own records of the task: its exec
    // (PERF_RECORD_COMM, also as the exec the sched tracepoint would have
    // given), its fork and exit.
    let kmem: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::PageAlloc { .. } | EventKind::PageFree { .. }
            )
        })
        .collect();
    assert_eq!(kmem.len(), 40);
    assert!(events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Comm { exec: true, .. })));
    assert!(events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Exec { .. })));
    match &kmem[0].kind {
        EventKind::PageAlloc { pfn, order, .. } => assert_eq!((*pfn, *order), (0x13bca8, 0)),
        other => panic!("first event is {other:?}"),
    }
    assert!(
        events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
        "events out of time order"
    );
    assert!(events.iter().all(|e| e.pid > 0 && e.tid > 0));
}

#[test]
fn mixed_fixture_pairs_syscalls_and_counts_ignored_kinds() {
    let bytes = std::fs::read(fixture("mixed.perf.data")).expect("fixture present");
    let (s, out) = import_bytes(&bytes).expect("imports");
    assert_eq!(s.nr_events_by_kind.get("kmem:mm_page_alloc"), Some(&41));
    assert_eq!(
        s.nr_events_by_kind.get("exceptions:page_fault_user"),
        Some(&47)
    );
    assert_eq!(s.nr_events_by_kind.get("syscalls:mmap"), Some(&8));
    assert_eq!(s.nr_unpaired_syscalls, 0);
    assert_eq!(s.ignored_events.get("sched:sched_switch"), Some(&1));
    assert!(
        s.report()
            .iter()
            .any(|l| l == "1 events of kind sched:sched_switch ignored"),
        "{:?}",
        s.report()
    );
    assert!(s
        .reduced_capability
        .iter()
        .any(|l| l.starts_with("kmem:mm_page_free was not recorded (required)")));
    let mut reader = TraceReader::new(&out[..]).expect("valid trace");
    let mmaps: Vec<_> = reader
        .by_ref()
        .filter_map(|e| match e.expect("whole").kind {
            EventKind::Mmap { len, ret, .. } => Some((len, ret)),
            _ => None,
        })
        .collect();
    assert_eq!(mmaps.len(), 8);
    assert!(mmaps
        .iter()
        .all(|&(len, ret)| len > 0 && ret.is_some_and(|r| r != 0)));
    let trailer = reader.trailer().expect("trailer");
    assert_eq!(trailer.ignored_events.get("sched:sched_switch"), Some(&1));
}

#[test]
fn import_writes_a_private_file_and_is_deterministic() {
    let dir = host::scratch::ScratchDir::new("perf-import").expect("scratch dir");
    let (a, b) = (dir.join("a.mmtrace"), dir.join("b.mmtrace"));
    import(&fixture("mixed.perf.data"), &a).expect("imports");
    import(&fixture("mixed.perf.data"), &b).expect("imports");
    let (ba, bb) = (std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
    assert_eq!(ba, bb, "two imports of one file differ");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&a).expect("a").permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn foreign_and_truncated_files_are_clear_errors() {
    let err = import_bytes(b"this is not a perf.data file at all, just text").err();
    assert!(
        matches!(err, Some(PerfImportError::NotPerfData { .. })),
        "{err:?}"
    );

    let bytes = std::fs::read(fixture("kmem.perf.data")).expect("fixture present");
    // Cut inside the data section (which starts after the attributes).
    let err = import_bytes(&bytes[..2000]).err();
    assert!(err.is_some(), "a cut file imported without error");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("mem.perf.data"), "{msg}");

    let never = host::scratch::ScratchFile::new("perf-import", "never-written.mmtrace")
        .expect("scratch dir");
    let missing = import(Path::new("/nonexistent/x.perf.data"), &never);
    assert!(matches!(missing, Err(PerfImportError::Open { .. })));
}

/// The offset of the `n`th record of the data section of a perf.data.
fn record_at(bytes: &[u8], n: usize) -> usize {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let mut at = u64_at(40) as usize;
    for _ in 0..n {
        at += u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
    }
    at
}

#[test]
fn a_damaged_record_is_an_error_naming_it() {
    let good = std::fs::read(fixture("readbuf.perf.data")).expect("fixture present");
    let at = record_at(&good, 300);
    let err = |bytes: &[u8]| {
        import_bytes(bytes)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    // A size of 0 (the parser would read that record forever), one
    // smaller than the header, one that runs past the section's end.
    for (size, what) in [
        (0u16, "size 0 is smaller than its 8-byte header"),
        (4, "size 4 is smaller"),
        (u16::MAX, "run past the end of the data section"),
    ] {
        let mut bad = good.clone();
        bad[at + 6..at + 8].copy_from_slice(&size.to_le_bytes());
        let msg = err(&bad);
        assert!(
            msg.contains(&format!("record 300 at byte {at}")) && msg.contains(what),
            "{msg}"
        );
    }
    // A type that no perf record has: the data is damaged or misaligned.
    let mut bad = good.clone();
    bad[at..at + 4].copy_from_slice(&0x4000_u32.to_le_bytes());
    assert!(err(&bad).contains("type 16384 is not a perf record type"));
    // A finished file whose data size alone reads 0: the records are read
    // to the end of the file, and the feature sections after them are no
    // records (a killed perf leaves none: see `killed.perf.data` below).
    let mut bad = good.clone();
    bad[48..56].copy_from_slice(&0u64.to_le_bytes());
    assert!(
        err(&bad).contains("is not a perf record type") || err(&bad).contains("is cut"),
        "{}",
        err(&bad)
    );
    // Nothing after the attributes.
    let data_at = u64::from_le_bytes(good[40..48].try_into().expect("8 bytes")) as usize;
    assert!(
        err(&bad[..data_at]).contains("no whole record follows it"),
        "{}",
        err(&bad[..data_at])
    );
    // The section's size cut inside the last record's header.
    let mut bad = good.clone();
    let size = u64::from_le_bytes(good[48..56].try_into().expect("8 bytes"));
    bad[48..56].copy_from_slice(&(size - 3).to_le_bytes());
    assert!(
        err(&bad).contains("bytes into its 8-byte header"),
        "{}",
        err(&bad)
    );
}

/// `killed.perf.data`: `perf record -e exceptions:page_fault_user
/// -e syscalls:sys_enter_mmap -e syscalls:sys_exit_mmap
/// -e syscalls:sys_enter_munmap -- sh -c 'for i in 1 2 3; do /bin/true;
/// done; sleep 4'`, perf killed with SIGKILL after 2 s (perf 6.1, kernel
/// 6.18.44): the header's data size is 0 and the feature sections (formats,
/// event names, command line) were never written; `perf report` refuses it
/// ("incompatible file format"). `killed-events/` is a copy of the four
/// tracepoints' `format` files of the host it was recorded on.
fn import_killed(bytes: &[u8]) -> Result<(trace::perf::ImportSummary, Vec<u8>), PerfImportError> {
    let opts = ImportOptions {
        tracefs_events: Some(fixture("killed-events")),
        ..ImportOptions::default()
    };
    import_from_with(
        Cursor::new(bytes),
        Path::new("killed.perf.data"),
        "killed",
        Vec::new(),
        Path::new("killed.mmtrace"),
        &opts,
    )
}

#[test]
fn a_killed_perf_record_is_read_to_the_end_of_the_file() {
    let bytes = std::fs::read(fixture("killed.perf.data")).expect("fixture present");
    assert_eq!(&bytes[48..56], &[0u8; 8], "the fixture's data size is 0");
    let (s, out) = import_killed(&bytes).expect("imports");
    let report = s.report().join("\n");
    assert!(report.contains("never finished"), "{report}");
    assert!(report.contains("killed-events"), "{report}");
    assert!(!report.contains("is cut"), "{report}");
    let events: Vec<_> = TraceReader::new(&out[..])
        .expect("valid trace")
        .collect::<Result<_, _>>()
        .expect("whole");
    let faults = |evs: &[trace::Event]| {
        evs.iter()
            .filter(|e| matches!(e.kind, EventKind::PageFaultUser { .. }))
            .count()
    };
    let nr_faults = faults(&events);
    // What perf wrote before the kill: the first exec's faults.
    assert_eq!(nr_faults, 66);

    // Cut inside a record, as a kill during perf's write leaves it: that
    // record is dropped with a warning naming its offset.
    let mut records = Vec::new();
    let mut at = u64::from_le_bytes(bytes[40..48].try_into().expect("8 bytes")) as usize;
    while at < bytes.len() {
        let len = u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        records.push((at, len));
        at += len;
    }
    let (last, len) = *records
        .iter()
        .rev()
        .find(|(_, l)| *l > 8)
        .expect("a record with a body");
    let (s, out) = import_killed(&bytes[..last + 5]).expect("imports");
    let report = s.report().join("\n");
    assert!(
        report.contains(&format!(
            "the last record, at byte {last}, is cut inside its 8-byte header (5 bytes)"
        )),
        "{report}"
    );
    let (s2, _) = import_killed(&bytes[..last + len - 1]).expect("imports");
    let report = s2.report().join("\n");
    assert!(
        report.contains(&format!(
            "the last record, at byte {last}, is cut: its header says {len} bytes, the file ends {} bytes into it",
            len - 1
        )),
        "{report}"
    );
    let cut: Vec<_> = TraceReader::new(&out[..])
        .expect("valid trace")
        .collect::<Result<_, _>>()
        .expect("whole");
    assert!(faults(&cut) + 1 >= nr_faults && faults(&cut) <= nr_faults);
}
