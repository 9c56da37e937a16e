//! Per-CPU page churn: bursts of page allocations and frees, half of them
//! freed on another CPU.
//!
//! # What it models
//!
//! The allocation pattern that stresses the PCP: each task allocates a burst
//! of pages (mostly order 0, some of orders 1–3 as slab and network buffers
//! are), works for a while, frees part of the burst itself and hands the rest
//! to a partner task on another CPU, which frees them there (a pipe or socket
//! buffer consumed on the receiving CPU). Pages therefore drift from CPU to
//! CPU: a freeing CPU's lists grow past `high` and drain to the zone, while
//! an allocating CPU's lists run empty and refill from the zone, each time
//! under `zone->lock`. The smaller `high`, the more often that happens.
//!
//! Parameters are synthetic: they set the size of the pressure, not a
//! particular application. Defaults give a burst of 1 MiB per task.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::page_alloc::Gfp;
use sim::{Block, ChanId, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "page-churn",
    summary: "bursts of page allocations per CPU, part freed by a partner task on another CPU",
    params: &[
        P::int(
            "tasks",
            Count::CPUS,
            1,
            N(65_536),
            "number of tasks, bound round-robin to CPUs",
        ),
        P::int("iterations", N(100), 1, N(10_000_000), "bursts per task"),
        P::int(
            "burst",
            N(256),
            1,
            N(1_000_000),
            "blocks allocated per burst",
        ),
        P::int(
            "high_order_pct",
            N(10),
            0,
            N(100),
            "percent of blocks of order 1-3 (uniform), the rest order 0",
        ),
        P::int(
            "remote_free_pct",
            N(50),
            0,
            N(100),
            "percent of each burst freed by the partner task",
        ),
        P::int(
            "think_ns",
            N(20_000),
            0,
            N(1_000_000_000),
            "user time between allocating and freeing a burst",
        ),
        P::int(
            "work_per_page_ns",
            N(0),
            0,
            N(1_000_000_000),
            "further user time per block of the burst (using the memory)",
        ),
    ],
    build,
    nr_runs: None,
};

/// The parameters of one run.
#[derive(Clone, Copy, Debug)]
pub struct ChurnParams {
    /// Bursts per task.
    pub iterations: u32,
    /// Blocks per burst.
    pub burst: u32,
    /// Percent of blocks of order 1–3.
    pub high_order_pct: u32,
    /// Percent of each burst the partner frees.
    pub remote_free_pct: u32,
    /// Compute time between allocating and freeing.
    pub think_ns: u64,
    /// Further compute time per block of the burst.
    pub work_per_page_ns: u64,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let tasks = a.int("tasks")? as u32;
    let cp = ChurnParams {
        iterations: a.int("iterations")? as u32,
        burst: a.int("burst")? as u32,
        high_order_pct: a.int("high_order_pct")? as u32,
        remote_free_pct: a.int("remote_free_pct")? as u32,
        think_ns: a.int("think_ns")? as u64,
        work_per_page_ns: a.int("work_per_page_ns")? as u64,
    };
    Ok((0..tasks)
        .map(|i| {
            // Partners are neighbours (0-1, 2-3, ...); a lone last task frees
            // everything itself.
            let partner = if i ^ 1 < tasks { i ^ 1 } else { i };
            TaskSpec {
                program: Box::new(PageChurn::new(cp, i, partner)),
                cpu: mm::VcpuId(i % nr_cpus),
                process: None,
            }
        })
        .collect())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Alloc,
    Think,
    FreeLocal,
    Send,
    Recv,
    FreeRemote,
}

/// One page-churn task.
pub struct PageChurn {
    p: ChurnParams,
    own_chan: ChanId,
    partner_chan: ChanId,
    iter: u32,
    phase: Phase,
    allocated: u32,
    last_order: u8,
    held: Vec<Block>,
    remote: Vec<Block>,
    alloc_failures: u64,
}

impl PageChurn {
    /// Task `me`, whose partner is task `partner` (itself if none).
    pub fn new(p: ChurnParams, me: u32, partner: u32) -> PageChurn {
        PageChurn {
            p,
            own_chan: me,
            partner_chan: partner,
            iter: 0,
            phase: Phase::Alloc,
            allocated: 0,
            last_order: 0,
            held: Vec::with_capacity(p.burst as usize),
            remote: Vec::new(),
            alloc_failures: 0,
        }
    }

    fn pick_order(&self, rng: &mut Rng) -> u8 {
        if rng.percent(self.p.high_order_pct) {
            1 + rng.below(3) as u8
        } else {
            0
        }
    }
}

impl Program for PageChurn {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        match last {
            OpResult::Alloc(Ok(pfn)) => self.held.push((pfn, self.last_order)),
            OpResult::Alloc(Err(_)) => self.alloc_failures += 1,
            OpResult::Received(blocks) => self.remote = blocks,
            _ => {}
        }
        loop {
            match self.phase {
                Phase::Alloc => {
                    if self.iter == self.p.iterations {
                        return None;
                    }
                    if self.allocated < self.p.burst {
                        self.allocated += 1;
                        self.last_order = self.pick_order(rng);
                        // Order-0 user pages are movable; higher orders stand
                        // for kernel buffers.
                        let gfp = if self.last_order == 0 {
                            Gfp::HIGHUSER_MOVABLE
                        } else {
                            Gfp::KERNEL
                        };
                        return Some(Op::AllocPages {
                            gfp,
                            order: self.last_order,
                        });
                    }
                    self.allocated = 0;
                    self.phase = Phase::Think;
                }
                Phase::Think => {
                    self.phase = Phase::FreeLocal;
                    let ns = self.p.think_ns + self.p.work_per_page_ns * self.p.burst as u64;
                    if ns > 0 {
                        return Some(Op::Compute { ns });
                    }
                }
                Phase::FreeLocal => {
                    let keep_remote = if self.partner_chan == self.own_chan {
                        0
                    } else {
                        self.p.burst as usize * self.p.remote_free_pct as usize / 100
                    };
                    if self.held.len() > keep_remote {
                        let b = self.held.pop().expect("held is not empty");
                        return Some(Op::FreePages { block: b });
                    }
                    self.phase = Phase::Send;
                }
                Phase::Send => {
                    if self.partner_chan == self.own_chan {
                        self.phase = Phase::FreeRemote;
                        continue;
                    }
                    self.phase = Phase::Recv;
                    let blocks = std::mem::take(&mut self.held);
                    return Some(Op::Send {
                        chan: self.partner_chan,
                        blocks,
                    });
                }
                Phase::Recv => {
                    self.phase = Phase::FreeRemote;
                    return Some(Op::Recv {
                        chan: self.own_chan,
                    });
                }
                Phase::FreeRemote => {
                    if let Some(b) = self.remote.pop() {
                        return Some(Op::FreePages { block: b });
                    }
                    self.iter += 1;
                    self.phase = Phase::Alloc;
                }
            }
        }
    }
}
