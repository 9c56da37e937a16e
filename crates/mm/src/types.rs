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

/// Parses a size as experiment files and workload parameters write it: a
/// number of bytes, optionally followed (with or without a space) by a unit:
/// `B`, `K`/`k`/`KB`/`KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`,
/// `P`/`PB`/`PiB` (machines up to the memmap's 4 PiB limit).
/// Every unit is binary (`16GB` is 16 GiB), as in the kernel's own messages
/// and `/proc/meminfo`'s `kB`. The one size parser of mmlab: machines
/// (`cli`) and workload parameters (`workloads`) both use it.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let expected = "a number followed by B, KiB, MiB, GiB, TiB or PiB (KB, MB, GB, TB, PB and K, M, G, T, P mean the same)";
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size \"{s}\": expected {expected}"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "k" | "KB" | "kB" | "KiB" => 10,
        "M" | "MB" | "MiB" => 20,
        "G" | "GB" | "GiB" => 30,
        "T" | "TB" | "TiB" => 40,
        "P" | "PB" | "PiB" => 50,
        u => {
            return Err(format!(
                "invalid size \"{s}\": unknown unit \"{u}\"; expected {expected}"
            ))
        }
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("invalid size \"{s}\": too large"))
}

#[cfg(test)]
mod parse_size_tests {
    use super::parse_size;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse_size("16GB"), Ok(16 << 30));
        assert_eq!(parse_size("16 GiB"), Ok(16 << 30));
        assert_eq!(parse_size("128MiB"), Ok(128 << 20));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("7"), Ok(7));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("4PiB"), Ok(4 << 50));
        assert_eq!(parse_size("4 PB"), Ok(4 << 50));
        assert_eq!(parse_size("1P"), Ok(1 << 50));
        assert!(parse_size("16384PiB").unwrap_err().contains("too large"));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("4 parsecs")
            .unwrap_err()
            .contains("unknown unit \"parsecs\""));
        assert!(parse_size("99999999999TiB")
            .unwrap_err()
            .contains("too large"));
    }
}
