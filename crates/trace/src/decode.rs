//! From raw tracepoint records to [`Event`]s, shared by the live recorder
//! and the perf.data importer.
//!
//! # System calls
//!
//! A system call is two tracepoints, `sys_enter_<name>` with the arguments
//! and `sys_exit_<name>` with the return value. The decoder keeps at most one
//! pending entry per thread (a thread is in at most one system call) and
//! emits the event at the exit. An exit without its entry (the recording
//! started inside the call) or an entry without its exit (the task died, or
//! the recording stopped) is counted in `nr_unpaired_syscalls`, not guessed.
//!
//! Where the formats show a call's entry tracepoint but not its exit (a
//! perf.data recorded with `-e syscalls:sys_enter_munmap` alone), every
//! entry is emitted at once, at the entry's time, with `ret: None`: the
//! replay makes the call itself and takes the model's result.

use std::collections::BTreeMap;

use crate::event::{Event, EventKind};
use crate::tracefs::{EventFormat, Field};

/// The tracepoints mmlab records, as `system:name`.
pub const RECORDED_EVENTS: &[&str] = &[
    "kmem:mm_page_alloc",
    "kmem:mm_page_free",
    "kmem:mm_page_alloc_zone_locked",
    "kmem:mm_page_pcpu_drain",
    "exceptions:page_fault_user",
    "exceptions:page_fault_kernel",
    "syscalls:sys_enter_mmap",
    "syscalls:sys_exit_mmap",
    "syscalls:sys_enter_munmap",
    "syscalls:sys_exit_munmap",
    "syscalls:sys_enter_brk",
    "syscalls:sys_exit_brk",
    "syscalls:sys_enter_mremap",
    "syscalls:sys_exit_mremap",
    "syscalls:sys_enter_mprotect",
    "syscalls:sys_exit_mprotect",
    "syscalls:sys_enter_madvise",
    "syscalls:sys_exit_madvise",
    "sched:sched_process_fork",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
    // Only the runs of `vmstat_update()`: see `EventKind::VmstatWork`. Not
    // the recorded processes' own event: `mmlab record` enables it in an
    // instance without the pid filter.
    VMSTAT_WORK_EVENT,
];

/// The tracepoint of the per-CPU vmstat work, and the filter that keeps only
/// `vmstat_update()`'s runs (the `.function` suffix compares a function
/// pointer with a symbol by name: Linux 6.3+).
pub const VMSTAT_WORK_EVENT: &str = "workqueue:workqueue_execute_start";
pub const VMSTAT_WORK_FILTER: &str = "function.function == vmstat_update";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Syscall {
    Mmap,
    Munmap,
    Brk,
    Mremap,
    Mprotect,
    Madvise,
}

impl Syscall {
    const ALL: [Syscall; 6] = [
        Syscall::Mmap,
        Syscall::Munmap,
        Syscall::Brk,
        Syscall::Mremap,
        Syscall::Mprotect,
        Syscall::Madvise,
    ];

    fn from_name(name: &str) -> Option<Syscall> {
        Some(match name {
            "mmap" => Syscall::Mmap,
            "munmap" => Syscall::Munmap,
            "brk" => Syscall::Brk,
            "mremap" => Syscall::Mremap,
            "mprotect" => Syscall::Mprotect,
            "madvise" => Syscall::Madvise,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Syscall::Mmap => "mmap",
            Syscall::Munmap => "munmap",
            Syscall::Brk => "brk",
            Syscall::Mremap => "mremap",
            Syscall::Mprotect => "mprotect",
            Syscall::Madvise => "madvise",
        }
    }

    /// The argument names, in the order `EventKind` stores them.
    fn arg_names(self) -> &'static [&'static str] {
        match self {
            Syscall::Mmap => &["addr", "len", "prot", "flags", "fd", "off"],
            Syscall::Munmap => &["addr", "len"],
            Syscall::Brk => &["brk"],
            Syscall::Mremap => &["addr", "old_len", "new_len", "flags", "new_addr"],
            Syscall::Mprotect => &["start", "len", "prot"],
            Syscall::Madvise => &["start", "len_in", "behavior"],
        }
    }

    fn event(self, a: &[u64; 6], ret: Option<i64>) -> EventKind {
        match self {
            Syscall::Mmap => EventKind::Mmap {
                addr: a[0],
                len: a[1],
                prot: a[2],
                flags: a[3],
                fd: a[4],
                off: a[5],
                ret,
            },
            Syscall::Munmap => EventKind::Munmap {
                addr: a[0],
                len: a[1],
                ret,
            },
            Syscall::Brk => EventKind::Brk { brk: a[0], ret },
            Syscall::Mremap => EventKind::Mremap {
                addr: a[0],
                old_len: a[1],
                new_len: a[2],
                flags: a[3],
                new_addr: a[4],
                ret,
            },
            Syscall::Mprotect => EventKind::Mprotect {
                start: a[0],
                len: a[1],
                prot: a[2],
                ret,
            },
            Syscall::Madvise => EventKind::Madvise {
                start: a[0],
                len_in: a[1],
                behavior: a[2] as i64,
                ret,
            },
        }
    }
}

/// How to turn one tracepoint id's record into an event.
#[derive(Clone, Debug)]
enum Handler {
    PageAlloc {
        pfn: Field,
        order: Field,
        migratetype: Field,
        gfp_flags: Field,
    },
    PageFree {
        pfn: Field,
        order: Field,
    },
    ZoneLocked {
        pfn: Field,
        order: Field,
        migratetype: Field,
        percpu_refill: Field,
    },
    PcpuDrain {
        pfn: Field,
        order: Field,
        migratetype: Field,
    },
    FaultUser {
        address: Field,
        ip: Field,
        error_code: Field,
        kernel: bool,
    },
    SysEnter {
        call: Syscall,
        args: Vec<Field>,
    },
    SysExit {
        call: Syscall,
        ret: Field,
    },
    Fork {
        parent: Field,
        child: Field,
    },
    Exec {
        filename: Field,
        pid: Field,
    },
    Exit {
        pid: Field,
    },
    /// `workqueue_execute_start`: `work` is the `struct work_struct`, the
    /// same per-CPU `vmstat_work` at every run on a CPU.
    VmstatWork {
        work: Field,
    },
}

/// What one record turned into.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A complete event.
    Event(Event),
    /// A system-call entry, held until its exit.
    Pending,
    /// A record of a tracepoint mmlab does not use; the name says which.
    Ignored(String),
    /// A record too short for its own format (or an unknown id).
    Malformed(String),
    /// A system-call exit without its entry.
    Unpaired,
}

/// Turns raw tracepoint records into events, given the formats of the
/// tracepoints that may occur.
pub struct Decoder {
    handlers: BTreeMap<u32, (String, Option<Handler>)>,
    pending: BTreeMap<i32, (Syscall, [u64; 6])>,
    /// Per [`Syscall`]: its entry can be decoded but its exit cannot (not
    /// in the formats): entries are emitted at once with `ret: None`.
    entry_only: [bool; 6],
    /// System call entries replaced before their exit, plus exits without an
    /// entry.
    pub nr_unpaired_syscalls: u64,
    /// Per CPU: the `work` pointer of its first `workqueue_execute_start`
    /// (see [`Decoder::vmstat_work`]).
    vmstat_work: BTreeMap<u32, u64>,
}

fn need(fmt: &EventFormat, name: &str) -> Option<Field> {
    fmt.field(name).cloned()
}

fn handler_for(fmt: &EventFormat) -> Option<Handler> {
    let f = |n| need(fmt, n);
    Some(match (fmt.system.as_str(), fmt.name.as_str()) {
        ("kmem", "mm_page_alloc") => Handler::PageAlloc {
            pfn: f("pfn")?,
            order: f("order")?,
            migratetype: f("migratetype")?,
            gfp_flags: f("gfp_flags")?,
        },
        ("kmem", "mm_page_free") => Handler::PageFree {
            pfn: f("pfn")?,
            order: f("order")?,
        },
        ("kmem", "mm_page_alloc_zone_locked") => Handler::ZoneLocked {
            pfn: f("pfn")?,
            order: f("order")?,
            migratetype: f("migratetype")?,
            percpu_refill: f("percpu_refill")?,
        },
        ("kmem", "mm_page_pcpu_drain") => Handler::PcpuDrain {
            pfn: f("pfn")?,
            order: f("order")?,
            migratetype: f("migratetype")?,
        },
        ("exceptions", kind @ ("page_fault_user" | "page_fault_kernel")) => Handler::FaultUser {
            address: f("address")?,
            ip: f("ip")?,
            error_code: f("error_code")?,
            kernel: kind == "page_fault_kernel",
        },
        ("syscalls", name) => {
            if let Some(call) = name.strip_prefix("sys_enter_").and_then(Syscall::from_name) {
                let args = call
                    .arg_names()
                    .iter()
                    .map(|n| f(n))
                    .collect::<Option<Vec<_>>>()?;
                Handler::SysEnter { call, args }
            } else if let Some(call) = name.strip_prefix("sys_exit_").and_then(Syscall::from_name) {
                Handler::SysExit {
                    call,
                    ret: f("ret")?,
                }
            } else {
                return None;
            }
        }
        ("sched", "sched_process_fork") => Handler::Fork {
            parent: f("parent_pid")?,
            child: f("child_pid")?,
        },
        ("sched", "sched_process_exec") => Handler::Exec {
            filename: f("filename")?,
            pid: f("pid")?,
        },
        ("sched", "sched_process_exit") => Handler::Exit { pid: f("pid")? },
        ("workqueue", "workqueue_execute_start") => Handler::VmstatWork { work: f("work")? },
        _ => return None,
    })
}

impl Decoder {
    /// A decoder for records of the given formats; records of other ids are
    /// malformed.
    pub fn new(formats: &[EventFormat]) -> Decoder {
        let handlers: BTreeMap<u32, (String, Option<Handler>)> = formats
            .iter()
            .map(|f| (f.id, (f.full_name(), handler_for(f))))
            .collect();
        let has = |want: &dyn Fn(&Handler) -> bool| {
            handlers.values().any(|(_, h)| h.as_ref().is_some_and(want))
        };
        let entry_only = Syscall::ALL.map(|c| {
            has(&|h| matches!(h, Handler::SysEnter { call, .. } if *call == c))
                && !has(&|h| matches!(h, Handler::SysExit { call, .. } if *call == c))
        });
        Decoder {
            handlers,
            pending: BTreeMap::new(),
            entry_only,
            nr_unpaired_syscalls: 0,
            vmstat_work: BTreeMap::new(),
        }
    }

    /// The system calls whose entries are emitted without a result (their
    /// exit tracepoint is not among the formats), by name (`munmap`).
    pub fn entry_only_syscalls(&self) -> Vec<&'static str> {
        Syscall::ALL
            .iter()
            .filter(|c| self.entry_only[**c as usize])
            .map(|c| c.name())
            .collect()
    }

    /// Whether a format of this name is one the decoder turns into events
    /// (its fields were all found).
    pub fn handles(&self, full_name: &str) -> bool {
        self.handlers
            .values()
            .any(|(n, h)| n == full_name && h.is_some())
    }

    /// Decodes one record. `pid` is the thread group when the source knows
    /// it (perf does); otherwise pass `tid`.
    pub fn decode(
        &mut self,
        ts_ns: u64,
        cpu: u32,
        pid: i32,
        tid: i32,
        id: u32,
        data: &[u8],
    ) -> Decoded {
        let Some((name, handler)) = self.handlers.get(&id) else {
            return Decoded::Malformed(format!("tracepoint id {id}"));
        };
        let Some(handler) = handler else {
            return Decoded::Ignored(name.clone());
        };
        let short = || Decoded::Malformed(name.clone());
        let kind = match handler {
            h @ (Handler::PageAlloc { .. }
            | Handler::PageFree { .. }
            | Handler::ZoneLocked { .. }
            | Handler::PcpuDrain { .. }) => match page_event(h, data) {
                Some(kind) => kind,
                None => return short(),
            },
            h @ (Handler::FaultUser { .. } | Handler::Fork { .. } | Handler::Exec { .. }) => {
                match task_event(h, data) {
                    Some(kind) => kind,
                    None => return short(),
                }
            }
            Handler::SysEnter { call, args } => {
                let mut a = [0u64; 6];
                for (slot, f) in a.iter_mut().zip(args) {
                    let Some(v) = f.read_u64(data) else {
                        return short();
                    };
                    *slot = v;
                }
                if self.entry_only[*call as usize] {
                    call.event(&a, None)
                } else {
                    if self.pending.insert(tid, (*call, a)).is_some() {
                        self.nr_unpaired_syscalls += 1;
                    }
                    return Decoded::Pending;
                }
            }
            Handler::SysExit { call, ret } => {
                let Some(ret) = ret.read_i64(data) else {
                    return short();
                };
                match self.pending.remove(&tid) {
                    Some((entered, a)) if entered == *call => call.event(&a, Some(ret)),
                    other => {
                        // A different pending call cannot be this one's
                        // entry; it stays unpaired too.
                        self.nr_unpaired_syscalls += 1 + other.is_some() as u64;
                        return Decoded::Unpaired;
                    }
                }
            }
            Handler::Exit { pid: p } => {
                let Some(p) = p.read_i64(data).map(|v| v as i32) else {
                    return short();
                };
                // A thread that exits inside a system call never returns
                // from it.
                if self.pending.remove(&tid).is_some() {
                    self.nr_unpaired_syscalls += 1;
                }
                EventKind::Exit { pid: p }
            }
            Handler::VmstatWork { work } => {
                let Some(work) = work.read_u64(data) else {
                    return short();
                };
                if !is_vmstat_work(&mut self.vmstat_work, cpu, work) {
                    return Decoded::Ignored(format!("{name} (another work item than the first)"));
                }
                EventKind::VmstatWork {}
            }
        };
        Decoded::Event(Event {
            ts_ns,
            cpu,
            pid,
            tid,
            kind,
        })
    }

    /// Counts entries still waiting for an exit as unpaired; call at the end.
    pub fn finish(&mut self) {
        self.nr_unpaired_syscalls += self.pending.len() as u64;
        self.pending.clear();
    }
}

/// Whether a `workqueue_execute_start` of `work` on `cpu` is the CPU's
/// vmstat work, given each CPU's first `work` in `first`. The records are
/// filtered to `vmstat_update()` where they are recorded
/// ([`VMSTAT_WORK_FILTER`]); as a check, each CPU's `vmstat_work` is one
/// per-CPU `struct delayed_work`, so a record of another work item on a
/// CPU (a recording made without the filter) is not taken for it.
fn is_vmstat_work(first: &mut BTreeMap<u32, u64>, cpu: u32, work: u64) -> bool {
    *first.entry(cpu).or_insert(work) == work
}

/// The event of a page-allocator tracepoint (`mm_page_alloc`,
/// `mm_page_free`, `mm_page_alloc_zone_locked`, `mm_page_pcpu_drain`); None
/// when a field lies outside the record (or `h` is another handler).
fn page_event(h: &Handler, data: &[u8]) -> Option<EventKind> {
    let u = |f: &Field| f.read_u64(data);
    let i32f = |f: &Field| f.read_i64(data).map(|v| v as i32);
    Some(match h {
        Handler::PageAlloc {
            pfn,
            order,
            migratetype,
            gfp_flags,
        } => {
            let (Some(pfn), Some(order), Some(mt), Some(gfp)) =
                (u(pfn), u(order), i32f(migratetype), u(gfp_flags))
            else {
                return None;
            };
            EventKind::PageAlloc {
                pfn,
                order: order as u32,
                migratetype: mt,
                gfp_flags: gfp,
            }
        }
        Handler::PageFree { pfn, order } => {
            let (Some(pfn), Some(order)) = (u(pfn), u(order)) else {
                return None;
            };
            EventKind::PageFree {
                pfn,
                order: order as u32,
            }
        }
        Handler::ZoneLocked {
            pfn,
            order,
            migratetype,
            percpu_refill,
        } => {
            let (Some(pfn), Some(order), Some(mt), Some(refill)) =
                (u(pfn), u(order), i32f(migratetype), u(percpu_refill))
            else {
                return None;
            };
            EventKind::PageAllocZoneLocked {
                pfn,
                order: order as u32,
                migratetype: mt,
                percpu_refill: refill != 0,
            }
        }
        Handler::PcpuDrain {
            pfn,
            order,
            migratetype,
        } => {
            let (Some(pfn), Some(order), Some(mt)) = (u(pfn), u(order), i32f(migratetype)) else {
                return None;
            };
            EventKind::PagePcpuDrain {
                pfn,
                order: order as u32,
                migratetype: mt,
            }
        }
        _ => return None,
    })
}

/// The event of a fault or task tracepoint that needs no pairing
/// (`page_fault_user`/`_kernel`, `sched_process_fork`, `sched_process_exec`);
/// None when a field lies outside the record (or `h` is another handler).
fn task_event(h: &Handler, data: &[u8]) -> Option<EventKind> {
    let u = |f: &Field| f.read_u64(data);
    let i32f = |f: &Field| f.read_i64(data).map(|v| v as i32);
    Some(match h {
        Handler::FaultUser {
            address,
            ip,
            error_code,
            kernel,
        } => {
            let (Some(address), Some(ip), Some(error_code)) = (u(address), u(ip), u(error_code))
            else {
                return None;
            };
            if *kernel {
                EventKind::PageFaultKernel {
                    address,
                    ip,
                    error_code,
                }
            } else {
                EventKind::PageFaultUser {
                    address,
                    ip,
                    error_code,
                }
            }
        }
        Handler::Fork { parent, child } => {
            let (Some(parent), Some(child)) = (i32f(parent), i32f(child)) else {
                return None;
            };
            EventKind::Fork { parent, child }
        }
        Handler::Exec { filename, pid: p } => {
            let (Some(filename), Some(p)) = (filename.read_str(data), i32f(p)) else {
                return None;
            };
            EventKind::Exec { pid: p, filename }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracefs::parse_format;

    /// 6.18's `workqueue_execute_start` format (its `function` field is
    /// what the recording filters on).
    const WQ_START: &str = "name: workqueue_execute_start\nID: 335\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:void * work;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:void * function;\toffset:16;\tsize:8;\tsigned:0;\n\n\
print fmt: \"work struct %p: function %ps\", REC->work, REC->function\n";

    fn record(work: u64) -> Vec<u8> {
        let mut r = vec![0u8; 24];
        r[0..2].copy_from_slice(&335u16.to_le_bytes());
        r[8..16].copy_from_slice(&work.to_le_bytes());
        r
    }

    /// Each CPU's vmstat work is one `struct delayed_work`: its runs become
    /// [`EventKind::VmstatWork`], a record of another work item on the same
    /// CPU (a recording made without the filter) is left out and named.
    #[test]
    fn vmstat_work_runs_are_one_work_item_per_cpu() {
        let fmt = parse_format("workqueue", WQ_START).expect("format");
        let mut d = Decoder::new(&[fmt]);
        assert!(d.handles(VMSTAT_WORK_EVENT));
        let kind = |x: Decoded| match x {
            Decoded::Event(e) => Some(e.kind),
            _ => None,
        };
        let a = 0xffff_8886_27c2_75e0u64;
        let b = 0xffff_8886_27d2_75e0u64;
        assert_eq!(
            kind(d.decode(1, 0, 11, 11, 335, &record(a))),
            Some(EventKind::VmstatWork {})
        );
        assert_eq!(
            kind(d.decode(2, 1, 12, 12, 335, &record(b))),
            Some(EventKind::VmstatWork {})
        );
        assert_eq!(
            kind(d.decode(3, 0, 11, 11, 335, &record(a))),
            Some(EventKind::VmstatWork {})
        );
        match d.decode(4, 0, 11, 11, 335, &record(b)) {
            Decoded::Ignored(n) => assert!(n.contains("another work item"), "{n}"),
            other => panic!("another work item on CPU 0 taken as its vmstat work: {other:?}"),
        }
        assert!(matches!(
            d.decode(5, 0, 11, 11, 335, &[0u8; 12]),
            Decoded::Malformed(_)
        ));
    }
}
