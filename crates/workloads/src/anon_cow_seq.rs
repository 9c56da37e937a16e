//! vm-scalability `anon-cow-seq`: children write, page after page, memory
//! they share copy-on-write with their parent.
//!
//! # What it models
//!
//! vm-scalability's `case-anon-cow-seq` (`usemem --prealloc --fork`-style):
//! a parent maps `size` bytes of anonymous private memory and populates
//! them (a write to every 4 KiB page), then forks `children` children. Each
//! child writes one byte per 4 KiB page from start to end, so every page it
//! writes is a copy-on-write fault, then exits; the parent waits for all of
//! them and exits.
//!
//! This is the workload where the THP copy-on-write change of 5.8
//! (commit 3917c80280c9) shows: on Linux 4.18 the first write to a shared
//! THP copies all 2 MiB (`thp_fault_alloc`), and the next 511 writes do not
//! fault; on 6.18 it splits the PMD (`thp_split_pmd`) and every 4 KiB page
//! is its own fault and copy.
//!
//! The case does not call `madvise()`: THP use is the kernel's
//! `transparent_hugepage/enabled` setting.
//!
//! Parameters: vm-scalability sizes the region from the machine's memory
//! and forks one child per CPU; here `size` (default 64 MiB) and
//! `children` (default one per CPU less the parent's) are given so that
//! experiments stay small.

use crate::params::{ParamError, Params};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use sim::{Machine, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "anon-cow-seq",
    summary:
        "vm-scalability anon-cow-seq: a parent populates memory, forked children write it (COW)",
    params: &[
        ("size", "64MiB", "bytes the parent maps and populates"),
        (
            "children",
            "one per CPU, less one",
            "children forked, placed round-robin on the CPUs after the parent's",
        ),
    ],
    build,
};

fn build(p: &Params, m: &Machine) -> Result<Vec<TaskSpec>, ParamError> {
    let nr_cpus = m.nr_cpus();
    let size = p.size("size", 64 << 20, PAGE_SIZE..=1 << 40)?;
    let children = p.int("children", (nr_cpus as i64 - 1).max(1), 1..=65_536)? as u32;
    Ok(vec![TaskSpec::new(
        Box::new(CowParent::new(size, children)),
        mm::VcpuId(0),
    )])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Map,
    Populate,
    Fork,
    Wait,
    Done,
}

/// The parent process.
pub struct CowParent {
    size: u64,
    children: u32,
    forked: u32,
    addr: u64,
    phase: Phase,
}

impl CowParent {
    /// A parent that populates `size` bytes and forks `children` writers.
    pub fn new(size: u64, children: u32) -> CowParent {
        CowParent {
            size,
            children,
            forked: 0,
            addr: 0,
            phase: Phase::Map,
        }
    }
}

impl Program for CowParent {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        loop {
            match self.phase {
                Phase::Map => {
                    self.phase = Phase::Populate;
                    return Some(Op::Mmap {
                        len: self.size,
                        hint: None,
                        fixed: false,
                        advice: None,
                    });
                }
                Phase::Populate => {
                    let OpResult::Mapped(Ok(addr)) = last else {
                        return None;
                    };
                    self.addr = addr;
                    self.phase = Phase::Fork;
                    return Some(Op::Touch {
                        addr,
                        len: self.size,
                        stride: PAGE_SIZE,
                        write: true,
                    });
                }
                Phase::Fork => {
                    if self.forked == self.children {
                        self.phase = Phase::Wait;
                        continue;
                    }
                    self.forked += 1;
                    return Some(Op::fork(CowChild::new(self.addr, self.size)));
                }
                Phase::Wait => {
                    self.phase = Phase::Done;
                    return Some(Op::Wait);
                }
                Phase::Done => return None,
            }
        }
    }
}

/// A child: writes one byte per page of the shared region, then exits.
pub struct CowChild {
    addr: u64,
    size: u64,
    step: u8,
}

impl CowChild {
    /// A child writing `[addr, addr + size)`.
    pub fn new(addr: u64, size: u64) -> CowChild {
        CowChild {
            addr,
            size,
            step: 0,
        }
    }
}

impl Program for CowChild {
    fn next(&mut self, _last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        match self.step {
            1 => Some(Op::Touch {
                addr: self.addr,
                len: self.size,
                stride: PAGE_SIZE,
                write: true,
            }),
            2 => Some(Op::Exit),
            _ => None,
        }
    }
}
