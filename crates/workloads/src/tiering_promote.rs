//! tiering-promote: an application that keeps faulting memory on a slow
//! (far) node while a promoter thread moves its hot pages to the fast
//! (near) node with `move_pages()`, batch after batch (seed 001's
//! "tiering-like workload", issue 8).
//!
//! # What it models
//!
//! A two-tier memory system: the near node has the CPUs the application
//! runs on; the far node is the slow tier. As in the tiering evaluations on
//! two-socket machines (Nimble, Yan et al., ASPLOS 2019, the 2019 RFC's
//! paper, used the remote socket of a 2 × E5-2650 v3 box as the slow
//! memory), the far node here is the other socket, its CPUs left idle.
//! The fast tier is taken to be full, so the application's new pages land
//! on the slow tier: each application thread calls
//! `set_mempolicy(MPOL_PREFERRED, far)` first (the model has no reclaim or
//! demotion that would push them there). A promoter thread of the same
//! process plays a user-space tiering daemon: the hot pages the application
//! reports are moved to the near node with `move_pages()` in batches, so
//! that the promotion competes with the application's faults for
//! `mmap_lock` (the promoter reads it for every page it isolates; the
//! application writes it to `mmap()`/`munmap()`), for the page-table locks
//! (the migration's unmap and remap take the tables' locks that faults
//! take), for the zone locks (destination allocations and frees), and for
//! the CPUs (the `mt` and `batched` copy engines queue work items on the
//! near node's first CPUs, where the application runs; `adaptive` takes
//! only idle ones).
//!
//! Each application thread (`threads` of them, on the near node's first
//! CPUs, one per physical core while there are enough) runs `rounds`
//! rounds of: `mmap()` a chunk of `chunk_mib` MiB (`MADV_HUGEPAGE` with
//! `page_size = "2M"`, else `MADV_NOHUGEPAGE`), write a line of each of
//! its 4 KiB pages (faults on the far node), report its first `hot_pct` % of pages as hot
//! (the daemon's access tracking, which is not modelled, is assumed to
//! find exactly them) and wake the promoter, read the hot part of each of its last `window`
//! chunks `passes` times, compute for `compute_us`, and `munmap()` its
//! oldest chunk once it has more than `window` (the daemon forgets the
//! pages of an unmapped chunk). The promoter runs on `promoter_cpu`; it
//! promotes what is pending in `move_pages()` calls of up to `batch_pages`
//! base pages, back to back, and when nothing is pending it waits to be
//! woken by the next report (as NUMA balancing promotes at the hint fault
//! that finds a page hot), or, with `interval_us` > 0, sleeps that long
//! between looks (a daemon that polls its access information). With
//! `drain = 1` the application threads wait at the end until the promoter
//! has promoted everything still pending, then ask `move_pages()` (nodes =
//! NULL) where each page of their last chunks is, before unmapping them
//! (the checks of the tests); with `drain = 0` the promoter stops when the
//! application has finished.
//!
//! # Where the parameters come from
//!
//! - `batch_pages` 512: `NR_MAX_BATCHED_MIGRATION`, the most base pages
//!   `migrate_pages()` unmaps and moves as one batch (one THP, or 512
//!   base pages, per call).
//! - `interval_us` 0 (woken by each report). A polling daemon would use
//!   something like DAMON's default sampling interval, 5 ms
//!   (`damon_new_ctx()` in mm/damon/core.c); polling makes the run's end
//!   wait for the promoter's last sleep, so `runtime_ns` then includes up
//!   to one interval after the application has finished.
//! - `hot_pct` 25, `window` 4, `passes` 4, `compute_us` 500, `chunk_mib`
//!   8, `rounds` 16, `threads` 8: estimates that shape a short run (a
//!   few tens of virtual milliseconds) in which the application keeps
//!   faulting while there is always promotion work; not taken from a
//!   published application.
//!
//! # Deviations
//!
//! - Without the cache model, a user access costs the same on either node
//!   (`touch_ns`): the application does not get faster once its pages are
//!   promoted. The workload shows the cost side (interference and
//!   promotion throughput), not the benefit.
//! - The copy's memory traffic does not compete with the application's
//!   for bandwidth (the copy model's caps apply to the copy alone).
//! - The daemon is a thread of the application's process (the model's
//!   `move_pages()` acts on the caller's address space; a daemon would
//!   pass the application's pid): the same locks are taken.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P, Params};
use crate::WorkloadDef;
use mm::migrate::MPOL_MF_MOVE;
use mm::types::PAGE_SIZE;
use mm::vma::{Advice, MapFlags};
use sim::{Machine, Op, OpResult, Program, Rng, TaskSpec};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// Bytes of each page an access covers: one cache line (a user access
/// costs the same whatever it covers without the cache model; with it,
/// one line per page keeps the simulation fast).
const LINE: u64 = 64;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "tiering-promote",
    summary: "an application faulting memory on a far node while a promoter thread \
              move_pages()s its hot pages to the near node in batches",
    params: &[
        P::int(
            "threads",
            N(8),
            1,
            Count::Of(
                |m, p| near_node_cpus(m, p).1 as i64,
                "the number of CPUs of near_node",
            ),
            "application threads, on the near node's first CPUs",
        ),
        P::choice(
            "page_size",
            "2M",
            &["2M", "4K"],
            "2M: THPs (MADV_HUGEPAGE); 4K: base pages (MADV_NOHUGEPAGE)",
        ),
        P::int(
            "chunk_mib",
            N(8),
            2,
            N(4096),
            "MiB each thread maps and faults per round",
        ),
        P::int("rounds", N(16), 1, N(100_000), "rounds per thread"),
        P::int(
            "window",
            N(4),
            1,
            N(1024),
            "chunks a thread keeps mapped (older ones are unmapped)",
        ),
        P::int(
            "hot_pct",
            N(25),
            0,
            N(100),
            "% of each chunk's pages that are hot (re-read, promoted)",
        ),
        P::int(
            "passes",
            N(4),
            0,
            N(1000),
            "reads of the window's hot pages per round",
        ),
        P::int(
            "compute_us",
            N(500),
            0,
            N(10_000_000),
            "application compute per round, microseconds",
        ),
        P::int(
            "batch_pages",
            N(512),
            1,
            N(1 << 20),
            "base pages per move_pages() call (NR_MAX_BATCHED_MIGRATION)",
        ),
        P::int(
            "interval_us",
            N(0),
            0,
            N(10_000_000),
            "0: the promoter waits for the next hot-page report; else it polls, sleeping this long",
        ),
        P::int(
            "promoter_cpu",
            Count::Of(
                |m, p| {
                    let (first, nr) = near_node_cpus(m, p);
                    (first + nr) as i64 - 1
                },
                "the last CPU of near_node",
            ),
            0,
            Count::LAST_CPU,
            "the promoter thread's CPU",
        ),
        P::int(
            "near_node",
            N(0),
            0,
            Count::LAST_NODE,
            "the fast node (application CPUs, promotion target)",
        ),
        P::int(
            "far_node",
            N(1),
            0,
            Count::LAST_NODE,
            "the slow node (new pages land here)",
        ),
        P::flag(
            "drain",
            false,
            "1: promote everything pending at the end, then check where pages are",
        ),
        P::flag(
            "promote",
            true,
            "0: the promoter drops the reports (the application alone, same accesses)",
        ),
    ],
    build,
    nr_runs: None,
};

/// What the run did, for tests: the promoter's `move_pages()` results and,
/// with `drain = 1`, where the application found its pages at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TieringLog {
    /// `move_pages()` calls made by the promoter.
    pub nr_calls: u64,
    /// Pages whose status came back as the near node.
    pub promoted: u64,
    /// Pages whose status came back as an error (unmapped meanwhile).
    pub failed: u64,
    /// Calls that returned nonzero.
    pub nr_bad_returns: u64,
    /// At the end (`drain = 1`): hot pages found on the near node.
    pub hot_near: u64,
    /// Hot pages found anywhere else.
    pub hot_elsewhere: u64,
    /// Cold pages found on the far node.
    pub cold_far: u64,
    /// Cold pages found anywhere else.
    pub cold_elsewhere: u64,
}

/// The application's and the promoter's shared view (the daemon's
/// knowledge of hot pages).
#[derive(Debug, Default)]
struct Shared {
    /// Hot pages reported and not yet promoted, oldest first.
    pending: VecDeque<u64>,
    /// Application threads still in their rounds.
    running: u32,
    log: TieringLog,
}

#[derive(Clone, Copy)]
struct Cfg {
    threads: u32,
    page: u64,
    huge: bool,
    chunk: u64,
    rounds: u32,
    window: usize,
    hot_pages: u64,
    passes: u32,
    compute_ns: u64,
    batch_pages: u64,
    interval_ns: u64,
    near: u16,
    far: u16,
    drain: bool,
    promote: bool,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    build_logged(a.given(), a.machine()).map(|(tasks, _)| tasks)
}

/// The first CPU of `near_node` and its number of CPUs (of node 0 while
/// `near_node` is not valid: its own read reports that).
fn near_node_cpus(m: &Machine, p: &Params) -> (u32, u32) {
    let last = m.nodes.len() as i64 - 1;
    let near = p.int("near_node", 0, 0..=last).unwrap_or(0) as usize;
    let first = m.nodes[..near].iter().map(|n| n.cpus).sum();
    (first, m.nodes[near].cpus)
}

/// Builds the workload and returns, beside its tasks, the log that the
/// run fills in.
pub fn build_logged(
    p: &Params,
    m: &Machine,
) -> Result<(Vec<TaskSpec>, Rc<RefCell<TieringLog>>), ParamError> {
    let a = Args::new(p, DEF.params, m);
    let (cfg, promoter_cpu) = Cfg::from_args(&a)?;
    let (first, _) = near_node_cpus(m, p);
    let shared = Rc::new(RefCell::new(Shared {
        running: cfg.threads,
        ..Shared::default()
    }));
    let mut tasks = Vec::new();
    for i in 0..cfg.threads {
        let app = App {
            cfg,
            shared: shared.clone(),
            id: i,
            step: Step::Policy,
            round: 0,
            chunks: VecDeque::new(),
            pass: 0,
            chunk_i: 0,
        };
        tasks.push((Box::new(app) as Box<dyn Program>, first + i));
    }
    let promoter = Promoter {
        cfg,
        shared: shared.clone(),
        in_flight: Vec::new(),
        notified: 0,
    };
    tasks.push((Box::new(promoter), promoter_cpu));
    // The caller's copy of the log, refreshed after every operation.
    let log = Rc::new(RefCell::new(TieringLog::default()));
    let tasks = tasks
        .into_iter()
        .map(|(inner, cpu)| TaskSpec {
            program: Box::new(Logged {
                inner,
                shared: shared.clone(),
                out: log.clone(),
            }),
            cpu: mm::VcpuId(cpu),
            process: Some(0),
        })
        .collect();
    Ok((tasks, log))
}

impl Cfg {
    /// The configuration the parameters give, and the promoter's CPU.
    fn from_args(a: &Args) -> Result<(Cfg, u32), ParamError> {
        if a.machine().nodes.len() < 2 {
            return Err(ParamError::Invalid {
                name: "far_node",
                expected: "a machine of at least 2 nodes (a near and a far one)".into(),
            });
        }
        let huge = a.choice("page_size")? == "2M";
        let near = a.int("near_node")? as u16;
        let far = a.int("far_node")? as u16;
        if near == far {
            return Err(ParamError::Invalid {
                name: "far_node",
                expected: "a node other than near_node".into(),
            });
        }
        let threads = a.int("threads")? as u32;
        let page = if huge { 2 << 20 } else { PAGE_SIZE };
        let chunk = (a.int("chunk_mib")? as u64) << 20;
        let rounds = a.int("rounds")? as u32;
        let window = a.int("window")? as usize;
        let hot_pct = a.int("hot_pct")? as u64;
        let cfg = Cfg {
            threads,
            page,
            huge,
            chunk,
            rounds,
            window,
            hot_pages: (chunk / page * hot_pct).div_ceil(100),
            passes: a.int("passes")? as u32,
            compute_ns: a.int("compute_us")? as u64 * 1000,
            batch_pages: a.int("batch_pages")? as u64,
            interval_ns: a.int("interval_us")? as u64 * 1000,
            near,
            far,
            drain: false,
            promote: false,
        };
        let promoter_cpu = a.int("promoter_cpu")? as u32;
        let cfg = Cfg {
            drain: a.flag("drain")?,
            promote: a.flag("promote")?,
            ..cfg
        };
        Ok((cfg, promoter_cpu))
    }
}

/// Copies the shared log out after every operation of the wrapped
/// program, so that the caller's handle sees the final state.
struct Logged {
    inner: Box<dyn Program>,
    shared: Rc<RefCell<Shared>>,
    out: Rc<RefCell<TieringLog>>,
}

impl Program for Logged {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        let op = self.inner.next(last, rng);
        *self.out.borrow_mut() = self.shared.borrow().log.clone();
        op
    }
}

/// One mapped chunk: the mapping as `mmap()` returned it and the first
/// page-size-aligned address in it.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    raw: u64,
    raw_len: u64,
    addr: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Policy,
    Map,
    Fault,
    Hot,
    Compute,
    Unmap,
    Wait,
    Query,
    UnmapAll,
    Done,
}

/// An application thread.
struct App {
    cfg: Cfg,
    shared: Rc<RefCell<Shared>>,
    id: u32,
    step: Step,
    round: u32,
    chunks: VecDeque<Chunk>,
    /// Position in the hot passes: pass and chunk.
    pass: u32,
    chunk_i: usize,
}

impl App {
    /// After `set_mempolicy()` or a chunk's `mmap()`: maps the first chunk,
    /// or faults the new one in (writes it) and remembers it.
    fn fault_mapped(&mut self, last: OpResult) -> Option<Op> {
        if matches!(last, OpResult::Sys(_)) {
            // The set_mempolicy() answer: map the first chunk.
            return self.next_round();
        }
        let OpResult::Mapped(Ok(raw)) = last else {
            // No address space left: end the thread, telling a promoter
            // that waits for work (it waited forever when this was the
            // last thread running).
            self.shared.borrow_mut().running -= 1;
            self.step = Step::Done;
            if self.cfg.interval_ns == 0 {
                return Some(kick(&self.cfg));
            }
            return None;
        };
        let raw_len = self.cfg.chunk + if self.cfg.huge { self.cfg.page } else { 0 };
        let addr = raw.next_multiple_of(self.cfg.page);
        self.chunks.push_back(Chunk { raw, raw_len, addr });
        self.step = Step::Fault;
        Some(Op::Touch {
            addr,
            len: self.cfg.chunk,
            stride: PAGE_SIZE,
            bytes: LINE,
            write: true,
        })
    }

    /// Reports the hot pages of the chunk just faulted in to the promoter
    /// (the profiler's samples, as NUMA hinting faults would).
    fn report_hot(&mut self) {
        let c = *self.chunks.back().expect("just mapped");
        let mut sh = self.shared.borrow_mut();
        for i in 0..self.cfg.hot_pages {
            sh.pending.push_back(c.addr + i * self.cfg.page);
        }
    }

    /// The round's compute is done: unmaps the oldest chunk if the window
    /// is full, else starts the next round.
    fn end_round(&mut self) -> Option<Op> {
        self.round += 1;
        if self.chunks.len() > self.cfg.window {
            let c = self.chunks[0];
            // The daemon forgets the pages of the unmapped chunk.
            self.shared
                .borrow_mut()
                .pending
                .retain(|&a| a < c.addr || a >= c.addr + self.cfg.chunk);
            self.step = Step::Unmap;
            return self.unmap_next();
        }
        self.next_round()
    }

    /// Counts where the final query found each page, hot and cold.
    fn log_placement(&self, status: &[i32]) {
        let pages = self.pages();
        let mut sh = self.shared.borrow_mut();
        for (&(_, hot), &s) in pages.iter().zip(status) {
            match (hot, s == self.cfg.near as i32, s == self.cfg.far as i32) {
                (true, true, _) => sh.log.hot_near += 1,
                (true, false, _) => sh.log.hot_elsewhere += 1,
                (false, _, true) => sh.log.cold_far += 1,
                (false, _, false) => sh.log.cold_elsewhere += 1,
            }
        }
    }

    fn hot_len(&self) -> u64 {
        self.cfg.hot_pages * self.cfg.page
    }

    /// The next hot-pass read, or `None` when the passes are over.
    fn next_hot(&mut self) -> Option<Op> {
        if self.hot_len() == 0 {
            return None;
        }
        if self.chunk_i >= self.chunks.len() {
            self.chunk_i = 0;
            self.pass += 1;
        }
        if self.pass >= self.cfg.passes {
            return None;
        }
        let c = self.chunks[self.chunk_i];
        self.chunk_i += 1;
        Some(Op::Touch {
            addr: c.addr,
            len: self.hot_len(),
            stride: PAGE_SIZE,
            bytes: LINE,
            write: false,
        })
    }

    /// The start of a round, or the end of the rounds.
    fn next_round(&mut self) -> Option<Op> {
        if self.round < self.cfg.rounds {
            self.step = Step::Map;
            let len = self.cfg.chunk + if self.cfg.huge { self.cfg.page } else { 0 };
            return Some(Op::Mmap {
                len,
                hint: None,
                flags: MapFlags::NONE,
                advice: Some(if self.cfg.huge {
                    Advice::HugePage
                } else {
                    Advice::NoHugePage
                }),
            });
        }
        self.shared.borrow_mut().running -= 1;
        self.step = if self.cfg.drain {
            Step::Wait
        } else {
            Step::UnmapAll
        };
        if self.cfg.interval_ns == 0 {
            // The promoter may be waiting for work: let it see the end.
            return Some(kick(&self.cfg));
        }
        self.end_op()
    }

    /// The first operation after the rounds.
    fn end_op(&mut self) -> Option<Op> {
        if self.step == Step::Wait {
            return Some(Op::Recv { chan: self.id });
        }
        self.unmap_next()
    }

    fn unmap_next(&mut self) -> Option<Op> {
        let c = self.chunks.pop_front()?;
        Some(Op::Munmap {
            addr: c.raw,
            len: c.raw_len,
        })
    }

    /// Every page of the chunks still mapped, with whether it is hot.
    fn pages(&self) -> Vec<(u64, bool)> {
        let n = self.cfg.chunk / self.cfg.page;
        self.chunks
            .iter()
            .flat_map(|c| (0..n).map(move |i| (c.addr + i * self.cfg.page, i < self.cfg.hot_pages)))
            .collect()
    }
}

impl Program for App {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        loop {
            match self.step {
                Step::Policy => {
                    self.step = Step::Map;
                    return Some(Op::SetMempolicy {
                        preferred: Some(self.cfg.far),
                    });
                }
                Step::Map => return self.fault_mapped(last),
                Step::Fault => {
                    self.report_hot();
                    self.step = Step::Hot;
                    self.pass = 0;
                    self.chunk_i = 0;
                    if self.cfg.hot_pages > 0 && self.cfg.interval_ns == 0 {
                        return Some(kick(&self.cfg));
                    }
                    if let Some(op) = self.next_hot() {
                        return Some(op);
                    }
                }
                Step::Hot => {
                    if let Some(op) = self.next_hot() {
                        return Some(op);
                    }
                    self.step = Step::Compute;
                    if self.cfg.compute_ns > 0 {
                        return Some(Op::Compute {
                            ns: self.cfg.compute_ns,
                        });
                    }
                }
                Step::Compute => return self.end_round(),
                Step::Unmap => return self.next_round(),
                Step::Wait if !matches!(last, OpResult::Received(_)) => {
                    // The kick at the end has been sent: wait.
                    return self.end_op();
                }
                Step::Wait => {
                    self.step = Step::Query;
                    let pages: Vec<u64> = self.pages().iter().map(|p| p.0).collect();
                    if pages.is_empty() {
                        continue;
                    }
                    return Some(Op::MovePages {
                        pages,
                        nodes: None,
                        flags: 0,
                    });
                }
                Step::Query => {
                    if let OpResult::MovedPages { status, .. } = &last {
                        self.log_placement(status);
                    }
                    self.step = Step::UnmapAll;
                    return self.unmap_next();
                }
                Step::UnmapAll => return self.unmap_next(),
                Step::Done => return None,
            }
        }
    }
}

/// A hot-page report's wake-up of the promoter: a message on its channel,
/// numbered after the application threads' own (0..threads, for the end of
/// a drain).
fn kick(cfg: &Cfg) -> Op {
    Op::Send {
        chan: cfg.threads,
        blocks: Vec::new(),
    }
}

/// The promoter thread.
struct Promoter {
    cfg: Cfg,
    shared: Rc<RefCell<Shared>>,
    /// The pages of the `move_pages()` call in flight.
    in_flight: Vec<u64>,
    /// Application threads told that the drain is over.
    notified: u32,
}

impl Program for Promoter {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        let mut sh = self.shared.borrow_mut();
        if let OpResult::MovedPages { ret, status } = &last {
            sh.log.nr_calls += 1;
            sh.log.nr_bad_returns += (*ret != 0) as u64;
            for &s in status {
                if s == self.cfg.near as i32 {
                    sh.log.promoted += 1;
                } else {
                    sh.log.failed += 1;
                }
            }
            self.in_flight.clear();
        }
        if !self.cfg.promote {
            sh.pending.clear();
        }
        let done = sh.running == 0;
        if done && !self.cfg.drain {
            return None;
        }
        if !sh.pending.is_empty() {
            let per_page = self.cfg.page / PAGE_SIZE;
            let n = (self.cfg.batch_pages / per_page).max(1) as usize;
            let n = n.min(sh.pending.len());
            self.in_flight = sh.pending.drain(..n).collect();
            return Some(Op::MovePages {
                pages: self.in_flight.clone(),
                nodes: Some(vec![self.cfg.near; n]),
                flags: MPOL_MF_MOVE,
            });
        }
        if done {
            // Drained: release the application threads one by one.
            if self.notified < self.cfg.threads {
                self.notified += 1;
                return Some(Op::Send {
                    chan: self.notified - 1,
                    blocks: Vec::new(),
                });
            }
            return None;
        }
        if self.cfg.interval_ns == 0 {
            Some(Op::Recv {
                chan: self.cfg.threads,
            })
        } else {
            Some(Op::Sleep {
                ns: self.cfg.interval_ns,
            })
        }
    }
}
