//! Replay speed: a synthetic trace of 1M allocator events (500k alloc/free
//! pairs on 4 CPUs, orders 0-3, a third freed on another CPU), written,
//! prepared and replayed; prints events per second.
//!
//! `cargo run --release -p trace --example replay_bench [EVENTS]`

use std::time::Instant;

use mm::cost::CostTable;
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc, VmSysctl};
use sim::Engine;
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

fn main() {
    let nr_events: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let nr_cpus = 4u32;
    // A private directory, gone when `path` drops (also on a panic).
    let path =
        host::scratch::ScratchFile::new("replay-bench", "bench.mmtrace").expect("scratch dir");
    let t0 = Instant::now();
    let mut w = TraceWriter::create(&path, &Header::synthetic("replay bench")).expect("create");
    // Each CPU keeps up to 64 blocks live, FIFO.
    let mut live: Vec<std::collections::VecDeque<(u64, u32)>> =
        vec![Default::default(); nr_cpus as usize];
    let mut next_pfn = 0u64;
    let mut ts = 0u64;
    let mut n = 0u64;
    let mut i = 0u64;
    while n < nr_events {
        let cpu = (i % nr_cpus as u64) as u32;
        let q = &mut live[cpu as usize];
        let kind = if q.len() >= 64 || (i.is_multiple_of(3) && !q.is_empty()) {
            let (pfn, order) = q.pop_front().expect("non-empty");
            EventKind::PageFree { pfn, order }
        } else {
            let order = [0, 0, 0, 1, 2, 3][(i % 6) as usize];
            let pfn = next_pfn;
            next_pfn += 8;
            q.push_back((pfn, order));
            EventKind::PageAlloc {
                pfn,
                order,
                migratetype: 1,
                gfp_flags: 0x140cca,
            }
        };
        // A third of the frees happen on the next CPU.
        let on = if matches!(kind, EventKind::PageFree { .. }) && i.is_multiple_of(3) {
            (cpu + 1) % nr_cpus
        } else {
            cpu
        };
        ts += 37;
        w.write(&Event {
            ts_ns: ts,
            cpu: on,
            pid: 1,
            tid: 1,
            kind,
        })
        .expect("write");
        n += 1;
        i += 1;
    }
    w.finish(&Trailer {
        nr_events: n,
        ..Trailer::default()
    })
    .expect("finish");
    let t1 = Instant::now();
    let prep = trace::replay::Prepared::open(&path).expect("prepare");
    let t2 = Instant::now();
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus,
            nr_pages: 1 << 22,
        }],
        dma32_pages: 0,
    };
    let pa = PageAlloc::new(&layout, VmSysctl::default(), mm::pcp::PcpPolicy::default());
    let mut eng = Engine::new(pa, CostTable::uniform(20), 1);
    let (tasks, stats) = prep.tasks(nr_cpus);
    for t in tasks {
        eng.spawn(t);
    }
    let t3 = Instant::now();
    eng.run();
    let t4 = Instant::now();
    let st = stats.borrow();
    let ev = (prep.recorded.allocs + prep.recorded.frees) as f64;
    println!("{} events ({} allocs, {} frees, {} cross-CPU waits): write {:.2}s, first pass {:.2}s ({:.2} M events/s), replay {:.2}s ({:.2} M events/s), prepare+replay {:.2} M events/s",
        n, st.allocs, st.frees, st.cross_cpu_waits,
        (t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64(), ev / (t2 - t1).as_secs_f64() / 1e6,
        (t4 - t3).as_secs_f64(), ev / (t4 - t3).as_secs_f64() / 1e6,
        ev / ((t4 - t3) + (t2 - t1)).as_secs_f64() / 1e6);
}
