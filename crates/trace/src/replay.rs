//! Replay mode (a): a recorded trace's page-allocator stream as workload
//! tasks for the engine.
//!
//! # What is replayed
//!
//! One task per recorded CPU. Its program replays, in trace order, that CPU's
//! `kmem:mm_page_alloc` and `kmem:mm_page_free` events: an allocation becomes
//! [`Op::AllocPages`] of the recorded order with the [`Gfp`] of
//! [`gfp_of`], a free becomes [`Op::FreePages`] of the *model's* block that
//! the model allocated for the recorded pfn, on the CPU the free was
//! recorded on (a page allocated on one CPU and freed on another goes to the
//! freeing CPU's PCP list, as in the kernel). The time between two events of
//! a CPU becomes [`Op::Compute`] of the recorded difference; every CPU's
//! first event is offset from the trace's first event, so the CPUs start
//! aligned.
//!
//! # Matching frees to allocations
//!
//! [`Prepared::open`] reads the trace once, in order, keeping a map recorded
//! pfn → allocation number of the blocks currently allocated (live state
//! only). Each free is matched to the allocation of its pfn; a free whose
//! allocation was not recorded (the page was allocated before the recording
//! started) is counted in [`Recorded::unmatched_frees`] and replayed as the
//! free of a block set aside before the replay starts
//! ([`Prepared::preallocate`]): the kernel's per-CPU lists received those
//! pages too, and without them the model's lists run empty where the
//! kernel's did not.
//! Allocations never freed stay allocated in the model. A free whose recorded
//! order differs from its allocation's frees the model's whole block and is
//! counted in [`Recorded::order_mismatches`].
//!
//! # The vmstat work
//!
//! A trace that recorded when each CPU's vmstat work ran
//! ([`EventKind::VmstatWork`]) puts [`Op::VmstatUpdate`] in that CPU's
//! stream at its place among the CPU's allocator events, and the engine
//! runs no vmstat timer of its own ([`sim::Engine::vmstat_work_from_workload`]):
//! the model's `decay_pcp_high()` drains the lists between the same
//! allocations and frees as the kernel's did. Without those events (older
//! traces, a perf.data recorded without them, or
//! [`Prepared::use_recorded_vmstat`] turned off), the engine's timer runs
//! on whole seconds as before.
//!
//! # Cross-CPU order
//!
//! A free on CPU B of a block allocated on CPU A must not run before the
//! allocation in virtual time. Virtual time drifts from recorded time (the
//! model's operations take the model's time on top of the recorded gaps),
//! so ordering by timestamps alone is not enough: when B reaches a matched
//! free whose allocation the model has not done yet, B's task waits on its
//! own channel ([`Op::Recv`]) and A, right after the allocation, sends it the
//! model's block ([`Op::Send`]). B then frees at `max(B's time, A's time)`.
//! This cannot deadlock: a task only ever waits for an event earlier in the
//! trace's total order. Limit: a wait stretches B's timeline by however
//! far A's virtual time has drifted behind; gaps are not shortened to
//! catch up.
//!
//! # Memory
//!
//! The trace is never held in memory: the first pass streams it with
//! [`TraceReader`] and writes one compact stream per CPU (24 bytes an event)
//! into an unlinked temporary file; each task reads its file with its own
//! offset and a small buffer. Memory grows with live state (allocated
//! blocks), not with the trace's length.
//!
//! # Gfp mapping
//!
//! See [`gfp_of`]: the recorded migratetype picks the model's migratetype
//! (`MIGRATE_UNMOVABLE` 0 → [`Gfp::KERNEL`], `MIGRATE_MOVABLE` 1 →
//! [`Gfp::MOVABLE`], `MIGRATE_RECLAIMABLE` 2 → [`Gfp::RECLAIMABLE`]); any
//! other value (highatomic, CMA, isolate, -1) falls back to the gfp flags'
//! `__GFP_MOVABLE` (0x08) and `__GFP_RECLAIMABLE` (0x10) bits. `__GFP_DMA`
//! (0x01) or `__GFP_DMA32` (0x04) → [`Gfp::DMA32`] (the model has no
//! ZONE_DMA). Other flags (reclaim, `__GFP_THISNODE`, whose bit moves
//! between releases) are not modelled.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use mm::cost::{CostTable, Cx};
use mm::page_alloc::{Gfp, PageAlloc, MAX_ORDER};
use mm::{SimTime, VcpuId};
use sim::{Block, Op, OpResult, Program, Rng, TaskSpec};

use crate::event::{EventKind, Header};

pub mod pcp_start;
use crate::format::{TraceError, TraceReader};
use pcp_start::PcpInference;
pub use pcp_start::{Inferred, ListStart, PcpStart};

/// The `mm_page_alloc` gfp flag bits the mapping reads (stable since 4.x).
const GFP_DMA: u64 = 0x01;
const GFP_DMA32: u64 = 0x04;
const GFP_MOVABLE: u64 = 0x08;
const GFP_RECLAIMABLE: u64 = 0x10;

/// The model's allocation flags for a recorded allocation.
pub fn gfp_of(migratetype: i32, gfp_flags: u64) -> Gfp {
    let mt = match migratetype {
        0 => Gfp::KERNEL,
        1 => Gfp::MOVABLE,
        2 => Gfp::RECLAIMABLE,
        _ if gfp_flags & GFP_MOVABLE != 0 => Gfp::MOVABLE,
        _ if gfp_flags & GFP_RECLAIMABLE != 0 => Gfp::RECLAIMABLE,
        _ => Gfp::KERNEL,
    };
    if gfp_flags & (GFP_DMA | GFP_DMA32) != 0 {
        mt.or(Gfp::DMA32)
    } else {
        mt
    }
}

/// Why a trace cannot be replayed.
#[derive(Debug)]
pub enum ReplayError {
    /// The trace could not be read: `path` names the file, the error the
    /// record.
    Trace { path: PathBuf, source: TraceError },
    /// The trace has no page allocator events.
    NoAllocatorEvents { path: PathBuf },
    /// The snapshot was read at the command's exec, but the trace holds no
    /// exec: all `skipped` allocator events came before the snapshot.
    NoExecAfterSnapshot { path: PathBuf, skipped: u64 },
    /// The trace has no page faults, address-space system calls or process
    /// events (replay mode (b)).
    NoAspaceEvents { path: PathBuf },
    /// The temporary per-CPU streams could not be written.
    Io { what: String, source: io::Error },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Trace { path, source } => write!(f, "{}: {source}", path.display()),
            ReplayError::NoAllocatorEvents { path } => write!(
                f,
                "{}: the trace has no kmem:mm_page_alloc or kmem:mm_page_free events; replay mode (a) \
                 needs kmem:mm_page_alloc and kmem:mm_page_free (record with `mmlab record`, or \
                 `perf record -e kmem:mm_page_alloc -e kmem:mm_page_free ...` and `mmlab import`)",
                path.display()
            ),
            ReplayError::NoExecAfterSnapshot { path, skipped } => write!(
                f,
                "{}: the trace header says its snapshot was read at the command's exec \
                 (`mmlab import --snapshot-at-exec`, or `taken-at: exec` in the snapshot), but the \
                 trace holds no exec event, so all {skipped} allocator events would come before the \
                 snapshot; import it without --snapshot-at-exec",
                path.display()
            ),
            ReplayError::NoAspaceEvents { path } => write!(
                f,
                "{}: the trace has no exceptions:page_fault_user, address-space system call or \
                 sched_process_* events; replay mode (b) needs them (record with `mmlab record`, or \
                 `perf record -e exceptions:page_fault_user -e 'syscalls:sys_*_mmap' ...` and `mmlab import`)",
                path.display()
            ),
            ReplayError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

/// The display carries the whole chain (the trace error names the byte and
/// record), so `source` is empty: printing a chain does not repeat it.
impl std::error::Error for ReplayError {}

/// What the trace itself says, counted in the first pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// `mm_page_alloc` events.
    pub allocs: u64,
    /// Pages they allocated (`2^order` each).
    pub pages_allocated: u64,
    /// `mm_page_free` events.
    pub frees: u64,
    /// `mm_page_alloc_zone_locked` events.
    pub alloc_zone_locked: u64,
    /// `mm_page_pcpu_drain` events.
    pub pcpu_drains: u64,
    /// Runs of the per-CPU vmstat work ([`EventKind::VmstatWork`]).
    pub vmstat_works: u64,
    /// Frees whose allocation is not in the trace: skipped.
    pub unmatched_frees: u64,
    /// Frees of a different order than their allocation.
    pub order_mismatches: u64,
    /// Allocations above the model's `MAX_ORDER`: skipped.
    pub unsupported_order: u64,
    /// Matched frees on another CPU than their allocation.
    pub cross_cpu_frees: u64,
    /// Allocations never freed in the trace.
    pub never_freed: u64,
    /// The CPUs with allocator events, ascending.
    pub cpus: Vec<u32>,
    /// Order-0 allocations per recorded CPU and model migratetype
    /// (unmovable, movable, reclaimable): the mix [`Prepared::warm_pcp`]
    /// fills the lists with.
    pub order0_mix: BTreeMap<u32, [u64; 3]>,
    /// Events in the trace, all kinds.
    pub nr_events: u64,
    /// Allocator events before the command's exec in a trace whose
    /// snapshot was read at that exec ([`Header::snapshot_at_exec`]):
    /// already in the snapshot's lists, so left out of the replay and of
    /// the counts above.
    pub before_snapshot: u64,
    /// Nanoseconds from the first to the last allocator event.
    pub span_ns: u64,
    /// What each CPU's lists held at the start, inferred from the trace
    /// ([`pcp_start`]).
    pub pcp_start: PcpStart,
}

/// What the model did during one replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Allocations the model performed and that succeeded.
    pub allocs: u64,
    /// Allocations that failed in the model.
    pub alloc_failed: u64,
    /// Frees the model performed.
    pub frees: u64,
    /// Matched frees skipped because the model's allocation had failed.
    pub frees_of_failed: u64,
    /// Frees that waited for their allocation on another CPU.
    pub cross_cpu_waits: u64,
    /// Read errors of the temporary streams (the affected task stopped).
    pub io_errors: u64,
}

const REC_ALLOC: u8 = 0;
const REC_FREE: u8 = 1;
const REC_VMSTAT: u8 = 2;
const REC_BYTES: usize = 24;

/// One record of a per-CPU stream.
#[derive(Clone, Copy, Debug)]
struct Rec {
    kind: u8,
    order: u8,
    gfp: u32,
    ts: u64,
    id: u64,
}

impl Rec {
    fn encode(&self) -> [u8; REC_BYTES] {
        let mut b = [0u8; REC_BYTES];
        b[0] = self.kind;
        b[1] = self.order;
        b[4..8].copy_from_slice(&self.gfp.to_le_bytes());
        b[8..16].copy_from_slice(&self.ts.to_le_bytes());
        b[16..24].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Rec {
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Rec {
            kind: b[0],
            order: b[1],
            gfp: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            ts: u64_at(8),
            id: u64_at(16),
        }
    }
}

/// A trace split into per-CPU allocator streams, ready to replay any number
/// of times.
pub struct Prepared {
    /// The trace's header.
    pub header: Header,
    /// Its trailer, when the trace is whole.
    pub trailer: Option<crate::event::Trailer>,
    /// What the trace says.
    pub recorded: Recorded,
    /// Per recorded CPU: its stream (an unlinked temporary file) and length.
    streams: Vec<(u32, Arc<File>, u64)>,
    start_ts: u64,
    /// Allocation slots: the most blocks live at once in the trace.
    nr_slots: usize,
    /// Blocks freed in the trace but allocated before it (allocation number,
    /// order, the flags to set them aside with): set aside before a replay
    /// starts.
    pre: Vec<(u64, u8, Gfp)>,
    /// Replay the recorded vmstat work (the default when the trace has
    /// it); false: leave it out, and the engine's timer runs as for a
    /// trace without it.
    pub use_recorded_vmstat: bool,
}

struct Live {
    id: u64,
    order: u32,
    cpu: u32,
}

/// At most this many frees of pages allocated before the recording (16 GiB
/// of 4 KiB pages): a trace with more is not from one machine.
const MAX_PREEXISTING: u64 = 1 << 22;

type Writers = BTreeMap<u32, (BufWriter<File>, Arc<File>, u64)>;

/// The temporary stream of recorded CPU `cpu`, created at its first record.
fn writer_for(
    writers: &mut Writers,
    cpu: u32,
) -> Result<&mut (BufWriter<File>, Arc<File>, u64), ReplayError> {
    let ioerr = |what: String| move |source| ReplayError::Io { what, source };
    Ok(match writers.entry(cpu) {
        std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::btree_map::Entry::Vacant(v) => {
            // A file without a name: nothing to guess, nothing left by a kill.
            let f =
                host::output::unnamed_file_in(&std::env::temp_dir()).map_err(ioerr(format!(
                    "cannot create a temporary file for CPU {cpu} in {}",
                    std::env::temp_dir().display()
                )))?;
            let reader = f
                .try_clone()
                .map_err(ioerr("cannot duplicate a temporary file".into()))?;
            v.insert((BufWriter::with_capacity(64 * 1024, f), Arc::new(reader), 0))
        }
    })
}

/// A new allocation number: slot | generation << 32, the slot reused once
/// its block is freed.
fn new_id(free_slots: &mut Vec<u32>, generations: &mut Vec<u32>) -> u64 {
    let slot = free_slots.pop().unwrap_or_else(|| {
        generations.push(0);
        generations.len() as u32 - 1
    });
    let generation = &mut generations[slot as usize];
    *generation = generation.wrapping_add(1);
    slot as u64 | (*generation as u64) << 32
}

/// The first pass over a trace: the per-CPU streams being written, the
/// blocks live in the trace, the counts, and what the lists held at the
/// start ([`pcp_start`]).
struct FirstPass {
    rec: Recorded,
    live: BTreeMap<u64, Live>,
    writers: Writers,
    // Allocation numbers: slot | generation << 32, the slot reused once its
    // block is freed (so the replay's table is as big as the most blocks
    // live at once), the generation telling its occupants apart.
    free_slots: Vec<u32>,
    generations: Vec<u32>,
    /// Blocks freed in the trace but allocated before it (allocation number,
    /// order, pfn).
    pre: Vec<(u64, u8, u64)>,
    /// Per pageblock (`pfn >> PAGEBLOCK_ORDER`), the migratetype of the PCP
    /// list its pages were last drained from ([`note_block_mt`]).
    block_mt: BTreeMap<u64, i32>,
    first_ts: Option<u64>,
    last_ts: u64,
    inference: PcpInference,
    /// Still before the snapshot's moment (the command's exec, when the
    /// header says the snapshot was read there).
    before_snapshot: bool,
}

/// Notes the migratetype of the PCP list a drained page sat on: its
/// pageblock's when the page was freed (`free_frozen_pages()` puts it on
/// the list of `get_pfnblock_migratetype()`). An allocation's migratetype
/// is no evidence of its block's: it is the one asked for, and a fallback
/// serves it from another block.
fn note_block_mt(block_mt: &mut BTreeMap<u64, i32>, pfn: u64, migratetype: i32) {
    if (0..3).contains(&migratetype) {
        block_mt.insert(pfn >> mm::page_alloc::PAGEBLOCK_ORDER, migratetype);
    }
}

/// The flags to set each pre-existing block (allocation number, order, pfn)
/// aside with: the migratetype its pageblock's drained pages show in the
/// trace (`block_mt`), movable where the trace drains none of them.
fn pre_with_gfp(pre: &[(u64, u8, u64)], block_mt: &BTreeMap<u64, i32>) -> Vec<(u64, u8, Gfp)> {
    pre.iter()
        .map(|&(id, order, pfn)| {
            let mt = block_mt
                .get(&(pfn >> mm::page_alloc::PAGEBLOCK_ORDER))
                .copied()
                .unwrap_or(1);
            (id, order, gfp_of(mt, 0))
        })
        .collect()
}

fn write_err(source: io::Error) -> ReplayError {
    ReplayError::Io {
        what: "cannot write a temporary replay stream".into(),
        source,
    }
}

impl FirstPass {
    fn new(header: &Header) -> FirstPass {
        FirstPass {
            rec: Recorded::default(),
            live: BTreeMap::new(),
            writers: BTreeMap::new(),
            free_slots: Vec::new(),
            generations: Vec::new(),
            pre: Vec::new(),
            block_mt: BTreeMap::new(),
            first_ts: None,
            last_ts: 0,
            inference: PcpInference::new(&header.machine.zones),
            before_snapshot: header.snapshot_at_exec,
        }
    }

    /// True for an allocator event the snapshot already holds: one before
    /// the command's first exec (its `comm` change or `sched_process_exec`,
    /// whichever comes first) in a trace whose snapshot was read at that
    /// exec. The kernel's lists at the snapshot include what those events
    /// did, and replaying them again on top would count them twice (a
    /// 63-page drain of perf's child 0.25 ms before perl's exec did).
    fn before_snapshot(&mut self, ev: &crate::event::Event) -> bool {
        if !self.before_snapshot {
            return false;
        }
        match ev.kind {
            EventKind::Exec { .. } | EventKind::Comm { exec: true, .. } => {
                self.before_snapshot = false;
                false
            }
            ref k if k.is_allocator() => {
                self.rec.before_snapshot += 1;
                true
            }
            _ => false,
        }
    }

    /// One event of the trace.
    fn event(&mut self, ev: &crate::event::Event) -> Result<(), ReplayError> {
        self.rec.nr_events += 1;
        if self.before_snapshot(ev) {
            return Ok(());
        }
        self.inference.observe(ev);
        let r = match ev.kind {
            EventKind::PageAlloc {
                pfn,
                order,
                migratetype,
                gfp_flags,
            } => self.alloc(ev, pfn, order, gfp_of(migratetype, gfp_flags)),
            EventKind::PageFree { pfn, order } => self.free(ev, pfn, order)?,
            EventKind::PageAllocZoneLocked { .. } => {
                self.rec.alloc_zone_locked += 1;
                None
            }
            EventKind::PagePcpuDrain {
                pfn, migratetype, ..
            } => {
                note_block_mt(&mut self.block_mt, pfn, migratetype);
                self.rec.pcpu_drains += 1;
                None
            }
            EventKind::VmstatWork {} => {
                self.rec.vmstat_works += 1;
                return self.write_at(
                    ev.cpu,
                    &Rec {
                        kind: REC_VMSTAT,
                        order: 0,
                        gfp: 0,
                        ts: ev.ts_ns,
                        id: 0,
                    },
                );
            }
            _ => None,
        };
        match r {
            Some(r) => self.write(ev.cpu, &r),
            None => Ok(()),
        }
    }

    fn alloc(&mut self, ev: &crate::event::Event, pfn: u64, order: u32, gfp: Gfp) -> Option<Rec> {
        let rec = &mut self.rec;
        rec.allocs += 1;
        rec.pages_allocated = rec.pages_allocated.saturating_add(1u64 << order.min(63));
        if order > MAX_ORDER as u32 {
            rec.unsupported_order += 1;
            return None;
        }
        if order == 0 {
            let mt = if gfp.contains(Gfp::MOVABLE) {
                1
            } else if gfp.contains(Gfp::RECLAIMABLE) {
                2
            } else {
                0
            };
            rec.order0_mix.entry(ev.cpu).or_default()[mt] += 1;
        }
        let id = new_id(&mut self.free_slots, &mut self.generations);
        let l = Live {
            id,
            order,
            cpu: ev.cpu,
        };
        if self.live.insert(pfn, l).is_some() {
            // The old block's free was not recorded: it stays allocated in
            // the model (and keeps its slot).
            rec.never_freed += 1;
        }
        Some(Rec {
            kind: REC_ALLOC,
            order: order as u8,
            gfp: gfp.0,
            ts: ev.ts_ns,
            id,
        })
    }

    fn free(
        &mut self,
        ev: &crate::event::Event,
        pfn: u64,
        order: u32,
    ) -> Result<Option<Rec>, ReplayError> {
        self.rec.frees += 1;
        let Some(l) = self.live.remove(&pfn) else {
            self.rec.unmatched_frees += 1;
            if order > MAX_ORDER as u32 {
                return Ok(None);
            }
            // A page allocated before the recording: the replay sets one
            // aside before it starts (`Prepared::preallocate`) and frees it
            // here.
            let id = new_id(&mut self.free_slots, &mut self.generations);
            self.free_slots.push(id as u32);
            self.pre.push((id, order as u8, pfn));
            if self.pre.len() as u64 > MAX_PREEXISTING {
                return Err(ReplayError::Io {
                    what: format!(
                        "more than {MAX_PREEXISTING} frees of pages allocated before the recording"
                    ),
                    source: io::Error::other("the trace frees more pages than it allocates"),
                });
            }
            return Ok(Some(Rec {
                kind: REC_FREE,
                order: order as u8,
                gfp: 0,
                ts: ev.ts_ns,
                id,
            }));
        };
        self.free_slots.push(l.id as u32);
        if l.order != order {
            self.rec.order_mismatches += 1;
        }
        if l.cpu != ev.cpu {
            self.rec.cross_cpu_frees += 1;
        }
        Ok(Some(Rec {
            kind: REC_FREE,
            order: l.order as u8,
            gfp: 0,
            ts: ev.ts_ns,
            id: l.id,
        }))
    }

    fn write(&mut self, cpu: u32, r: &Rec) -> Result<(), ReplayError> {
        self.first_ts.get_or_insert(r.ts);
        self.last_ts = self.last_ts.max(r.ts);
        self.write_at(cpu, r)
    }

    /// Writes `r` to `cpu`'s stream without moving the span of allocator
    /// events (the vmstat work's records do not start or end it).
    fn write_at(&mut self, cpu: u32, r: &Rec) -> Result<(), ReplayError> {
        let w = writer_for(&mut self.writers, cpu)?;
        w.0.write_all(&r.encode()).map_err(write_err)?;
        w.2 += REC_BYTES as u64;
        Ok(())
    }
}

impl Prepared {
    /// Reads the trace at `path` once and splits its allocator events.
    pub fn open(path: &Path) -> Result<Prepared, ReplayError> {
        let terr = |source| ReplayError::Trace {
            path: path.to_path_buf(),
            source,
        };
        let mut reader = TraceReader::open(path).map_err(terr)?;
        let header = reader.header().clone();
        let mut pass = FirstPass::new(&header);
        for ev in reader.by_ref() {
            pass.event(&ev.map_err(terr)?)?;
        }
        let mut rec = pass.rec;
        if pass.before_snapshot && rec.before_snapshot > 0 {
            return Err(ReplayError::NoExecAfterSnapshot {
                path: path.to_path_buf(),
                skipped: rec.before_snapshot,
            });
        }
        rec.never_freed += pass.live.len() as u64;
        if rec.allocs == 0 && rec.frees == 0 {
            return Err(ReplayError::NoAllocatorEvents {
                path: path.to_path_buf(),
            });
        }
        let mut streams = Vec::new();
        for (cpu, (mut w, r, len)) in pass.writers {
            w.flush().map_err(write_err)?;
            rec.cpus.push(cpu);
            streams.push((cpu, r, len));
        }
        let start_ts = pass.first_ts.unwrap_or(0);
        let rec_vmstat = rec.vmstat_works > 0;
        rec.span_ns = pass.last_ts.saturating_sub(start_ts);
        rec.pcp_start = pass.inference.finish(&header.machine.zones);
        Ok(Prepared {
            header,
            trailer: reader.trailer().cloned(),
            recorded: rec,
            streams,
            start_ts,
            nr_slots: pass.generations.len(),
            pre: pre_with_gfp(&pass.pre, &pass.block_mt),
            use_recorded_vmstat: rec_vmstat,
        })
    }

    /// The tasks of one replay on a machine of `nr_cpus` vCPUs (recorded CPU
    /// `c` runs on vCPU `c % nr_cpus`), and the handle to read what the
    /// model did once the engine has run them. Frees of pages allocated
    /// before the recording are skipped (counted in
    /// [`ReplayStats::frees_of_failed`]); [`Prepared::tasks_with`] replays
    /// them with the blocks of [`Prepared::preallocate`].
    pub fn tasks(&self, nr_cpus: u32) -> (Vec<TaskSpec>, Rc<RefCell<ReplayStats>>) {
        let none = self.pre.iter().map(|&(id, _, _)| (id, None)).collect();
        self.tasks_with(nr_cpus, none)
    }

    /// Sets aside a block for every free of a page allocated before the
    /// recording, as the kernel had it allocated, and empties the PCP lists
    /// that the setting aside filled; the counters are reset afterwards.
    /// Call before [`Prepared::warm_pcp`], and give the result to
    /// [`Prepared::tasks_with`].
    ///
    /// `mm_page_free` does not say the block's migratetype, which decides
    /// the PCP list its free lands on: each block is set aside with the
    /// migratetype of the list a page of its pageblock was drained from in
    /// the trace (`mm_page_pcpu_drain`). Deviation: movable where the trace
    /// drains none of its pageblock (most of what a workload frees is its
    /// own user memory), an ESTIMATE.
    pub fn preallocate(&self, pa: &mut PageAlloc, nr_cpus: u32) -> Vec<(u64, Option<Block>)> {
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(0));
        let blocks = self
            .pre
            .iter()
            .map(|&(id, order, gfp)| {
                cx.begin(VcpuId(0), SimTime(0));
                (
                    id,
                    pa.alloc_pages(&mut cx, gfp, order).ok().map(|p| (p, order)),
                )
            })
            .collect();
        for c in 0..nr_cpus.max(1) {
            cx.begin(VcpuId(c), SimTime(0));
            pa.drain_pages(&mut cx, VcpuId(c));
        }
        pa.vmstat = mm::vmstat::VmStat::default();
        blocks
    }

    /// [`Prepared::tasks`] with the set-aside blocks of
    /// [`Prepared::preallocate`].
    pub fn tasks_with(
        &self,
        nr_cpus: u32,
        pre: Vec<(u64, Option<Block>)>,
    ) -> (Vec<TaskSpec>, Rc<RefCell<ReplayStats>>) {
        let mut sh = Shared {
            slots: vec![Vec::new(); self.nr_slots],
        };
        for (id, b) in pre {
            sh.put(id, SlotState::Allocated(b));
        }
        let shared = Rc::new(RefCell::new(sh));
        let stats = Rc::new(RefCell::new(ReplayStats::default()));
        let tasks = self
            .streams
            .iter()
            .enumerate()
            .map(|(i, (cpu, file, len))| TaskSpec {
                program: Box::new(CpuReplay {
                    file: file.clone(),
                    len: *len,
                    off: 0,
                    buf: Vec::new(),
                    pos: 0,
                    now_ts: self.start_ts,
                    peeked: None,
                    alloc_id: None,
                    chan: i as u32,
                    vmstat: self.replays_vmstat(),
                    shared: shared.clone(),
                    stats: stats.clone(),
                }),
                cpu: VcpuId(cpu % nr_cpus.max(1)),
                process: None,
            })
            .collect();
        (tasks, stats)
    }
}

impl Prepared {
    /// Whether the replay's tasks give the recorded vmstat work: the
    /// engine must then run none of its own
    /// ([`sim::Engine::vmstat_work_from_workload`]).
    pub fn replays_vmstat(&self) -> bool {
        self.use_recorded_vmstat && self.recorded.vmstat_works > 0
    }

    /// At most how many pages [`Prepared::warm_pcp`] puts on per-CPU lists:
    /// the recorded pagesets' counts, each at most its zone's managed pages
    /// (a damaged header may claim more; `warm_pcp` clamps the same way). What the warm-up costs the host
    /// grows with it (the pages' `struct page`s are materialised), so a
    /// caller checks it against the host before warming (a 2 KiB trace
    /// claiming 2^47 pages on a 16 TiB zone aborted on memory, fuzz input
    /// 110216 of seed 6000000).
    pub fn warm_pcp_pages_bound(&self) -> u64 {
        self.header
            .machine
            .zones
            .iter()
            .flat_map(|z| z.pagesets.iter().map(|ps| ps.count.min(z.managed)))
            .fold(0u64, u64::saturating_add)
    }

    /// Puts the recorded per-CPU list contents back before a replay: under
    /// a kernel that auto-tunes `high` (6.7+), each list's `high` starts at
    /// the recorded one (clamped to the model's `high_min..=high_max`), as
    /// the kernel's had been tuned by what ran before; then for every
    /// recorded pageset with pages on it (`count` in the header's
    /// `/proc/zoneinfo` snapshot, taken just before the command started),
    /// puts that many pages on the CPU's lists, up to the model's own
    /// `high - batch` (the fullest a list stays after a drain: fuller, the
    /// replay's first free would drain what the warm-up put there): each
    /// list as [`pcp_start`] inferred it from the trace (blocks of its order
    /// and migratetype, allocated on the CPU's vCPU and freed there), or,
    /// where the trace says nothing of a CPU's lists, order-0 pages in the
    /// proportions of the CPU's recorded order-0 allocations (a guess). The
    /// counters are reset afterwards: they count the replay only. Returns
    /// the pages on PCP lists after the warm-up.
    pub fn warm_pcp(&self, pa: &mut PageAlloc, nr_cpus: u32) -> u64 {
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(0));
        for (zh, z) in self.header.machine.zones.iter().enumerate() {
            let zone_gfp = match z.name.as_str() {
                "DMA" | "DMA32" => Gfp::DMA32,
                "Normal" | "Movable" => Gfp::KERNEL,
                _ => continue,
            };
            let Some(zi) = pa.zones.iter().position(|m| m.zone_type.name() == z.name) else {
                continue;
            };
            for ps in &z.pagesets {
                let v = VcpuId(ps.cpu % nr_cpus.max(1));
                let pi = pa.pcp_index(v, zi);
                let room = start_high(pa, pi, ps);
                // A list never holds more than its zone's pages: the
                // model's zone of that name may be larger than the
                // recorded one (fuzz input 761763 of seed 6000000).
                let want = ps.count.min(room).min(z.managed);
                let lists = self.start_lists(ps.cpu, zh, want);
                cx.begin(v, SimTime(0));
                put_on_lists(pa, &mut cx, (zi, pi), zone_gfp, &lists);
                // Allocating those pages refilled the lists, and under
                // auto-tuning each refill raised `high` by a batch
                // (`nr_pcp_alloc()`): the recorded `high` again, not the
                // warm-up's (server: 33 811 recorded, 58 192 after it).
                start_high(pa, pi, ps);
            }
        }
        pa.vmstat = mm::vmstat::VmStat::default();
        pa.nr_pcp_pages()
    }

    /// The lists to warm for recorded CPU `cpu` in header zone `zh`, as
    /// (order, migratetype, blocks), `pages` pages in all: the inferred
    /// start scaled to `pages`, or the order-0 guess.
    fn start_lists(&self, cpu: u32, zh: usize, pages: u64) -> Vec<(u8, u8, u64)> {
        let inferred = self.recorded.pcp_start.get(&(cpu, zh));
        let total: u64 = inferred
            .map(|l| l.iter().map(|x| x.blocks << x.order).sum())
            .unwrap_or(0);
        if let (Some(lists), true) = (inferred, total > 0) {
            let scale = |b: u64| (b as u128 * pages.min(total) as u128 / total as u128) as u64;
            return lists
                .iter()
                .map(|l| (l.order, l.migratetype, scale(l.blocks)))
                .collect();
        }
        let mix = self
            .recorded
            .order0_mix
            .get(&cpu)
            .copied()
            .unwrap_or([0, 1, 0]);
        let sum: u64 = mix.iter().sum::<u64>().max(1);
        (0..3)
            .map(|mt| (0, mt as u8, pages * mix[mt] / sum))
            .collect()
    }
}

/// Sets the pageset's `high` to the recorded one under auto-tuning (within
/// the model's bounds); returns the pages it may take before a free
/// would drain (`high - batch - count`).
fn start_high(pa: &mut PageAlloc, pi: usize, ps: &crate::event::Pageset) -> u64 {
    let pcp = &mut pa.pcp[pi];
    if pcp.high_min != pcp.high_max && ps.high > 0 {
        pcp.high = (ps.high.min(i32::MAX as u64) as i32).clamp(pcp.high_min, pcp.high_max);
    }
    (pcp.high - pcp.batch - pcp.count).max(0) as u64
}

/// Allocates the blocks of each (order, migratetype, blocks) on the vCPU
/// `cx` runs on, then frees them there: they land on its lists (pageset
/// `pi`).
///
/// The warm-up's frees rebuild a state, not a history: before each one the
/// pageset's free-burst detection is cleared ([`forget_warm_up_frees`]),
/// else thousands of frees without an allocation saturate `free_count`
/// and the first high-order block freed after them is a `free_high` that
/// drains the whole list and lowers `high` (sqlite's full recording of
/// 2026-11-24 23:17: 13 885 pages warmed, 0 left, `high` 100 348 → 39 868).
///
/// Likewise the allocations: each refill brought a batch to the list (up
/// to `batch << CONFIG_PCP_BATCH_SCALE_MAX` pages once `alloc_factor` has
/// grown), and what the allocations left of the last refills would stay
/// on the list beside the blocks freed onto it. So the pageset (zone `zi`,
/// pageset `pi`) is drained between the two: the lists end holding the
/// pages asked for, not those plus the refills' remainder (gzip's full
/// recording of 2026-11-24 23:18: 2 752 and 2 899 pages over the
/// recorded counts on its two CPUs).
fn put_on_lists(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    (zi, pi): (usize, usize),
    zone_gfp: Gfp,
    lists: &[(u8, u8, u64)],
) {
    let mut held = Vec::new();
    for &(order, mt, blocks) in lists {
        let mt_gfp = [Gfp::KERNEL, Gfp::MOVABLE, Gfp::RECLAIMABLE][mt.min(2) as usize];
        let g = Gfp(mt_gfp.0 | (zone_gfp.0 & Gfp::DMA32.0));
        for _ in 0..blocks {
            // One operation per begin: the segments do not pile up.
            cx.begin(cx.cpu, SimTime(0));
            match pa.alloc_pages(cx, g, order) {
                Ok(p) => held.push((p, order)),
                Err(_) => break,
            }
        }
    }
    cx.begin(cx.cpu, SimTime(0));
    pa.drain_pages_zone(cx, zi, cx.cpu);
    for (p, order) in held {
        cx.begin(cx.cpu, SimTime(0));
        forget_warm_up_frees(&mut pa.pcp[pi]);
        pa.free_pages(cx, p, order);
    }
    forget_warm_up_frees(&mut pa.pcp[pi]);
}

/// Clears a pageset's record of recent frees and allocations: `free_count`
/// (pages freed without an allocation between), `free_factor`,
/// `alloc_factor` and the `PCPF_*` flags (the last free's order). The
/// kernel's at the recording's start are not in /proc/zoneinfo; the
/// warm-up's own would be its artefact. Zero is an ESTIMATE: the state a
/// list reaches after a few allocations (each halves `free_count`).
fn forget_warm_up_frees(p: &mut mm::pcp::PerCpuPages) {
    p.free_count = 0;
    p.free_factor = 0;
    p.alloc_factor = 0;
    p.flags = 0;
}

/// What a slot holds for one allocation number.
#[derive(Clone, Copy, Debug)]
enum SlotState {
    /// The model's block; `None`: the model's allocation failed.
    Allocated(Option<Block>),
    /// The free came first: the channel of the task waiting for the block.
    Waiting(u32),
}

/// State the CPUs' programs share: per allocation slot (the low 32 bits of
/// an allocation number), the model's blocks and the frees waiting for
/// theirs. A slot holds one allocation at a time in trace order, but the
/// CPUs' timelines drift, so the next allocation of a slot can run before
/// the free of the previous one: a slot is a short list, searched by the
/// whole allocation number.
struct Shared {
    slots: Vec<Vec<(u64, SlotState)>>,
}

impl Shared {
    fn take(&mut self, id: u64) -> Option<SlotState> {
        let list = self.slots.get_mut(id as u32 as usize)?;
        let i = list.iter().position(|(x, _)| *x == id)?;
        Some(list.swap_remove(i).1)
    }

    fn put(&mut self, id: u64, st: SlotState) {
        let slot = id as u32 as usize;
        if slot >= self.slots.len() {
            self.slots.resize(slot + 1, Vec::new());
        }
        self.slots[slot].push((id, st));
    }
}

struct CpuReplay {
    file: Arc<File>,
    len: u64,
    off: u64,
    buf: Vec<u8>,
    pos: usize,
    now_ts: u64,
    peeked: Option<Rec>,
    alloc_id: Option<(u64, u8)>,
    chan: u32,
    /// Give the recorded vmstat work ([`Op::VmstatUpdate`]); false: skip it.
    vmstat: bool,
    shared: Rc<RefCell<Shared>>,
    stats: Rc<RefCell<ReplayStats>>,
}

const READ_BYTES: usize = REC_BYTES * 2730;

impl CpuReplay {
    fn read(&mut self) -> Option<Rec> {
        if self.pos >= self.buf.len() {
            if self.off >= self.len {
                return None;
            }
            let n = (self.len - self.off).min(READ_BYTES as u64) as usize;
            self.buf.resize(n, 0);
            if self.file.read_exact_at(&mut self.buf, self.off).is_err() {
                self.stats.borrow_mut().io_errors += 1;
                self.off = self.len;
                self.buf.clear();
                return None;
            }
            self.off += n as u64;
            self.pos = 0;
        }
        let r = Rec::decode(&self.buf[self.pos..self.pos + REC_BYTES]);
        self.pos += REC_BYTES;
        Some(r)
    }

    /// The model's allocation `id` of `order` returned `r`: hand the block
    /// to a waiting free (a [`Op::Send`]) or keep it for a later one.
    fn allocated(
        &mut self,
        id: u64,
        order: u8,
        r: Result<mm::Pfn, mm::page_alloc::AllocError>,
    ) -> Option<Op> {
        let block = {
            let mut st = self.stats.borrow_mut();
            match r {
                Ok(pfn) => {
                    st.allocs += 1;
                    Some((pfn, order))
                }
                Err(_) => {
                    st.alloc_failed += 1;
                    None
                }
            }
        };
        let mut sh = self.shared.borrow_mut();
        match sh.take(id) {
            Some(SlotState::Waiting(chan)) => Some(Op::Send {
                chan,
                blocks: block.into_iter().collect(),
            }),
            // An allocation number is allocated once.
            Some(SlotState::Allocated(_)) | None => {
                sh.put(id, SlotState::Allocated(block));
                None
            }
        }
    }
}

impl Program for CpuReplay {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        match last {
            OpResult::Alloc(r) => {
                if let Some((id, order)) = self.alloc_id.take() {
                    if let Some(op) = self.allocated(id, order, r) {
                        return Some(op);
                    }
                }
            }
            OpResult::Received(blocks) => {
                if let Some(&b) = blocks.first() {
                    self.stats.borrow_mut().frees += 1;
                    return Some(Op::FreePages { block: b });
                }
                self.stats.borrow_mut().frees_of_failed += 1;
            }
            // The allocator stream issues no address-space operations.
            OpResult::Start
            | OpResult::Done
            | OpResult::Mapped(_)
            | OpResult::Sys(_)
            | OpResult::Forked(_)
            | OpResult::Brk(_)
            | OpResult::MovedPages { .. } => {}
        }
        loop {
            let rec = match self.peeked.take() {
                Some(r) => r,
                None => self.read()?,
            };
            if rec.ts > self.now_ts {
                let gap = rec.ts - self.now_ts;
                self.now_ts = rec.ts;
                self.peeked = Some(rec);
                return Some(Op::Compute { ns: gap });
            }
            match rec.kind {
                REC_VMSTAT if self.vmstat => return Some(Op::VmstatUpdate),
                REC_VMSTAT => {}
                REC_ALLOC => {
                    self.alloc_id = Some((rec.id, rec.order));
                    return Some(Op::AllocPages {
                        gfp: Gfp(rec.gfp),
                        order: rec.order,
                    });
                }
                _ => {
                    let mut sh = self.shared.borrow_mut();
                    match sh.take(rec.id) {
                        Some(SlotState::Allocated(Some(b))) => {
                            self.stats.borrow_mut().frees += 1;
                            return Some(Op::FreePages { block: b });
                        }
                        Some(SlotState::Allocated(None)) => {
                            self.stats.borrow_mut().frees_of_failed += 1;
                        }
                        // A free is recorded once per allocation number.
                        Some(SlotState::Waiting(_)) | None => {
                            sh.put(rec.id, SlotState::Waiting(self.chan));
                            self.stats.borrow_mut().cross_cpu_waits += 1;
                            return Some(Op::Recv { chan: self.chan });
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block freed in the trace but allocated before it is set aside with
    /// the migratetype of the list its pageblock's pages were drained from;
    /// without a drain in its pageblock, movable.
    #[test]
    fn pre_existing_blocks_take_their_pageblocks_drained_migratetype() {
        let mut block_mt = BTreeMap::new();
        let block = 7u64 << mm::page_alloc::PAGEBLOCK_ORDER;
        note_block_mt(&mut block_mt, block + 5, 1);
        note_block_mt(&mut block_mt, block + 6, 0); // the last drain wins
        note_block_mt(&mut block_mt, block + 9, 4); // not a PCP list: ignored
        let pre = [(1, 0, block + 100), (2, 1, block + 1024)];
        let got = pre_with_gfp(&pre, &block_mt);
        assert_eq!(got[0], (1, 0, Gfp::KERNEL));
        assert_eq!(got[1], (2, 1, Gfp::MOVABLE), "another pageblock");
    }
}
