//! will-it-scale `page_fault1`: map, fault in and unmap anonymous memory in
//! a loop.
//!
//! # What it models
//!
//! will-it-scale's `tests/page_fault1.c`: each task loops over
//! `mmap(NULL, 128 MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS)`,
//! a write of one byte to every 4 KiB page of it (each one a page fault,
//! or one per 2 MiB when THP applies), and `munmap()`. The benchmark reports
//! faults per second; here `runtime_ns` for a fixed number of loops. With
//! `threads = 0` (the default) every task is a process of its own, as in
//! `page_fault1_processes`; with `threads = 1` all tasks are threads of one
//! process, as in `page_fault1_threads`, and share its address space.
//!
//! The benchmark does not call `madvise()`: whether the mapping gets THPs
//! is the kernel's `transparent_hugepage/enabled` setting.
//!
//! Parameters: `size` defaults to the benchmark's 128 MiB (`MEMSIZE`);
//! `tasks` to one per CPU (will-it-scale runs 1..nr_cpus tasks);
//! `iterations` is the number of loops, which will-it-scale instead bounds
//! by time. The model's tasks all start at once and run at one pace, so
//! their loops stay in step; will-it-scale samples after a warm-up, by
//! which time the tasks' loops are out of phase. `stagger = 1` models that
//! steady state: task `i` of `n` begins with a loop that writes only the
//! last `(n - i) / n` of its mapping, so the tasks' `munmap()`s are spread
//! evenly over a loop (in `page_fault1_threads` each one invalidates every
//! thread's VMA cache).
//!
//! # Variants (the large-folio issue's fault patterns)
//!
//! - `random = 1` writes the pages in a random order (a fresh permutation
//!   each loop, from the task's seeded stream), one access per page, as the
//!   native fault harness's random pattern does.
//! - `misalign = N` places the mapping N bytes past a 2 MiB boundary: the
//!   task maps `size + N + 2 MiB`, and unmaps the head below the chosen start
//!   and the tail above its end, as the native harness places its unaligned
//!   mappings. (Without it, a `size` that is a multiple of 2 MiB is 2 MiB-
//!   aligned on 6.7+ and any other size is only page-aligned.)

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::pgtable::PMD_SIZE;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::collections::VecDeque;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "page-fault1",
    summary:
        "will-it-scale page_fault1: mmap anonymous memory, write every page, munmap, in a loop",
    params: &[
        P::int(
            "tasks",
            Count::CPUS,
            1,
            N(65_536),
            "number of tasks, bound round-robin to CPUs",
        ),
        P::int(
            "iterations",
            N(4),
            1,
            N(1_000_000),
            "mmap/touch/munmap loops per task",
        ),
        P::size(
            "size",
            128 << 20,
            PAGE_SIZE,
            1 << 40,
            "bytes mapped and touched per loop",
        ),
        P::flag(
            "threads",
            false,
            "1: the tasks are threads of one process (page_fault1_threads)",
        ),
        P::flag("random", false, "1: write the pages in a random order (then tasks × size at most the machine's memory and 1 TiB)"),
        P::flag(
            "stagger",
            false,
            "1: task i of n first runs a partial loop, (n-i)/n of the size, so the \
             tasks' loops are out of phase as after will-it-scale's warm-up",
        ),
        P::opt_size(
            "misalign",
            0,
            PMD_SIZE - PAGE_SIZE,
            "place the mapping this many bytes past a 2 MiB boundary (page multiple)",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let tasks = a.int("tasks")? as u32;
    let iterations = a.int("iterations")? as u32;
    let size = a.size("size")?;
    let threads = a.flag("threads")?;
    let random = a.flag("random")?;
    let stagger = a.flag("stagger")?;
    let pages = size.div_ceil(PAGE_SIZE);
    let misalign = a.opt_size("misalign")?;
    if misalign.is_some_and(|m| !m.is_multiple_of(PAGE_SIZE)) {
        return Err(ParamError::Invalid {
            name: "misalign",
            expected: "a multiple of 4 KiB below 2 MiB".into(),
        });
    }
    if !size.is_multiple_of(PAGE_SIZE) && (random || misalign.is_some()) {
        return Err(ParamError::Invalid {
            name: "size",
            expected: "a multiple of 4 KiB with random or misalign".into(),
        });
    }
    check_random_fits(random, tasks, size, m.memory_bytes())?;
    Ok((0..tasks)
        .map(|i| TaskSpec {
            program: Box::new(PageFault1 {
                skip: if stagger {
                    pages * u64::from(i) / u64::from(tasks) * PAGE_SIZE
                } else {
                    0
                },
                ..PageFault1::new(size, iterations).with(random, misalign)
            }),
            cpu: mm::VcpuId(i % nr_cpus),
            process: threads.then_some(0),
        })
        .collect())
}

/// The largest `tasks × size` of a random-order run: the most a single
/// task may ask for (`size` is at most 1 TiB).
const MAX_RANDOM_BYTES: u64 = 1 << 40;

/// With `random = 1`, every task's mapping is written at once in an order
/// the model holds in host memory (4 bytes a page): `tasks × size` must fit
/// the machine's memory (more cannot be resident at once) and 1 TiB (the
/// model's orders then take at most 1 GiB). Fuzz experiment input 950059 of `--seed 5000000` (16 tasks
/// of 1 TiB on a 1 GiB machine) aborted allocating 15 GiB of accesses.
fn check_random_fits(
    random: bool,
    tasks: u32,
    size: u64,
    machine_bytes: u64,
) -> Result<(), ParamError> {
    let total = u64::from(tasks).saturating_mul(size);
    let max = machine_bytes.min(MAX_RANDOM_BYTES);
    if random && total > max {
        return Err(ParamError::Invalid {
            name: "size",
            expected: format!(
                "with random = 1, tasks × size at most {} (the machine's memory, and at most \
                 1 TiB); {tasks} × {} is {}",
                sim::machine::human_bytes(max),
                sim::machine::human_bytes(size),
                sim::machine::human_bytes(total)
            ),
        });
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Map,
    Touch,
    Unmap,
}

/// One page_fault1 task.
pub struct PageFault1 {
    size: u64,
    iterations: u32,
    iter: u32,
    phase: Phase,
    addr: u64,
    random: bool,
    misalign: Option<u64>,
    /// Bytes of the mapping that the first loop leaves unwritten (stagger).
    skip: u64,
    /// Operations queued before the next phase (trims, the sequential write).
    pending: VecDeque<Op>,
    /// The loop's random write order (page indices), after `pending`.
    order: Vec<u32>,
    /// The next index into `order`.
    next_page: usize,
}

impl PageFault1 {
    /// A task that maps, touches and unmaps `size` bytes `iterations` times.
    pub fn new(size: u64, iterations: u32) -> PageFault1 {
        PageFault1 {
            size,
            iterations,
            iter: 0,
            phase: Phase::Map,
            addr: 0,
            random: false,
            misalign: None,
            skip: 0,
            pending: VecDeque::new(),
            order: Vec::new(),
            next_page: 0,
        }
    }

    /// The next write of a random-order loop; its page order is dropped
    /// once written.
    fn next_random_touch(&mut self) -> Option<Op> {
        let Some(&p) = self.order.get(self.next_page) else {
            if !self.order.is_empty() {
                self.order = Vec::new();
            }
            return None;
        };
        self.next_page += 1;
        Some(Op::Touch {
            addr: self.addr + u64::from(p) * PAGE_SIZE,
            len: 1,
            stride: PAGE_SIZE,
            bytes: 1,
            write: true,
        })
    }

    /// The variant: random write order, and the mapping's offset past a
    /// 2 MiB boundary.
    pub fn with(mut self, random: bool, misalign: Option<u64>) -> PageFault1 {
        self.random = random;
        self.misalign = misalign;
        self
    }

    fn map_len(&self) -> u64 {
        match self.misalign {
            Some(m) => self.size + m + PMD_SIZE,
            None => self.size,
        }
    }
}

impl Program for PageFault1 {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        if let Some(op) = self.pending.pop_front() {
            return Some(op);
        }
        if let Some(op) = self.next_random_touch() {
            return Some(op);
        }
        match self.phase {
            Phase::Map => {
                if self.iter == self.iterations {
                    return None;
                }
                self.phase = Phase::Touch;
                Some(Op::Mmap {
                    len: self.map_len(),
                    hint: None,
                    flags: MapFlags::NONE,
                    advice: None,
                })
            }
            Phase::Touch => {
                // The benchmark asserts that mmap() succeeded; a failure
                // here ends the task.
                let OpResult::Mapped(Ok(mut addr)) = last else {
                    return None;
                };
                if let Some(m) = self.misalign {
                    let len = self.map_len();
                    let start = addr.next_multiple_of(PMD_SIZE) + m;
                    if start > addr {
                        self.pending.push_back(Op::Munmap {
                            addr,
                            len: start - addr,
                        });
                    }
                    self.pending.push_back(Op::Munmap {
                        addr: start + self.size,
                        len: addr + len - start - self.size,
                    });
                    addr = start;
                }
                self.addr = addr;
                self.phase = Phase::Unmap;
                if self.random {
                    // At most 2^28 pages (`size` is at most 1 TiB): u32
                    // indices, turned into accesses one at a time.
                    let n = (self.size / PAGE_SIZE) as u32;
                    let mut order: Vec<u32> = (0..n).collect();
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    self.order = order;
                    self.next_page = 0;
                } else {
                    // Only the first loop is partial.
                    let skip = std::mem::take(&mut self.skip);
                    self.pending.push_back(Op::Touch {
                        addr: addr + skip,
                        len: self.size - skip,
                        stride: PAGE_SIZE,
                        bytes: 1,
                        write: true,
                    });
                }
                self.pending
                    .pop_front()
                    .or_else(|| self.next_random_touch())
            }
            Phase::Unmap => {
                self.iter += 1;
                self.phase = Phase::Map;
                Some(Op::Munmap {
                    addr: self.addr,
                    len: self.size,
                })
            }
        }
    }
}
