//! The simulated machine: sockets/nodes, CPUs, memory and caches.

use mm::page_alloc::{MemoryLayout, NodeLayout};
use mm::PAGE_SIZE;
use std::fmt;

/// The most CPUs the model accepts: 256 CPUs per DESIGN.md, with room to
/// spare. (Memory is bounded by [`mm::page::MAX_PFN`]: 4 PiB.)
pub const MAX_CPUS: u32 = 1024;

/// One NUMA node (a socket, in the seeds' machines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Logical CPUs on the node.
    pub cpus: u32,
    /// Bytes of memory on the node.
    pub memory_bytes: u64,
}

/// A machine description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// A short name for reports.
    pub name: String,
    /// Nodes in order.
    pub nodes: Vec<NodeSpec>,
    /// Last-level cache per node, in bytes (0 if unknown).
    pub llc_bytes: u64,
    /// Bytes of node 0 below 4 GiB that form ZONE_DMA32.
    pub dma32_bytes: u64,
}

/// Why a machine cannot be simulated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachineError {
    /// No nodes, a node without CPUs, or too many CPUs.
    Cpus(String),
    /// A node's memory is not a whole number of 2 MiB pageblocks, or is zero.
    Memory(String),
    /// The page allocator's boot state would not fit in the host's memory.
    TooLarge {
        /// Bytes of host memory the allocator needs at boot.
        needed_bytes: u64,
        /// Bytes the host has.
        host_bytes: u64,
    },
}

impl fmt::Display for MachineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineError::Cpus(s) | MachineError::Memory(s) => f.write_str(s),
            MachineError::TooLarge { needed_bytes, host_bytes } => write!(
                f,
                "the machine's page allocator would need {} of host memory at boot (before the workload's {} bytes a touched page), but this host has {}",
                human_bytes(*needed_bytes),
                mm::page::MemMap::BYTES_PER_PAGE,
                human_bytes(*host_bytes)
            ),
        }
    }
}

impl std::error::Error for MachineError {}

/// `1.5 GiB`-style size.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl Machine {
    /// Total logical CPUs.
    pub fn nr_cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.cpus).sum()
    }

    /// Total bytes of memory.
    pub fn memory_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.memory_bytes).sum()
    }

    /// Host bytes the model's page allocator needs for this machine at
    /// boot (`MemoryLayout::boot_host_bytes`): a few bytes per 128 MiB
    /// section and the per-CPU pagesets, not 16 bytes a page; the memory a
    /// workload touches comes on top.
    pub fn metadata_bytes(&self) -> u64 {
        self.memory_layout().boot_host_bytes()
    }

    /// Checks that the machine can exist and fits a host with `host_bytes`.
    pub fn validate(&self, host_bytes: u64) -> Result<(), MachineError> {
        if self.nodes.is_empty() {
            return Err(MachineError::Cpus("the machine has no nodes".into()));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.cpus == 0 {
                return Err(MachineError::Cpus(format!(
                    "node {i} has 0 CPUs; every node needs at least one"
                )));
            }
            if n.memory_bytes == 0 || n.memory_bytes % (2 << 20) != 0 {
                return Err(MachineError::Memory(format!(
                    "node {i} has {} of memory; expected a positive multiple of 2 MiB (one pageblock)",
                    human_bytes(n.memory_bytes)
                )));
            }
        }
        if self.nr_cpus() > MAX_CPUS {
            return Err(MachineError::Cpus(format!(
                "{} CPUs; the model supports at most {MAX_CPUS}",
                self.nr_cpus()
            )));
        }
        if self.memory_bytes() / PAGE_SIZE > mm::page::MAX_PFN {
            return Err(MachineError::Memory(format!(
                "{} of memory; the model addresses at most {} (52-bit physical addresses)",
                human_bytes(self.memory_bytes()),
                human_bytes(mm::page::MAX_PFN * PAGE_SIZE)
            )));
        }
        // Leave half the host for everything else.
        if self.metadata_bytes() > host_bytes / 2 {
            return Err(MachineError::TooLarge {
                needed_bytes: self.metadata_bytes(),
                host_bytes,
            });
        }
        Ok(())
    }

    /// The layout the page allocator boots on.
    pub fn memory_layout(&self) -> MemoryLayout {
        MemoryLayout {
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeLayout {
                    nr_cpus: n.cpus,
                    nr_pages: n.memory_bytes / PAGE_SIZE,
                })
                .collect(),
            dma32_pages: self.dma32_bytes / PAGE_SIZE,
        }
    }

    /// The node of CPU `cpu`.
    pub fn cpu_node(&self, cpu: u32) -> usize {
        let mut c = cpu;
        for (i, n) in self.nodes.iter().enumerate() {
            if c < n.cpus {
                return i;
            }
            c -= n.cpus;
        }
        self.nodes.len() - 1
    }
}
