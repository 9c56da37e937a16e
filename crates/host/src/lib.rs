//! Safe contact with the live host.
//!
//! `mmlab` writes files users care about (traces of long runs, results) and
//! changes system-wide state (THP and PCP knobs, hugetlb pools, tracefs
//! instances and mounts). This crate holds the mechanisms that keep both
//! safe, so that `native`, `trace` and `cli` share one implementation:
//!
//! | module | what it guarantees |
//! | --- | --- |
//! | [`output`] | an output appears whole or not at all; a failed or rejected run never touches an existing file; no predictable temporary name |
//! | [`journal`] | every change to system state is written down before it is made, with what undoes it; undone by its owner, on a signal, or by the next run after a kill |
//! | [`signals`] | SIGINT, SIGTERM, SIGHUP, SIGQUIT undo the journal and end the process by the same signal; a recorded workload's group gets them first |
//! | [`lock`] | [`lock::LiveLock`]: one user of system-wide state at a time, across threads and processes; taking it restores what a dead holder left |
//! | [`limits`] | a cap on this process's address space (the fuzzers) |
//! | [`scratch`] | scratch directories with unpredictable names, owner-only, removed when dropped (also when a test panics) |
//! | [`live`] | where the kernel keeps its knobs and counters, and how their text reads (`[choice]` lists, `/proc/vmstat`) |
//!
//! The crate sits beside the model: it depends on no other mmlab crate, and
//! `mm`/`sim` never use it (they do no I/O).

pub mod journal;
pub mod limits;
pub mod live;
pub mod lock;
pub mod output;
mod rand;
pub mod scratch;
pub mod signals;

pub use output::{AtomicFile, Mode, OutputError};
