//! Many small VMAs close together, faulted at random: the kind of workload
//! where hashing the VMA cache by page number beats hashing it by PMD.
//!
//! # What it models
//!
//! In the review of seed 002 David Rientjes grants that he "could also
//! construct a workload where the current implementation based on pfn would
//! outperform all of these". This is one: each task is a process with
//! `vmas` anonymous mappings of `pages` pages, one unmapped page apart (so
//! they never merge), together within a PMD or two. Each visit writes the
//! next unwritten page of a VMA picked at random, which faults (one VMA
//! lookup through the task's cache, Linux 3.15–6.0). When every page has
//! been written, one `madvise(MADV_DONTNEED)` per VMA drops them and the
//! next round begins.
//!
//! With the pmd hash every VMA of one PMD competes for one slot, so the
//! cache holds one or two of them; with the pfn hash a miss lands in the
//! slot of the faulting page, so the four slots fill with four recently
//! missed VMAs, nearly at random.
//!
//! Parameters: constructed, not measured: 8 VMAs (twice the cache's four
//! slots) of 31 pages each (so that eight with their gaps span 1 MiB),
//! 16 rounds per process.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::collections::VecDeque;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "small-vmas",
    summary: "small VMAs a page apart, written page by page in random VMA order \
              (favours the pfn hash)",
    params: &[
        P::int(
            "tasks",
            Count::CPUS,
            1,
            N(65_536),
            "processes, bound round-robin to CPUs",
        ),
        P::int("vmas", N(8), 1, N(65_536), "VMAs per process"),
        P::int("pages", N(31), 1, N(1 << 20), "pages per VMA"),
        P::int(
            "rounds",
            N(16),
            1,
            N(1_000_000),
            "times every page is written (then dropped with MADV_DONTNEED)",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let tasks = a.int("tasks")? as u32;
    let vmas = a.int("vmas")? as usize;
    let pages = a.int("pages")? as u64;
    let rounds = a.int("rounds")? as u32;
    Ok((0..tasks)
        .map(|i| {
            TaskSpec::new(
                Box::new(SmallVmas {
                    pages,
                    rounds,
                    round: 0,
                    base: None,
                    written: vec![0; vmas],
                    queue: VecDeque::new(),
                }),
                mm::VcpuId(i % nr_cpus),
            )
        })
        .collect())
}

/// One small-vmas process.
pub struct SmallVmas {
    pages: u64,
    rounds: u32,
    round: u32,
    /// The first VMA's address once mapped.
    base: Option<u64>,
    /// Pages written so far this round, per VMA.
    written: Vec<u64>,
    queue: VecDeque<Op>,
}

impl SmallVmas {
    fn stride(&self) -> u64 {
        (self.pages + 1) * PAGE_SIZE
    }
}

impl Program for SmallVmas {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        let stride = self.stride();
        let nr = self.written.len();
        let Some(base) = self.base else {
            if !matches!(last, OpResult::Mapped(_)) {
                // One mapping over all of them; the gaps are cut below.
                return Some(Op::Mmap {
                    len: nr as u64 * stride,
                    hint: None,
                    flags: MapFlags::NONE,
                    advice: None,
                });
            }
            let OpResult::Mapped(Ok(base)) = last else {
                return None;
            };
            self.base = Some(base);
            for i in 0..nr as u64 {
                self.queue.push_back(Op::Munmap {
                    addr: base + i * stride + self.pages * PAGE_SIZE,
                    len: PAGE_SIZE,
                });
            }
            return self.queue.pop_front();
        };
        if let Some(op) = self.queue.pop_front() {
            return Some(op);
        }
        // A random VMA with pages left; the next one round if it is full.
        let start = rng.below(nr as u64) as usize;
        let Some(v) = (0..nr)
            .map(|k| (start + k) % nr)
            .find(|&v| self.written[v] < self.pages)
        else {
            // Round over: drop every page, and begin again.
            self.round += 1;
            if self.round == self.rounds {
                return None;
            }
            for v in 0..nr as u64 {
                self.queue.push_back(Op::Madvise {
                    addr: base + v * stride,
                    len: self.pages * PAGE_SIZE,
                    advice: mm::vma::Advice::DontNeed,
                });
            }
            self.written.iter_mut().for_each(|w| *w = 0);
            return self.queue.pop_front();
        };
        let addr = base + v as u64 * stride + self.written[v] * PAGE_SIZE;
        self.written[v] += 1;
        Some(Op::Touch {
            bytes: 1,
            addr,
            len: PAGE_SIZE,
            stride: PAGE_SIZE,
            write: true,
        })
    }
}
