//! Replay mode (a): synthetic traces written with `TraceWriter`, the tiny
//! recorded fixture, and (as root with tracefs) a fresh live recording.

use std::path::Path;

use host::scratch::ScratchFile;
use mm::cost::CostTable;
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc, VmSysctl};
use sim::Engine;
use trace::event::{Machine, Pageset, Zone};
use trace::replay::{Prepared, ReplayError, ReplayStats};
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

/// `name` in a private scratch directory, removed when dropped (also when
/// the test fails).
fn tmp(name: &str) -> ScratchFile {
    ScratchFile::new("replay-test", name).expect("scratch dir")
}

fn header(nr_cpus: u32) -> Header {
    let mut h = Header::synthetic("replay test");
    h.machine = Machine {
        nr_cpus,
        zones: vec![Zone {
            node: 0,
            name: "Normal".into(),
            managed: 1 << 18,
            present: 1 << 18,
            spanned: 1 << 18,
            min: 256,
            low: 320,
            high: 384,
            start_pfn: None,
            pagesets: (0..nr_cpus)
                .map(|cpu| Pageset {
                    cpu,
                    count: 0,
                    high: 0,
                    batch: 63,
                    high_min: None,
                    high_max: None,
                })
                .collect(),
        }],
    };
    h
}

fn ev(ts_ns: u64, cpu: u32, kind: EventKind) -> Event {
    Event {
        ts_ns,
        cpu,
        pid: 100,
        tid: 100,
        kind,
    }
}

fn alloc(ts: u64, cpu: u32, pfn: u64, order: u32) -> Event {
    ev(
        ts,
        cpu,
        EventKind::PageAlloc {
            pfn,
            order,
            migratetype: (pfn % 3) as i32,
            gfp_flags: 0xcc0,
        },
    )
}

fn free(ts: u64, cpu: u32, pfn: u64, order: u32) -> Event {
    ev(ts, cpu, EventKind::PageFree { pfn, order })
}

fn write(path: &Path, h: &Header, events: &[Event]) {
    let mut w = TraceWriter::create(path, h).expect("create");
    for e in events {
        w.write(e).expect("write");
    }
    w.finish(&Trailer {
        nr_events: events.len() as u64,
        ..Trailer::default()
    })
    .expect("finish");
}

/// A few CPUs: allocations on one CPU freed on another, orders 0-3, a free
/// of a page allocated before the recording, and blocks never freed.
fn synthetic(nr_cpus: u32, rounds: u64) -> Vec<Event> {
    let mut out = vec![free(5, 1, 999_999, 0)]; // allocated before recording
    let mut ts = 10;
    for r in 0..rounds {
        let a = (r % nr_cpus as u64) as u32;
        let b = ((r + 1) % nr_cpus as u64) as u32;
        let order = (r % 4) as u32;
        let pfn = 1000 + r * 16;
        out.push(alloc(ts, a, pfn, order));
        out.push(free(ts + 3, b, pfn, order));
        if r.is_multiple_of(5) {
            out.push(alloc(ts + 4, b, 500_000 + r, 0)); // never freed
        }
        ts += 7;
    }
    out
}

fn run(prep: &Prepared, nr_cpus: u32) -> (Engine, ReplayStats) {
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus,
            nr_pages: 1 << 18,
        }],
        dma32_pages: 0,
    };
    let pa = PageAlloc::new(&layout, VmSysctl::default(), mm::pcp::PcpPolicy::default());
    let mut eng = Engine::new(pa, CostTable::uniform(20), 1);
    eng.check_invariants_every(97);
    let (tasks, stats) = prep.tasks(nr_cpus);
    for t in tasks {
        eng.spawn(t);
    }
    eng.run();
    let st = stats.borrow().clone();
    (eng, st)
}

#[test]
fn every_recorded_pair_becomes_a_model_pair() {
    let p = tmp("pairs.mmtrace");
    write(&p, &header(3), &synthetic(3, 200));
    let prep = Prepared::open(&p).expect("prepare");
    let r = &prep.recorded;
    assert_eq!(r.allocs, 200 + 40);
    assert_eq!(r.frees, 201);
    assert_eq!(
        r.unmatched_frees, 1,
        "the free before the recording is counted"
    );
    assert_eq!(r.cross_cpu_frees, 200);
    assert_eq!(r.never_freed, 40);
    assert_eq!(r.cpus, vec![0, 1, 2]);
    let (eng, st) = run(&prep, 3);
    assert_eq!(st.allocs, r.allocs);
    assert_eq!(st.alloc_failed, 0);
    assert_eq!(st.frees, r.frees - r.unmatched_frees);
    assert_eq!(st.io_errors, 0);
    // Never-freed blocks stay allocated: every order-0..3 pair came back.
    let pgfree = eng.pa.vmstat.get(mm::vmstat::VmEvent::PGFREE);
    let freed_pages: u64 = (0..200u64).map(|r| 1 << (r % 4)).sum();
    assert_eq!(pgfree, freed_pages);
}

#[test]
fn a_free_waits_for_its_allocation_on_another_cpu() {
    // CPU 0 allocates a burst at one instant (the model takes time for
    // each); CPU 1 frees the last block one nanosecond later in the trace,
    // which in virtual time is before CPU 0 gets there.
    let mut evs = Vec::new();
    for i in 0..50 {
        evs.push(alloc(100, 0, 10_000 + i * 8, 3));
    }
    evs.push(free(101, 1, 10_000 + 49 * 8, 3));
    let p = tmp("wait.mmtrace");
    write(&p, &header(2), &evs);
    let prep = Prepared::open(&p).expect("prepare");
    let (_, st) = run(&prep, 2);
    assert_eq!(st.cross_cpu_waits, 1);
    assert_eq!(st.frees, 1);
    assert_eq!(st.allocs, 50);
}

#[test]
fn replay_is_deterministic_and_repeatable() {
    let p = tmp("det.mmtrace");
    write(&p, &header(4), &synthetic(4, 500));
    let prep = Prepared::open(&p).expect("prepare");
    let (a, sa) = run(&prep, 4);
    let (b, sb) = run(&prep, 4);
    assert_eq!(sa, sb);
    assert_eq!(a.pa.vmstat, b.pa.vmstat);
    // More recorded CPUs than vCPUs fold onto them.
    let (_, sc) = run(&prep, 2);
    assert_eq!(sc.allocs, sa.allocs);
}

#[test]
fn a_trace_without_allocator_events_says_what_is_needed() {
    let p = tmp("noalloc.mmtrace");
    write(
        &p,
        &header(1),
        &[ev(
            1,
            0,
            EventKind::PageFaultUser {
                address: 0x1000,
                ip: 0,
                error_code: 6,
            },
        )],
    );
    let e = Prepared::open(&p).err().expect("an error");
    assert!(matches!(e, ReplayError::NoAllocatorEvents { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("kmem:mm_page_alloc") && msg.contains("mm_page_free"),
        "{msg}"
    );
}

#[test]
fn a_damaged_trace_names_the_file_and_the_record() {
    let p = tmp("damaged.mmtrace");
    write(&p, &header(2), &synthetic(2, 3000));
    let mut bytes = std::fs::read(&p).expect("read");
    let n = bytes.len();
    bytes.truncate(n * 2 / 3);
    std::fs::write(&p, &bytes).expect("write");
    let e = Prepared::open(&p).err().expect("an error");
    let msg = e.to_string();
    assert!(
        msg.contains("damaged.mmtrace") && msg.contains("events"),
        "{msg}"
    );
    let missing = Prepared::open(Path::new("/nonexistent/t.mmtrace"))
        .err()
        .expect("an error")
        .to_string();
    assert!(missing.contains("/nonexistent/t.mmtrace"), "{missing}");
}

#[test]
fn the_recorded_fixture_replays_every_allocation() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dd-gzip.mmtrace");
    let prep = Prepared::open(&p).expect("prepare the fixture");
    assert!(prep.recorded.allocs > 100);
    let (_, st) = run(&prep, prep.header.machine.nr_cpus.max(1));
    assert_eq!(
        st.allocs + st.alloc_failed,
        prep.recorded.allocs - prep.recorded.unsupported_order
    );
    assert_eq!(st.alloc_failed, 0);
    assert_eq!(
        st.frees,
        prep.recorded.frees - prep.recorded.unmatched_frees
    );
}

// --- Live: record a real workload, replay it. ---

fn live_lock() -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open("/tmp/mmlab-live-kernel.lock")
        .ok()?;
    // SAFETY: flock on an fd this function owns; released when `f` closes.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    (rc == 0).then_some(f)
}

#[test]
fn a_live_recording_replays_with_the_recorded_allocation_count() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        println!("SKIPPED (cannot run here): recording needs root, running as uid {euid}");
        return;
    }
    let Some(_lock) = live_lock() else {
        println!("SKIPPED (cannot run here): cannot lock /tmp/mmlab-live-kernel.lock");
        return;
    };
    let p = tmp("live.mmtrace");
    let opts = trace::record::RecordOptions {
        mount_tracefs: true,
        ..Default::default()
    };
    let args: Vec<String> = vec![
        "-c".into(),
        "dd if=/dev/zero bs=1M count=32 2>/dev/null | gzip > /dev/null".into(),
    ];
    match trace::record::record(&p, "sh", &args, &opts) {
        Ok(_) => {}
        Err(e) => {
            println!("SKIPPED (cannot run here): recording failed: {e}");
            return;
        }
    }
    let prep = Prepared::open(&p).expect("replay the live recording");
    assert!(prep.recorded.allocs > 1000, "{:?}", prep.recorded);
    let cpus = prep
        .header
        .machine
        .nr_cpus
        .max(prep.recorded.cpus.last().map_or(1, |c| c + 1));
    let (_, st) = run(&prep, cpus);
    assert_eq!(st.alloc_failed, 0);
    assert_eq!(
        st.allocs,
        prep.recorded.allocs - prep.recorded.unsupported_order
    );
    println!(
        "live: {} allocations recorded, {} replayed; {} frees recorded, {} replayed ({} unmatched)",
        prep.recorded.allocs,
        st.allocs,
        prep.recorded.frees,
        st.frees,
        prep.recorded.unmatched_frees
    );
}

#[test]
fn warm_pcp_puts_the_recorded_pages_on_the_lists_and_resets_the_counters() {
    let mut h = header(2);
    h.machine.zones[0].pagesets[1].count = 100;
    let p = tmp("warm.mmtrace");
    write(&p, &h, &synthetic(2, 10));
    let prep = Prepared::open(&p).expect("prepare");
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: 1 << 18,
        }],
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, VmSysctl::default(), mm::pcp::PcpPolicy::default());
    let on_lists = prep.warm_pcp(&mut pa, 2);
    assert!(on_lists >= 100, "{on_lists} pages on PCP lists");
    assert_eq!(pa.vmstat, mm::vmstat::VmStat::default());
    pa.check_invariants();
}

/// A two-CPU machine whose `high` 6.18 auto-tunes between `high_min` and
/// `high_max`, a trace header for it, and CPU 1's pageset in the header's
/// first zone.
fn two_cpus_auto_tuned() -> (Header, PageAlloc, usize) {
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: 1 << 18,
        }],
        dma32_pages: 0,
    };
    let h = header(2);
    let cfg = mm::knobs::Preset::Linux6_18.config();
    let pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    let zi = pa
        .zones
        .iter()
        .position(|z| z.zone_type.name() == h.machine.zones[0].name)
        .expect("zone");
    let pi = pa.pcp_index(mm::VcpuId(1), zi);
    (h, pa, pi)
}

/// Records CPU 1's list (pageset `pi` of `pa`) with `high` at its
/// `high_max` and 200 pages under it: more than four refills of
/// `batch << CONFIG_PCP_BATCH_SCALE_MAX` (2 016) pages, enough to grow
/// `alloc_factor` and to saturate `free_count`. Returns (count, high).
fn cpu1_list_near_high_max(h: &mut Header, pa: &PageAlloc, pi: usize) -> (u64, i32) {
    let (lo, hi) = (pa.pcp[pi].high_min, pa.pcp[pi].high_max);
    let want = (hi - 200) as u64;
    assert!(want > 4 * 2016, "a list of over 4 x 2016 pages: {lo}..{hi}");
    h.machine.zones[0].pagesets[1].count = want;
    h.machine.zones[0].pagesets[1].high = hi as u64;
    (want, hi)
}

/// The warm-up allocates the recorded pages and frees them onto the lists;
/// under auto-tuning each refill on the way raises `high` by a batch, so
/// `high` is set to the recorded one again afterwards.
#[test]
fn warm_pcp_keeps_the_recorded_high() {
    let (mut h, mut pa, pi) = two_cpus_auto_tuned();
    let (lo, hi) = (pa.pcp[pi].high_min, pa.pcp[pi].high_max);
    assert!(hi - lo > 1000, "bounds {lo}..{hi}");
    // A recorded high between the bounds, the list nearly full.
    let high = (lo + hi) / 2;
    h.machine.zones[0].pagesets[1].count = (high - 200) as u64;
    h.machine.zones[0].pagesets[1].high = high as u64;
    let p = tmp("warm-high.mmtrace");
    write(&p, &h, &synthetic(2, 10));
    let prep = Prepared::open(&p).expect("prepare");
    prep.warm_pcp(&mut pa, 2);
    assert_eq!(pa.pcp[pi].high, high);
    assert!(
        pa.pcp[pi].count >= high - 200 - 63,
        "{} on the list",
        pa.pcp[pi].count
    );
    pa.check_invariants();
}

/// The warm-up's allocations refill the lists a batch at a time (up to
/// `batch << 5` pages once `alloc_factor` has grown), and the remainder of
/// the last refill is not one of the recorded pages: the list holds the
/// recorded count, not that plus the remainder (gzip's full recording:
/// about 2 800 pages more per CPU, drained by the first `decay_pcp_high()`
/// where the kernel drained none).
#[test]
fn warm_pcp_leaves_no_refill_remainder_on_the_lists() {
    let (mut h, mut pa, pi) = two_cpus_auto_tuned();
    let (want, _) = cpu1_list_near_high_max(&mut h, &pa, pi);
    let p = tmp("warm-remainder.mmtrace");
    write(&p, &h, &synthetic(2, 10));
    let prep = Prepared::open(&p).expect("prepare");
    prep.warm_pcp(&mut pa, 2);
    let count = pa.pcp[pi].count as u64;
    // The order-0 guess splits the count over three migratetypes in whole
    // pages: at most two short, never over.
    assert!(
        count <= want && count + 2 >= want,
        "{count} pages on the list, {want} recorded"
    );
    pa.check_invariants();
}

/// A free of a page allocated before the recording is replayed with a
/// block set aside before the run: the model frees every recorded block.
#[test]
fn frees_of_pages_from_before_the_recording_are_replayed() {
    let p = tmp("pre.mmtrace");
    write(&p, &header(3), &synthetic(3, 200));
    let prep = Prepared::open(&p).expect("prepare");
    let r = &prep.recorded;
    assert_eq!(r.unmatched_frees, 1);
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 3,
            nr_pages: 1 << 18,
        }],
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, VmSysctl::default(), mm::pcp::PcpPolicy::default());
    let pre = prep.preallocate(&mut pa, 3);
    assert_eq!(pre.len(), 1);
    assert!(pre[0].1.is_some(), "the block was set aside");
    assert_eq!(pa.nr_pcp_pages(), 0, "setting aside leaves the lists empty");
    assert_eq!(pa.vmstat.get(mm::vmstat::VmEvent::PGFREE), 0);
    let mut eng = Engine::new(pa, CostTable::uniform(20), 1);
    eng.check_invariants_every(97);
    let (tasks, stats) = prep.tasks_with(3, pre);
    for t in tasks {
        eng.spawn(t);
    }
    eng.run();
    let st = stats.borrow().clone();
    assert_eq!(st.frees, r.frees);
    assert_eq!(st.frees_of_failed, 0);
}

/// A warm-up of lists that hold high-order blocks keeps its pages: its own
/// thousands of frees are not taken for a burst of high-order frees
/// (`free_high`), which drained the whole list and lowered `high`.
#[test]
fn warm_pcp_with_high_order_lists_keeps_its_pages() {
    let (mut h, mut pa, pi) = two_cpus_auto_tuned();
    let (want, high) = cpu1_list_near_high_max(&mut h, &pa, pi);
    // CPU 1 takes blocks of orders 0 to 3 from its lists before it frees
    // any: the inferred lists hold high-order blocks.
    let mut events = Vec::new();
    let base = 1u64 << 20; // Normal's first pfn, as the inference assumes
    for (i, order) in [0u32, 1, 2, 3].iter().cycle().take(64).enumerate() {
        events.push(alloc(10 + i as u64, 1, base + 16 * i as u64, *order));
    }
    for (i, order) in [0u32, 1, 2, 3].iter().cycle().take(64).enumerate() {
        events.push(free(1000 + i as u64, 1, base + 16 * i as u64, *order));
    }
    let p = tmp("warm-high-order.mmtrace");
    write(&p, &h, &events);
    let prep = Prepared::open(&p).expect("prepare");
    let lists = prep.recorded.pcp_start.get(&(1, 0)).expect("CPU 1's lists");
    assert!(
        lists.iter().any(|l| l.order > 0 && l.blocks > 0),
        "{lists:?}"
    );
    prep.warm_pcp(&mut pa, 2);
    assert_eq!(pa.pcp[pi].high, high, "high as recorded");
    // Each list is scaled down to whole blocks: a few pages short at most.
    assert!(
        pa.pcp[pi].count as u64 >= want - 64,
        "{} of {want} pages on the list",
        pa.pcp[pi].count
    );
    assert_eq!(pa.vmstat.get(mm::vmstat::VmEvent::PCP_FREE_HIGH), 0);
    assert_eq!(
        pa.pcp[pi].free_count, 0,
        "the warm-up's frees are forgotten"
    );
    pa.check_invariants();
}

/// The per-CPU vmstat work of a trace that recorded it runs where it was
/// recorded, in its CPU's order among the allocator events, and the engine
/// runs no timer of its own; without it (or told to leave it out), the
/// engine's one-second timer runs as before.
#[test]
fn recorded_vmstat_work_replaces_the_model_timer() {
    let mut events = vec![alloc(10, 0, 1000, 0), free(20, 0, 1000, 0)];
    events.push(ev(300_000_000, 0, EventKind::VmstatWork {}));
    events.push(alloc(1_500_000_000, 0, 2000, 0));
    events.push(free(1_500_000_010, 0, 2000, 0));
    let p = tmp("vmstat-work.mmtrace");
    write(&p, &header(1), &events);
    let mut prep = Prepared::open(&p).expect("prepare");
    assert_eq!(prep.recorded.vmstat_works, 1);
    assert_eq!(
        prep.recorded.span_ns, 1_500_000_000,
        "the work does not move the span"
    );
    assert!(prep.replays_vmstat());
    let sample_times = |prep: &Prepared, from_workload: bool| -> Vec<u64> {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 1,
                nr_pages: 1 << 16,
            }],
            dma32_pages: 0,
        };
        let cfg = mm::knobs::Preset::Linux6_18.config();
        let pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
        let mut eng = Engine::new(pa, CostTable::uniform(20), 1);
        eng.stop_with_last_task();
        if from_workload {
            eng.vmstat_work_from_workload();
        }
        let (tasks, _) = prep.tasks(1);
        for t in tasks {
            eng.spawn(t);
        }
        let run = eng.run();
        let mut t: Vec<u64> = run.pcp_series.iter().map(|s| s.time_ns).collect();
        t.dedup();
        t
    };
    let recorded = sample_times(&prep, true);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    // Recorded 0.3 s after the first event; the model's operations add
    // their (uniform 20 ns) costs on top of the recorded gaps.
    assert!(
        (300_000_000..300_010_000).contains(&recorded[0]),
        "{recorded:?}"
    );
    prep.use_recorded_vmstat = false;
    assert!(!prep.replays_vmstat());
    assert_eq!(sample_times(&prep, false), vec![1_000_000_000]);
}

/// A snapshot read at the command's exec (`mmlab import
/// --snapshot-at-exec`) already holds what the allocator events before the
/// exec did: perl's perf-exec child drained 63 pages 0.25 ms before perl
/// exec'd, and replaying that drain's frees again on the snapshot's lists
/// counted a drain the snapshot had already seen. Those events are left out
/// of the replay and of the recorded counts; a page allocated before the
/// exec and freed after it is one allocated before the recording.
#[test]
fn a_snapshot_at_exec_starts_the_allocator_stream_at_the_exec() {
    let drain = |ts, pfn| {
        ev(
            ts,
            0,
            EventKind::PagePcpuDrain {
                pfn,
                order: 0,
                migratetype: 1,
            },
        )
    };
    let exec = ev(
        10,
        0,
        EventKind::Comm {
            comm: "perl".into(),
            exec: true,
        },
    );
    let events = [
        alloc(1, 0, 5000, 0),
        free(2, 0, 6000, 0),
        drain(3, 6000),
        exec,
        alloc(11, 0, 7000, 0),
        free(12, 0, 7000, 0),
        free(13, 0, 5000, 0),
    ];
    for (at_exec, want) in [(false, (2, 3, 1, 0, 1)), (true, (1, 2, 0, 3, 1))] {
        let t = tmp("at-exec.mmtrace");
        let mut h = header(1);
        h.snapshot_at_exec = at_exec;
        write(&t, &h, &events);
        let r = Prepared::open(&t).expect("prepare").recorded;
        // Without the flag the pre-exec free of 6000 has no allocation; with
        // it, 5000's free after the exec is of a page from before.
        assert_eq!(
            (
                r.allocs,
                r.frees,
                r.pcpu_drains,
                r.before_snapshot,
                r.unmatched_frees
            ),
            want,
            "snapshot_at_exec {at_exec}"
        );
    }
    // A snapshot said to be read at an exec the trace does not hold: a
    // clear error, not "no allocator events".
    let t = tmp("at-exec-none.mmtrace");
    let mut h = header(1);
    h.snapshot_at_exec = true;
    write(&t, &h, &[alloc(1, 0, 5000, 0), free(2, 0, 5000, 0)]);
    let e = Prepared::open(&t).err().expect("refused");
    assert!(
        matches!(e, ReplayError::NoExecAfterSnapshot { skipped: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("no exec event"), "{e}");
}
