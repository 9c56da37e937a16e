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

use crate::params::{ParamError, Params};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use sim::{Machine, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "page-fault1",
    summary:
        "will-it-scale page_fault1: mmap anonymous memory, write every page, munmap, in a loop",
    params: &[
        (
            "tasks",
            "one per CPU",
            "number of tasks, bound round-robin to CPUs",
        ),
        ("iterations", "4", "mmap/touch/munmap loops per task"),
        ("size", "128MiB", "bytes mapped and touched per loop"),
        (
            "threads",
            "0",
            "1: the tasks are threads of one process (page_fault1_threads)",
        ),
        (
            "stagger",
            "0",
            "1: task i of n first runs a partial loop, (n-i)/n of the size, so the \
             tasks' loops are out of phase as after will-it-scale's warm-up",
        ),
    ],
    build,
};

fn build(p: &Params, m: &Machine) -> Result<Vec<TaskSpec>, ParamError> {
    let nr_cpus = m.nr_cpus();
    let tasks = p.int("tasks", nr_cpus as i64, 1..=65_536)? as u32;
    let iterations = p.int("iterations", 4, 1..=1_000_000)? as u32;
    let size = p.size("size", 128 << 20, PAGE_SIZE..=1 << 40)?;
    let threads = p.int("threads", 0, 0..=1)? == 1;
    let stagger = p.int("stagger", 0, 0..=1)? == 1;
    let pages = size.div_ceil(PAGE_SIZE);
    Ok((0..tasks)
        .map(|i| TaskSpec {
            program: Box::new(PageFault1 {
                skip: if stagger {
                    pages * u64::from(i) / u64::from(tasks) * PAGE_SIZE
                } else {
                    0
                },
                ..PageFault1::new(size, iterations)
            }),
            cpu: mm::VcpuId(i % nr_cpus),
            process: threads.then_some(0),
        })
        .collect())
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
    /// Bytes of the mapping that the first loop leaves unwritten (stagger).
    skip: u64,
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
            skip: 0,
        }
    }
}

impl Program for PageFault1 {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        match self.phase {
            Phase::Map => {
                if self.iter == self.iterations {
                    return None;
                }
                self.phase = Phase::Touch;
                Some(Op::Mmap {
                    len: self.size,
                    hint: None,
                    fixed: false,
                    advice: None,
                })
            }
            Phase::Touch => {
                // The benchmark asserts that mmap() succeeded; a failure
                // here ends the task.
                let OpResult::Mapped(Ok(addr)) = last else {
                    return None;
                };
                self.addr = addr;
                self.phase = Phase::Unmap;
                // Only the first loop is partial.
                let skip = std::mem::take(&mut self.skip);
                Some(Op::Touch {
                    addr: addr + skip,
                    len: self.size - skip,
                    stride: PAGE_SIZE,
                    write: true,
                })
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
