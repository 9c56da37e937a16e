//! A plain perf.data replays completely: the fixture `mini-aspace.perf.data`
//! (`perf record -q -d` with every address-space tracepoint, entries and
//! exits, the sched tracepoints and `exceptions:page_fault_user`, of the
//! program `fixtures/mini.c`: an mmap'd `PROT_NONE` reservation opened by
//! mprotect, a partial munmap, a hole refilled by mmap, `MADV_DONTNEED`,
//! sbrk, an mremap that moves, a thread with its own malloc arena, a fork;
//! perf 6.1, kernel 6.18 on this project's 2-CPU host) is imported with
//! and without some of its events (`ImportOptions::ignore_events`, as if
//! they had not been recorded), and the replays are compared.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use host::scratch::ScratchFile;
use mm::cost::CostTable;
use mm::knobs::Preset;
use mm::page_alloc::{MemoryLayout, NodeLayout};
use trace::aspace::{replay_aspace, AspaceModel};
use trace::perf::{import_with, ImportOptions, ImportSummary, PerfImportError};
use trace::{EventKind, TraceReader};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `name` in a private scratch directory, removed when dropped (also when
/// the test fails).
fn tmp(name: &str) -> ScratchFile {
    ScratchFile::new("perf-replay", name).expect("scratch dir")
}

const SYSCALLS: [&str; 6] = ["mmap", "munmap", "brk", "mremap", "mprotect", "madvise"];

fn opts(ignore: &[&str]) -> ImportOptions {
    ImportOptions {
        ignore_events: ignore.iter().map(|s| s.to_string()).collect(),
        ..ImportOptions::default()
    }
}

fn import(name: &str, o: &ImportOptions) -> (ImportSummary, ScratchFile) {
    let out = tmp(name);
    let s = import_with(&fixture("mini-aspace.perf.data"), &out, o).expect("imports");
    (s, out)
}

fn replay(path: &Path) -> AspaceModel {
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: (1 << 30) / 4096,
        }],
        dma32_pages: 0,
    };
    let r = replay_aspace(
        path,
        &layout,
        &CostTable::uniform(1),
        &[Preset::Linux6_18.config()],
    )
    .expect("replays");
    r.models.into_iter().next().expect("one kernel")
}

fn events(path: &Path) -> Vec<trace::Event> {
    TraceReader::open(path)
        .expect("trace")
        .collect::<Result<_, _>>()
        .expect("whole")
}

fn note(m: &AspaceModel, prefix: &str) -> u64 {
    m.notes
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn entries_without_exits_replay_like_the_whole_recording() {
    let (_, full) = import("full", &opts(&[]));
    let exits: Vec<String> = SYSCALLS
        .iter()
        .map(|c| format!("syscalls:sys_exit_{c}"))
        .collect();
    let names: Vec<&str> = exits.iter().map(String::as_str).collect();
    let (sum, entries) = import("entries", &opts(&names));
    assert_eq!(sum.entry_only_syscalls, SYSCALLS.to_vec());
    // Every mmap but the one with MAP_FIXED (the dynamic linker's) is
    // placed exactly by the PERF_RECORD_MMAP2 after it, or by the model
    // inside the merged VMA it reports (the hole refilled by mmap).
    let ev = events(&entries);
    let rets = |f: &dyn Fn(&EventKind) -> Option<Option<i64>>| -> Vec<Option<i64>> {
        ev.iter().filter_map(|e| f(&e.kind)).collect()
    };
    let munmaps = rets(&|k| match k {
        EventKind::Munmap { ret, .. } => Some(*ret),
        _ => None,
    });
    assert!(!munmaps.is_empty() && munmaps.iter().all(Option::is_none));
    let a = replay(&full);
    let b = replay(&entries);
    // The whole recording: everything modelled, nothing refused.
    assert_eq!(a.faults_sigsegv, 0, "{:?}", a.notes);
    assert_eq!(b.faults_sigsegv, 0, "{:?}", b.notes);
    assert_eq!(a.predicted_pgfault(), b.predicted_pgfault());
    // Only the pages mremap moved (where, only its exit says) pass
    // through instead of being taken; the moved range is 64 KiB.
    assert_eq!(note(&b, "mremap without its exit moved by the model"), 1);
    let moved = b.faults_passthrough - a.faults_passthrough;
    assert!(moved <= 16, "{moved} more faults passed through");
    assert_eq!(a.faults_taken - b.faults_taken, moved);
    assert!(
        note(
            &b,
            "mmap without its exit (placed by its PERF_RECORD_MMAP2)"
        ) >= 1
    );
    assert_eq!(note(&b, "mmap without its exit or a PERF_RECORD_MMAP2"), 0);
    assert!(note(&b, "munmap without its exit") >= 1);
    assert!(note(&b, "mprotect without its exit") >= 1);
    assert_eq!(note(&b, "heap start taken from the PERF_RECORD_MMAP2"), 1);
}

#[test]
fn without_mmap_records_the_model_places_entry_only_mmaps_and_says_so() {
    let (sum, out) = import(
        "no-records",
        &opts(&[
            "syscalls:sys_exit_mmap",
            "syscalls:sys_exit_brk",
            "perf:mmap",
        ]),
    );
    assert_eq!(sum.nr_mmaps_placed_by_records, 0);
    assert!(sum
        .reduced_capability
        .iter()
        .any(|l| l.starts_with("perf record -d was not used")));
    let m = replay(&out);
    assert!(note(&m, "mmap without its exit or a PERF_RECORD_MMAP2") >= 1);
    assert!(note(&m, "brk without its exit before the heap's start was known") >= 1);
    // Unplaced memory is not invented: its faults pass through unchanged
    // (and without the exec's mappings, no exec layout adds its argument
    // pages).
    let faults = events(&out)
        .iter()
        .filter(|e| matches!(e.kind, EventKind::PageFaultUser { .. }))
        .count() as u64;
    assert_eq!(m.predicted_pgfault(), faults);
    assert_eq!(m.faults_sigsegv, 0);
}

#[test]
fn perf_task_records_stand_in_for_the_sched_tracepoints() {
    let (_, full) = import("sched", &opts(&[]));
    let sched = [
        "sched:sched_process_fork",
        "sched:sched_process_exec",
        "sched:sched_process_exit",
    ];
    let (sum, recs) = import("task-records", &opts(&sched));
    assert!(sum
        .reduced_capability
        .iter()
        .any(|l| l.contains("come from perf's PERF_RECORD_FORK/EXIT")));
    let count =
        |p: &Path, f: fn(&EventKind) -> bool| events(p).iter().filter(|e| f(&e.kind)).count();
    let forks = |k: &EventKind| matches!(k, EventKind::Fork { .. });
    let exits = |k: &EventKind| matches!(k, EventKind::Exit { .. });
    let execs = |k: &EventKind| matches!(k, EventKind::Exec { .. });
    assert_eq!(count(&full, forks), count(&recs, forks));
    assert_eq!(count(&full, exits), count(&recs, exits));
    assert_eq!(count(&full, execs), count(&recs, execs));
    let (a, b) = (replay(&full), replay(&recs));
    assert_eq!(
        (a.faults_taken, a.faults_passthrough, a.faults_sigsegv),
        (b.faults_taken, b.faults_passthrough, b.faults_sigsegv)
    );
}

/// Every subset of the events (a seeded sample of them: xorshift64*)
/// imports and replays, or is refused with the error that says there is
/// nothing to replay.
#[test]
fn any_subset_of_the_events_imports_and_replays() {
    let mut all: Vec<String> = trace::decode::RECORDED_EVENTS
        .iter()
        .map(|s| s.to_string())
        .collect();
    all.extend(trace::perf::IGNORABLE_RECORDS.iter().map(|s| s.to_string()));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..40 {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let ignore: BTreeSet<String> = all
            .iter()
            .enumerate()
            .filter(|(j, _)| r >> (j % 64) & 1 == 1)
            .map(|(_, s)| s.clone())
            .collect();
        let o = ImportOptions {
            ignore_events: ignore.clone(),
            ..ImportOptions::default()
        };
        let out = tmp(&format!("subset-{i}"));
        match import_with(&fixture("mini-aspace.perf.data"), &out, &o) {
            Ok(_) => {
                let layout = MemoryLayout {
                    nodes: vec![NodeLayout {
                        nr_cpus: 2,
                        nr_pages: (1 << 28) / 4096,
                    }],
                    dma32_pages: 0,
                };
                let r = replay_aspace(
                    &out,
                    &layout,
                    &CostTable::uniform(1),
                    &[Preset::Linux6_18.config()],
                );
                if let Err(e) = r {
                    assert!(
                        matches!(e, trace::replay::ReplayError::NoAspaceEvents { .. }),
                        "{ignore:?}: {e}"
                    );
                }
            }
            Err(PerfImportError::NoUsableEvents { .. }) => {}
            Err(e) => panic!("{ignore:?}: {e}"),
        }
    }
}

#[test]
fn an_unknown_event_to_ignore_is_refused() {
    let e = opts(&["kmem:mm_page_allocc"]).check().unwrap_err();
    assert!(
        e.contains("kmem:mm_page_allocc") && e.contains("perf:mmap-data"),
        "{e}"
    );
}

#[test]
fn a_failed_import_leaves_an_existing_output_alone() {
    let out = tmp("keep");
    std::fs::write(&out, b"an older trace").expect("write");
    let bad = tmp("bad.perf.data");
    std::fs::write(&bad, b"PERFILE2 but nothing else").expect("write");
    assert!(import_with(&bad, &out, &ImportOptions::default()).is_err());
    assert_eq!(std::fs::read(&out).expect("still there"), b"an older trace");
}

fn with_zoneinfo(text: &str) -> Result<ImportSummary, PerfImportError> {
    let snap = trace::sysinfo::parse_zoneinfo_strict(text).expect("a well-formed zoneinfo");
    let o = ImportOptions {
        zoneinfo: Some((PathBuf::from("zoneinfo.txt"), snap)),
        ..ImportOptions::default()
    };
    let out = tmp("zoneinfo");
    let r = import_with(&fixture("mini-aspace.perf.data"), &out, &o);
    if r.is_ok() {
        let h = TraceReader::open(&out).expect("trace").header().clone();
        assert_eq!(h.machine.zones.len(), 5);
        assert!(h
            .machine
            .zones
            .iter()
            .any(|z| z.name == "Normal" && !z.pagesets.is_empty()));
    }
    r
}

#[test]
fn a_zoneinfo_of_another_machine_or_kernel_is_refused_naming_the_line() {
    let text = std::fs::read_to_string(fixture("zoneinfo-2cpu-6.18.txt")).expect("fixture");
    with_zoneinfo(&text).expect("this machine's zoneinfo fits its perf.data");
    let first_cpu = text
        .lines()
        .position(|l| l.trim_start().starts_with("cpu:"))
        .expect("a cpu line")
        + 1;
    let msg = |r: Result<ImportSummary, PerfImportError>| match r {
        Err(PerfImportError::Snapshot { line, what, .. }) => (line, what),
        other => panic!("expected a snapshot error, got {other:?}"),
    };
    // Four CPUs instead of two: every zone's second pageset is CPU 3's.
    let four_cpus = text.replace("    cpu: 1\n", "    cpu: 3\n");
    let (line, what) = msg(with_zoneinfo(&four_cpus));
    assert_eq!(line, first_cpu);
    assert!(
        what.contains("of 4 CPUs") && what.contains("another machine"),
        "{what}"
    );
    // A kernel without PCP high auto-tuning (before 6.7).
    let old: String = text
        .lines()
        .filter(|l| !l.contains("high_min") && !l.contains("high_max"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (line, what) = msg(with_zoneinfo(&old));
    assert_eq!(line, first_cpu);
    assert!(what.contains("another kernel"), "{what}");
    // Twice the memory.
    let big: String = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("present") {
            Some(v) => format!(
                "        present  {}\n",
                v.trim().parse::<u64>().expect("n") * 2
            ),
            None => format!("{l}\n"),
        })
        .collect();
    let (line, what) = msg(with_zoneinfo(&big));
    assert_eq!(line, 1);
    assert!(
        what.contains("MemTotal") && what.contains("another machine"),
        "{what}"
    );
}

#[test]
fn an_exec_s_mappings_become_its_exec_layout() {
    let (_, out) = import("layout", &opts(&[]));
    let ev = events(&out);
    let i = ev
        .iter()
        .position(|e| matches!(e.kind, EventKind::Exec { .. }))
        .expect("the exec");
    // The layout follows the exec, as mmlab record writes it: the
    // stack, the program's segments (and .bss), the interpreter's, the vDSO.
    let EventKind::ExecLayout { vmas, .. } = &ev[i + 1].kind else {
        panic!("no ExecLayout after the exec: {:?}", ev[i + 1]);
    };
    let names: Vec<&str> = vmas.iter().map(|v| v.name.as_str()).collect();
    assert!(names.iter().any(|n| n.ends_with("/mini")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("ld-linux")), "{names:?}");
    assert!(
        names.contains(&"[stack]") && names.contains(&"[vdso]"),
        "{names:?}"
    );
    let m = replay(&out);
    assert_eq!(
        m.faults_passthrough - m.faults_passthrough_file,
        0,
        "faults outside every mapping"
    );
    // Without the sched tracepoints the exec comes from perf's COMM record,
    // and the loader's page allocations after it do not end the exec
    // before its mappings are in.
    let (_, nosched) = import(
        "layout-nosched",
        &opts(&[
            "sched:sched_process_fork",
            "sched:sched_process_exec",
            "sched:sched_process_exit",
        ]),
    );
    let evs = events(&nosched);
    let layouts: Vec<_> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ExecLayout { vmas, .. } => Some(vmas),
            _ => None,
        })
        .collect();
    assert!(
        layouts
            .iter()
            .any(|v| v.iter().any(|m| m.name == "[stack]")),
        "{layouts:?}"
    );
    // Without -d the exec's data and stack are not reported: no layout
    // unless the ELF files on this host complete it.
    let (s, nod) = import(
        "layout-nod",
        &ImportOptions {
            no_elf_layouts: true,
            ..opts(&["perf:mmap-data"])
        },
    );
    assert_eq!(s.execs_from_elf, (0, 0));
    assert!(!events(&nod)
        .iter()
        .any(|e| matches!(e.kind, EventKind::ExecLayout { .. })));
    // With them (which files are on this host differs: `mini` was built
    // in a directory that is gone, ld.so may be another): whatever layout
    // comes of them has file segments and .bss only, never a stack.
    let (s, elf) = import("layout-elf", &opts(&["perf:mmap-data"]));
    assert_eq!(s.execs_from_elf.1, 1);
    for e in events(&elf) {
        if let EventKind::ExecLayout { vmas, .. } = &e.kind {
            assert!(vmas.iter().all(|v| v.name != "[stack]"), "{vmas:?}");
        }
    }
}
