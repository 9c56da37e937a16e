//! Reads an mmlab trace and prints its event counts, bytes per event and the
//! reader's throughput; or, with `--synthetic N OUT`, writes a trace of N
//! seeded synthetic events (for fuzz seeds and benchmarks).
//!
//! ```text
//! cargo run --release -p trace --example trace_stats -- FILE
//! cargo run --release -p trace --example trace_stats -- --synthetic 100 seed.mmtrace
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use trace::event::{Event, EventKind, Header, Trailer};
use trace::{TraceReader, TraceWriter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--synthetic") {
        let n: u64 = args.get(1).ok_or("missing N")?.parse()?;
        let out = args.get(2).ok_or("missing OUT")?;
        let mut w = TraceWriter::create(
            Path::new(out),
            &Header::synthetic("trace_stats --synthetic"),
        )?;
        for i in 0..n {
            let kind = match i % 4 {
                0 => EventKind::PageAlloc {
                    pfn: 0x10_0000 + i * 3,
                    order: 0,
                    migratetype: 1,
                    gfp_flags: 0x140cca,
                },
                1 => EventKind::PageFaultUser {
                    address: 0x7f00_0000_0000 + (i << 12),
                    ip: 0x40_1000,
                    error_code: 6,
                },
                2 => EventKind::PageFree {
                    pfn: 0x10_0000 + i,
                    order: 0,
                },
                _ => EventKind::Mmap {
                    addr: 0,
                    len: 1 << 20,
                    prot: 3,
                    flags: 0x22,
                    fd: u64::MAX,
                    off: 0,
                    ret: Some(0x7f00_0000_0000),
                },
            };
            w.write(&Event {
                ts_ns: 1000 + i * 250,
                cpu: (i % 2) as u32,
                pid: 42,
                tid: 42,
                kind,
            })?;
        }
        w.finish(&Trailer::default())?;
        return Ok(());
    }
    let path = args
        .first()
        .ok_or("usage: trace_stats FILE | --synthetic N OUT")?;
    let size = std::fs::metadata(path)?.len();
    let t0 = Instant::now();
    let mut reader = TraceReader::open(Path::new(path))?;
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut n = 0u64;
    for ev in reader.by_ref() {
        *by_kind.entry(ev?.kind.name()).or_default() += 1;
        n += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    for (k, v) in &by_kind {
        println!("{v:>12}  {k}");
    }
    println!(
        "{n} events, {size} bytes, {:.2} bytes/event",
        size as f64 / n.max(1) as f64
    );
    println!(
        "read in {:.3} s: {:.1} M events/s",
        secs,
        n as f64 / secs / 1e6
    );
    if let Some(t) = reader.trailer() {
        println!(
            "lost {} events, {} unpaired syscalls",
            t.nr_lost_events, t.nr_unpaired_syscalls
        );
    }
    Ok(())
}
