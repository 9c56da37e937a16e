//! Newtypes for the model's index and address spaces.
//!
//! Every space the kernel keeps apart gets its own type, so that a page frame
//! number can never be passed where a virtual address or a CPU number is
//! expected (the habit of rust-vmm's `GuestAddress`).

use std::fmt;

/// log2 of the base page size: 4 KiB pages, as on x86-64 and default arm64.
pub const PAGE_SHIFT: u32 = 12;
/// Bytes in a base page.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// log2 of the bytes mapped by one PMD entry (2 MiB with 4 KiB pages).
pub const PMD_SHIFT: u32 = 21;
/// Order of a PMD-mapped folio (`HPAGE_PMD_ORDER`).
pub const HPAGE_PMD_ORDER: u8 = (PMD_SHIFT - PAGE_SHIFT) as u8;

/// A page frame number: a physical address shifted right by `PAGE_SHIFT`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Pfn(pub u64);

impl Pfn {
    /// The pfn `nr` pages further on.
    #[allow(clippy::should_implement_trait)] // a pfn plus a count, not pfn + pfn
    #[inline]
    pub fn add(self, nr: u64) -> Pfn {
        Pfn(self.0 + nr)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

/// A user virtual address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Vaddr(pub u64);

impl fmt::Display for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// An allocation order: a block of `2^order` base pages.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Order(pub u8);

impl Order {
    /// Number of base pages in a block of this order.
    #[inline]
    pub fn nr_pages(self) -> u64 {
        1u64 << self.0
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order-{}", self.0)
    }
}

/// A count of base pages.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct NrPages(pub u64);

impl NrPages {
    /// Bytes covered by this many base pages.
    pub fn bytes(self) -> u64 {
        self.0 << PAGE_SHIFT
    }
}

/// A simulated CPU. The kernel calls it a CPU; the simulator calls it a vCPU so
/// that simulator words never clash with the kernel's.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct VcpuId(pub u32);

impl VcpuId {
    /// The id as an index into per-CPU arrays.
    #[inline]
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// A NUMA node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct NodeId(pub u16);

/// Virtual time in nanoseconds since the start of a simulation.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The time `ns` nanoseconds later.
    #[inline]
    pub fn after(self, ns: u64) -> SimTime {
        SimTime(self.0 + ns)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns >= 1_000_000_000 {
            write!(f, "{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000)
        } else {
            write!(f, "{ns}ns")
        }
    }
}
