//! Who last wrote the cache lines that `zone->lock` protects, and what it
//! costs another CPU to read them.
//!
//! # Why
//!
//! Work done under a contended `zone->lock` is dominated not by its
//! instructions but by the cache lines it touches: the free list heads and
//! `nr_free` of `struct zone`'s `free_area[]`, and the `struct page`s of the
//! blocks taken off or put on the lists (and of their list neighbours, whose
//! `lru` pointers change). When the previous holder ran on another core,
//! each of those lines was last written there, and this CPU's read waits for
//! a core-to-core transfer: tens of nanoseconds within a socket, over a
//! hundred across sockets. A refill of 63 pages is then tens of such
//! transfers, the lock is held that much longer, and on a machine with a
//! hundred CPUs allocating the lock saturates. That is what seed 003's
//! kbuild measured (43.6 % of cycles in the zone lock) and what a model that
//! charges a fixed instruction count per list operation cannot produce.
//!
//! # What is modelled
//!
//! Not a coherence simulator: one last-writer record per line that matters
//! ([`LineOwners`]), `0` for a line nobody has written since boot (it comes
//! from DRAM). A touch by CPU `c` of a line last written by `o` costs the
//! profile's transfer latency for the distance between `o` and `c`
//! ([`CpuTopology::class`], [`transfer_ns`]); then `c` owns it. Touches
//! within one locked section are serial (each `struct page` is found through
//! the previous one's list pointer), so their costs add.
//!
//! Deviations: reads do not leave shared copies (a read makes the reader the
//! owner, which is what the next writer in the list code does anyway); no
//! eviction (a line written long ago by another CPU still costs a transfer,
//! not a DRAM access); the lines are updated when an operation starts, not
//! when the engine plays it (the engine grants the lock in the same global
//! time order, so the two orders differ only where operations overlap).

use crate::cost::{Cost, CostTable};
use crate::types::VcpuId;

/// How a machine's CPUs share cores, last-level caches and sockets, for the
/// distance of a cache-line transfer.
///
/// CPUs are numbered as the model numbers them (and Linux on Intel servers):
/// node by node, and within a node the first thread of every core first,
/// their SMT siblings after, so node-local CPU `i` is on core
/// `i % cores_per_node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTopology {
    /// Logical CPUs per node (socket); the same on every node.
    pub cpus_per_node: u32,
    /// Hardware threads per core.
    pub threads_per_core: u32,
    /// Cores sharing one last-level cache (a whole socket on Intel servers
    /// and on Ampere Altra's system-level cache, a CCX on AMD).
    pub cores_per_llc: u32,
}

/// The distance between the writer of a line and its reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LineClass {
    /// The same CPU: the line is in its own L1/L2.
    Same,
    /// The SMT sibling.
    Smt,
    /// Another core sharing the LLC.
    SameLlc,
    /// Another LLC of the same socket.
    OtherLlc,
    /// Another socket.
    OtherSocket,
}

impl CpuTopology {
    fn cores_per_node(&self) -> u32 {
        (self.cpus_per_node / self.threads_per_core.max(1)).max(1)
    }

    /// Node and core of `cpu`.
    fn place(&self, cpu: u32) -> (u32, u32) {
        let per = self.cpus_per_node.max(1);
        (cpu / per, (cpu % per) % self.cores_per_node())
    }

    /// The distance between `writer` and `reader`.
    pub fn class(&self, writer: u32, reader: u32) -> LineClass {
        if writer == reader {
            return LineClass::Same;
        }
        let ((wn, wc), (rn, rc)) = (self.place(writer), self.place(reader));
        if wn != rn {
            LineClass::OtherSocket
        } else if wc == rc {
            LineClass::Smt
        } else if wc / self.cores_per_llc.max(1) == rc / self.cores_per_llc.max(1) {
            LineClass::SameLlc
        } else {
            LineClass::OtherLlc
        }
    }

    /// The node of `cpu`.
    pub fn node_of(&self, cpu: u32) -> u32 {
        self.place(cpu).0
    }
}

/// Nanoseconds for a CPU to read a line of `class` (0 for its own line).
pub fn transfer_ns(costs: &CostTable, class: LineClass) -> u64 {
    match class {
        LineClass::Same => 0,
        LineClass::Smt => costs.get(Cost::C2cSmt),
        LineClass::SameLlc => costs.get(Cost::C2cSameLlc),
        LineClass::OtherLlc => costs.get(Cost::C2cOtherLlc),
        LineClass::OtherSocket => costs.get(Cost::C2cOtherSocket),
    }
}

/// One last-writer record per line: `0` for a line nobody has written since
/// boot, else the writer's CPU number + 1.
///
/// Invariant: every record is `0` or a CPU of the topology it was used with.
#[derive(Clone, Debug, Default)]
pub struct LineOwners {
    owner: Vec<u16>,
}

impl LineOwners {
    /// Records for `n` lines, none written yet. The vector is allocated
    /// zeroed, so records of lines never touched cost no host memory.
    pub fn new(n: usize) -> LineOwners {
        LineOwners { owner: vec![0; n] }
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// True if there are no lines.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// The CPU that last wrote line `i`, if any.
    pub fn owner(&self, i: usize) -> Option<VcpuId> {
        match self.owner[i] {
            0 => None,
            o => Some(VcpuId(o as u32 - 1)),
        }
    }

    /// CPU `cpu` reads and writes line `i`, whose memory is on node `home`:
    /// returns the nanoseconds the read waits (a transfer from the last
    /// writer, or DRAM for a line nobody wrote), and makes `cpu` the owner.
    pub fn touch(
        &mut self,
        i: usize,
        cpu: VcpuId,
        home: u32,
        topo: &CpuTopology,
        costs: &CostTable,
    ) -> u64 {
        let ns = match self.owner(i) {
            Some(o) => transfer_ns(costs, topo.class(o.0, cpu.0)),
            None if topo.node_of(cpu.0) == home => costs.get(Cost::DramLocal),
            None => costs.get(Cost::DramRemote),
        };
        self.owner[i] = (cpu.0 + 1) as u16;
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sockets of 4 cores x 2 threads, two LLCs of 2 cores per socket:
    /// node 0 is CPUs 0..8 (cores 0-3, then siblings 4-7).
    const TOPO: CpuTopology = CpuTopology {
        cpus_per_node: 8,
        threads_per_core: 2,
        cores_per_llc: 2,
    };

    #[test]
    fn classes_follow_the_numbering() {
        assert_eq!(TOPO.class(1, 1), LineClass::Same);
        assert_eq!(TOPO.class(1, 5), LineClass::Smt);
        assert_eq!(TOPO.class(0, 1), LineClass::SameLlc);
        assert_eq!(TOPO.class(0, 5), LineClass::SameLlc);
        assert_eq!(TOPO.class(0, 2), LineClass::OtherLlc);
        assert_eq!(TOPO.class(0, 8), LineClass::OtherSocket);
        assert_eq!(TOPO.node_of(9), 1);
    }

    #[test]
    fn a_touch_costs_the_transfer_from_the_last_writer_and_takes_the_line() {
        let mut costs = CostTable::uniform(0);
        for (c, ns) in [
            (Cost::C2cSmt, 8),
            (Cost::C2cSameLlc, 40),
            (Cost::C2cOtherLlc, 70),
            (Cost::C2cOtherSocket, 120),
            (Cost::DramLocal, 90),
            (Cost::DramRemote, 140),
        ] {
            costs.set(c, ns);
        }
        let mut l = LineOwners::new(4);
        // Nobody wrote line 0: DRAM, local to CPU 0, remote for CPU 8.
        assert_eq!(l.touch(0, VcpuId(0), 0, &TOPO, &costs), 90);
        assert_eq!(l.touch(1, VcpuId(8), 0, &TOPO, &costs), 140);
        // Again on the same CPU: its own line.
        assert_eq!(l.touch(0, VcpuId(0), 0, &TOPO, &costs), 0);
        assert_eq!(l.touch(0, VcpuId(4), 0, &TOPO, &costs), 8);
        assert_eq!(l.touch(0, VcpuId(1), 0, &TOPO, &costs), 40);
        assert_eq!(l.touch(0, VcpuId(3), 0, &TOPO, &costs), 70);
        assert_eq!(l.touch(0, VcpuId(12), 0, &TOPO, &costs), 120);
        assert_eq!(l.owner(0), Some(VcpuId(12)));
    }
}
