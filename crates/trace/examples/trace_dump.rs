//! Prints every event of an mmlab trace in its debug form, one per line
//! (allocator events left out unless `--kmem`): for diffing two recordings.
//!
//! ```sh
//! cargo run --release -p trace --example trace_dump -- run.mmtrace [--kmem]
//! ```
use std::path::Path;

use trace::{EventKind, TraceReader};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: trace_dump TRACE [--kmem]");
        std::process::exit(2);
    };
    let kmem = args.iter().any(|a| a == "--kmem");
    let mut r = match TraceReader::open(Path::new(path)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    for ev in r.by_ref() {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            }
        };
        let alloc = matches!(
            ev.kind,
            EventKind::PageAlloc { .. }
                | EventKind::PageFree { .. }
                | EventKind::PageAllocZoneLocked { .. }
                | EventKind::PagePcpuDrain { .. }
        );
        if alloc && !kmem {
            continue;
        }
        println!(
            "{} {} {}/{} {:?}",
            ev.ts_ns, ev.cpu, ev.pid, ev.tid, ev.kind
        );
    }
    println!("trailer {:?}", r.trailer());
}
