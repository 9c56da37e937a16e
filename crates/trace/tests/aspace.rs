//! Replay mode (b) on small synthetic traces: each scenario writes the
//! events a kernel would record and checks what the model predicts under
//! the recorded configuration and under others.

use host::scratch::ScratchFile;
use mm::cost::CostTable;
use mm::knobs::{KernelConfig, KnobValue, Preset};
use mm::page_alloc::{MemoryLayout, NodeLayout};
use mm::vmstat::VmEvent;
use trace::aspace::{replay_aspace, AspaceModel, AspaceReplay};
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

const P: u64 = 4096;
const MIB: u64 = 1 << 20;
/// Flags of an anonymous private mapping and of a file mapping.
const ANON: u64 = 0x22;
const FILE_PRIVATE: u64 = 0x02;
/// Error codes: a user write to a page not present, a user read.
const WRITE: u64 = 0x6;
const READ: u64 = 0x4;

/// `name` in a private scratch directory, removed when dropped (also when
/// the test fails).
fn tmp(name: &str) -> ScratchFile {
    ScratchFile::new("aspace", name).expect("scratch dir")
}

struct Trace {
    ev: Vec<Event>,
    ts: u64,
}

impl Trace {
    fn new() -> Trace {
        Trace {
            ev: Vec::new(),
            ts: 1000,
        }
    }

    fn put(&mut self, pid: i32, tid: i32, kind: EventKind) {
        self.ts += 10;
        self.ev.push(Event {
            ts_ns: self.ts,
            cpu: (tid % 2) as u32,
            pid,
            tid,
            kind,
        });
    }

    /// `parent` (a thread group leader) forks `child`.
    fn fork(&mut self, parent: i32, child: i32) {
        self.put(parent, parent, EventKind::Fork { parent, child });
    }

    fn mmap(&mut self, pid: i32, at: u64, len: u64, prot: u64, flags: u64) {
        self.put(
            pid,
            pid,
            EventKind::Mmap {
                addr: 0,
                len,
                prot,
                flags,
                fd: u64::MAX,
                off: 0,
                ret: Some(at as i64),
            },
        );
    }

    fn touch(&mut self, pid: i32, tid: i32, start: u64, len: u64, code: u64) {
        let mut a = start;
        while a < start + len {
            self.put(
                pid,
                tid,
                EventKind::PageFaultUser {
                    address: a,
                    ip: 0,
                    error_code: code,
                },
            );
            a += P;
        }
    }

    fn brk(&mut self, pid: i32, brk: u64, ret: u64) {
        self.put(
            pid,
            pid,
            EventKind::Brk {
                brk,
                ret: Some(ret as i64),
            },
        );
    }

    fn mprotect(&mut self, pid: i32, start: u64, len: u64, prot: u64) {
        self.put(
            pid,
            pid,
            EventKind::Mprotect {
                start,
                len,
                prot,
                ret: Some(0),
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn mremap(
        &mut self,
        pid: i32,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        new_addr: u64,
        ret: u64,
    ) {
        self.put(
            pid,
            pid,
            EventKind::Mremap {
                addr,
                old_len,
                new_len,
                flags,
                new_addr,
                ret: Some(ret as i64),
            },
        );
    }

    fn write(&self, name: &str) -> ScratchFile {
        self.write_as(name, &Header::synthetic("aspace test"), &[])
    }

    /// As a perf.data import whose trailer names `missing` event kinds.
    fn write_as(&self, name: &str, header: &Header, missing: &[&str]) -> ScratchFile {
        let path = tmp(name);
        let mut w = TraceWriter::create(&path, header).expect("create");
        for e in &self.ev {
            w.write(e).expect("write");
        }
        w.finish(&Trailer {
            nr_events: self.ev.len() as u64,
            missing_event_kinds: missing.iter().map(|s| s.to_string()).collect(),
            ..Trailer::default()
        })
        .expect("finish");
        path
    }
}

fn kernel(knobs: &[(&str, &str)]) -> KernelConfig {
    let mut c = Preset::Linux6_18.config();
    for (k, v) in knobs {
        c.set_knob(k, &KnobValue::Str(v.to_string())).expect("knob");
    }
    c
}

/// 16 KiB anonymous folios only (THP and every other size `never`).
fn only_16k() -> KernelConfig {
    kernel(&[
        ("transparent_hugepage/enabled", "never"),
        ("transparent_hugepage/hugepages-2048kB/enabled", "never"),
        ("transparent_hugepage/hugepages-16kB/enabled", "always"),
    ])
}

/// AAAA (one 16 KiB block) with page 0 written by task 10, which then
/// forks task 11.
fn written_then_forked() -> Trace {
    let mut t = Trace::new();
    t.mmap(10, BASE, 4 * P, 3, ANON);
    t.touch(10, 10, BASE, P, WRITE);
    t.fork(10, 11);
    t
}

fn replay(t: &Trace, name: &str, kernels: &[KernelConfig]) -> AspaceReplay {
    let path = t.write(name);
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: (1 << 30) / P,
        }],
        dma32_pages: 0,
    };
    replay_aspace(&path, &layout, &CostTable::uniform(1), kernels).expect("replay")
}

const BASE: u64 = 0x7f00_0000_0000;

/// The model's VMAs of process `pid` at the end of the replay, as
/// `(start, end, "rw-")`.
fn vmas(m: &AspaceModel, pid: i32) -> Vec<(u64, u64, String)> {
    let p = m.live.get(&pid).expect("process alive at the end");
    p.vmas
        .iter()
        .map(|v| {
            let b = |bit: u32, c: char| if v.flags.0 & bit != 0 { c } else { '-' };
            (
                v.start,
                v.end,
                [b(1, 'r'), b(2, 'w'), b(4, 'x')].iter().collect(),
            )
        })
        .collect()
}

fn span(start: u64, end: u64, prot: &str) -> (u64, u64, String) {
    (start, end, prot.to_string())
}

#[test]
fn anonymous_faults_are_replayed_and_large_folios_absorb_the_rest() {
    // AAAAAAAA  (4 MiB anonymous, 2 MiB-aligned), every page written once
    let mut t = Trace::new();
    t.mmap(10, BASE, 4 * MIB, 3, ANON);
    t.touch(10, 10, BASE, 4 * MIB, WRITE);
    let r = replay(
        &t,
        "anon",
        &[
            kernel(&[("transparent_hugepage/enabled", "never")]),
            kernel(&[("transparent_hugepage/hugepages-64kB/enabled", "always")]),
            kernel(&[("transparent_hugepage/enabled", "always")]),
        ],
    );
    assert_eq!(r.recorded.faults, 1024);
    let [off, k64, thp] = &r.models[..] else {
        panic!("three kernels");
    };
    assert_eq!(off.predicted_pgfault(), 1024);
    assert_eq!(off.faults_taken, 1024);
    assert_eq!(off.faults_absorbed, 0);
    // 64 KiB folios: one fault per 16 pages.
    assert_eq!(k64.predicted_pgfault(), 64);
    assert_eq!(k64.faults_absorbed, 1024 - 64);
    assert_eq!(k64.vmstat.mthp_stat(64, "anon_fault_alloc"), 64);
    // PMD THP: one fault per 2 MiB.
    assert_eq!(thp.predicted_pgfault(), 2);
    assert_eq!(thp.vmstat.get(VmEvent::THP_FAULT_ALLOC), 2);
}

/// `MAP_STACK` (x86-64): glibc maps thread stacks with it.
const MAP_STACK: u64 = 0x20000;

#[test]
fn a_map_stack_mapping_takes_no_large_folio_since_6_7() {
    // SSSSSSSS  (4 MiB MAP_STACK, 2 MiB-aligned), every page written once
    let mut t = Trace::new();
    t.mmap(10, BASE, 4 * MIB, 3, ANON | MAP_STACK);
    t.touch(10, 10, BASE, 4 * MIB, WRITE);
    let mut thp_66 = Preset::Linux6_6.config();
    thp_66
        .set_knob(
            "transparent_hugepage/enabled",
            &KnobValue::Str("always".into()),
        )
        .expect("knob");
    let r = replay(
        &t,
        "map-stack",
        &[
            kernel(&[("transparent_hugepage/hugepages-64kB/enabled", "always")]),
            kernel(&[("transparent_hugepage/enabled", "always")]),
            thp_66,
        ],
    );
    let [k64, thp, thp_66] = &r.models[..] else {
        panic!("three kernels");
    };
    // 6.18: VM_NOHUGEPAGE, so one fault per page under 64 KiB folios and
    // under PMD THP alike (a plain mapping takes 64 and 2: see
    // anonymous_faults_are_replayed_and_large_folios_absorb_the_rest).
    assert_eq!(k64.predicted_pgfault(), 1024);
    assert_eq!(k64.vmstat.mthp_stat(64, "anon_fault_alloc"), 0);
    assert_eq!(thp.predicted_pgfault(), 1024);
    assert_eq!(thp.vmstat.get(VmEvent::THP_FAULT_ALLOC), 0);
    // 6.6: MAP_STACK was a no-op; PMD THP fills it.
    assert_eq!(thp_66.predicted_pgfault(), 2);
    assert_eq!(thp_66.vmstat.get(VmEvent::THP_FAULT_ALLOC), 2);
}

#[test]
fn file_mappings_and_unknown_memory_pass_through() {
    // FFFF       file mapping: its faults are carried over
    //      ????  nothing recorded there (the stack): carried over
    let mut t = Trace::new();
    t.mmap(10, BASE, 4 * P, 1, FILE_PRIVATE);
    t.touch(10, 10, BASE, 4 * P, READ);
    t.touch(10, 10, BASE + 64 * P, 3 * P, WRITE);
    let r = replay(&t, "file", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(m.faults_passthrough, 7);
    assert_eq!(m.faults_passthrough_file, 4);
    assert_eq!(m.faults_replayed, 0);
    assert_eq!(m.predicted_pgfault(), 7);
}

#[test]
fn brk_growth_is_the_heap_vma_and_a_shrink_unmaps() {
    let heap = 0x5555_0000_0000u64;
    let mut t = Trace::new();
    t.put(
        10,
        10,
        EventKind::Brk {
            brk: 0,
            ret: Some(heap as i64),
        },
    );
    // HHHH      brk grows by 4 pages; they are written
    t.put(
        10,
        10,
        EventKind::Brk {
            brk: heap + 4 * P,
            ret: Some((heap + 4 * P) as i64),
        },
    );
    t.touch(10, 10, heap, 4 * P, WRITE);
    // HH        shrink by 2, grow again: the 2 pages fault anew
    t.put(
        10,
        10,
        EventKind::Brk {
            brk: heap + 2 * P,
            ret: Some((heap + 2 * P) as i64),
        },
    );
    t.put(
        10,
        10,
        EventKind::Brk {
            brk: heap + 4 * P,
            ret: Some((heap + 4 * P) as i64),
        },
    );
    t.touch(10, 10, heap, 4 * P, WRITE);
    let r = replay(&t, "brk", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(m.faults_replayed, 8);
    assert_eq!(
        m.faults_taken, 6,
        "the 2 pages kept by the heap do not fault"
    );
    assert_eq!(m.faults_absorbed, 2);
    assert_eq!(m.faults_passthrough, 0);
}

#[test]
fn fork_gives_cow_faults_and_a_thread_shares_the_address_space() {
    let mut t = Trace::new();
    t.mmap(10, BASE, 8 * P, 3, ANON);
    t.touch(10, 10, BASE, 8 * P, WRITE);
    // A thread (its events carry the parent's thread group) writes the
    // pages the parent mapped: already there, nothing to copy.
    t.fork(10, 11);
    t.touch(10, 11, BASE, 8 * P, WRITE | 1);
    // A process: its writes copy.
    t.fork(10, 20);
    t.touch(20, 20, BASE, 8 * P, WRITE | 1);
    t.put(20, 20, EventKind::Exit { pid: 20 });
    let r = replay(&t, "fork", &[kernel(&[])]);
    assert_eq!(r.recorded.threads, 1);
    assert_eq!(r.recorded.forks, 2);
    let m = &r.models[0];
    // The thread's 8 writes find the pages writable: a thread's clone()
    // write-protects nothing, so the tentative fork's write protection is
    // undone once the task shows it is a thread (a kernel would not have
    // recorded these faults; the model absorbs them). The process's 8
    // writes copy.
    assert_eq!(m.faults_taken, 8 + 8);
    assert_eq!(m.faults_absorbed, 8);
    assert_eq!(m.faults_passthrough, 0);
}

#[test]
fn a_reservation_made_accessible_by_mprotect_is_modelled() {
    // ........  PROT_NONE reservation (an arena): a VMA of its own
    // AA......  mprotect(RW) of its first 2 pages: split off, written
    let mut t = Trace::new();
    t.mmap(10, BASE, 8 * P, 0, ANON);
    t.mprotect(10, BASE, 2 * P, 3);
    t.touch(10, 10, BASE, 2 * P, WRITE);
    // A stray access to the reservation: the kernel's SIGSEGV, in no
    // pgfault count.
    t.touch(10, 10, BASE + 4 * P, P, READ);
    let r = replay(&t, "mprotect", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(m.faults_taken, 2);
    assert_eq!(m.faults_sigsegv, 1);
    assert_eq!(m.faults_passthrough, 0);
    assert_eq!(m.predicted_pgfault(), 2);
    assert_eq!(
        vmas(m, 10),
        vec![
            span(BASE, BASE + 2 * P, "rw-"),
            span(BASE + 2 * P, BASE + 8 * P, "---")
        ]
    );
    assert!(m.notes.is_empty(), "nothing emulated: {:?}", m.notes);
}

#[test]
fn mprotect_splits_refuses_writes_and_merges_back() {
    // WWWW....  8 pages read-write, the first 4 written
    let mut t = Trace::new();
    t.mmap(10, BASE, 8 * P, 3, ANON);
    t.touch(10, 10, BASE, 4 * P, WRITE);
    // WWrrrr..  pages 2-5 made read-only
    t.mprotect(10, BASE + 2 * P, 4 * P, 1);
    // a write to page 2: SIGSEGV; a read of page 4 (untouched): the zero
    // page; a read of page 3: mapped, no fault
    t.touch(10, 10, BASE + 2 * P, P, WRITE | 1);
    t.touch(10, 10, BASE + 4 * P, P, READ);
    t.touch(10, 10, BASE + 3 * P, P, READ);
    // --- an anonymous PROT_NONE mapping and a read-only one beside it:
    //     VMAs of their own
    t.mmap(10, BASE + 8 * P, 2 * P, 0, ANON);
    t.mmap(10, BASE + 10 * P, 2 * P, 1, ANON);
    let mid = {
        let r = replay(&t, "mprotect-ro-mid", &[kernel(&[])]);
        vmas(&r.models[0], 10)
    };
    assert_eq!(
        mid,
        vec![
            span(BASE, BASE + 2 * P, "rw-"),
            span(BASE + 2 * P, BASE + 6 * P, "r--"),
            span(BASE + 6 * P, BASE + 8 * P, "rw-"),
            span(BASE + 8 * P, BASE + 10 * P, "---"),
            span(BASE + 10 * P, BASE + 12 * P, "r--"),
        ]
    );
    // WWWWWW..  read-write again: one VMA; page 3 is the process's own and
    //           stays writable, page 4 (the zero page) faults to copy
    t.mprotect(10, BASE + 2 * P, 4 * P, 3);
    t.touch(10, 10, BASE + 3 * P, P, WRITE | 1);
    t.touch(10, 10, BASE + 4 * P, P, WRITE | 1);
    // a write to the read-only mapping: SIGSEGV
    t.touch(10, 10, BASE + 10 * P, P, WRITE);
    let r = replay(&t, "mprotect-ro", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(
        vmas(m, 10),
        vec![
            span(BASE, BASE + 8 * P, "rw-"),
            span(BASE + 8 * P, BASE + 10 * P, "---"),
            span(BASE + 10 * P, BASE + 12 * P, "r--"),
        ]
    );
    assert_eq!(m.faults_replayed, 10);
    assert_eq!(m.faults_taken, 4 + 1 + 1);
    assert_eq!(m.faults_absorbed, 2);
    assert_eq!(m.faults_sigsegv, 2);
    assert_eq!(m.predicted_pgfault(), 6);
    assert!(m.notes.is_empty(), "{:?}", m.notes);
}

#[test]
fn mprotect_of_file_mappings_changes_nothing_and_is_counted() {
    // FFFFAAAA  a file mapping and an anonymous one after it; the dynamic
    //           linker's mprotect(PROT_READ) over both (RELRO and .bss)
    let mut t = Trace::new();
    t.mmap(10, BASE, 4 * P, 3, FILE_PRIVATE);
    t.mmap(10, BASE + 4 * P, 4 * P, 3, ANON);
    t.mprotect(10, BASE, 6 * P, 1);
    t.mprotect(10, BASE, 2 * P, 1);
    let r = replay(&t, "mprotect-file", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(
        vmas(m, 10),
        vec![
            span(BASE + 4 * P, BASE + 6 * P, "r--"),
            span(BASE + 6 * P, BASE + 8 * P, "rw-"),
        ]
    );
    assert_eq!(
        m.notes.get(
            "mprotect outside modelled memory (file-backed, stack, program: nothing to change)"
        ),
        Some(&1)
    );
}

#[test]
fn the_first_brk_sets_the_heap_start_and_the_kernel_answer_wins() {
    // The heap of a process after exec: brk(0) tells start_brk.
    let heap = 0x5555_5555_9000u64;
    let mut t = Trace::new();
    t.put(
        10,
        10,
        EventKind::Exec {
            pid: 10,
            filename: "/bin/x".into(),
        },
    );
    t.brk(10, 0, heap);
    // HH        brk(heap + 5000): the heap VMA ends at the page boundary
    t.brk(10, heap + 5000, heap + 5000);
    t.touch(10, 10, heap, 2 * P, WRITE);
    // HH  FF    a file mapping 2 pages above the heap (not modelled): the
    //           kernel refuses to grow the heap into its guard page and
    //           returns the old break; the model, without the mapping,
    //           would grow: the recorded break wins
    t.mmap(10, heap + 4 * P, 2 * P, 1, FILE_PRIVATE);
    t.brk(10, heap + 3 * P + 1, heap + 5000);
    // H   FF    a shrink to one page: the second page goes
    t.brk(10, heap + P, heap + P);
    // HHH FF    growth to 3 pages: page 2 faults anew
    t.brk(10, heap + 3 * P, heap + 3 * P);
    t.touch(10, 10, heap, 3 * P, WRITE);
    let r = replay(&t, "brk-start", &[kernel(&[])]);
    let m = &r.models[0];
    let l = &m.live[&10];
    assert_eq!((l.start_brk, l.brk), (heap, heap + 3 * P));
    assert_eq!(vmas(m, 10), vec![span(heap, heap + 3 * P, "rw-")]);
    assert_eq!(m.faults_taken, 2 + 2);
    assert_eq!(m.faults_absorbed, 1);
    assert_eq!(
        m.notes
            .get("brk results the model disagreed with (the recorded break applied)"),
        Some(&1)
    );
}

#[test]
fn brk_of_a_process_whose_heap_began_before_the_recording() {
    // The first brk event moves the break: the heap below it is unknown
    // (its faults pass through); from there the heap is modelled.
    let heap = 0x5555_0000_0000u64;
    let mut t = Trace::new();
    t.brk(10, heap + 8 * P, heap + 8 * P);
    t.brk(10, heap + 10 * P, heap + 10 * P);
    t.touch(10, 10, heap + 6 * P, 4 * P, WRITE);
    let r = replay(&t, "brk-unknown", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(m.live[&10].start_brk, heap + 8 * P);
    assert_eq!(vmas(m, 10), vec![span(heap + 8 * P, heap + 10 * P, "rw-")]);
    assert_eq!(m.faults_taken, 2);
    assert_eq!(m.faults_passthrough, 2);
    assert!(m
        .notes
        .contains_key("brk changes from an unknown break (the heap below it is not modelled)"));
}

/// `MREMAP_MAYMOVE`, `MREMAP_FIXED`, `MREMAP_DONTUNMAP`.
const MAYMOVE: u64 = 1;
const FIXED: u64 = 2;
const DONTUNMAP: u64 = 4;

#[test]
fn mremap_moves_pages_to_the_recorded_address() {
    // WWWWB     4 pages written, a mapping right after them: no growth in place
    let new = BASE + 64 * MIB;
    let mut t = Trace::new();
    t.mmap(10, BASE, 4 * P, 3, ANON);
    t.touch(10, 10, BASE, 4 * P, WRITE);
    t.mmap(10, BASE + 4 * P, P, 1, ANON);
    // mremap(BASE, 4P, 8P, MAYMOVE): the kernel moved it to `new`, an
    // address the model's own placement would not have chosen
    t.mremap(10, BASE, 4 * P, 8 * P, MAYMOVE, 0, new);
    //     B     ...   WWWWWWWW  the moved pages are there: no fault for
    //                           the first 4, the new tail faults
    t.touch(10, 10, new, 8 * P, WRITE);
    let r = replay(&t, "mremap-move", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(
        vmas(m, 10),
        vec![
            span(BASE + 4 * P, BASE + 5 * P, "r--"),
            span(new, new + 8 * P, "rw-"),
        ]
    );
    assert_eq!(m.faults_taken, 4 + 4);
    assert_eq!(m.faults_absorbed, 4);
    assert!(m.notes.is_empty(), "{:?}", m.notes);
}

#[test]
fn mremap_grows_and_shrinks_in_place_and_dontunmap_keeps_the_old_range() {
    let mut t = Trace::new();
    // WWWW      grown in place to 8 pages, then written: 4 new faults
    t.mmap(10, BASE, 4 * P, 3, ANON);
    t.touch(10, 10, BASE, 4 * P, WRITE);
    t.mremap(10, BASE, 4 * P, 8 * P, MAYMOVE, 0, BASE);
    t.touch(10, 10, BASE, 8 * P, WRITE);
    // WW        shrunk to 2
    t.mremap(10, BASE, 8 * P, 2 * P, 0, 0, BASE);
    // ..  ...  WW  MREMAP_DONTUNMAP to where the kernel put it: the old
    //              range stays mapped, empty; the pages moved
    let to = BASE + 32 * MIB;
    t.mremap(10, BASE, 2 * P, 2 * P, MAYMOVE | DONTUNMAP, 0, to);
    t.touch(10, 10, to, 2 * P, WRITE);
    t.touch(10, 10, BASE, 2 * P, WRITE);
    // MREMAP_FIXED, as recorded
    let fixed = BASE + 40 * MIB;
    t.mremap(10, to, 2 * P, 4 * P, MAYMOVE | FIXED, fixed, fixed);
    t.touch(10, 10, fixed, 4 * P, READ);
    let r = replay(&t, "mremap-inplace", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(
        vmas(m, 10),
        vec![
            span(BASE, BASE + 2 * P, "rw-"),
            span(fixed, fixed + 4 * P, "rw-"),
        ]
    );
    // 4 + 4 (growth) + 2 (the old range, empty after DONTUNMAP) + 2 (the
    // tail of the fixed move, read: the zero page)
    assert_eq!(m.faults_taken, 4 + 4 + 2 + 2);
    // 4 (the kept pages) + 2 (moved by DONTUNMAP) + 2 (moved by FIXED)
    assert_eq!(m.faults_absorbed, 4 + 2 + 2);
    assert!(m.notes.is_empty(), "{:?}", m.notes);
}

#[test]
fn an_mremap_the_model_refuses_is_replayed_as_its_effect_and_counted() {
    // WWrr      two VMAs (rw- and r--); since 6.17 the kernel moves both
    //           with MREMAP_FIXED and the same length, the model (one-VMA
    //           rule) refuses: unmap + map, the pages lost
    let to = BASE + 16 * MIB;
    let mut t = Trace::new();
    t.mmap(10, BASE, 2 * P, 3, ANON);
    t.mmap(10, BASE + 2 * P, 2 * P, 1, ANON);
    t.touch(10, 10, BASE, 2 * P, WRITE);
    t.mremap(10, BASE, 4 * P, 4 * P, MAYMOVE | FIXED, to, to);
    t.touch(10, 10, to, 2 * P, WRITE);
    // a file mapping moved: still file-backed at its new place
    t.mmap(10, BASE + 64 * MIB, 4 * P, 1, FILE_PRIVATE);
    t.mremap(
        10,
        BASE + 64 * MIB,
        4 * P,
        8 * P,
        MAYMOVE,
        0,
        BASE + 80 * MIB,
    );
    t.touch(10, 10, BASE + 80 * MIB, P, READ);
    let r = replay(&t, "mremap-refused", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(vmas(m, 10), vec![span(to, to + 4 * P, "rw-")]);
    assert_eq!(m.faults_taken, 2 + 2);
    assert_eq!(m.faults_passthrough_file, 1);
    assert_eq!(
        m.notes.get(
            "mremap the model refused, replayed as its effect on the VMAs (moved pages not in the model)"
        ),
        Some(&1)
    );
}

#[test]
fn the_vmacache_policies_see_the_same_faults_and_count_hits() {
    let mut t = Trace::new();
    for i in 0..4 {
        t.mmap(10, BASE + i * 4 * MIB, 64 * P, 3, ANON);
    }
    for i in 0..4 {
        t.touch(10, 10, BASE + i * 4 * MIB, 64 * P, WRITE);
    }
    let r = replay(
        &t,
        "vmacache",
        &[
            kernel(&[]),
            kernel(&[("mmlab.vmacache", "pmd")]),
            kernel(&[("mmlab.vmacache", "pfn")]),
        ],
    );
    for m in &r.models {
        assert_eq!(m.predicted_pgfault(), 256);
    }
    assert_eq!(r.models[0].vmstat.get(VmEvent::VMACACHE_FIND_CALLS), 0);
    let pmd = &r.models[1].vmstat;
    assert_eq!(pmd.get(VmEvent::VMACACHE_FIND_CALLS), 256);
    // One miss per VMA, then hits.
    assert_eq!(pmd.get(VmEvent::VMACACHE_FIND_HITS), 256 - 4);
}

#[test]
fn replays_are_deterministic() {
    let mut t = Trace::new();
    t.mmap(10, BASE, 2 * MIB, 3, ANON);
    t.touch(10, 10, BASE, 2 * MIB, WRITE);
    t.fork(10, 20);
    t.touch(20, 20, BASE, MIB, WRITE | 1);
    let k = [kernel(&[(
        "transparent_hugepage/hugepages-16kB/enabled",
        "always",
    )])];
    let a = replay(&t, "det-a", &k);
    let b = replay(&t, "det-b", &k);
    let s = |r: &AspaceReplay| {
        let m = &r.models[0];
        format!(
            "{:?} {} {} {}",
            m.vmstat.iter().collect::<Vec<_>>(),
            m.faults_taken,
            m.faults_absorbed,
            m.fault_ns
        )
    };
    assert_eq!(s(&a), s(&b));
}

#[test]
fn a_trace_without_address_space_events_is_a_clear_error() {
    let mut t = Trace::new();
    t.put(
        10,
        10,
        EventKind::PageAlloc {
            pfn: 100,
            order: 0,
            migratetype: 1,
            gfp_flags: 0,
        },
    );
    let path = t.write("none");
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 1,
            nr_pages: 1 << 16,
        }],
        dma32_pages: 0,
    };
    let e = replay_aspace(&path, &layout, &CostTable::uniform(1), &[kernel(&[])])
        .err()
        .expect("an error");
    let msg = e.to_string();
    assert!(
        msg.contains("page_fault_user") && msg.contains("mode (b)"),
        "{msg}"
    );
}

/// Random event streams (the fuzz target's decoding of seeded random
/// bytes) replay without a panic under three kernels.
#[test]
fn random_event_streams_replay_without_panics() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut faults = 0;
    for round in 0..60 {
        let bytes: Vec<u8> = (0..24 * 400)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect();
        let rec = trace::aspace::replay_fuzz_input(&bytes);
        assert_eq!(rec.nr_events, 400, "round {round}");
        faults += rec.faults;
    }
    assert!(faults > 0);
}

#[test]
fn an_anonymous_reservation_larger_than_the_machine_is_not_modelled() {
    // 1 TiB of MAP_NORESERVE-style anonymous memory (a sanitizer's shadow):
    // kept out of the model, its faults carried over; fork and exit stay
    // cheap (the model would walk every PMD of it).
    let mut t = Trace::new();
    t.mmap(10, 0x1000_0000_0000, 1 << 40, 3, ANON);
    t.touch(10, 10, 0x1000_0000_0000, 4 * P, WRITE);
    t.fork(10, 20);
    t.put(20, 20, EventKind::Exit { pid: 20 });
    t.put(10, 10, EventKind::Exit { pid: 10 });
    let r = replay(&t, "huge", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(m.faults_passthrough, 4);
    assert_eq!(m.faults_replayed, 0);
    assert!(m
        .notes
        .keys()
        .any(|k| k.starts_with("anonymous mappings larger than the machine")));
}

fn exec_vma(start: u64, len: u64, prot: u32, name: &str) -> trace::event::ExecVma {
    trace::event::ExecVma {
        start,
        len,
        pgoff: 0,
        prot,
        flags: 2,
        name: name.to_string(),
    }
}

/// An exec whose mappings the trace records, as `mmlab record` writes them:
///
/// ```text
///   PPPP DDDD BBBBBBBB(2 MiB .bss)   ...   LL  V      .... SSSSS(stack)
///   prog data .bss                         ld.so vdso     128K + 1 arg page
/// ```
///
/// The kernel fault that `execve()` takes on the new stack before its
/// `sched_process_exec` is held and replayed in the new address space; the
/// `.bss` takes 64 KiB folios; a fault below the stack grows it; file and
/// vDSO faults pass through; nothing is outside every mapping.
#[test]
fn an_exec_layout_puts_the_stack_bss_and_files_in_the_replay() {
    let prog = 0x5555_0000_0000u64;
    let bss = prog + 2 * MIB;
    let ld = BASE + 64 * MIB;
    let vdso = ld - 4 * P;
    let top = 0x7ffd_0001_0000u64;
    let stack_len = 128 * 1024 + P;
    let mut t = Trace::new();
    // The exec's own kernel fault on the new stack, below the argument page.
    t.put(
        10,
        10,
        EventKind::PageFaultKernel {
            address: top - P - 8,
            ip: 0,
            error_code: 2,
        },
    );
    t.put(
        10,
        10,
        EventKind::Exec {
            pid: 10,
            filename: "/usr/bin/prog".into(),
        },
    );
    t.put(
        10,
        10,
        EventKind::ExecLayout {
            pid: 10,
            vmas: vec![
                exec_vma(top - stack_len, stack_len, 3, "[stack]"),
                exec_vma(prog, 2 * MIB, 1, "/usr/bin/prog"),
                exec_vma(prog + MIB, MIB, 3, "/usr/bin/prog"),
                exec_vma(bss, 2 * MIB, 3, "//anon"),
                exec_vma(ld, 2 * P, 5, "/usr/lib/ld.so"),
                exec_vma(vdso, 2 * P, 5, "[vdso]"),
            ],
        },
    );
    t.touch(10, 10, bss, 2 * MIB, WRITE);
    t.touch(10, 10, prog, 4 * P, READ);
    t.touch(10, 10, prog + MIB, 2 * P, WRITE);
    t.touch(10, 10, vdso, P, READ);
    t.touch(10, 10, top - stack_len - 3 * P, P, WRITE);
    let r = replay(
        &t,
        "exec",
        &[
            kernel(&[("transparent_hugepage/enabled", "never")]),
            kernel(&[
                ("transparent_hugepage/enabled", "never"),
                ("transparent_hugepage/hugepages-64kB/enabled", "always"),
            ]),
        ],
    );
    assert_eq!(r.recorded.exec_layouts, 1);
    let [k4, k64] = &r.models[..] else {
        panic!("two kernels");
    };
    for m in [k4, k64] {
        assert_eq!(
            m.faults_passthrough, m.faults_passthrough_file,
            "nothing outside"
        );
        assert_eq!(
            m.faults_passthrough,
            4 + 2 + 1,
            "program text and data, vDSO"
        );
        assert_eq!(m.faults_exec_args, 1);
        assert_eq!(m.faults_sigsegv, 0);
    }
    // 4K: the held kernel fault, 512 .bss pages and the stack growth.
    assert_eq!(k4.faults_taken, 1 + 512 + 1);
    // 64K: 32 folios for the .bss; the held fault's 64 KiB block holds the
    // argument page (4 KiB), the grown stack page is 4 KiB.
    assert_eq!(k64.faults_taken, 1 + 32 + 1);
    assert_eq!(k64.vmstat.mthp_stat(64, "anon_fault_alloc"), 32);
    let stack = vmas(k64, 10)
        .into_iter()
        .find(|v| v.1 == top)
        .expect("stack");
    assert_eq!(
        stack.0,
        top - stack_len - 3 * P,
        "grown to the faulting page"
    );
}

#[test]
fn without_brk_exits_the_heap_starts_at_its_first_fault() {
    // A perf.data without sys_exit_brk and without -d: brk(0) and
    // brk(start_brk + 16 pages) tell only the break asked for.
    let heap = 0x5555_5556_0000u64;
    let entry = |brk: u64| EventKind::Brk { brk, ret: None };
    let mut t = Trace::new();
    // FF                  the program's .data (a file mapping below the heap)
    t.mmap(10, heap - 4 * P, 2 * P, 3, FILE_PRIVATE);
    t.put(10, 10, entry(0));
    t.put(10, 10, entry(heap + 16 * P));
    // FF  HHHHHHHHHHHHHHHH  the heap, written from its first page (glibc's
    //                       sysmalloc() writes the top chunk's header there)
    t.touch(10, 10, heap, 16 * P, WRITE);
    let k16 = only_16k();
    let r = replay(&t, "brk-first-fault", &[kernel(&[]), k16]);
    for m in &r.models {
        assert_eq!(
            (m.live[&10].start_brk, m.live[&10].brk),
            (heap, heap + 16 * P)
        );
        assert_eq!(vmas(m, 10), vec![span(heap, heap + 16 * P, "rw-")]);
        assert_eq!(m.faults_passthrough, 0);
        assert_eq!(
            m.notes
                .get("heap start taken from its first fault (brk without its exit)"),
            Some(&1)
        );
    }
    // 4 KiB: every page faults; 16 KiB folios: one fault in four.
    assert_eq!(r.models[0].faults_taken, 16);
    assert_eq!(r.models[1].faults_taken, 4);
    assert_eq!(r.models[1].faults_absorbed, 12);
}

#[test]
fn without_brk_exits_a_fault_below_a_mapping_starts_no_heap() {
    // brk(0), brk(B + 4 pages) without exits, and a fault in no mapping
    // but *below* a mapping that lies under the break: not the heap's.
    let heap = 0x5555_5556_0000u64;
    let entry = |brk: u64| EventKind::Brk { brk, ret: None };
    let mut t = Trace::new();
    t.put(10, 10, entry(0));
    t.put(10, 10, entry(heap + 4 * P));
    // ?  FF    the fault at heap - 4P has the file mapping between it and
    //          the break: passed through, the heap still unknown
    t.mmap(10, heap - 2 * P, 2 * P, 3, FILE_PRIVATE);
    t.touch(10, 10, heap - 4 * P, P, WRITE);
    // ?  FFHHHH then the heap's first page: the heap starts there
    t.touch(10, 10, heap, 4 * P, WRITE);
    let r = replay(&t, "brk-first-fault-below", &[kernel(&[])]);
    let m = &r.models[0];
    assert_eq!(m.live[&10].start_brk, heap);
    assert_eq!(m.faults_passthrough, 1);
    assert_eq!(m.faults_taken, 4);
}

#[test]
fn a_thread_leaves_the_parents_large_folios_writable() {
    // AAAA (one 16 KiB block): page 0 written, then a thread is created
    // (sched_process_fork, then the new task's first event in the parent's
    // thread group), then pages 1..3 written, as a 4 KiB recording has
    // them. Under 16 KiB folios the first fault mapped all four pages
    // writable; a thread's clone() write-protects nothing, so pages 1..3
    // do not fault (the tentative fork's write protection is undone).
    let mut t = written_then_forked();
    t.touch(10, 11, BASE + 3 * P, P, WRITE);
    t.touch(10, 10, BASE + P, 2 * P, WRITE);
    let k16 = only_16k();
    let r = replay(&t, "thread-wp", &[kernel(&[]), k16]);
    assert_eq!(r.models[0].faults_taken, 4);
    assert_eq!(r.models[1].faults_taken, 1);
    assert_eq!(r.models[1].faults_absorbed, 3);
}

#[test]
fn a_thread_is_known_at_its_fork_not_at_its_first_event() {
    // As above, but the parent writes pages 1..2 between the clone and the
    // new thread's first event (zstd's main thread creating workers while
    // another writes): the replay knows at the fork, from the child's next
    // event, that it is a thread, so nothing was write-protected and those
    // writes do not fault under 16 KiB folios.
    let mut t = written_then_forked();
    t.touch(10, 10, BASE + P, 2 * P, WRITE);
    t.touch(10, 11, BASE + 3 * P, P, WRITE);
    let k16 = only_16k();
    let r = replay(&t, "thread-at-fork", &[kernel(&[]), k16]);
    assert_eq!(r.recorded.threads, 1);
    assert_eq!(r.models[0].faults_taken, 4);
    assert_eq!(r.models[1].faults_taken, 1);
    assert_eq!(r.models[1].faults_absorbed, 3);
    // The same writes after a fork whose child is a process (its next
    // event in its own thread group) are copy-on-write faults.
    let mut t = written_then_forked();
    t.touch(10, 10, BASE + P, 2 * P, WRITE);
    t.touch(11, 11, BASE + 3 * P, P, WRITE);
    let r = replay(&t, "process-at-fork", &[k16]);
    assert_eq!(r.recorded.threads, 0);
    assert_eq!(r.models[0].faults_taken, 1 + 2 + 1);
}

/// A perf.data import's header (the replay infers what an import lacks).
fn perf_header() -> Header {
    let mut h = Header::synthetic("aspace test");
    h.source = trace::event::TraceSource::PerfImport {
        file: "perf.data".into(),
        perf_version: None,
        cmdline: None,
    };
    h
}

#[test]
fn without_mremap_a_fault_outside_every_mapping_infers_the_moved_mapping() {
    // ....MMMMAAAA  A: a 64 KiB block written; then realloc() moves it down
    // (mremap, not recorded) to M..A and writes the new part M: 16 faults
    // outside every mapping the trace shows.
    let a = BASE + 2 * MIB;
    let mut t = Trace::new();
    t.mmap(10, a, 64 * 1024, 3, ANON);
    t.touch(10, 10, a, 64 * 1024, WRITE);
    t.touch(10, 10, a - 64 * 1024, 64 * 1024, WRITE);
    // The old place reused: a recorded fault again on a written page.
    t.touch(10, 10, a - 64 * 1024, P, WRITE);
    let kernels = [
        kernel(&[]),
        kernel(&[("transparent_hugepage/hugepages-64kB/enabled", "always")]),
    ];
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: (1 << 30) / P,
        }],
        dma32_pages: 0,
    };
    let run = |missing: &[&str], name: &str| {
        let path = t.write_as(name, &perf_header(), missing);
        replay_aspace(&path, &layout, &CostTable::uniform(1), &kernels).expect("replay")
    };
    // With mremap recorded (none happened), the faults are carried over.
    let r = run(&[], "with-mremap");
    assert_eq!(r.models[1].faults_passthrough, 17);
    assert_eq!(r.models[1].faults_inferred, 0);
    // Without it, the mapping runs from the first such fault up to the
    // block above: one 64 KiB folio answers its 16 faults; the fault on a
    // written page again is new memory there, taken under every kernel.
    let r = run(&["syscalls:sys_enter_mremap"], "without-mremap");
    let (k4, k64) = (&r.models[0], &r.models[1]);
    assert_eq!(
        (
            k4.faults_passthrough,
            k4.faults_inferred,
            k4.faults_inferred_taken
        ),
        (0, 17, 17)
    );
    assert_eq!(k4.predicted_pgfault(), 16 + 17);
    assert_eq!((k64.faults_inferred, k64.faults_inferred_taken), (17, 2));
    assert_eq!(k64.predicted_pgfault(), 1 + 2);
    let notes: u64 = k4
        .notes
        .iter()
        .filter(|(k, _)| {
            k.starts_with("mappings inferred") || k.starts_with("inferred mappings replaced")
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(notes, 2, "{:?}", k4.notes);
}
