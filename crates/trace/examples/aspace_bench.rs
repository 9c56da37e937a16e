//! Replay mode (b) speed: a synthetic trace of about 1M events (processes
//! that fork, map 8 MiB anonymous regions, write every page of them, unmap
//! half and exit), written and replayed under one kernel and under four
//! side by side; prints events per second.
//!
//! `cargo run --release -p trace --example aspace_bench [EVENTS]`

use std::time::Instant;

use mm::cost::CostTable;
use mm::knobs::{KnobValue, Preset};
use mm::page_alloc::{MemoryLayout, NodeLayout};
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

fn main() {
    let nr_events: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    // A private directory, gone when `path` drops (also on a panic).
    let path =
        host::scratch::ScratchFile::new("aspace-bench", "bench.mmtrace").expect("scratch dir");
    let mut w = TraceWriter::create(&path, &Header::synthetic("aspace bench")).expect("create");
    let mut ts = 0u64;
    let mut put = |w: &mut TraceWriter<_>, pid: i32, kind: EventKind| {
        ts += 50;
        w.write(&Event {
            ts_ns: ts,
            cpu: (pid % 2) as u32,
            pid,
            tid: pid,
            kind,
        })
        .expect("write");
    };
    let region = 8u64 << 20;
    let mut pid = 100;
    while w.nr_events() < nr_events {
        let child = pid + 1;
        put(&mut w, pid, EventKind::Fork { parent: pid, child });
        put(
            &mut w,
            child,
            EventKind::Exec {
                pid: child,
                filename: "/bin/x".into(),
            },
        );
        for r in 0..4u64 {
            let at = 0x7f00_0000_0000 + r * 2 * region;
            put(
                &mut w,
                child,
                EventKind::Mmap {
                    addr: 0,
                    len: region,
                    prot: 3,
                    flags: 0x22,
                    fd: u64::MAX,
                    off: 0,
                    ret: Some(at as i64),
                },
            );
            let mut a = at;
            while a < at + region {
                put(
                    &mut w,
                    child,
                    EventKind::PageFaultUser {
                        address: a,
                        ip: 0,
                        error_code: 6,
                    },
                );
                a += 4096;
            }
            put(
                &mut w,
                child,
                EventKind::Munmap {
                    addr: at,
                    len: region / 2,
                    ret: Some(0),
                },
            );
        }
        put(&mut w, child, EventKind::Exit { pid: child });
        pid += 2;
    }
    let n = w.nr_events();
    w.finish(&Trailer {
        nr_events: n,
        ..Trailer::default()
    })
    .expect("finish");
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: 1 << 20,
        }],
        dma32_pages: 0,
    };
    let table = CostTable::uniform(20);
    let knob = |name: &str, v: &str| {
        let mut c = Preset::Linux6_18.config();
        c.set_knob(name, &KnobValue::Str(v.into())).expect("knob");
        c
    };
    let one = [Preset::Linux6_18.config()];
    let four = [
        Preset::Linux6_18.config(),
        knob("transparent_hugepage/enabled", "always"),
        knob("transparent_hugepage/hugepages-64kB/enabled", "always"),
        knob("mmlab.vmacache", "pmd"),
    ];
    for kernels in [&one[..], &four[..]] {
        let t = Instant::now();
        let r = trace::aspace::replay_aspace(&path, &layout, &table, kernels).expect("replay");
        let s = t.elapsed().as_secs_f64();
        println!(
            "{} events, {} kernels: {:.2}s, {:.2} M events/s ({:.2} M event-kernels/s); faults taken {:?}",
            r.recorded.nr_events,
            kernels.len(),
            s,
            r.recorded.nr_events as f64 / s / 1e6,
            (r.recorded.nr_events * kernels.len() as u64) as f64 / s / 1e6,
            r.models.iter().map(|m| m.faults_taken).collect::<Vec<_>>()
        );
    }
}
