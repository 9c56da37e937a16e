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
//! experiments stay small. `placement` says where the children run:
//! `next` (the engine's default: the CPUs after the parent's, in order, so
//! that 36 children on 2 × 36 CPUs fill the first node) or `spread` (the
//! nodes in turn, the parent's CPU skipped: 36 children on 2 × 36 CPUs run
//! 18 on each node, as the kernel's fork balancing spreads them over idle
//! cores and sockets).
//!
//! `fork_size` (default: `size`) is how much the parent maps and populates,
//! of which the children write the first `size` bytes (the parent reads the
//! rest rather than writing it: a read fault maps the zero page, or the huge
//! zero page, without the clearing that would cost the simulation time, and
//! fork copies a zero-page entry at the cost of any other). vm-scalability's
//! region is a share of the machine's memory, and the time the parent's
//! forks take copying its page tables spreads the children over it: child
//! `k` starts `k` forks after the first, so that the children do not all
//! read the same source page at the same moment. A region of the seed's
//! size for the fork and a smaller one for the children's writes keeps that
//! stagger, as the model's fork costs it, while the children's run stays
//! short.
//!
//! `fork_gap_ns` is time the parent spends before each fork after the first
//! (default 0): an explicit stagger, for experiments that do not use
//! `fork_size`. It runs as the parent's `Compute`, so it counts in
//! `user_ns` (the same for every kernel).
//!
//! Each access writes the whole 4 KiB page (`usemem` writes every word),
//! one translation per page: without the cache model this costs what one
//! store per page costs; with it, every line of the page is played.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Machine, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "anon-cow-seq",
    summary:
        "vm-scalability anon-cow-seq: a parent populates memory, forked children write it (COW)",
    params: &[
        P::size(
            "size",
            64 << 20,
            PAGE_SIZE,
            1 << 40,
            "bytes of the region each child writes",
        ),
        P::opt_size(
            "fork_size",
            PAGE_SIZE,
            1 << 40,
            "bytes the parent maps, populates and forks (default: size; the children write the first size bytes)",
        ),
        P::int(
            "children",
            Count::CPUS_LESS_ONE,
            1,
            N(65_536),
            "children forked, placed round-robin on the CPUs after the parent's",
        ),
        P::int(
            "fork_gap_ns",
            N(0),
            0,
            N(1_000_000_000_000),
            "time the parent spends before each fork after the first (see the module docs)",
        ),
        P::choice(
            "placement",
            "next",
            &["next", "spread"],
            "next: children on the CPUs after the parent's; spread: nodes in turn (fork balancing)",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let size = a.size("size")?;
    let children = a.int("children")? as u32;
    let fork_size = a.opt_size("fork_size")?.unwrap_or(size);
    if fork_size < size {
        return Err(ParamError::Invalid {
            name: "fork_size",
            expected: format!("at least size ({size} bytes)"),
        });
    }
    let mut parent = CowParent::new(size, children);
    parent.fork_size = fork_size;
    parent.fork_gap_ns = a.int("fork_gap_ns")? as u64;
    if a.choice("placement")? == "spread" {
        parent.child_cpus = spread_cpus(m, children);
    }
    Ok(vec![TaskSpec::new(Box::new(parent), mm::VcpuId(0))])
}

/// CPUs for `n` children taking the nodes in turn, each node's CPUs in
/// order, CPU 0 (the parent's) skipped while others are free; round-robin
/// once every CPU has a child.
fn spread_cpus(m: &Machine, n: u32) -> Vec<mm::VcpuId> {
    let mut per_node: Vec<Vec<u32>> = Vec::new();
    let mut first = 0;
    for node in &m.nodes {
        per_node.push((first..first + node.cpus).filter(|&c| c != 0).collect());
        first += node.cpus;
    }
    let mut order = Vec::new();
    let mut i = 0;
    while per_node.iter().any(|c| i < c.len()) {
        for c in &per_node {
            if let Some(&cpu) = c.get(i) {
                order.push(mm::VcpuId(cpu));
            }
        }
        i += 1;
    }
    if order.is_empty() {
        order.push(mm::VcpuId(0));
    }
    (0..n as usize).map(|k| order[k % order.len()]).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Setup,
    Map,
    Populate,
    /// The part of the region beyond `size`, read only.
    PopulateRest,
    Fork,
    Wait,
    Done,
}

/// The parent process.
pub struct CowParent {
    size: u64,
    /// Bytes mapped, populated and forked (at least `size`).
    fork_size: u64,
    children: u32,
    forked: u32,
    addr: u64,
    phase: Phase,
    /// The CPU of each child; empty: the engine places them.
    child_cpus: Vec<mm::VcpuId>,
    /// Nanoseconds spent before each fork after the first.
    fork_gap_ns: u64,
    /// The gap before the next fork has been spent.
    gap_done: bool,
    /// `Some(nr_overcommit_hugepages)`: the region is a `MAP_HUGETLB`
    /// mapping, and the parent first sets the pool's overcommit if given
    /// (vm-scalability's `setup_hugetlb`); `None`: anonymous private memory.
    hugetlb: Option<Option<u64>>,
}

impl CowParent {
    /// A parent that populates `size` bytes and forks `children` writers.
    pub fn new(size: u64, children: u32) -> CowParent {
        CowParent {
            size,
            fork_size: size,
            children,
            forked: 0,
            addr: 0,
            phase: Phase::Map,
            child_cpus: Vec::new(),
            fork_gap_ns: 0,
            gap_done: false,
            hugetlb: None,
        }
    }

    /// The hugetlb variant: the region is mapped with `MAP_HUGETLB`, after
    /// writing `nr_overcommit_hugepages = overcommit` if given.
    pub fn hugetlb(size: u64, children: u32, overcommit: Option<u64>) -> CowParent {
        CowParent {
            hugetlb: Some(overcommit),
            phase: Phase::Setup,
            ..CowParent::new(size, children)
        }
    }

    /// Spends `ns` before each fork after the first.
    pub fn fork_gap(mut self, ns: u64) -> CowParent {
        self.fork_gap_ns = ns;
        self
    }
}

impl Program for CowParent {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        loop {
            match self.phase {
                Phase::Setup => {
                    self.phase = Phase::Map;
                    if let Some(Some(n)) = self.hugetlb {
                        return Some(Op::SetHugepages {
                            nr_hugepages: None,
                            nr_overcommit_hugepages: Some(n),
                        });
                    }
                }
                Phase::Map => {
                    self.phase = Phase::Populate;
                    return Some(match self.hugetlb {
                        Some(_) => Op::MmapHugetlb {
                            len: self.fork_size,
                            hint: None,
                            flags: MapFlags::NONE,
                        },
                        None => Op::Mmap {
                            len: self.fork_size,
                            hint: None,
                            flags: MapFlags::NONE,
                            advice: None,
                        },
                    });
                }
                Phase::Populate => {
                    let OpResult::Mapped(Ok(addr)) = last else {
                        return None;
                    };
                    self.addr = addr;
                    self.phase = Phase::PopulateRest;
                    return Some(Op::Touch {
                        addr,
                        len: self.size,
                        stride: PAGE_SIZE,
                        bytes: PAGE_SIZE,
                        write: true,
                    });
                }
                Phase::PopulateRest => {
                    self.phase = Phase::Fork;
                    // Read, not written: a read fault maps the (huge) zero
                    // page without clearing anything, and fork copies its
                    // page-table entry as it copies a written page's
                    // (copy_huge_pmd(): a deposited table and the PMD),
                    // which is all this part of the region is for.
                    if self.fork_size > self.size && self.hugetlb.is_none() {
                        return Some(Op::Touch {
                            addr: self.addr + self.size,
                            len: self.fork_size - self.size,
                            stride: PAGE_SIZE,
                            bytes: 1,
                            write: false,
                        });
                    }
                }
                Phase::Fork => {
                    if self.forked == self.children {
                        self.phase = Phase::Wait;
                        continue;
                    }
                    if self.forked > 0 && self.fork_gap_ns > 0 && !self.gap_done {
                        self.gap_done = true;
                        return Some(Op::Compute {
                            ns: self.fork_gap_ns,
                        });
                    }
                    self.gap_done = false;
                    let child = CowChild::new(self.addr, self.size);
                    let cpu = self.child_cpus.get(self.forked as usize).copied();
                    self.forked += 1;
                    return Some(match cpu {
                        Some(c) => Op::fork_on(child, c),
                        None => Op::fork(child),
                    });
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
                bytes: PAGE_SIZE,
                write: true,
            }),
            2 => Some(Op::Exit),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_machine as machine;

    /// `spread` takes the nodes in turn and skips the parent's CPU 0:
    /// 6 children on 2 × 4 CPUs run on 1, 4, 2, 5, 3, 6.
    #[test]
    fn spread_alternates_nodes_and_skips_the_parent() {
        let cpus: Vec<u32> = spread_cpus(&machine(2, 4), 6).iter().map(|c| c.0).collect();
        assert_eq!(cpus, vec![1, 4, 2, 5, 3, 6]);
        // More children than CPUs: round-robin over the same order.
        let cpus: Vec<u32> = spread_cpus(&machine(1, 2), 3).iter().map(|c| c.0).collect();
        assert_eq!(cpus, vec![1, 1, 1]);
    }

    #[test]
    fn placement_is_validated() {
        let mut p = crate::Params::default();
        p.0.insert(
            "placement".into(),
            crate::params::ParamValue::Str("random".into()),
        );
        let e = crate::build("anon-cow-seq", &p, &machine(1, 4))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("one of next, spread"), "{e}");
    }
}
