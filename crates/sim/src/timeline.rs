//! A timeline of what each simulated CPU did when, for `--timeline`: the
//! operations it ran, the locks it waited for and held, the page clears and
//! copies it played through the cache model, and samples of its PCP lists
//! and of the zones' free pages.
//!
//! # Observation only
//!
//! The engine calls these hooks only when a timeline was asked for
//! ([`crate::Engine::with_timeline`]); they read the model and never change
//! it, so a run's results are the same with and without one, and without
//! one the engine pays one `Option` test per hook.
//!
//! # Bounded
//!
//! Records outside [`TimelineOptions::window`] are not kept, and recording
//! stops at [`TimelineOptions::max_records`] (the timeline says it was
//! truncated), so a long run gives a timeline of a size chosen in advance.
//! Consecutive page clears or copies of one vCPU are one record.

use mm::cost::LockClass;
use mm::page_alloc::PageAlloc;
use mm::vmstat::VmEvent;
use mm::{SimTime, VcpuId};

/// What to record.
#[derive(Clone, Copy, Debug)]
pub struct TimelineOptions {
    /// Keep records that overlap `[from, to)` of virtual time.
    pub window: (SimTime, SimTime),
    /// Stop recording after this many records.
    pub max_records: usize,
}

impl Default for TimelineOptions {
    fn default() -> TimelineOptions {
        TimelineOptions {
            window: (SimTime(0), SimTime(u64::MAX)),
            max_records: 1_000_000,
        }
    }
}

/// What a page-sized memory record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// `clear_page()` of a (sub-)page.
    Clear,
    /// `copy_page()` of a (sub-)page.
    Copy,
}

/// The allocator events counted during one operation (from the vmstat
/// counters before and after it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// PCP refills from the buddy lists (`rmqueue_bulk()`).
    pub pcp_refills: u64,
    /// PCP drains to the buddy lists (`free_pcppages_bulk()`).
    pub pcp_drains: u64,
    /// Blocks taken under `zone->lock` (`mm_page_alloc_zone_locked`).
    pub zone_locked_allocs: u64,
    /// Page faults.
    pub faults: u64,
}

/// One thing the timeline saw.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// vCPU `v` ran an operation named `name` over `[from, to)`.
    Op {
        v: VcpuId,
        from: SimTime,
        to: SimTime,
        name: &'static str,
        counts: OpCounts,
    },
    /// vCPU `v` spun for a lock of `class` over `[from, to)`.
    LockWait {
        v: VcpuId,
        class: LockClass,
        from: SimTime,
        to: SimTime,
    },
    /// vCPU `v` held a lock of `class` over `[from, to)` (`read`: shared).
    LockHold {
        v: VcpuId,
        class: LockClass,
        read: bool,
        from: SimTime,
        to: SimTime,
    },
    /// vCPU `v` cleared or copied `pages` pages back to back over `[from, to)`.
    Mem {
        v: VcpuId,
        kind: MemKind,
        pages: u32,
        from: SimTime,
        to: SimTime,
    },
    /// vCPU `v`'s PCP list for zone `zone` at `at`.
    Pcp {
        v: VcpuId,
        zone: u32,
        at: SimTime,
        count: i32,
        high: i32,
    },
    /// Zone `zone`'s free pages at `at`.
    FreePages { zone: u32, at: SimTime, pages: u64 },
}

/// An operation begun and not yet ended on a vCPU.
#[derive(Clone, Copy, Debug)]
struct OpenOp {
    from: SimTime,
    name: &'static str,
    counts: OpCounts,
}

/// The recorder the engine feeds.
#[derive(Clone, Debug)]
pub struct Timeline {
    opts: TimelineOptions,
    records: Vec<Record>,
    truncated: bool,
    /// Per vCPU: the operation in progress.
    open: Vec<Option<OpenOp>>,
    /// Per vCPU: the name the next operation started on it gets.
    next_name: Vec<Option<&'static str>>,
    /// Per vCPU: (lock class, read, taken at) of the locks it holds.
    holds: Vec<Vec<(LockClass, bool, SimTime)>>,
    /// The counters at the last operation start (any vCPU).
    last_counts: OpCounts,
    /// Per (vCPU, zone): the last (count, high) recorded.
    last_pcp: Vec<(i32, i32)>,
    /// Per zone: the last free pages recorded.
    last_free: Vec<u64>,
    nr_zones: usize,
    /// `Node 0 Normal`, per zone index.
    zone_names: Vec<String>,
}

fn counts(pa: &PageAlloc) -> OpCounts {
    OpCounts {
        pcp_refills: pa.vmstat.get(VmEvent::PCP_BULK_ALLOC),
        pcp_drains: pa.vmstat.get(VmEvent::PCP_BULK_FREE),
        zone_locked_allocs: pa.vmstat.get(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED),
        faults: pa.vmstat.get(VmEvent::PGFAULT),
    }
}

impl Timeline {
    /// A timeline of a machine with `nr_cpus` vCPUs and the zones of `pa`.
    pub fn new(opts: TimelineOptions, nr_cpus: usize, pa: &PageAlloc) -> Timeline {
        let nr_zones = pa.zones.len();
        Timeline {
            opts,
            records: Vec::new(),
            truncated: false,
            open: vec![None; nr_cpus],
            next_name: vec![None; nr_cpus],
            holds: vec![Vec::new(); nr_cpus],
            last_counts: counts(pa),
            last_pcp: vec![(i32::MIN, i32::MIN); nr_cpus * nr_zones],
            last_free: vec![u64::MAX; nr_zones],
            nr_zones,
            zone_names: pa
                .zones
                .iter()
                .map(|z| format!("Node {} {}", z.node.0, z.zone_type.name()))
                .collect(),
        }
    }

    /// The zones' names (`Node 0 Normal`), by zone index.
    pub fn zone_names(&self) -> &[String] {
        &self.zone_names
    }

    /// The number of vCPUs it was made for.
    pub fn nr_cpus(&self) -> usize {
        self.open.len()
    }

    /// The records, in the order they ended.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// True if recording stopped at `max_records`.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The options it recorded with.
    pub fn options(&self) -> TimelineOptions {
        self.opts
    }

    fn push(&mut self, from: SimTime, to: SimTime, r: Record) {
        let (w0, w1) = self.opts.window;
        if to < w0 || from >= w1 || self.truncated {
            return;
        }
        if self.records.len() >= self.opts.max_records {
            self.truncated = true;
            return;
        }
        self.records.push(r);
    }

    /// The next operation started on `v` is `name` (a task's `Op`, or the
    /// kernel work the engine runs between them).
    pub fn name_next(&mut self, v: VcpuId, name: &'static str) {
        self.next_name[v.0 as usize] = Some(name);
    }

    /// An operation started on `v` at `t`; the model's state already
    /// reflects it (state changes when an operation starts), so the
    /// counters it moved and the PCP and free-page levels it left are read
    /// now.
    pub fn op_started(&mut self, v: VcpuId, t: SimTime, pa: &PageAlloc) {
        let now = counts(pa);
        let d = OpCounts {
            pcp_refills: now.pcp_refills - self.last_counts.pcp_refills,
            pcp_drains: now.pcp_drains - self.last_counts.pcp_drains,
            zone_locked_allocs: now.zone_locked_allocs - self.last_counts.zone_locked_allocs,
            faults: now.faults - self.last_counts.faults,
        };
        self.last_counts = now;
        let name = self.next_name[v.0 as usize].take().unwrap_or("touch");
        self.open[v.0 as usize] = Some(OpenOp {
            from: t,
            name,
            counts: d,
        });
        self.sample(v, t, pa);
    }

    /// Records the PCP lists of `v` and the zones' free pages where they
    /// changed since they were last recorded.
    fn sample(&mut self, v: VcpuId, t: SimTime, pa: &PageAlloc) {
        for zi in 0..self.nr_zones {
            let p = &pa.pcp[pa.pcp_index(v, zi)];
            let slot = v.0 as usize * self.nr_zones + zi;
            if self.last_pcp[slot] != (p.count, p.high) {
                self.last_pcp[slot] = (p.count, p.high);
                let (count, high) = (p.count, p.high);
                self.push(
                    t,
                    t,
                    Record::Pcp {
                        v,
                        zone: zi as u32,
                        at: t,
                        count,
                        high,
                    },
                );
            }
            let free = pa.zones[zi].nr_free_pages;
            if self.last_free[zi] != free {
                self.last_free[zi] = free;
                self.push(
                    t,
                    t,
                    Record::FreePages {
                        zone: zi as u32,
                        at: t,
                        pages: free,
                    },
                );
            }
        }
    }

    /// The operation in progress on `v` has played all its segments at `t`.
    pub fn op_ended(&mut self, v: VcpuId, t: SimTime) {
        if let Some(o) = self.open[v.0 as usize].take() {
            self.push(
                o.from,
                t,
                Record::Op {
                    v,
                    from: o.from,
                    to: t,
                    name: o.name,
                    counts: o.counts,
                },
            );
        }
    }

    /// `v` holds a lock of `class` from `t` (after waiting since `waited_from`
    /// if that is earlier).
    pub fn lock_taken(
        &mut self,
        v: VcpuId,
        class: LockClass,
        read: bool,
        waited_from: SimTime,
        t: SimTime,
    ) {
        if waited_from < t {
            self.push(
                waited_from,
                t,
                Record::LockWait {
                    v,
                    class,
                    from: waited_from,
                    to: t,
                },
            );
        }
        self.holds[v.0 as usize].push((class, read, t));
    }

    /// `v` released a lock of `class` at `t`.
    pub fn lock_released(&mut self, v: VcpuId, class: LockClass, read: bool, t: SimTime) {
        let holds = &mut self.holds[v.0 as usize];
        let Some(i) = holds.iter().rposition(|h| h.0 == class && h.1 == read) else {
            return;
        };
        let (_, _, from) = holds.remove(i);
        self.push(
            from,
            t,
            Record::LockHold {
                v,
                class,
                read,
                from,
                to: t,
            },
        );
    }

    /// `v` cleared or copied a page over `[t, t + ns)`; joined to the
    /// previous record if that was the same kind on `v` and ended at `t`.
    pub fn mem(&mut self, v: VcpuId, kind: MemKind, t: SimTime, ns: u64) {
        let to = t.after(ns);
        if let Some(Record::Mem {
            v: lv,
            kind: lk,
            pages,
            to: lt,
            ..
        }) = self.records.last_mut()
        {
            if *lv == v && *lk == kind && *lt == t {
                *pages += 1;
                *lt = to;
                return;
            }
        }
        self.push(
            t,
            to,
            Record::Mem {
                v,
                kind,
                pages: 1,
                from: t,
                to,
            },
        );
    }
}

/// The name an operation gets on the timeline.
pub fn op_name(op: &crate::Op) -> &'static str {
    use crate::Op;
    match op {
        Op::AllocPages { .. } => "alloc_pages",
        Op::FreePages { .. } => "free_pages",
        Op::Compute { .. } => "user compute",
        Op::Send { .. } => "send",
        Op::Recv { .. } => "recv",
        Op::Mmap { .. } => "mmap",
        Op::MmapHugetlb { .. } => "mmap (MAP_HUGETLB)",
        Op::SetHugepages { .. } => "sysctl nr_hugepages",
        Op::Munmap { .. } => "munmap",
        Op::Mprotect { .. } => "mprotect",
        Op::Mremap { .. } => "mremap",
        Op::Madvise { .. } => "madvise",
        Op::Brk { .. } => "brk",
        Op::Touch { .. } => "touch",
        Op::Fork { .. } => "fork",
        Op::Exit => "exit_group",
        Op::MovePages { .. } => "move_pages",
        Op::SetMempolicy { .. } => "set_mempolicy",
        Op::Sleep { .. } => "sleep",
        Op::Wait => "wait",
        Op::KernelWork { .. } => "kernel work (unmodelled)",
        Op::VmstatUpdate => "vmstat work due (recorded)",
    }
}
