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
//! no VMAs): each page a process faults in is one order-0 allocation, with
//! `__GFP_ZERO` as the kernel's anonymous fault asks (the clear is charged
//! and its lines go through the CPU's caches, pushing out the `struct page`
//! lines the CPU wrote earlier); the fault's other kernel work is not
//! charged.
//!
//! # Where the parameters come from
//!
//! A kernel build recorded on this host (`make -j2 mm/` of
//! linux-source-6.1; [`crate::recorded_build`], `docs/kbuild-recording.md`):
//!
//! - `job_sizes = "recorded"`: a job's pages are drawn from the recorded
//!   processes' page counts (1 802 processes, 1 506 093 pages): most jobs
//!   are small (a shell, the gcc driver: ~50 pages) but most pages belong to
//!   a few large ones (each `cc1` ~10 000 pages, `nm` and `objtool` ~2 500),
//!   whose exit frees far more than a per-CPU list holds. (The mean, 836
//!   pages, is the `uniform` alternative's default.)
//! - `work_per_page_ns` = 25 280: the build's user time per page allocated.
//! - `slab_pct` = 3: kernel (unmovable) pages were 3.15 % of the pages.
//! - `remote_free_pct` = 34: the share of anonymous pages freed on another
//!   CPU than the one that allocated them, measured on the 2-CPU host (a
//!   process that moved before it exited frees its pages on the CPU it
//!   exits on). On the seeds' machines this is an estimate. A job chosen to
//!   exit elsewhere hands everything its exit frees (user pages, kernel
//!   stack, PGD) to a task on another CPU, which frees them before its own
//!   next step.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::recorded_build;
use crate::WorkloadDef;
use mm::page_alloc::Gfp;
use sim::{Block, Op, OpResult, Program, Rng, TaskSpec};
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;

/// An anonymous fault's page: 6.6 `vma_alloc_zeroed_movable_folio()` asks
/// for `GFP_HIGHUSER_MOVABLE | __GFP_ZERO`, so the faulting CPU clears it.
const ANON_GFP: Gfp = Gfp::HIGHUSER_MOVABLE.or(Gfp::ZERO);
/// A kernel stack's page: 6.6 `THREADINFO_GFP` has `__GFP_ZERO`.
const STACK_GFP: Gfp = Gfp::KERNEL.or(Gfp::ZERO);
/// The PGD: 6.6 `GFP_PGTABLE_USER` has `__GFP_ZERO`.
const PGD_GFP: Gfp = Gfp::KERNEL.or(Gfp::ZERO);

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
            "jobs per slot: make's queue holds tasks x jobs jobs, each slot takes the next when it is done",
        ),
        P::choice(
            "job_sizes",
            "recorded",
            &["recorded", "uniform"],
            "pages a job faults in: recorded (the recorded build's processes) or uniform",
        ),
        P::int(
            "pages_per_job",
            N(836),
            2,
            N(100_000_000),
            "with job_sizes = uniform: mean order-0 pages a job faults in (uniform in ±50 %)",
        ),
        P::int(
            "work_per_page_ns",
            N(recorded_build::USER_NS_PER_PAGE as i64),
            0,
            N(1_000_000_000),
            "user time per page faulted in (measured: see the module doc)",
        ),
        P::int(
            "slab_pct",
            N(3),
            0,
            // Below 100: a job's pages are faulted only when a step is not
            // a kernel allocation, so 100 % would never finish a job.
            N(99),
            "extra kernel allocations of order 1, in % of pages (measured share of kernel pages)",
        ),
        P::int(
            "remote_free_pct",
            N(recorded_build::REMOTE_FREE_PCT as i64),
            0,
            N(100),
            "% of jobs that exit on another CPU (measured on 2 CPUs: see the module doc)",
        ),
    ],
    build,
    nr_runs: None,
};

#[derive(Clone, Copy, Debug)]
struct KbuildParams {
    jobs: u32,
    /// `None`: the recorded distribution.
    pages_per_job: Option<u32>,
    work_per_page_ns: u64,
    slab_pct: u32,
    remote_free_pct: u32,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let tasks = a.int("tasks")? as u32;
    let uniform = a.choice("job_sizes")? == "uniform";
    let pages_per_job = a.int("pages_per_job")? as u32;
    let kp = KbuildParams {
        jobs: a.int("jobs")? as u32,
        pages_per_job: uniform.then_some(pages_per_job),
        work_per_page_ns: a.int("work_per_page_ns")? as u64,
        slab_pct: a.int("slab_pct")? as u32,
        remote_free_pct: a.int("remote_free_pct")? as u32,
    };
    let exits = Rc::new(RefCell::new(Exits {
        mailbox: vec![Vec::new(); tasks as usize],
        active: vec![true; tasks as usize],
        queued: tasks as u64 * kp.jobs as u64,
    }));
    Ok((0..tasks)
        .map(|i| {
            TaskSpec::new(
                Box::new(Kbuild::new(kp, i as usize, exits.clone())),
                mm::VcpuId(i),
            )
        })
        .collect())
}

/// What the tasks share: make's job queue, and blocks that a job which
/// exited on another CPU left there to be freed.
struct Exits {
    mailbox: Vec<Vec<Block>>,
    /// Tasks that will take another step (a job exits only on a CPU whose
    /// task runs again, so that every block is freed).
    active: Vec<bool>,
    /// Jobs make has not started yet.
    queued: u64,
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
    /// This task's index (its CPU).
    me: usize,
    exits: Rc<RefCell<Exits>>,
    /// The running job exits on another CPU.
    exits_elsewhere: bool,
    phase: Phase,
    target: u32,
    faulted: u32,
    held: Vec<Block>,
    slab: Vec<Block>,
    stack: Vec<Block>,
    /// Stack allocations tried for this job, failed ones included: a fork
    /// goes on with the pages it got (counting only successes retried a
    /// failing allocation forever when memory ran out).
    nr_stack_tried: usize,
    pgd: Option<Block>,
    pending: For,
}

impl Kbuild {
    fn new(p: KbuildParams, me: usize, exits: Rc<RefCell<Exits>>) -> Kbuild {
        Kbuild {
            p,
            me,
            exits,
            exits_elsewhere: false,
            phase: Phase::ForkStack,
            target: 0,
            faulted: 0,
            held: Vec::new(),
            slab: Vec::new(),
            stack: Vec::new(),
            nr_stack_tried: 0,
            pgd: None,
            pending: For::User,
        }
    }

    fn alloc(&mut self, what: For, gfp: Gfp, order: u8) -> Option<Op> {
        self.pending = what;
        Some(Op::AllocPages { gfp, order })
    }

    /// The pages of the next job: drawn from the recording, or uniform in
    /// `pages_per_job` ± 50 %.
    fn draw_pages(&self, rng: &mut Rng) -> u32 {
        match self.p.pages_per_job {
            Some(n) => n / 2 + rng.below(n as u64 + 1) as u32,
            None => recorded_build::draw_process_pages(|m| rng.below(m)) as u32,
        }
    }

    /// A job that exits on another CPU: everything its exit frees (its
    /// user pages, and its kernel stack and PGD) goes to the mailbox of a
    /// task on another CPU that still has jobs to run, chosen at random.
    fn exit_elsewhere(&mut self, rng: &mut Rng) {
        let mut ex = self.exits.borrow_mut();
        let others: Vec<usize> = (0..ex.active.len())
            .filter(|&t| t != self.me && ex.active[t])
            .collect();
        if others.is_empty() {
            return;
        }
        let t = others[rng.below(others.len() as u64) as usize];
        let mb = &mut ex.mailbox[t];
        mb.append(&mut self.held);
        mb.append(&mut self.stack);
        mb.extend(self.pgd.take());
    }

    /// Phase::ForkStack: make starts the slot's next job (its kernel stack
    /// first), or, with the queue empty, the slot gives its slab pages back
    /// and ends.
    fn fork_stack(&mut self, rng: &mut Rng) -> ControlFlow<Option<Op>> {
        if self.nr_stack_tried == 0 {
            // make starts the next job of its queue on this slot.
            let mut ex = self.exits.borrow_mut();
            if ex.queued == 0 {
                // The build is done here: the CPU's slab caches give
                // their pages back, then the slot ends.
                if let Some(b) = self.slab.pop() {
                    return ControlFlow::Break(Some(Op::FreePages { block: b }));
                }
                ex.active[self.me] = false;
                return ControlFlow::Break(None);
            }
            ex.queued -= 1;
        }
        if self.nr_stack_tried < KERNEL_STACK_PAGES {
            self.nr_stack_tried += 1;
            return ControlFlow::Break(self.alloc(For::Stack, STACK_GFP, 0));
        }
        self.target = self.draw_pages(rng);
        self.exits_elsewhere = rng.percent(self.p.remote_free_pct);
        self.faulted = 0;
        self.phase = Phase::ForkPgd;
        ControlFlow::Continue(())
    }

    /// Phase::Run: the job's next anonymous page, or now and then a slab
    /// allocation or free; on to the exit when the job has all its pages.
    fn run(&mut self, rng: &mut Rng) -> ControlFlow<Option<Op>> {
        if self.faulted == self.target {
            self.phase = Phase::ExitUser;
            return ControlFlow::Continue(());
        }
        // Kernel memory of orders 1-3 now and then, freed a little later.
        if rng.percent(self.p.slab_pct) {
            if self.slab.len() > 4 {
                let b = self
                    .slab
                    .swap_remove(rng.below(self.slab.len() as u64) as usize);
                return ControlFlow::Break(Some(Op::FreePages { block: b }));
            }
            return ControlFlow::Break(self.alloc(For::Slab, Gfp::KERNEL, 1));
        }
        self.faulted += 1;
        self.phase = Phase::Work;
        ControlFlow::Break(self.alloc(For::User, ANON_GFP, 0))
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
        // Pages of a job that exited on this CPU come first: the exit runs
        // here before this CPU's own task continues.
        if let Some(b) = self.exits.borrow_mut().mailbox[self.me].pop() {
            return Some(Op::FreePages { block: b });
        }
        loop {
            match self.phase {
                Phase::ForkStack => {
                    if let ControlFlow::Break(op) = self.fork_stack(rng) {
                        return op;
                    }
                }
                Phase::ForkPgd => {
                    self.phase = Phase::Run;
                    return self.alloc(For::Pgd, PGD_GFP, 1);
                }
                Phase::Run => {
                    if let ControlFlow::Break(op) = self.run(rng) {
                        return op;
                    }
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
                    if self.exits_elsewhere {
                        self.exits_elsewhere = false;
                        self.exit_elsewhere(rng);
                    }
                    // exit_mmap(): the user pages go back in one burst. Slab
                    // pages belong to the CPU's slab caches, not to the
                    // process: they outlive the job and are returned only
                    // when make's queue is empty.
                    if let Some(b) = self.held.pop() {
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
                    self.nr_stack_tried = 0;
                    self.phase = Phase::ForkStack;
                    if let Some(b) = self.pgd.take() {
                        return Some(Op::FreePages { block: b });
                    }
                }
            }
        }
    }
}
