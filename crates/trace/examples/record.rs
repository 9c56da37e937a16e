//! Records a command into an mmlab trace and prints the summary.
//!
//! ```text
//! cargo run --release -p trace --example record -- OUT CMD [ARGS...]
//! ```

use std::path::Path;

use trace::record::{record, RecordOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (out, cmd) = match (args.first(), args.get(1)) {
        (Some(o), Some(c)) => (o, c),
        _ => return Err("usage: record OUT CMD [ARGS...]".into()),
    };
    let s = record(Path::new(out), cmd, &args[2..], &RecordOptions::default())?;
    println!("{s:#?}");
    println!(
        "{} events, {:.2} bytes/event in the trace, {:.2} ring-buffer bytes/event",
        s.nr_events,
        s.nr_trace_bytes as f64 / s.nr_events.max(1) as f64,
        s.nr_raw_bytes as f64 / s.nr_events.max(1) as f64
    );
    Ok(())
}
