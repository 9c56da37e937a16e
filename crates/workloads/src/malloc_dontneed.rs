//! A malloc that frees back to the same hugepage-sized arenas with
//! `MADV_DONTNEED` and re-faults them: seed 002's own example.
//!
//! # What it models
//!
//! In the review of the PMD-hash patch David Rientjes describes the case he
//! optimised for: "madvise(MADV_DONTNEED) from a malloc implementation where
//! I don't control what is free()'d and I'm constantly freeing back to the
//! same hugepages". Each task here is such a single-threaded process:
//!
//! 1. It reserves a heap of `arenas` hugepage-sized (2 MiB) arenas, aligned
//!    to 2 MiB the way jemalloc and tcmalloc align their chunks: map the
//!    size plus 2 MiB, then unmap the unaligned head and tail.
//! 2. Then `rounds` times: one *large* allocation of `large` bytes, above
//!    glibc's default `M_MMAP_THRESHOLD` of 128 KiB (mallopt(3)), so it is
//!    its own `mmap()`, written, and freed at the end of the round with
//!    `munmap()` — the VMA leaving the tree invalidates every VMA cache of
//!    the mm; between, `burst` small allocations served from one arena
//!    picked at random for the round (the "same hugepages"): each takes 1 to
//!    `max_pages` pages at a random page of the arena, is written (one fault
//!    per page: the pages were never touched or were dropped) and freed with
//!    `madvise(MADV_DONTNEED)`.
//!
//! Every lookup of the fault path and of `madvise()`/`munmap()` goes
//! through the task's VMA cache (Linux 3.15–6.0), so after each
//! invalidation the next miss caches the heap in the slot of the hot
//! arena's PMD (pmd hash), or of its page (pfn hash).
//!
//! Parameters: the 2 MiB arena (the seed's "hugepages") and the 128 KiB
//! mmap threshold (glibc) are sourced; how many arenas, rounds, allocations
//! per round and their sizes are this model's choices (no source gives
//! them), kept small so that a run takes well under a second.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::collections::VecDeque;

/// A hugepage: the arena size of the seed's example.
const ARENA: u64 = 2 << 20;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "malloc-dontneed",
    summary: "seed 002's example: a malloc freeing back to 2 MiB arenas with MADV_DONTNEED, \
              large blocks by mmap/munmap",
    params: &[
        P::int(
            "tasks",
            Count::CPUS,
            1,
            N(65_536),
            "processes, bound round-robin to CPUs",
        ),
        P::int("arenas", N(16), 1, N(4096), "2 MiB arenas in each heap"),
        P::int(
            "rounds",
            N(64),
            1,
            N(1_000_000),
            "rounds per process, each on one random arena",
        ),
        P::int(
            "burst",
            N(16),
            1,
            N(1_000_000),
            "small allocate/write/free cycles per round",
        ),
        P::int(
            "max_pages",
            N(16),
            1,
            N(512),
            "largest small allocation, in 4 KiB pages",
        ),
        P::size(
            "large",
            256 << 10,
            0,
            1 << 30,
            "the round's mmap'd allocation (0: none, so no munmap)",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let tasks = a.int("tasks")? as u32;
    let cfg = Config {
        arenas: a.int("arenas")? as u64,
        rounds: a.int("rounds")? as u32,
        burst: a.int("burst")? as u32,
        max_pages: a.int("max_pages")? as u64,
        large: a.size("large")?,
    };
    Ok((0..tasks)
        .map(|i| TaskSpec::new(Box::new(MallocDontneed::new(cfg)), mm::VcpuId(i % nr_cpus)))
        .collect())
}

#[derive(Clone, Copy, Debug)]
struct Config {
    arenas: u64,
    rounds: u32,
    burst: u32,
    max_pages: u64,
    large: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Reserve the heap (answer: the unaligned reservation).
    Reserve,
    /// Trim it to 2 MiB alignment (queued unmaps), then start the rounds.
    Trim,
    /// A round's large allocation was mapped: queue the round.
    Round,
    /// Play queued operations.
    Queue,
}

/// One malloc-dontneed process.
pub struct MallocDontneed {
    cfg: Config,
    phase: Phase,
    heap: u64,
    round: u32,
    queue: VecDeque<Op>,
}

impl MallocDontneed {
    fn new(cfg: Config) -> MallocDontneed {
        MallocDontneed {
            cfg,
            phase: Phase::Reserve,
            heap: 0,
            round: 0,
            queue: VecDeque::new(),
        }
    }

    /// The next round's first operation: its large `mmap()`, or the small
    /// allocations straight away.
    fn start_round(&mut self, rng: &mut Rng) -> Option<Op> {
        if self.round == self.cfg.rounds {
            return None;
        }
        self.round += 1;
        if self.cfg.large > 0 {
            self.phase = Phase::Round;
            return Some(Op::Mmap {
                len: self.cfg.large,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            });
        }
        self.queue_small(rng);
        self.phase = Phase::Queue;
        self.queue.pop_front()
    }

    /// The round's small allocations in one random arena.
    fn queue_small(&mut self, rng: &mut Rng) {
        let arena = self.heap + rng.below(self.cfg.arenas) * ARENA;
        let arena_pages = ARENA / PAGE_SIZE;
        for _ in 0..self.cfg.burst {
            let pages = 1 + rng.below(self.cfg.max_pages);
            let first = rng.below(arena_pages - pages.min(arena_pages) + 1);
            let addr = arena + first * PAGE_SIZE;
            let len = pages * PAGE_SIZE;
            self.queue.push_back(Op::Touch {
                bytes: 1,
                addr,
                len,
                stride: PAGE_SIZE,
                write: true,
            });
            self.queue.push_back(Op::Madvise {
                addr,
                len,
                advice: mm::vma::Advice::DontNeed,
            });
        }
    }
}

impl Program for MallocDontneed {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        match self.phase {
            Phase::Reserve => {
                self.phase = Phase::Trim;
                Some(Op::Mmap {
                    len: self.cfg.arenas * ARENA + ARENA,
                    hint: None,
                    flags: MapFlags::NONE,
                    advice: None,
                })
            }
            Phase::Trim => {
                // A failed reservation ends the process, as malloc()
                // returning NULL would end a program that checks it.
                let OpResult::Mapped(Ok(raw)) = last else {
                    return None;
                };
                let size = self.cfg.arenas * ARENA;
                self.heap = raw.next_multiple_of(ARENA);
                let (head, tail) = (self.heap - raw, raw + ARENA - self.heap);
                if head > 0 {
                    self.queue.push_back(Op::Munmap {
                        addr: raw,
                        len: head,
                    });
                }
                if tail > 0 {
                    self.queue.push_back(Op::Munmap {
                        addr: self.heap + size,
                        len: tail,
                    });
                }
                self.phase = Phase::Queue;
                match self.queue.pop_front() {
                    Some(op) => Some(op),
                    None => self.start_round(rng),
                }
            }
            Phase::Round => {
                let OpResult::Mapped(Ok(large)) = last else {
                    return None;
                };
                self.queue.push_back(Op::Touch {
                    bytes: 1,
                    addr: large,
                    len: self.cfg.large,
                    stride: PAGE_SIZE,
                    write: true,
                });
                self.queue_small(rng);
                self.queue.push_back(Op::Munmap {
                    addr: large,
                    len: self.cfg.large,
                });
                self.phase = Phase::Queue;
                self.queue.pop_front()
            }
            Phase::Queue => match self.queue.pop_front() {
                Some(op) => Some(op),
                None => self.start_round(rng),
            },
        }
    }
}
