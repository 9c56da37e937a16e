//! Runs one measurement with its default configuration and prints its table.
//!
//! `cargo run --release -p native --example measure -- copy-order|parallel-copy|faults`
//!
//! The `mmlab native` command of the CLI crate is the real front end; this example
//! exists so that the crate can be exercised on its own.

use native::faults;
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

/// The issue tracker's 1 GiB patterns on the live kernel.
fn fault_tables() -> Result<String, NativeError> {
    let mut out = String::new();
    for (p, _) in faults::reference_patterns() {
        out += &faults::run(&p)?.table();
        out.push('\n');
    }
    Ok(out)
}
