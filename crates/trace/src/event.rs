//! The typed events of a recorded trace, and the header and trailer that
//! describe the machine and the kernel they were recorded on.
//!
//! # What is recorded
//!
//! Only what mmlab replays: page allocator traffic (the `kmem:` tracepoints),
//! page faults (`exceptions:page_fault_user`, and `page_fault_kernel` for the
//! kernel's own faults on user memory), the system calls that
//! shape an address space (with their return value, so a failed `mmap` is not
//! replayed as a mapping) and the process lifecycle (`sched:` fork, exec and
//! exit). Every field keeps the tracepoint's name.
//!
//! # Invariants
//!
//! - A trace's events are in non-decreasing `ts_ns` order when they come from
//!   [`crate::record`] or [`crate::perf`]; ties keep the order of the CPU
//!   number and then of the ring buffer, so the order is deterministic.
//! - A system call event carries the timestamp of its *exit*: that is when
//!   its effect on the address space is complete and its return value known.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One traced event: when, where, which task, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds on the trace clock (`mono` for live recordings, perf's
    /// clock for imports). Only differences are meaningful.
    pub ts_ns: u64,
    /// The CPU the event fired on.
    pub cpu: u32,
    /// The thread group id (the process); equal to `tid` when unknown.
    pub pid: i32,
    /// The thread id (`common_pid` in a tracepoint record).
    pub tid: i32,
    /// What happened.
    pub kind: EventKind,
}

/// The table of event kinds: one line per kind gives its stable code (what
/// the trace format stores), its variant, the tracepoint (or perf record)
/// it comes from, and its fields with the codec that stores each (see
/// `format::FieldWriter`/`format::Cursor`: `pfn` and `addr` are deltas
/// from the previous record of the chunk, `str` a bounded byte string,
/// `ret` an optional return value). Everything that must agree per kind —
/// the enum, [`EventKind::code`], [`EventKind::name_of_code`], the encoder
/// and the decoder — is generated from it, so a kind is added in one place.
macro_rules! event_kinds {
    ($(
        $(#[$doc:meta])*
        $code:literal => $variant:ident $name:literal {
            $( $(#[$fdoc:meta])* $field:ident : $ty:ty [$codec:ident] ),* $(,)?
        }
    ),* $(,)?) => {
        /// What happened, with the tracepoint's fields under their kernel names.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum EventKind {
            $( $(#[$doc])* $variant { $( $(#[$fdoc])* $field: $ty ),* }, )*
        }

        /// The number of distinct [`EventKind`] variants, for per-kind tables.
        pub const NR_EVENT_KINDS: usize = [$($code),*].len();

        // The codes are the variants' positions: 0, 1, 2, ... in order.
        const _: () = {
            let codes: [u8; NR_EVENT_KINDS] = [$($code),*];
            let mut i = 0;
            while i < codes.len() {
                assert!(codes[i] as usize == i, "event codes must be 0, 1, 2, ... in table order");
                i += 1;
            }
        };

        impl EventKind {
            /// A stable small number per variant; the trace format stores it.
            pub fn code(&self) -> u8 {
                match self {
                    $( EventKind::$variant { .. } => $code, )*
                }
            }

            /// The name of the tracepoint (or system call, or perf record)
            /// the variant comes from, indexed by [`EventKind::code`].
            pub fn name_of_code(code: u8) -> &'static str {
                const NAMES: [&str; NR_EVENT_KINDS] = [$($name),*];
                NAMES.get(code as usize).copied().unwrap_or("unknown")
            }

            /// Writes the variant's fields (not its code) in table order.
            pub(crate) fn encode_fields(&self, w: &mut crate::format::FieldWriter<'_>) {
                match self {
                    $( EventKind::$variant { $($field),* } => { $( w.$codec($field); )* } )*
                }
            }

            /// Reads the fields of the variant of `code`; `Ok(None)` for a
            /// code no variant has.
            #[inline(always)]
            pub(crate) fn decode_fields(
                code: u8,
                r: &mut crate::format::FieldReader<'_, '_>,
            ) -> Result<Option<EventKind>, crate::format::TraceError> {
                Ok(Some(match code {
                    $( $code => EventKind::$variant { $( $field: r.$codec(stringify!($field))? ),* }, )*
                    _ => return Ok(None),
                }))
            }
        }
    };
}

event_kinds! {
    /// `kmem:mm_page_alloc`: a block of `2^order` pages left the allocator.
    0 => PageAlloc "kmem:mm_page_alloc" {
        pfn: u64 [pfn], order: u32 [u32], migratetype: i32 [i32], gfp_flags: u64 [u64],
    },
    /// `kmem:mm_page_free`: a block went back to the allocator.
    1 => PageFree "kmem:mm_page_free" { pfn: u64 [pfn], order: u32 [u32] },
    /// `kmem:mm_page_alloc_zone_locked`: an allocation that took the zone
    /// lock, either for itself or to refill a per-CPU list (`percpu_refill`).
    2 => PageAllocZoneLocked "kmem:mm_page_alloc_zone_locked" {
        pfn: u64 [pfn], order: u32 [u32], migratetype: i32 [i32], percpu_refill: bool [bool],
    },
    /// `kmem:mm_page_pcpu_drain`: a page moved from a per-CPU list back to
    /// the buddy lists.
    3 => PagePcpuDrain "kmem:mm_page_pcpu_drain" {
        pfn: u64 [pfn], order: u32 [u32], migratetype: i32 [i32],
    },
    /// `exceptions:page_fault_user`.
    4 => PageFaultUser "exceptions:page_fault_user" {
        address: u64 [addr], ip: u64 [u64], error_code: u64 [u64],
    },
    /// `mmap(addr, len, prot, flags, fd, off)`; `ret` is the mapped address
    /// or a negative errno (see [`EventKind::Munmap`] for `None`).
    5 => Mmap "syscalls:mmap" {
        addr: u64 [addr], len: u64 [u64], prot: u64 [u64], flags: u64 [u64], fd: u64 [u64],
        off: u64 [u64], ret: Option<i64> [ret],
    },
    /// `munmap(addr, len)`. `ret` is `None` when the call's
    /// `sys_exit_*` tracepoint was not recorded (a perf.data recorded with
    /// the entry only): the event then carries the entry's time, and a
    /// replay computes the result itself. The same holds for every system
    /// call kind.
    6 => Munmap "syscalls:munmap" { addr: u64 [addr], len: u64 [u64], ret: Option<i64> [ret] },
    /// `brk(brk)`; `ret` is the new break.
    7 => Brk "syscalls:brk" { brk: u64 [addr], ret: Option<i64> [ret] },
    /// `mremap(addr, old_len, new_len, flags, new_addr)`.
    8 => Mremap "syscalls:mremap" {
        addr: u64 [addr], old_len: u64 [u64], new_len: u64 [u64], flags: u64 [u64],
        new_addr: u64 [u64], ret: Option<i64> [ret],
    },
    /// `mprotect(start, len, prot)`.
    9 => Mprotect "syscalls:mprotect" {
        start: u64 [addr], len: u64 [u64], prot: u64 [u64], ret: Option<i64> [ret],
    },
    /// `madvise(start, len_in, behavior)`.
    10 => Madvise "syscalls:madvise" {
        start: u64 [addr], len_in: u64 [u64], behavior: i64 [i64], ret: Option<i64> [ret],
    },
    /// `sched:sched_process_fork`: `parent` created `child` (a process or a
    /// thread: the tracepoint does not say which). Also made from perf's
    /// `PERF_RECORD_FORK` when the tracepoint was not recorded.
    11 => Fork "sched:sched_process_fork" { parent: i32 [i32], child: i32 [i32] },
    /// `sched:sched_process_exec`: fires when the new image is mapped (after
    /// the ELF loader's mappings). Made from perf's `PERF_RECORD_COMM` with
    /// `PERF_RECORD_MISC_COMM_EXEC` when the tracepoint was not recorded:
    /// then `filename` is the task's new `comm` (at most 15 bytes) and the
    /// event comes *before* the new image's mappings (see [`EventKind::Comm`]).
    12 => Exec "sched:sched_process_exec" { pid: i32 [i32], filename: String [str] },
    /// `sched:sched_process_exit`: a task exited. Also made from perf's
    /// `PERF_RECORD_EXIT` when the tracepoint was not recorded.
    13 => Exit "sched:sched_process_exit" { pid: i32 [i32] },
    /// `exceptions:page_fault_kernel`: a fault taken in kernel mode, on a
    /// user address when the kernel copies to or from user memory
    /// (`copy_to_user()` into a buffer never touched: `read()` into fresh
    /// memory). Counted in `pgfault` like a user fault; `error_code` has no
    /// `X86_PF_USER` bit.
    14 => PageFaultKernel "exceptions:page_fault_kernel" {
        address: u64 [addr], ip: u64 [u64], error_code: u64 [u64],
    },
    /// The address space `execve()` set up for process `pid`: every mapping
    /// the kernel made or grew while it loaded the program, in the order it
    /// made them (see [`ExecVma`]). Follows the `sched_process_exec` event
    /// of the same exec. Not a tracepoint: `mmlab record` takes the
    /// kernel's `PERF_RECORD_MMAP2` records of the exec (perf's `mmap_data`
    /// stream of the process tree); the perf.data importer takes the
    /// `PERF_RECORD_MMAP2` records of a `perf record -d` file between the
    /// exec's `PERF_RECORD_COMM` and its return to user space.
    15 => ExecLayout "mmlab:exec_layout" { pid: i32 [i32], vmas: Vec<ExecVma> [exec_vmas] },
    /// perf's `PERF_RECORD_MMAP2` (or `PERF_RECORD_MMAP`): the kernel's
    /// account of a VMA after `mmap_region()`, `do_brk_flags()`,
    /// `mprotect_fixup()`, a stack expansion or an install of a special
    /// mapping (`perf_event_mmap()`), as `[addr, addr + len)` *after* any
    /// merge with a neighbour; executable VMAs always, the others only with
    /// `perf record -d`. `filename` is the file, or `//anon`, `[heap]`,
    /// `[stack]`, `[vdso]`...; `prot`/`flags` are `PROT_*`/`MAP_*` bits
    /// (for a `PERF_RECORD_MMAP` without them: `PROT_READ`, plus
    /// `PROT_EXEC` for an executable one, and `MAP_PRIVATE`). Records perf
    /// synthesized at the start from `/proc/PID/maps` (the address spaces
    /// of processes that already existed) have time 0. The importer puts
    /// an exec's records into its [`EventKind::ExecLayout`] instead.
    16 => MmapRecord "perf:mmap" {
        addr: u64 [addr], len: u64 [u64], pgoff: u64 [u64], prot: u32 [u32], flags: u32 [u32],
        filename: String [str],
    },
    /// perf's `PERF_RECORD_COMM`: the task's name changed; `exec` when the
    /// change is an `execve()` (`PERF_RECORD_MISC_COMM_EXEC`), which the
    /// kernel reports from `begin_new_exec()`: after the old address space
    /// is gone and before the ELF loader maps the new image (whose
    /// `PERF_RECORD_MMAP2` records follow). Only exec records and those perf
    /// synthesized at the start are kept.
    17 => Comm "perf:comm" { comm: String [str], exec: bool [bool] },
    /// `workqueue:workqueue_execute_start` of the per-CPU vmstat work
    /// (`vmstat_update()`, mm/vmstat.c): a kworker began the CPU's vmstat
    /// refresh, whose `refresh_cpu_vm_stats()` runs `decay_pcp_high()` on
    /// every zone's pageset of this CPU (6.7+). Only records of that work
    /// function are kept: `mmlab record` filters on it in the kernel
    /// (`function.function == vmstat_update`), and a perf.data must be
    /// recorded with the same `--filter` (see `mmlab import --help`). The
    /// event's `pid` and `tid` are the kworker's. The work runs about once a
    /// second per CPU, at a phase the kernel's timer wheel picks
    /// (`round_jiffies_relative()`), which the PCP drains of
    /// `decay_pcp_high()` follow.
    18 => VmstatWork "workqueue:workqueue_execute_start" {},
}

/// One mapping made by `execve()`, with the fields of `PERF_RECORD_MMAP2`.
///
/// The kernel reports, in order: the stack once `setup_arg_pages()` has
/// grown it (`[stack]`); the program's `PT_LOAD` segments (the first one
/// over the whole image, which the loader then trims), each segment's
/// `.bss` beyond its file part (`//anon`); the same for the interpreter;
/// the vDSO and its data pages (`[vdso]`, `[vvar]`, `[vvar_vclock]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecVma {
    /// First byte (page-aligned).
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// Page offset in the file (for anonymous memory, the kernel reports
    /// the start address).
    pub pgoff: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_SHARED` or `MAP_PRIVATE`.
    pub flags: u32,
    /// The file's path, or `//anon`, `[stack]`, `[heap]`, `[vdso]`, ...
    pub name: String,
}

impl EventKind {
    /// The tracepoint name of this event.
    pub fn name(&self) -> &'static str {
        Self::name_of_code(self.code())
    }

    /// The kind's code for a name of [`EventKind::name_of_code`].
    pub fn code_of_name(name: &str) -> Option<u8> {
        (0..NR_EVENT_KINDS as u8).find(|&c| Self::name_of_code(c) == name)
    }

    /// The page allocator's events and the per-CPU vmstat work (a
    /// kworker's, which drains the PCP lists): the machine's, not one
    /// process's.
    pub fn is_allocator(&self) -> bool {
        matches!(
            self,
            EventKind::PageAlloc { .. }
                | EventKind::PageFree { .. }
                | EventKind::PageAllocZoneLocked { .. }
                | EventKind::PagePcpuDrain { .. }
                | EventKind::VmstatWork {}
        )
    }
}

/// Where a trace came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceSource {
    /// Recorded by [`crate::record::record`] running `cmd args...`.
    Record {
        cmd: String,
        args: Vec<String>,
        mechanism: String,
    },
    /// Imported by [`crate::perf::import`] from a perf.data file.
    PerfImport {
        file: String,
        perf_version: Option<String>,
        cmdline: Option<String>,
    },
    /// Written by a program or a test directly.
    Synthetic { description: String },
}

/// One CPU's per-CPU pageset of a zone, as `/proc/zoneinfo` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pageset {
    pub cpu: u32,
    pub count: u64,
    pub high: u64,
    pub batch: u64,
    /// Present on kernels with PCP high auto-tuning (6.7 and later).
    pub high_min: Option<u64>,
    pub high_max: Option<u64>,
}

/// One zone of `/proc/zoneinfo`, in pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    pub node: u32,
    pub name: String,
    pub managed: u64,
    pub present: u64,
    pub spanned: u64,
    pub min: u64,
    pub low: u64,
    pub high: u64,
    pub pagesets: Vec<Pageset>,
    /// The zone's first page frame (`start_pfn:`), when the snapshot says.
    #[serde(default)]
    pub start_pfn: Option<u64>,
}

/// The machine a trace was recorded on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub nr_cpus: u32,
    pub zones: Vec<Zone>,
}

/// The memory-management knobs in force during the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knobs {
    /// `transparent_hugepage/enabled`: the selected value (`always`,
    /// `madvise`, `never`).
    pub thp_enabled: Option<String>,
    /// `transparent_hugepage/hugepages-<size>/enabled` by directory name
    /// (`hugepages-64kB` → `inherit`).
    pub thp_sizes_enabled: BTreeMap<String, String>,
    /// `vm.percpu_pagelist_high_fraction`.
    pub percpu_pagelist_high_fraction: Option<u64>,
}

/// A snapshot of the kernel's own counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// `/proc/vmstat`, whole.
    pub vmstat: BTreeMap<String, u64>,
    /// `transparent_hugepage/hugepages-<size>/stats/*` by directory name,
    /// then by counter name.
    pub thp_stats: BTreeMap<String, BTreeMap<String, u64>>,
}

/// The trace header, written before the first event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub mmlab_version: String,
    pub source: TraceSource,
    /// `uname -r` of the kernel the trace comes from, when known.
    pub kernel_release: Option<String>,
    pub machine: Machine,
    pub knobs: Knobs,
    /// The clock the timestamps come from (`mono`, `perf`, ...).
    pub trace_clock: String,
    pub counters_before: Option<Counters>,
    /// The `kmem:` events are every process's (`mmlab record
    /// --kmem-system-wide`), not only the recorded command's.
    #[serde(default)]
    pub kmem_system_wide: bool,
    /// The zoneinfo snapshot (the PCP lists' `count` and `high`) was read
    /// when the command exec'd, with the events already on (`mmlab import
    /// --snapshot-at-exec`): the allocator events before the command's
    /// first exec are already in it, so the replay of the allocator stream
    /// starts at that exec. False: the snapshot is of the trace's start.
    #[serde(default)]
    pub snapshot_at_exec: bool,
}

impl Header {
    /// A header with nothing but its source, for tests and synthetic traces.
    pub fn synthetic(description: &str) -> Header {
        Header {
            mmlab_version: env!("CARGO_PKG_VERSION").to_string(),
            source: TraceSource::Synthetic {
                description: description.to_string(),
            },
            kernel_release: None,
            machine: Machine::default(),
            knobs: Knobs::default(),
            trace_clock: "none".to_string(),
            counters_before: None,
            kmem_system_wide: false,
            snapshot_at_exec: false,
        }
    }
}

/// The trace trailer, written after the last event: what is only known at
/// the end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// Events in the file.
    pub nr_events: u64,
    /// Events the kernel could not store (ring-buffer overruns and drops,
    /// perf's LOST records). Non-zero means the trace is incomplete.
    pub nr_lost_events: u64,
    /// System call entries without an exit, or exits without an entry: they
    /// are not in the trace.
    pub nr_unpaired_syscalls: u64,
    /// Events of kinds mmlab does not know, by tracepoint name.
    pub ignored_events: BTreeMap<String, u64>,
    /// Event kinds a replay needs that the source did not contain (for an
    /// import: tracepoints that were not recorded).
    pub missing_event_kinds: Vec<String>,
    pub counters_after: Option<Counters>,
    /// Exit status of the recorded command, as the shell would print it.
    pub exit_status: Option<String>,
    /// Whether the recording was cut short by SIGINT.
    pub interrupted: bool,
    /// The recorded command's minor faults (`ru_minflt` from `wait4()`: the
    /// command and every descendant it waited for, counted by the kernel as
    /// `pgfault` counts them), when the recorder reaped it. Unlike the
    /// `/proc/vmstat` deltas this is the workload's own count.
    #[serde(default)]
    pub workload_minflt: Option<u64>,
    /// Its major faults (`ru_majflt`).
    #[serde(default)]
    pub workload_majflt: Option<u64>,
}
