//! A kernel build (`make -jN`) as the page allocator sees it.
//!
//! # What it models
//!
//! Seed 003's kbuild runs `make -j112` on one socket of a 224-CPU machine:
//! thousands of short-lived compiler processes. Each one faults in its heap
//! and stack page by page while it works (order-0 movable allocations), makes
//! the kernel's slab caches grow and shrink by order-1 pages along the way
//! (those pages belong to the CPU's caches and outlive the job), and at exit
//! frees everything it held in a
//! burst on the CPU where it dies, followed by its kernel stack (four order-0
//! pages: x86-64 kernel stacks are vmalloc'ed with `CONFIG_VMAP_STACK`) and
//! the lone order-1 free of process teardown (the PGD of a PTI kernel). That
//! lone high-order free after a burst is what patch 1 of the series is about; the
//! refill/drain rhythm of many CPUs allocating and freeing is what `high`
//! tuning is about.
//!
//! Deviation: the jobs are modelled at the allocator level (no page tables,
//! no VMAs): each page a compiler faults in is one order-0 allocation. Job
//! sizes are synthetic (the default spreads jobs uniformly over
//! `pages_per_job` ± 50 %). The default user time per page comes from a
//! measurement: recording 6 × `make -j2` of a small C project on this host
//! kind took 224k `mm_page_alloc` events in 5.5 s on 2 CPUs
//! (LIVE-KERNEL.md, "Tracing a real workload"), about one allocation per
//! 49 µs of CPU time.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::page_alloc::Gfp;
use sim::{Block, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "kbuild",
    summary:
        "make -jN: short-lived jobs that fault memory in, use slab pages, and free it all at exit",
    params: &[
        P::int(
            "tasks",
            Count::HALF_CPUS,
            1,
            Count::CPUS,
            "parallel jobs (make -jN), bound to CPUs 0..N-1",
        ),
        P::int(
            "jobs",
            N(20),
            1,
            N(1_000_000),
            "jobs each task runs one after another",
        ),
        P::int(
            "pages_per_job",
            N(4096),
            2,
            N(100_000_000),
            "mean order-0 pages a job faults in (uniform in ±50 %)",
        ),
        P::int(
            "work_per_page_ns",
            N(49_000),
            0,
            N(1_000_000_000),
            "user time per page faulted in (measured: see the module doc)",
        ),
        P::int(
            "slab_pct",
            N(5),
            0,
            // Below 100: a job's pages are faulted only when a step is not
            // a kernel allocation, so 100 % would never finish a job.
            N(99),
            "extra kernel allocations of order 1-3, in % of steps (freed during the job)",
        ),
    ],
    build,
    nr_runs: None,
};

#[derive(Clone, Copy, Debug)]
struct KbuildParams {
    jobs: u32,
    pages_per_job: u32,
    work_per_page_ns: u64,
    slab_pct: u32,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let tasks = a.int("tasks")? as u32;
    let kp = KbuildParams {
        jobs: a.int("jobs")? as u32,
        pages_per_job: a.int("pages_per_job")? as u32,
        work_per_page_ns: a.int("work_per_page_ns")? as u64,
        slab_pct: a.int("slab_pct")? as u32,
    };
    Ok((0..tasks)
        .map(|i| TaskSpec::new(Box::new(Kbuild::new(kp)), mm::VcpuId(i)))
        .collect())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// fork(): the kernel stack (four order-0 pages, vmalloc'ed) and the PGD
    /// (order 1, with PTI).
    ForkStack,
    ForkPgd,
    /// The compiler runs, faulting pages in.
    Run,
    Work,
    /// exit(): user and slab pages in a burst, then stack and PGD.
    ExitUser,
    ExitStack,
    ExitPgd,
}

/// Pages of an x86-64 kernel stack (16 KiB, `THREAD_SIZE`).
const KERNEL_STACK_PAGES: usize = 4;

/// What the allocation in flight is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum For {
    User,
    Slab,
    Stack,
    Pgd,
}

struct Kbuild {
    p: KbuildParams,
    job: u32,
    phase: Phase,
    target: u32,
    faulted: u32,
    held: Vec<Block>,
    slab: Vec<Block>,
    stack: Vec<Block>,
    pgd: Option<Block>,
    pending: For,
}

impl Kbuild {
    fn new(p: KbuildParams) -> Kbuild {
        Kbuild {
            p,
            job: 0,
            phase: Phase::ForkStack,
            target: 0,
            faulted: 0,
            held: Vec::new(),
            slab: Vec::new(),
            stack: Vec::new(),
            pgd: None,
            pending: For::User,
        }
    }

    fn alloc(&mut self, what: For, gfp: Gfp, order: u8) -> Option<Op> {
        self.pending = what;
        Some(Op::AllocPages { gfp, order })
    }
}

impl Program for Kbuild {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        // A failed allocation is counted by the kernel model; the job goes on
        // without that page, as a process would after a failed fault retry.
        if let OpResult::Alloc(Ok(pfn)) = last {
            match self.pending {
                For::User => self.held.push((pfn, 0)),
                For::Slab => self.slab.push((pfn, 1)),
                For::Stack => self.stack.push((pfn, 0)),
                For::Pgd => self.pgd = Some((pfn, 1)),
            }
        }
        loop {
            match self.phase {
                Phase::ForkStack => {
                    if self.job == self.p.jobs {
                        return None;
                    }
                    if self.stack.len() < KERNEL_STACK_PAGES {
                        return self.alloc(For::Stack, Gfp::KERNEL, 0);
                    }
                    let half = self.p.pages_per_job / 2;
                    self.target = half + rng.below(self.p.pages_per_job as u64 + 1) as u32;
                    self.faulted = 0;
                    self.phase = Phase::ForkPgd;
                }
                Phase::ForkPgd => {
                    self.phase = Phase::Run;
                    return self.alloc(For::Pgd, Gfp::KERNEL, 1);
                }
                Phase::Run => {
                    if self.faulted == self.target {
                        self.phase = Phase::ExitUser;
                        continue;
                    }
                    // Kernel memory of orders 1-3 now and then, freed a little later.
                    if rng.percent(self.p.slab_pct) {
                        if self.slab.len() > 4 {
                            let b = self
                                .slab
                                .swap_remove(rng.below(self.slab.len() as u64) as usize);
                            return Some(Op::FreePages { block: b });
                        }
                        return self.alloc(For::Slab, Gfp::KERNEL, 1);
                    }
                    self.faulted += 1;
                    self.phase = Phase::Work;
                    return self.alloc(For::User, Gfp::HIGHUSER_MOVABLE, 0);
                }
                Phase::Work => {
                    self.phase = Phase::Run;
                    if self.p.work_per_page_ns > 0 {
                        return Some(Op::Compute {
                            ns: self.p.work_per_page_ns,
                        });
                    }
                }
                Phase::ExitUser => {
                    // exit_mmap(): the user pages go back in one burst. Slab
                    // pages belong to the CPU's slab caches, not to the
                    // process: they outlive the job and are returned only
                    // when the task's last job is done.
                    let last_job = self.job + 1 == self.p.jobs;
                    let next =
                        self.held
                            .pop()
                            .or_else(|| if last_job { self.slab.pop() } else { None });
                    if let Some(b) = next {
                        return Some(Op::FreePages { block: b });
                    }
                    self.phase = Phase::ExitStack;
                }
                Phase::ExitStack => {
                    if let Some(b) = self.stack.pop() {
                        return Some(Op::FreePages { block: b });
                    }
                    self.phase = Phase::ExitPgd;
                }
                Phase::ExitPgd => {
                    // The PGD is the last, lone high-order free of the exit.
                    self.job += 1;
                    self.phase = Phase::ForkStack;
                    if let Some(b) = self.pgd.take() {
                        return Some(Op::FreePages { block: b });
                    }
                }
            }
        }
    }
}
