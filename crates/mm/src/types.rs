//! Newtypes for the model's index and address spaces.
//!
//! A page frame number, a user address, a CPU, a node and a simulated time
//! each have their own type where they cross an interface (the habit of
//! rust-vmm's `GuestAddress`), so that one cannot be passed where another
//! is expected. Inside a function, where the kernel does arithmetic on an
//! `unsigned long`, values are plain integers, and an allocation order is a
//! `u8` as the kernel's `unsigned int order` (an `Order` newtype was
//! declared and never used, and is gone; so is `NrPages`). The memory
//! map's compact page index is described in `page.rs`.

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
    #[inline]
    pub fn offset(self, nr: u64) -> Pfn {
        Pfn(self.0 + nr)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

/// A user virtual address.
///
/// It is the type of a user address wherever one enters or leaves the
/// model: the system calls on an address space (`MmStruct::mmap`,
/// `munmap`, `mprotect`, `mremap`, `madvise`, `brk`, `hugetlb_mmap`), the
/// fault entry points (`handle_mm_fault`, `do_user_addr_fault`,
/// `user_access`, `access_ok`) and the fault context (`Vmf::address`), so
/// that an address and a length (both `u64` before) cannot swap places.
/// Inside those functions, where addresses are masked, shifted into table
/// indices and compared with VMA bounds, they are plain `u64` (as the
/// kernel's `unsigned long`); a VMA's bounds are too.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Vaddr(pub u64);

impl Vaddr {
    /// True if the address is a multiple of `align` bytes.
    #[inline]
    pub fn is_multiple_of(self, align: u64) -> bool {
        self.0.is_multiple_of(align)
    }

    /// The first address at or above this one that is a multiple of
    /// `align` bytes.
    #[inline]
    pub fn next_multiple_of(self, align: u64) -> Vaddr {
        Vaddr(self.0.next_multiple_of(align))
    }
}

/// The offset of the address within an `n`-byte aligned block.
impl std::ops::Rem<u64> for Vaddr {
    type Output = u64;
    #[inline]
    fn rem(self, n: u64) -> u64 {
        self.0 % n
    }
}

/// The address `n` bytes further on.
impl std::ops::Add<u64> for Vaddr {
    type Output = Vaddr;
    #[inline]
    fn add(self, n: u64) -> Vaddr {
        Vaddr(self.0 + n)
    }
}

impl std::ops::AddAssign<u64> for Vaddr {
    #[inline]
    fn add_assign(&mut self, n: u64) {
        self.0 += n;
    }
}

/// The address `n` bytes before.
impl std::ops::Sub<u64> for Vaddr {
    type Output = Vaddr;
    #[inline]
    fn sub(self, n: u64) -> Vaddr {
        Vaddr(self.0 - n)
    }
}

/// The distance in bytes between two addresses.
impl std::ops::Sub<Vaddr> for Vaddr {
    type Output = u64;
    #[inline]
    fn sub(self, other: Vaddr) -> u64 {
        self.0 - other.0
    }
}

impl fmt::LowerHex for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::Display for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
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
