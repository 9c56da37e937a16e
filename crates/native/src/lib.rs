//! Real-hardware and live-kernel measurements on the host.
//!
//! Where the model (`mm`, `sim`) predicts, this crate measures: the live kernel's
//! fault counts for a pattern, and the real cost of copying huge pages in a given
//! order or with several threads. Everything here touches real memory, real knobs and
//! real threads; nothing here is deterministic in time, but everything that is
//! deterministic in the kernel (fault counts, per-size folio allocations) is reported
//! exactly.
//!
//! # Modules
//!
//! | module | kernel behaviour | entry point |
//! | --- | --- | --- |
//! | [`knobs`] | THP/mTHP sysfs knobs, sysctls | [`knobs::LiveKernel::probe`], [`knobs::LiveLock`], [`knobs::KnobGuard`] |
//! | [`vmstat`] | `/proc/vmstat`, `hugepages-*/stats` | [`vmstat::Snapshot::take`] |
//! | [`faults`] | anonymous faults, mTHP order choice, THP COW split | [`faults::run`] |
//! | [`hugetlb`] | hugetlb pool, `MAP_HUGETLB` faults and COW, `HugePages_*` | [`hugetlb::run`] |
//! | [`copy_order`] | `process_huge_page()` sub-page order | [`copy_order::run`] |
//! | [`parallel_copy`] | multi-threaded huge-page copy (seed 001) | [`parallel_copy::run`] |
//! | [`calibrate`] | micro-benchmarks of clear/copy, locks, cache lines, DRAM, syscalls, munmap/mprotect/fork per page | [`calibrate::run_interleaved`] |
//!
//! # API principles
//!
//! - A measurement is `module::run(&Config) -> Result<Report, NativeError>`. `Config`
//!   has a `Default` that finishes in a few seconds; `Report` is plain data with a
//!   `table()` method that formats it as text. Printing is the caller's business.
//! - An environment problem is a [`NativeError`], never a panic. "This host cannot run
//!   it" is [`NativeError::CannotRun`] with a [`knobs::CannotRun`] reason.
//! - Anything that changes system-wide state holds the [`knobs::LiveLock`] and
//!   restores every knob it changed, also on panic.
//! - Random choices come from [`rng::SplitMix64`] with a seed in the config.

pub mod calibrate;
pub mod copy_order;
pub mod error;
pub mod faults;
pub mod hugetlb;
pub mod knobs;
pub mod parallel_copy;
pub mod rng;
pub mod stats;
pub mod sys;
pub mod table;
pub mod vmstat;

pub use error::NativeError;
