//! Runs one measurement with its default configuration and prints its table.
//!
//! `cargo run --release -p native --example measure -- copy-order|parallel-copy|faults`
//!
//! The `mmlab native` command of the CLI crate is the real front end; this example
//! exists so that the crate can be exercised on its own.

use native::faults::{self, Advice, FaultPattern, GIB};
use native::knobs::{ThpEnabled, ThpKnobs};
use native::{copy_order, parallel_copy, NativeError};

fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    let result = match what.as_str() {
        "copy-order" => copy_order::run(&copy_order::Config::default()).map(|r| r.table()),
        "parallel-copy" => parallel_copy::run(&parallel_copy::Config::default()).map(|r| r.table()),
        "faults" => fault_tables(),
        _ => {
            eprintln!("usage: measure copy-order|parallel-copy|faults");
            std::process::exit(2);
        }
    };
    match result {
        Ok(table) => print!("{table}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(if e.is_cannot_run() { 77 } else { 1 });
        }
    }
}

/// The 1 GiB patterns of the issue tracker, sequential writes, literal knobs.
fn fault_tables() -> Result<String, NativeError> {
    let mut out = String::new();
    let mut unaligned_64k = FaultPattern::new(
        "64K only, +12K, 1 GiB-20K",
        GIB - (20 << 10),
        ThpKnobs::only(64, ThpEnabled::Always),
    );
    unaligned_64k.offset_bytes = 12 << 10;
    let mut madv = FaultPattern::new("2M madvise", GIB, ThpKnobs::only(2048, ThpEnabled::Madvise));
    madv.advice = Advice::Hugepage;
    for p in [
        FaultPattern::new("THP off", GIB, ThpKnobs::off()),
        FaultPattern::new("16K only", GIB, ThpKnobs::only(16, ThpEnabled::Always)),
        FaultPattern::new("64K only", GIB, ThpKnobs::only(64, ThpEnabled::Always)),
        FaultPattern::new("2M only", GIB, ThpKnobs::only(2048, ThpEnabled::Always)),
        unaligned_64k,
        madv,
    ] {
        let r = faults::run(&p)?;
        out += &r.table();
        out.push('\n');
    }
    Ok(out)
}
