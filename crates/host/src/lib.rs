//! Safe contact with the live host.
//!
//! `mmlab` writes files users care about (traces of long runs, results) and
//! changes system-wide state (THP and PCP knobs, hugetlb pools, tracefs
//! instances). This crate holds the mechanisms that keep both safe, so that
//! `native`, `trace` and `cli` share one implementation:
//!
//! | module | what it guarantees |
//! | --- | --- |
//! | [`output`] | an output appears whole or not at all; a failed or rejected run never touches an existing file; no predictable temporary name |
//!
//! The crate sits beside the model: it depends on no other mmlab crate, and
//! `mm`/`sim` never use it (they do no I/O).

pub mod output;
mod rand;

pub use output::{AtomicFile, Mode, OutputError};
