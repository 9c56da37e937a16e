//! mmlab's kernel model: the Linux memory-management hot paths as plain,
//! deterministic Rust.
//!
//! One module per kernel source file, with the kernel's names. The model does
//! no I/O, never reads a wall clock, spawns no threads and keeps no floating
//! point in its state; it receives the current virtual time as an argument and
//! reports the cost of each step through [`cost::Cx`], never knowing how it is
//! driven.

pub mod cacheline;
pub mod copy_page;
pub mod cost;
pub mod exec;
pub mod hugetlb;
pub mod knobs;
pub mod memory;
pub mod migrate;
pub mod mprotect;
pub mod mremap;
pub mod page;
pub mod page_alloc;
pub mod pcp;
pub mod pgtable;
pub mod rng;
pub mod types;
pub mod vma;
pub mod vmacache;
pub mod vmstat;

pub use types::*;
