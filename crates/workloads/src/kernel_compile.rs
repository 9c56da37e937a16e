//! A kernel build (`make -jN`) as the anonymous-memory fault path sees it:
//! the compiler processes' heaps (seed 004's "kernel compilation" benchmark).
//!
//! # What it models
//!
//! Seed 004 times `make -j8` and `make -j80` of the kernel on an 80-core
//! Ampere Altra and reports real, kernel (sys) and user time. What large
//! anonymous folios change there is the compilers' memory: each `cc1` is a
//! short-lived process whose heap grows through `brk()` (glibc's main
//! arena) and `mmap()` (glibc's large chunks and GCC's garbage-collected
//! pages), is partly given back while it runs, and is torn down at exit.
//!
//! Each of the `tasks` job slots (the N of `-jN`) is a vCPU whose run queue
//! holds `jobs` compiler processes, run one after another. A job:
//!
//! 1. asks for its break (`brk(0)`, as glibc does at start-up);
//! 2. allocates until it has used `job_mib` (uniform in ±50 %) of memory,
//!    one allocation at a time, writing every page it allocates and then
//!    computing `work_per_page_ns` for each such page:
//!    - `mmap_pct` % of the allocations are mmapped chunks of 128 KiB to
//!      2 MiB plus a page of header (glibc maps requests from
//!      `M_MMAP_THRESHOLD`, 128 KiB, up as chunks of their own; GCC's
//!      `ggc-page.c` maps its pages in runs), page-aligned lengths that are
//!      rarely a multiple of 64 KiB;
//!    - the others come from the heap: requests of 16 B to 256 KiB carved
//!      from the top of the heap, the break moved up (by the request plus
//!      glibc's `M_TOP_PAD`, 128 KiB, page-aligned) when they do not fit;
//! 3. after each allocation, with probability `free_pct` %, frees memory:
//!    a whole mmapped chunk (`munmap`, glibc's `free()` of a mapped chunk),
//!    a page-aligned part of one (`MADV_DONTNEED`, as `ggc-page.c` releases
//!    free pages; the part is reused, written again, by a later allocation),
//!    or the top of the heap (`brk()` down to the in-use top plus
//!    `M_TOP_PAD`, as glibc's `systrim()` does when the free top exceeds
//!    `M_TRIM_THRESHOLD`, 128 KiB);
//! 4. exits (`exit_mmap()` frees what is left).
//!
//! real time is `runtime_ns`, user time `user_ns`, kernel time `sys_ns`.
//!
//! # Where the parameters come from
//!
//! A kernel build recorded on this host ([`crate::recorded_build`],
//! `docs/kbuild-recording.md`):
//!
//! - `job_sizes = "recorded"`: a job allocates what one of the recorded
//!   build's processes allocated (drawn from their page counts: most jobs
//!   are small, `sh` or the `gcc` driver, most memory is in the `cc1`s at
//!   ~40 MiB each). `job_mib` (32, an estimate) is the `uniform`
//!   alternative's mean.
//! - `work_per_page_ns` = 26 280: the build's user time per anonymous page.
//! - `other_sys_permille` = 67: the kernel time the model does not play
//!   (exec, file-backed faults, the page cache, file system calls,
//!   scheduling), in ‰ of user time: the same build's sampled kernel time
//!   outside the anonymous fault path, measured with `perf` on this host
//!   under 4 KiB and 64 KiB folios alike (it does not move between them).
//!   Added as system time in proportion to each job's user time; large
//!   anonymous folios do not change it.
//! - `cold_fault_pct` = 100: each user fault also pays for the compiler's
//!   code run since its last fault ([`COLD_FAULT_NS`], by the pages used
//!   in between: measured on this host, see the constant), which the
//!   cost profile's back-to-back fault costs leave out. The model plays a
//!   range's writes before its work, so it counts pages, not time, since
//!   the last fault; the table holds the measured spacing of cc1's faults.
//! - The glibc constants (128 KiB mmap threshold, top pad and trim
//!   threshold) are glibc's documented defaults (mallopt(3)).
//! - `mmap_pct` = 30, `free_pct` = 20 and the request-size ranges are
//!   estimates: how a process's memory splits between brk and mmap, and how
//!   much it gives back before exit, were not measured. None was tuned to
//!   the seed's result.
//!
//! Deviations: a job is a process of its own from the start; make's
//! `fork()` and the `exec()` that throws the copy away are not played
//! (the engine binds tasks to vCPUs without migration, so a make parent
//! waiting on one vCPU would serialize behind its children); their kernel
//! time, with that of file I/O and the page cache, is in
//! `other_sys_permille`, not played step by step.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::recorded_build;
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::collections::VecDeque;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "kernel-compile",
    summary: "make -jN of the kernel: compiler processes whose heaps grow by brk and mmap, \
              are partly freed (munmap, MADV_DONTNEED, brk shrink) and torn down at exit",
    params: &[
        P::int(
            "tasks",
            Count::Of(
                |m, _| 8.min(m.nr_cpus() as i64),
                "8, or the number of CPUs if fewer",
            ),
            1,
            Count::CPUS,
            "job slots (make -jN), bound to CPUs spread over the machine",
        ),
        P::int(
            "jobs",
            N(4),
            1,
            N(100_000),
            "compiler processes each slot runs one after another",
        ),
        P::choice(
            "job_sizes",
            "recorded",
            &["recorded", "uniform"],
            "how much a job allocates: recorded (the recorded build's processes) or uniform (job_mib ± 50 %)",
        ),
        P::int(
            "job_mib",
            N(32),
            1,
            N(65_536),
            "with job_sizes = uniform: mean MiB a job allocates and writes (uniform in ±50 %; estimate)",
        ),
        P::int(
            "work_per_page_ns",
            N(recorded_build::USER_NS_PER_ANON_PAGE as i64),
            0,
            N(1_000_000_000),
            "user time per page allocated (measured: see the module doc)",
        ),
        P::int(
            "mmap_pct",
            N(30),
            0,
            N(100),
            "% of allocations that are mmapped chunks rather than heap (estimate)",
        ),
        P::int(
            "free_pct",
            N(20),
            0,
            N(100),
            "% of allocations followed by a free: munmap, MADV_DONTNEED or brk shrink (estimate)",
        ),
        P::int(
            "cold_fault_pct",
            N(100),
            0,
            N(1000),
            "% of COLD_FAULT_NS (measured on this project's x86 host) each user fault adds for the compiler's code run since its last fault; 0: faults cost what back-to-back ones do",
        ),
        P::int(
            "other_sys_permille",
            N(recorded_build::OTHER_SYS_PERMILLE as i64),
            0,
            N(100_000),
            "kernel time the model does not play (exec, file faults, read/write, ...), in ‰ of user time",
        ),
    ],
    build,
    nr_runs: None,
};

/// What a compiler's user page fault costs beyond a back-to-back fault,
/// in ns, by the pages it used since its last fault (element `m - 1` for
/// `m` pages; 16 and more, the last): the fault path's code and branch
/// history pushed out of the core by the compiler's own code in between
/// ([`sim::Program::cold_fault_ns`]).
///
/// Measured on this project's x86 host (2026-11-25; docs/kbuild-recording.md,
/// "Which part of the program's work makes the fault cold"):
/// `scripts/fault_gaps.py --per-pages 16` over `perf record --switch-events
/// -e page-faults -c 1` of `make mm/memory.o mm/page_alloc.o mm/slub.o`
/// (linux-source-6.1): cc1's on-CPU time between its faults, m at a time,
/// less m faults of 1.2 us, is its code time; at 6.58 KiB of code a us
/// through its L1I (cachegrind on cc1 of mm/memory.c) it maps onto what
/// `scripts/cold_fault.c` measured a fault to cost after C bytes of other
/// code (+140 ns at 8 KiB, +270 at 32 KiB, +330-350 from 64 KiB), and
/// after a whole L2 of its lines (0.92 KiB a us into the 1 MiB L2) onto
/// its 1 MiB data sweep (+796 ns). A 4 KiB folio's fault comes one page
/// after the last (231 ns), a 64 KiB folio's sixteen (398 ns).
pub const COLD_FAULT_NS: [u64; 16] = [
    231, 283, 309, 326, 338, 348, 356, 363, 370, 376, 381, 385, 389, 392, 395, 398,
];

/// glibc's `M_MMAP_THRESHOLD` default: requests from 128 KiB are mapped.
const MMAP_THRESHOLD: u64 = 128 << 10;
/// glibc's `M_TOP_PAD` default: extra bytes asked of `brk()` each time.
const TOP_PAD: u64 = 128 << 10;
/// glibc's `M_TRIM_THRESHOLD` default: a free heap top above this is
/// returned with `brk()`.
const TRIM_THRESHOLD: u64 = 128 << 10;
/// Largest mmapped chunk (estimate: GCC's GC maps its pages in runs of up to
/// 2 MiB).
const MAX_CHUNK: u64 = 2 << 20;
/// Largest heap request (below the mmap threshold by glibc's rule; estimate
/// for the upper end of what stays on the heap after the threshold adapts).
const MAX_HEAP_REQUEST: u64 = 256 << 10;

#[derive(Clone, Copy, Debug)]
struct JobParams {
    /// Mean bytes a job allocates (uniform in ± 50 %), or `None` for the
    /// recorded build's processes.
    job_bytes: Option<u64>,
    work_per_page_ns: u64,
    mmap_pct: u32,
    free_pct: u32,
    other_sys_permille: u64,
    cold_fault_pct: u64,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let tasks = a.int("tasks")? as u32;
    let jobs = a.int("jobs")? as u32;
    let uniform = a.choice("job_sizes")? == "uniform";
    let job_bytes = (a.int("job_mib")? as u64) << 20;
    let jp = JobParams {
        job_bytes: uniform.then_some(job_bytes),
        work_per_page_ns: a.int("work_per_page_ns")? as u64,
        mmap_pct: a.int("mmap_pct")? as u32,
        free_pct: a.int("free_pct")? as u32,
        other_sys_permille: a.int("other_sys_permille")? as u64,
        cold_fault_pct: a.int("cold_fault_pct")? as u64,
    };
    // Spread the slots over the machine, as the scheduler spreads busy
    // tasks over idle cores.
    let stride = (nr_cpus / tasks).max(1);
    let mut specs = Vec::new();
    for _ in 0..jobs {
        for t in 0..tasks {
            specs.push(TaskSpec::new(
                Box::new(CompileJob::new(jp)),
                mm::VcpuId(t * stride),
            ));
        }
    }
    Ok(specs)
}

/// What the op in flight will answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Await {
    Nothing,
    /// `brk(0)` at start-up.
    StartBrk,
    /// `mmap()` of a chunk of this length.
    Chunk(u64),
}

/// One compiler process.
pub struct CompileJob {
    p: JobParams,
    /// Bytes this job allocates before it exits (drawn at start).
    target: u64,
    /// Bytes allocated so far (re-used parts count again).
    allocated: u64,
    /// First byte of the heap (`mm->start_brk`).
    heap_start: u64,
    /// Top of the heap's used part.
    heap_used: u64,
    /// The break as last set.
    brk: u64,
    /// Live mmapped chunks: (address, length).
    chunks: Vec<(u64, u64)>,
    /// Parts released with `MADV_DONTNEED`, waiting to be reused.
    released: Vec<(u64, u64)>,
    pending: VecDeque<Op>,
    awaiting: Await,
    started: bool,
    exited: bool,
    /// [`COLD_FAULT_NS`] at `cold_fault_pct` (empty at 0).
    cold_fault_ns: Vec<u64>,
}

impl CompileJob {
    fn new(p: JobParams) -> CompileJob {
        CompileJob {
            p,
            target: 0,
            allocated: 0,
            heap_start: 0,
            heap_used: 0,
            brk: 0,
            chunks: Vec::new(),
            released: Vec::new(),
            pending: VecDeque::new(),
            awaiting: Await::Nothing,
            started: false,
            exited: false,
            cold_fault_ns: match p.cold_fault_pct {
                0 => Vec::new(),
                pct => COLD_FAULT_NS.iter().map(|ns| ns * pct / 100).collect(),
            },
        }
    }

    /// Writes `[addr, addr + len)` page by page, then computes for its pages.
    fn use_range(&mut self, addr: u64, len: u64) {
        let first = addr & !(PAGE_SIZE - 1);
        let pages = (addr + len).div_ceil(PAGE_SIZE) - first / PAGE_SIZE;
        self.pending.push_back(Op::Touch {
            bytes: 1,
            addr: first,
            len: pages * PAGE_SIZE,
            stride: PAGE_SIZE,
            write: true,
        });
        self.allocated += len;
        if self.p.work_per_page_ns > 0 {
            let ns = pages * self.p.work_per_page_ns;
            self.pending.push_back(Op::Compute { ns });
            // The kernel's share of that work which the model does not
            // play: the program's file faults, reads and writes, its part
            // of exec and exit.
            let sys = ns * self.p.other_sys_permille / 1000;
            if sys > 0 {
                self.pending.push_back(Op::KernelWork { ns: sys });
            }
        }
    }

    /// The next allocation: a released part reused, a mapped chunk, or heap.
    fn allocate(&mut self, rng: &mut Rng) -> Option<Op> {
        if !self.released.is_empty() && rng.percent(50) {
            let (a, l) = self
                .released
                .swap_remove(rng.below(self.released.len() as u64) as usize);
            self.use_range(a, l);
            return None;
        }
        if rng.percent(self.p.mmap_pct) {
            // A request of 128 KiB to 2 MiB and its chunk header, in pages.
            let req = MMAP_THRESHOLD + rng.below(MAX_CHUNK - MMAP_THRESHOLD + 1);
            let len = (req + 16).div_ceil(PAGE_SIZE) * PAGE_SIZE;
            self.awaiting = Await::Chunk(len);
            return Some(Op::Mmap {
                len,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            });
        }
        let req = 16 + rng.below(MAX_HEAP_REQUEST - 16 + 1);
        let start = self.heap_used;
        self.heap_used += req;
        if self.heap_used > self.brk {
            // sysmalloc(): ask for the request plus M_TOP_PAD, page-aligned.
            self.brk = (self.heap_used + TOP_PAD).div_ceil(PAGE_SIZE) * PAGE_SIZE;
            self.pending.push_back(Op::Brk { brk: self.brk });
        }
        self.use_range(start, req);
        None
    }

    /// Frees something, if there is anything to free.
    fn free(&mut self, rng: &mut Rng) {
        match rng.below(3) {
            0 if !self.chunks.is_empty() => {
                let (a, l) = self
                    .chunks
                    .swap_remove(rng.below(self.chunks.len() as u64) as usize);
                self.released.retain(|&(ra, _)| ra < a || ra >= a + l);
                self.pending.push_back(Op::Munmap { addr: a, len: l });
            }
            1 if !self.chunks.is_empty() => {
                // A page-aligned run inside a chunk, up to half of it.
                let (a, l) = self.chunks[rng.below(self.chunks.len() as u64) as usize];
                let pages = l / PAGE_SIZE;
                let n = 1 + rng.below(pages / 2);
                let off = rng.below(pages - n + 1);
                let (ra, rl) = (a + off * PAGE_SIZE, n * PAGE_SIZE);
                if self
                    .released
                    .iter()
                    .any(|&(x, y)| x < ra + rl && ra < x + y)
                {
                    return;
                }
                self.released.push((ra, rl));
                self.pending.push_back(Op::Madvise {
                    addr: ra,
                    len: rl,
                    advice: mm::vma::Advice::DontNeed,
                });
            }
            _ => {
                // Free the top of the heap: up to half of what is in use.
                let used = self.heap_used - self.heap_start;
                self.heap_used -= rng.below(used / 2 + 1);
                let top = self.heap_used.div_ceil(PAGE_SIZE) * PAGE_SIZE;
                if self.brk - top > TRIM_THRESHOLD {
                    // systrim(): keep M_TOP_PAD above the in-use top.
                    self.brk = top + TOP_PAD;
                    self.pending.push_back(Op::Brk { brk: self.brk });
                }
            }
        }
    }
}

impl Program for CompileJob {
    fn cold_fault_ns(&self) -> Option<&[u64]> {
        (!self.cold_fault_ns.is_empty()).then_some(&self.cold_fault_ns[..])
    }

    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        if self.exited {
            return None;
        }
        match (self.awaiting, last) {
            (Await::StartBrk, OpResult::Brk(b)) => {
                self.heap_start = b;
                self.heap_used = b;
                self.brk = b;
            }
            (Await::Chunk(len), OpResult::Mapped(Ok(a))) => {
                self.chunks.push((a, len));
                self.use_range(a, len);
            }
            // A refused mmap: the job carries on with what it has.
            _ => {}
        }
        self.awaiting = Await::Nothing;
        if !self.started {
            self.started = true;
            self.target = match self.p.job_bytes {
                Some(b) => b / 2 + rng.below(b + 1),
                None => recorded_build::draw_process_pages(|m| rng.below(m)) * PAGE_SIZE,
            };
            self.awaiting = Await::StartBrk;
            return Some(Op::Brk { brk: 0 });
        }
        loop {
            if let Some(op) = self.pending.pop_front() {
                return Some(op);
            }
            if self.allocated >= self.target {
                self.exited = true;
                return Some(Op::Exit);
            }
            let op = self.allocate(rng);
            if rng.percent(self.p.free_pct) {
                self.free(rng);
            }
            if op.is_some() {
                return op;
            }
        }
    }
}
