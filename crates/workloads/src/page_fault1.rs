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
//! by time.

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
    ],
    build,
};

fn build(p: &Params, m: &Machine) -> Result<Vec<TaskSpec>, ParamError> {
    let nr_cpus = m.nr_cpus();
    let tasks = p.int("tasks", nr_cpus as i64, 1..=65_536)? as u32;
    let iterations = p.int("iterations", 4, 1..=1_000_000)? as u32;
    let size = p.size("size", 128 << 20, PAGE_SIZE..=1 << 40)?;
    let threads = p.int("threads", 0, 0..=1)? == 1;
    Ok((0..tasks)
        .map(|i| TaskSpec {
            program: Box::new(PageFault1::new(size, iterations)),
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
                Some(Op::Touch {
                    addr,
                    len: self.size,
                    stride: PAGE_SIZE,
                    bytes: 1,
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
