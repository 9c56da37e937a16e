//! An estimate of the kernel's faults on user memory, for traces that did
//! not record `exceptions:page_fault_kernel`.
//!
//! # Why
//!
//! When the kernel itself first touches a user page (`copy_to_user()` of a
//! `read()` into a fresh buffer, the ELF loader clearing a `.bss`,
//! `create_elf_tables()` on a new stack), it takes a page fault that
//! `pgfault` and the task's `ru_minflt` count, but it fires
//! `page_fault_kernel`, not `page_fault_user`. A perf.data recorded
//! without that tracepoint misses them: for an external sort they are a
//! sixth of its faults. They cannot be replayed (their addresses are
//! unknown), but their number can be estimated, and is printed as an
//! estimate with its error band.
//!
//! # The evidence
//!
//! Every such fault on not-present anonymous memory allocates a zeroed
//! order-0 page in the task's context: `mm_page_alloc` with
//! `__GFP_MOVABLE | __GFP_ZERO`, the gfp of
//! `vma_alloc_zeroed_movable_folio()` (6.18's `folio_prealloc()` with
//! `need_zero`), exactly as a user's first write does. A user fault
//! allocates one when it is a write to a page not present (`X86_PF_WRITE`
//! without `X86_PF_PROT`), or a write to a page the process had read (the
//! shared zero page, replaced on the write: `wp_page_copy()` of the zero
//! page allocates zeroed), outside file-backed mappings (a write there
//! copies the file's page: no `__GFP_ZERO`). So, per address space
//! (process, until its next exec), the zeroed movable order-0 allocations
//! beyond those its user faults explain are faults the kernel took on its
//! behalf: the estimate.
//!
//! # Where it errs
//!
//! - Over: `get_user_pages()` faults (`MAP_POPULATE`, `mlock`, the
//!   argument pages of an exec) allocate the same way and are not page
//!   faults of the task (the argument pages are, in `ru_minflt`, though);
//!   a kernel *read* of a fresh page (`write()` from an untouched buffer)
//!   maps the zero page, and the user's later write then allocates a page
//!   no recorded read explains.
//! - Under: a user write to a zero page read before the recording began,
//!   or before a `fork` the trace does not show, is taken as a kernel
//!   fault (over) or missed; kernel faults on file-backed memory allocate
//!   page cache (no `__GFP_ZERO`) and are not seen at all.
//! - Only recordings under pure 4 KiB folios: a large anonymous folio is
//!   allocated without `__GFP_ZERO` (`folio_zero_user()` clears it), so a
//!   recording with mTHP or THP on sees none of the kernel's faults there.
//!
//! Its error on this project's recordings that hold both (the estimate
//! against their `page_fault_kernel` count) is [`ERROR_PCT`], printed with
//! every estimate.

use std::collections::{BTreeMap, BTreeSet};

use crate::event::{Event, EventKind};

/// `__GFP_MOVABLE` and `__GFP_ZERO` (6.18's `gfp_types.h`, bits 3 and 8;
/// the same since 4.x).
const GFP_MOVABLE: u64 = 0x08;
const GFP_ZERO: u64 = 0x100;
/// `X86_PF_PROT`, `X86_PF_WRITE`.
const PF_PROT: u64 = 0x1;
const PF_WRITE: u64 = 0x2;
/// `MAP_ANONYMOUS`, `MAP_FIXED`.
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_FIXED: u64 = 0x10;
const PAGE_SHIFT: u32 = 12;
/// x86-64's `TASK_SIZE` with 4-level page tables: above it, kernel addresses.
const USER_END: u64 = 1 << 47;

/// The error of the estimate, in percent of the trace's recorded faults
/// (user + kernel): (lowest, highest) of (estimate − recorded
/// `page_fault_kernel`) / recorded faults, measured on the corpus
/// recordings of `scripts/corpus/` that are not held out (build, python,
/// node, sqlite, server, xz, zstd, sort, exec_folios; `mmlab record`
/// traces, which hold both), 2026-11-24, widened to whole percents. The
/// held-out programs (perl, java, gzip) were checked against it
/// afterwards (docs/ARCHITECTURE.md, "Kernel faults a recording lacks").
/// A band printed with the estimate, not a correction applied to it.
pub const ERROR_PCT: (f64, f64) = (-1.0, 1.0);

/// A perf mapping name of a file: a path, not perf's `//anon` (nor
/// `[heap]`, `[stack]`, `[vdso]`).
fn is_file(name: &str) -> bool {
    name.starts_with('/') && !name.starts_with("//")
}

#[derive(Clone, Default)]
struct Space {
    /// Zeroed movable order-0 allocations in the process's context.
    zeroed: u64,
    /// User faults that allocate a zeroed page.
    explained: u64,
    /// Pages read-faulted (mapped to the zero page), not written since.
    read: BTreeSet<u64>,
    /// File-backed ranges: start → end.
    files: BTreeMap<u64, u64>,
}

impl Space {
    fn in_file(&self, addr: u64) -> bool {
        self.files
            .range(..=addr)
            .next_back()
            .is_some_and(|(_, &end)| end > addr)
    }

    fn add_file(&mut self, start: u64, len: u64) {
        self.carve(start, len);
        self.files.insert(start, start.saturating_add(len));
    }

    /// Takes `[start, start + len)` out of the file ranges (a mapping made
    /// over them, or unmapped): the parts of a range outside it stay.
    fn carve(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let first = self
            .files
            .range(..start)
            .next_back()
            .filter(|(_, &e)| e > start)
            .map_or(start, |(&s, _)| s);
        let hit: Vec<(u64, u64)> = self
            .files
            .range(first..end)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in hit {
            self.files.remove(&s);
            if s < start {
                self.files.insert(s, start);
            }
            if e > end {
                self.files.insert(end, e);
            }
        }
    }

    fn unmap(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        self.carve(start, len);
        let pages: Vec<u64> = self
            .read
            .range(start >> PAGE_SHIFT..end >> PAGE_SHIFT)
            .copied()
            .collect();
        for p in pages {
            self.read.remove(&p);
        }
    }

    /// A mapping of `[start, start + len)`: file-backed or not.
    fn map(&mut self, start: u64, len: u64, file: bool) {
        if file {
            self.add_file(start, len);
        } else {
            self.carve(start, len);
        }
    }

    fn user_fault(&mut self, address: u64, error_code: u64) {
        if self.in_file(address) {
            return;
        }
        let page = address >> PAGE_SHIFT;
        match (error_code & PF_PROT != 0, error_code & PF_WRITE != 0) {
            (false, true) => self.explained += 1,
            (false, false) => {
                self.read.insert(page);
            }
            (true, true) if self.read.remove(&page) => self.explained += 1,
            _ => {}
        }
    }
}

/// What the estimator found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelFaultEstimate {
    /// Zeroed movable order-0 allocations in the processes' contexts.
    pub zeroed_allocs: u64,
    /// Of those, the ones the recorded user faults explain.
    pub explained: u64,
    /// The estimate: the address spaces' unexplained allocations, summed.
    pub kernel_faults: u64,
}

impl KernelFaultEstimate {
    /// The estimate's band for a trace of `recorded_faults` faults:
    /// `kernel_faults` plus [`ERROR_PCT`] of them, never below 0.
    pub fn band(&self, recorded_faults: u64) -> (u64, u64) {
        let n = (recorded_faults + self.kernel_faults) as f64;
        let at = |pct: f64| {
            (self.kernel_faults as f64 + pct / 100.0 * n)
                .max(0.0)
                .round() as u64
        };
        (at(ERROR_PCT.0), at(ERROR_PCT.1))
    }
}

/// The streaming estimator: [`KernelFaultEstimator::observe`] every event
/// in trace order, then [`KernelFaultEstimator::finish`].
#[derive(Default)]
pub struct KernelFaultEstimator {
    spaces: BTreeMap<i32, Space>,
    out: KernelFaultEstimate,
    /// The trace holds every process's allocator events but only the
    /// workload's faults and calls (`mmlab record --kmem-system-wide`,
    /// `perf record -a`): an allocation counts only in a process the
    /// workload's own events named first, or every other process's zeroed
    /// pages would be taken for kernel faults of the workload.
    system_wide_allocs: bool,
    /// With `system_wide_allocs`: the processes the workload's own events
    /// named (never forgotten: an exec's allocations come before the new
    /// image's first fault).
    workload: BTreeSet<i32>,
}

impl KernelFaultEstimator {
    /// An estimator for a trace whose allocator events are system-wide
    /// (`kmem_system_wide` in its header) or not.
    pub fn new(kmem_system_wide: bool) -> Self {
        KernelFaultEstimator {
            system_wide_allocs: kmem_system_wide,
            ..Self::default()
        }
    }

    /// Counts one event.
    pub fn observe(&mut self, ev: &Event) {
        match &ev.kind {
            EventKind::PageAlloc {
                order: 0,
                gfp_flags,
                ..
            } if gfp_flags & (GFP_MOVABLE | GFP_ZERO) == GFP_MOVABLE | GFP_ZERO
                && (!self.system_wide_allocs || self.workload.contains(&ev.pid)) =>
            {
                self.space(ev.pid).zeroed += 1;
            }
            EventKind::PageFree { .. }
            | EventKind::PageAllocZoneLocked { .. }
            | EventKind::PagePcpuDrain { .. }
            | EventKind::PageAlloc { .. } => {}
            _ if self.system_wide_allocs && self.workload.insert(ev.pid) => {
                // The first event of a workload process: look again.
                self.observe(ev);
            }
            EventKind::PageFaultUser {
                address,
                error_code,
                ..
            } if *address < USER_END => self.space(ev.pid).user_fault(*address, *error_code),
            EventKind::Mmap {
                addr,
                len,
                flags,
                ret,
                ..
            } => {
                let at = match ret {
                    Some(r) if *r >= 0 => Some(*r as u64),
                    None if flags & MAP_FIXED != 0 => Some(*addr),
                    _ => None,
                };
                if let Some(at) = at {
                    self.space(ev.pid).map(at, *len, flags & MAP_ANONYMOUS == 0);
                }
            }
            EventKind::MmapRecord {
                addr,
                len,
                filename,
                ..
            } => self.space(ev.pid).map(*addr, *len, is_file(filename)),
            EventKind::Munmap { addr, len, .. } => self.space(ev.pid).unmap(*addr, *len),
            EventKind::Fork { parent, child } if parent != child => {
                if self.system_wide_allocs {
                    self.workload.insert(*child);
                }
                // A thread shares its process's entry (events carry the
                // thread group); a process starts as a copy of its parent.
                let copy = Space {
                    zeroed: 0,
                    explained: 0,
                    ..self.spaces.get(&ev.pid).cloned().unwrap_or_default()
                };
                self.spaces.entry(*child).or_insert(copy);
            }
            EventKind::Exec { pid, .. } => self.retire(*pid),
            EventKind::ExecLayout { pid, vmas } => {
                // In the kernel's order: the first segment's mapping spans
                // the whole image, the `.bss` mappings then replace its
                // tail.
                let s = self.space(*pid);
                for v in vmas {
                    s.map(v.start, v.len, is_file(&v.name));
                }
            }
            EventKind::Exit { pid } if *pid == ev.pid => self.retire(*pid),
            _ => {}
        }
    }

    fn space(&mut self, pid: i32) -> &mut Space {
        self.spaces.entry(pid).or_default()
    }

    /// An address space ends (exec, exit of its leader): its counts are
    /// final.
    fn retire(&mut self, pid: i32) {
        if let Some(s) = self.spaces.remove(&pid) {
            self.out.zeroed_allocs += s.zeroed;
            self.out.explained += s.explained.min(s.zeroed);
            self.out.kernel_faults += s.zeroed.saturating_sub(s.explained);
        }
    }

    /// The estimate over the whole trace.
    pub fn finish(mut self) -> KernelFaultEstimate {
        let pids: Vec<i32> = self.spaces.keys().copied().collect();
        for pid in pids {
            self.retire(pid);
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pid: i32, kind: EventKind) -> Event {
        Event {
            ts_ns: 0,
            cpu: 0,
            pid,
            tid: pid,
            kind,
        }
    }

    fn zeroed() -> EventKind {
        EventKind::PageAlloc {
            pfn: 1,
            order: 0,
            migratetype: 1,
            gfp_flags: 0xdca, // GFP_HIGHUSER_MOVABLE | __GFP_ZERO
        }
    }

    fn fault(address: u64, error_code: u64) -> EventKind {
        EventKind::PageFaultUser {
            address,
            ip: 0,
            error_code,
        }
    }

    #[test]
    fn zeroed_allocations_no_user_fault_explains_are_the_estimate() {
        let mut e = KernelFaultEstimator::default();
        // A user write fault and its page; a read (zero page), then a
        // write to the same page and its page: both explained.
        for k in [fault(0x1000, 6), zeroed(), fault(0x2000, 4)] {
            e.observe(&ev(7, k));
        }
        for k in [fault(0x2000, 7), zeroed()] {
            e.observe(&ev(7, k));
        }
        // Three pages the kernel faulted in (read() into a fresh buffer).
        for _ in 0..3 {
            e.observe(&ev(7, zeroed()));
        }
        // A write fault in a file mapping copies the file's page: it
        // explains nothing.
        e.observe(&ev(
            7,
            EventKind::Mmap {
                addr: 0,
                len: 0x4000,
                prot: 3,
                flags: 2,
                fd: 3,
                off: 0,
                ret: Some(0x10_0000),
            },
        ));
        e.observe(&ev(7, fault(0x10_1000, 6)));
        // Not zeroed: page cache, a copy-on-write copy.
        e.observe(&ev(
            7,
            EventKind::PageAlloc {
                pfn: 2,
                order: 0,
                migratetype: 1,
                gfp_flags: 0xcca,
            },
        ));
        let r = e.finish();
        assert_eq!(
            r,
            KernelFaultEstimate {
                zeroed_allocs: 5,
                explained: 2,
                kernel_faults: 3,
            }
        );
        // 1 % of the 4 user faults + 3 kernel faults rounds to 0.
        assert_eq!(r.band(4), (3, 3));
        // 1 % of 1000 faults: 3 - 10 (never below 0) to 3 + 10.
        assert_eq!(r.band(997), (0, 13));
    }

    #[test]
    fn with_system_wide_allocations_only_the_workload_counts() {
        let mut e = KernelFaultEstimator::new(true);
        // Another process (9) allocates zeroed pages; it has no fault or
        // call in the trace: not the workload's.
        e.observe(&ev(9, zeroed()));
        // The workload (7) forks 8, which execs; 8's allocation before its
        // first fault (the kernel clearing its .bss) counts.
        e.observe(&ev(7, fault(0x1000, 6)));
        e.observe(&ev(7, zeroed()));
        e.observe(&ev(
            7,
            EventKind::Fork {
                parent: 7,
                child: 8,
            },
        ));
        e.observe(&ev(
            8,
            EventKind::Exec {
                pid: 8,
                filename: "cc1".into(),
            },
        ));
        e.observe(&ev(8, zeroed()));
        e.observe(&ev(9, zeroed()));
        let r = e.finish();
        assert_eq!((r.zeroed_allocs, r.explained, r.kernel_faults), (2, 1, 1));
        // The same events with allocations of the workload only: 9 counts.
        let mut all = KernelFaultEstimator::default();
        all.observe(&ev(9, zeroed()));
        assert_eq!(all.finish().kernel_faults, 1);
    }

    #[test]
    fn a_forked_child_writes_to_the_zero_pages_its_parent_read() {
        let mut e = KernelFaultEstimator::default();
        e.observe(&ev(7, fault(0x2000, 4)));
        e.observe(&ev(
            7,
            EventKind::Fork {
                parent: 7,
                child: 8,
            },
        ));
        e.observe(&ev(8, fault(0x2000, 7)));
        e.observe(&ev(8, zeroed()));
        // The exec ends the child's address space: a new image's zeroed
        // page without a fault is the kernel's.
        e.observe(&ev(
            8,
            EventKind::Exec {
                pid: 8,
                filename: "/bin/x".into(),
            },
        ));
        e.observe(&ev(8, zeroed()));
        let r = e.finish();
        assert_eq!((r.zeroed_allocs, r.explained, r.kernel_faults), (2, 1, 1));
    }
}
