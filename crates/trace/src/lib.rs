//! mmlab's recorded traces: the typed events of a real workload, the compact
//! mmlab trace format that stores them, recording on the live kernel through
//! a private tracefs instance, and import of perf.data files.
//!
//! # Code map
//!
//! - [`event`]: the [`Event`] enum and the trace [`Header`]/[`Trailer`].
//! - [`format`]: [`TraceWriter`] and the streaming [`TraceReader`].
//! - [`record`]: [`record::record`] on the live kernel (root and tracefs).
//! - [`exec_layout`]: each exec's mappings from perf's mapping records,
//!   shared by the recorder and an importer.
//! - [`perf`]: [`perf::import`] of `perf record -e kmem:...` files;
//!   [`perf_workload`]: the recorded command's process tree in a `perf record -a` file;
//!   [`perf_unfinished`]: a file whose header perf never finished (killed).
//! - [`elf_layout`]: an exec's layout completed from its ELF files (perf.data without -d).
//! - [`kfault`]: the estimate of the kernel's faults on user memory when
//!   `exceptions:page_fault_kernel` was not recorded.
//! - [`replay`]: replay mode (a), the allocator stream as engine tasks.
//! - [`aspace`]: replay mode (b), the address-space stream through the
//!   fault path, every kernel side by side in one pass.
//! - `tracefs`: the ring-buffer page and tracepoint `format` parsers both of
//!   the above share, and `decode`: tracepoint records to [`Event`]s.
//!
//! # Invariants
//!
//! - The same input file always gives the same events in the same order.
//! - Nothing that comes from a file or the kernel can make this crate panic:
//!   bad input is a typed error that names where it is.

pub mod aspace;
pub mod decode;
pub mod elf_layout;
pub mod event;
pub mod exec_layout;
pub mod format;
pub mod kfault;
pub mod perf;
pub mod perf_unfinished;
pub mod perf_workload;
pub mod record;
pub mod replay;
pub mod sysinfo;
pub mod tracefs;

pub use event::{Event, EventKind, Header, Trailer};
pub use format::{TraceError, TraceFile, TraceReader, TraceSink, TraceWriter};
