//! A Speedometer-2.0-like browser workload: the JavaScript and DOM heaps of
//! a renderer process, as the anonymous-memory fault path sees them (seed
//! 004's third benchmark).
//!
//! # What it models
//!
//! Speedometer runs the same suite of web-app tests over and over and
//! reports runs per minute. Its memory is that of Chromium's renderer: V8's
//! heap and Blink's PartitionAlloc, both built on anonymous mappings of
//! mixed sizes and alignments that are partly unmapped or decommitted and
//! then reused. Each task is a renderer process that does `runs` runs; a
//! run makes `objects` allocations, each written in full and followed by
//! `work_per_page_ns` of computation per page, of three kinds (equally
//! likely):
//!
//! - **V8 heap pages**: 256 KiB, aligned to 256 KiB. V8 gets the alignment
//!   as its `AlignedAllocVirtualMemory()` does: it maps size + alignment −
//!   one page and unmaps the unaligned head and tail.
//! - **Large objects**: V8's large-object space maps each object of more
//!   than a heap page's worth on its own: 16 KiB to 1 MiB here, plus a page
//!   of header, page-aligned only (so rarely 64 KiB-aligned at either end).
//! - **PartitionAlloc slot spans**: Blink's allocator reserves 2 MiB "super
//!   pages", 2 MiB-aligned (mapped with the same over-map-and-trim), and
//!   commits slot spans of 1 to 8 partition pages of 16 KiB inside them, in
//!   order; decommitted spans are reused first.
//!
//! At the end of each run a "garbage collection" unmaps half of the live
//! V8 pages and large objects (chosen at random) and decommits half of the
//! committed slot spans with `MADV_DONTNEED` (PartitionAlloc's
//! `DecommitSystemPages()` on Linux). In the V8 pages and spans that stay,
//! it discards up to three runs of 1 to 8 free pages each
//! (`MADV_DONTNEED`: V8 discards the free-list memory of swept pages,
//! PartitionAlloc's purge discards the free slots' pages), at random page
//! offsets; the next run's allocations refill those holes first (half of
//! the allocations, while holes remain), writing them again.
//!
//! # Where the parameters come from
//!
//! - The 256 KiB V8 page (`kRegularPageSize`), PartitionAlloc's 2 MiB super
//!   page and 16 KiB partition page (`kSuperPageSize`,
//!   `PartitionPageSize()` on 4 KiB-page systems) are the constants of
//!   those allocators' sources.
//! - `work_per_page_ns` = 49 µs per page written: the CPU time per page
//!   allocated measured for compiling a small C project on this host kind
//!   (`../shared/reference/LIVE-KERNEL.md`; the recorded kernel build of
//!   `docs/kbuild-recording.md` gives 26 µs), assumed for a JavaScript
//!   benchmark: an estimate, not a measurement of Speedometer.
//! - The mix of kinds, the large-object size range, `objects`, and the
//!   halves freed per run are estimates; none was tuned to the seed.
//!
//! Deviations: the renderer's other threads (GC helpers, compositor) and
//! the browser and GPU processes are not modelled; reserved but
//! uncommitted memory is mapped read-write (the model has no `PROT_NONE`
//! and no `mprotect`), which changes nothing for faults because nothing
//! touches it.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::{Advice, MapFlags};
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::collections::VecDeque;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "speedometer",
    summary: "Speedometer-2.0-like browser heap: V8 pages, large objects and PartitionAlloc \
              spans of mixed sizes and alignments, half unmapped or decommitted and reused \
              every run (runs_per_min)",
    params: &[
        P::int(
            "tasks",
            N(1),
            1,
            Count::CPUS,
            "renderer processes, each on its own CPU",
        ),
        P::int(
            "runs",
            N(4),
            1,
            N(100_000),
            "benchmark runs each renderer makes",
        ),
        P::int("objects", N(200), 1, N(1_000_000), "allocations per run"),
        P::int(
            "work_per_page_ns",
            N(49_000),
            0,
            N(1_000_000_000),
            "computation per page written (estimate: see the module doc)",
        ),
    ],
    build,
    nr_runs: Some(nr_runs),
};

/// V8's regular heap page (`kRegularPageSize`).
const V8_PAGE: u64 = 256 << 10;
/// PartitionAlloc's super page (`kSuperPageSize`).
const SUPER_PAGE: u64 = 2 << 20;
/// PartitionAlloc's partition page on 4 KiB-page systems.
const PARTITION_PAGE: u64 = 16 << 10;
/// Largest large object (estimate).
const MAX_LARGE_OBJECT: u64 = 1 << 20;

#[derive(Clone, Copy, Debug)]
struct RunParams {
    runs: u32,
    objects: u32,
    work_per_page_ns: u64,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let tasks = a.int("tasks")? as u32;
    let rp = RunParams {
        runs: a.int("runs")? as u32,
        objects: a.int("objects")? as u32,
        work_per_page_ns: a.int("work_per_page_ns")? as u64,
    };
    Ok((0..tasks)
        .map(|t| TaskSpec::new(Box::new(Renderer::new(rp)), mm::VcpuId(t)))
        .collect())
}

/// Runs the workload makes in total (for `runs_per_min`): every renderer
/// makes `runs`.
fn nr_runs(a: &Args) -> Result<u64, ParamError> {
    Ok(a.int("tasks")? as u64 * a.int("runs")? as u64)
}

/// What the `mmap()` in flight is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Await {
    Nothing,
    /// Over-mapped to align a block of `size` to `size`: V8 page or super page.
    Aligned {
        size: u64,
        super_page: bool,
    },
    /// A large object of this length.
    Large(u64),
}

/// One renderer process.
pub struct Renderer {
    p: RunParams,
    run: u32,
    object: u32,
    /// Live V8 pages and large objects: (address, length).
    blocks: Vec<(u64, u64)>,
    /// The current super page and how much of it spans have used.
    super_page: Option<(u64, u64)>,
    /// Committed slot spans.
    spans: Vec<(u64, u64)>,
    /// Decommitted slot spans, reused first.
    decommitted: Vec<(u64, u64)>,
    /// Free pages discarded inside live blocks and spans, refilled first.
    holes: Vec<(u64, u64)>,
    pending: VecDeque<Op>,
    awaiting: Await,
    done: bool,
}

impl Renderer {
    fn new(p: RunParams) -> Renderer {
        Renderer {
            p,
            run: 0,
            object: 0,
            blocks: Vec::new(),
            super_page: None,
            spans: Vec::new(),
            decommitted: Vec::new(),
            holes: Vec::new(),
            pending: VecDeque::new(),
            awaiting: Await::Nothing,
            done: false,
        }
    }

    fn write(&mut self, addr: u64, len: u64) {
        self.pending.push_back(Op::Touch {
            bytes: 1,
            addr,
            len,
            stride: PAGE_SIZE,
            write: true,
        });
        if self.p.work_per_page_ns > 0 {
            self.pending.push_back(Op::Compute {
                ns: len / PAGE_SIZE * self.p.work_per_page_ns,
            });
        }
    }

    /// Maps `size` aligned to `size` by over-mapping and trimming.
    fn map_aligned(&mut self, size: u64, super_page: bool) -> Op {
        self.awaiting = Await::Aligned { size, super_page };
        Op::Mmap {
            len: 2 * size - PAGE_SIZE,
            hint: None,
            flags: MapFlags::NONE,
            advice: None,
        }
    }

    /// The aligned block inside the over-mapping at `a`; queues the trims.
    fn trim(&mut self, a: u64, size: u64) -> u64 {
        let len = 2 * size - PAGE_SIZE;
        let s = a.next_multiple_of(size);
        if s > a {
            self.pending.push_back(Op::Munmap {
                addr: a,
                len: s - a,
            });
        }
        if s + size < a + len {
            self.pending.push_back(Op::Munmap {
                addr: s + size,
                len: a + len - s - size,
            });
        }
        s
    }

    /// A slot span of 1-8 partition pages: a decommitted one reused, or the
    /// next in the current super page (a new super page when it is full).
    fn commit_span(&mut self, rng: &mut Rng) -> Option<Op> {
        if !self.decommitted.is_empty() {
            let (a, l) = self
                .decommitted
                .swap_remove(rng.below(self.decommitted.len() as u64) as usize);
            self.spans.push((a, l));
            self.write(a, l);
            return None;
        }
        let len = (1 + rng.below(8)) * PARTITION_PAGE;
        match self.super_page {
            Some((base, used)) if used + len <= SUPER_PAGE => {
                self.super_page = Some((base, used + len));
                self.spans.push((base + used, len));
                self.write(base + used, len);
                None
            }
            _ => Some(self.map_aligned(SUPER_PAGE, true)),
        }
    }

    fn allocate(&mut self, rng: &mut Rng) -> Option<Op> {
        if !self.holes.is_empty() && rng.percent(50) {
            let (a, l) = self
                .holes
                .swap_remove(rng.below(self.holes.len() as u64) as usize);
            self.write(a, l);
            return None;
        }
        match rng.below(3) {
            0 => Some(self.map_aligned(V8_PAGE, false)),
            1 => {
                let len = PAGE_SIZE + (4 + rng.below(MAX_LARGE_OBJECT / PAGE_SIZE - 3)) * PAGE_SIZE;
                self.awaiting = Await::Large(len);
                Some(Op::Mmap {
                    len,
                    hint: None,
                    flags: MapFlags::NONE,
                    advice: None,
                })
            }
            _ => self.commit_span(rng),
        }
    }

    /// The end of a run: half the blocks unmapped, half the spans
    /// decommitted, free pages discarded in what stays.
    fn collect(&mut self, rng: &mut Rng) {
        // Holes not refilled this run are in blocks that may go now.
        self.holes.clear();
        for _ in 0..self.blocks.len() / 2 {
            let (a, l) = self
                .blocks
                .swap_remove(rng.below(self.blocks.len() as u64) as usize);
            self.pending.push_back(Op::Munmap { addr: a, len: l });
        }
        for _ in 0..self.spans.len() / 2 {
            let (a, l) = self
                .spans
                .swap_remove(rng.below(self.spans.len() as u64) as usize);
            self.decommitted.push((a, l));
            self.pending.push_back(Op::Madvise {
                addr: a,
                len: l,
                advice: Advice::DontNeed,
            });
        }
        let live: Vec<(u64, u64)> = self.blocks.iter().chain(&self.spans).copied().collect();
        for (a, l) in live {
            let pages = l / PAGE_SIZE;
            let mut taken: Vec<(u64, u64)> = Vec::new();
            for _ in 0..rng.below(4) {
                let n = (1 + rng.below(8)).min(pages);
                let off = rng.below(pages - n + 1);
                if taken.iter().any(|&(o, m)| o < off + n && off < o + m) {
                    continue;
                }
                taken.push((off, n));
                let (ha, hl) = (a + off * PAGE_SIZE, n * PAGE_SIZE);
                self.holes.push((ha, hl));
                self.pending.push_back(Op::Madvise {
                    addr: ha,
                    len: hl,
                    advice: Advice::DontNeed,
                });
            }
        }
    }
}

impl Program for Renderer {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        match (self.awaiting, last) {
            (Await::Aligned { size, super_page }, OpResult::Mapped(Ok(a))) => {
                let s = self.trim(a, size);
                if super_page {
                    // The first span goes at the start of the new super page.
                    let len = (1 + rng.below(8)) * PARTITION_PAGE;
                    self.super_page = Some((s, len));
                    self.spans.push((s, len));
                    self.write(s, len);
                } else {
                    self.blocks.push((s, size));
                    self.write(s, size);
                }
            }
            (Await::Large(len), OpResult::Mapped(Ok(a))) => {
                self.blocks.push((a, len));
                self.write(a, len);
            }
            _ => {}
        }
        self.awaiting = Await::Nothing;
        loop {
            if let Some(op) = self.pending.pop_front() {
                return Some(op);
            }
            if self.done {
                return None;
            }
            if self.object == self.p.objects {
                self.object = 0;
                self.run += 1;
                if self.run == self.p.runs {
                    self.done = true;
                    return Some(Op::Exit);
                }
                self.collect(rng);
                continue;
            }
            self.object += 1;
            if let Some(op) = self.allocate(rng) {
                return Some(op);
            }
        }
    }
}
