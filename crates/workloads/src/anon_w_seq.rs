//! vm-scalability `anon-w-seq`: every task writes its own anonymous region
//! once, from start to end.
//!
//! # What it models
//!
//! vm-scalability's `case-anon-w-seq`, which runs `usemem` in `nr_task`
//! processes, each mapping an anonymous private region and writing it
//! sequentially. `usemem` writes every word; the model charges one
//! `touch_ns` per 4 KiB page for the accesses that do not fault, so the
//! per-page user time is in the profile's `touch_ns`, and every first write
//! to a page (or to a 2 MiB THP) is a fault. The task then exits and its
//! address space is torn down (`exit_mmap()`), as when `usemem` returns.
//!
//! The case does not call `madvise()`: THP use is the kernel's
//! `transparent_hugepage/enabled` setting (the test robot runs it with
//! `always`).
//!
//! Parameters: vm-scalability sizes each task's region as the machine's
//! memory divided by `nr_task`; here `size` is given per task (default
//! 64 MiB) so that experiments stay small, and `tasks` defaults to one per
//! CPU.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "anon-w-seq",
    summary: "vm-scalability anon-w-seq: each process writes its own anonymous region start to end",
    params: &[
        P::int(
            "tasks",
            Count::CPUS,
            1,
            N(65_536),
            "number of processes, bound round-robin to CPUs",
        ),
        P::size(
            "size",
            64 << 20,
            PAGE_SIZE,
            1 << 40,
            "bytes mapped and written per process",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let tasks = a.int("tasks")? as u32;
    let size = a.size("size")?;
    Ok((0..tasks)
        .map(|i| TaskSpec::new(Box::new(AnonWSeq::new(size)), mm::VcpuId(i % nr_cpus)))
        .collect())
}

/// One anon-w-seq process.
pub struct AnonWSeq {
    size: u64,
    step: u8,
}

impl AnonWSeq {
    /// A process that maps `size` bytes and writes them once.
    pub fn new(size: u64) -> AnonWSeq {
        AnonWSeq { size, step: 0 }
    }
}

impl Program for AnonWSeq {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        match (self.step, last) {
            (1, _) => Some(Op::Mmap {
                len: self.size,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            }),
            (2, OpResult::Mapped(Ok(addr))) => Some(Op::Touch {
                addr,
                len: self.size,
                stride: PAGE_SIZE,
                bytes: PAGE_SIZE,
                write: true,
            }),
            // Done (or mmap failed): exit, and exit_mmap() frees the region.
            _ => None,
        }
    }
}
