//! Address spaces and their VMAs (mm/mmap.c, mm/vma.c, mm/madvise.c; Linux 6.18).
//!
//! # The VMA tree and what a lookup costs
//!
//! Since 6.1 the kernel keeps VMAs in a maple tree: a B-tree with up to 16
//! slots per node. The model keeps them in a `BTreeMap` keyed by start
//! address and charges a lookup as the maple tree would: one
//! [`Cost::VmaLookupLevel`] per tree level, the depth being that of a tree of
//! fan-out 16 over the VMAs (`ceil(log16(nr_vmas))`, at least 1).
//!
//! # Placement
//!
//! `get_unmapped_area()` is the top-down allocator of x86-64 without ASLR
//! (so that runs are deterministic): the highest gap below `mmap_base` that
//! fits. Anonymous mappings whose length is a multiple of 2 MiB are aligned
//! to 2 MiB, as `thp_get_unmapped_area()` does for anonymous mappings since
//! 6.7 (efa7df3e3bb5), restricted to PMD-multiple lengths since 6.12
//! (d4148aeab412); the `linux-4.18` preset does not align ([`MmapLayout`]).
//!
//! Deviation: only anonymous private mappings exist; VMAs merge when adjacent
//! with equal flags (the kernel also requires a compatible `anon_vma`, which
//! only matters after a fork); no `vm_pgoff`, no `mprotect`, no stack gap.

use crate::cost::{Cost, Cx};
use crate::page_alloc::{AllocError, PageAlloc};
use crate::pgtable::{PageTables, PMD_SIZE};
use crate::types::PAGE_SIZE;
use std::collections::BTreeMap;
use std::fmt;

/// `TASK_SIZE` of x86-64 with 4-level paging (47 bits, less one page).
pub const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;
/// `mmap_base` without ASLR: `TASK_SIZE` less the default 8 MiB stack gap
/// rounded as `mmap_base()` does (128 MiB minimum gap).
pub const MMAP_BASE: u64 = TASK_SIZE - (128 << 20);
/// `vm.mmap_min_addr` default.
pub const MMAP_MIN_ADDR: u64 = 0x10000;

/// VMA flags (`vm_flags_t`), reduced to those the model uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct VmFlags(pub u32);

impl VmFlags {
    /// `VM_READ`.
    pub const READ: VmFlags = VmFlags(1 << 0);
    /// `VM_WRITE`.
    pub const WRITE: VmFlags = VmFlags(1 << 1);
    /// `VM_HUGEPAGE`, set by `MADV_HUGEPAGE`.
    pub const HUGEPAGE: VmFlags = VmFlags(1 << 29);
    /// `VM_NOHUGEPAGE`, set by `MADV_NOHUGEPAGE`.
    pub const NOHUGEPAGE: VmFlags = VmFlags(1 << 30);
    /// Anonymous private memory (the kernel: `vma_is_anonymous()` and no `VM_SHARED`).
    pub const ANON_PRIVATE: VmFlags = VmFlags(1 << 31);

    /// True if every bit of `other` is set.
    pub fn contains(self, other: VmFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union.
    pub const fn or(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 | other.0)
    }

    /// Without the bits of `other`.
    pub const fn without(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 & !other.0)
    }
}

/// One virtual memory area, `[start, end)`.
///
/// Invariant: `start < end`, both page-aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Flags.
    pub flags: VmFlags,
}

/// Errors of the address-space system calls, as the kernel's errno values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// `EINVAL`: a bad address, length or advice.
    Inval,
    /// `ENOMEM`: no room in the address space, a range not mapped, or no
    /// memory for page tables.
    NoMem,
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Errno::Inval => "EINVAL",
            Errno::NoMem => "ENOMEM",
        })
    }
}

impl std::error::Error for Errno {}

impl From<AllocError> for Errno {
    fn from(_: AllocError) -> Errno {
        Errno::NoMem
    }
}

/// `madvise()` advice the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_DONTNEED`: drop the range's pages; the next touch faults.
    DontNeed,
    /// `MADV_HUGEPAGE`: set `VM_HUGEPAGE`.
    HugePage,
    /// `MADV_NOHUGEPAGE`: set `VM_NOHUGEPAGE`.
    NoHugePage,
}

/// How `get_unmapped_area()` places anonymous mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapLayout {
    /// Linux < 6.7: page alignment only.
    PageAligned,
    /// Linux ≥ 6.12: 2 MiB alignment for anonymous mappings whose length is
    /// a multiple of 2 MiB.
    ThpAligned,
}

/// A process's address space (`struct mm_struct`).
#[derive(Clone, Debug)]
pub struct MmStruct {
    /// VMAs by start address (the kernel's `mm_mt`).
    pub vmas: BTreeMap<u64, Vma>,
    /// Page tables.
    pub pgt: PageTables,
    /// Page faults taken, as `ru_minflt` counts them.
    pub nr_faults: u64,
    /// Placement of new mappings.
    pub layout: MmapLayout,
    /// `mm->vmacache_seqnum` (Linux 3.15–6.0): bumped whenever a VMA leaves
    /// the tree, so that every task's per-task VMA cache revalidates
    /// ([`crate::vmacache`]).
    pub vmacache_seqnum: u64,
}

fn page_align(len: u64) -> Option<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|l| l & !(PAGE_SIZE - 1))
}

impl MmStruct {
    /// Models `mm_alloc()`: an empty address space with its PGD.
    pub fn new(
        pa: &mut PageAlloc,
        cx: &mut Cx,
        layout: MmapLayout,
    ) -> Result<MmStruct, AllocError> {
        Ok(MmStruct {
            vmas: BTreeMap::new(),
            pgt: PageTables::new(pa, cx)?,
            nr_faults: 0,
            layout,
            vmacache_seqnum: 0,
        })
    }

    /// Depth of a maple tree of fan-out 16 over this many VMAs.
    pub fn maple_depth(&self) -> u64 {
        let mut depth = 1;
        let mut cap = 16u64;
        while (self.vmas.len() as u64) > cap {
            depth += 1;
            cap *= 16;
        }
        depth
    }

    /// Models `find_vma()`: the first VMA ending above `addr`.
    pub fn find_vma(&self, cx: &mut Cx, addr: u64) -> Option<Vma> {
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        self.vmas
            .range(..=addr)
            .next_back()
            .map(|(_, v)| *v)
            .filter(|v| v.end > addr)
            .or_else(|| self.vmas.range(addr..).next().map(|(_, v)| *v))
    }

    /// The VMA containing `addr`, if any (`vma_lookup()`).
    pub fn vma_lookup(&self, cx: &mut Cx, addr: u64) -> Option<Vma> {
        self.find_vma(cx, addr).filter(|v| v.start <= addr)
    }

    /// True if no VMA overlaps `[start, end)`.
    fn range_free(&self, start: u64, end: u64) -> bool {
        let below = self.vmas.range(..end).next_back();
        below.is_none_or(|(_, v)| v.end <= start)
    }

    /// Models `get_unmapped_area()` for an anonymous private mapping: the
    /// hint if it is free, else the highest fitting gap below `mmap_base`
    /// (`vm_unmapped_area()` top-down), aligned as [`MmapLayout`] says.
    pub fn get_unmapped_area(&self, cx: &mut Cx, len: u64, hint: u64) -> Result<u64, Errno> {
        if len > TASK_SIZE - MMAP_MIN_ADDR {
            return Err(Errno::NoMem);
        }
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        if hint != 0 {
            let h = hint & !(PAGE_SIZE - 1);
            if h >= MMAP_MIN_ADDR && h <= TASK_SIZE - len && self.range_free(h, h + len) {
                return Ok(h);
            }
        }
        let align = if self.layout == MmapLayout::ThpAligned && len.is_multiple_of(PMD_SIZE) {
            PMD_SIZE
        } else {
            PAGE_SIZE
        };
        // Walk the gaps from the top down.
        let mut high = MMAP_BASE;
        let fit = |low: u64, high: u64| -> Option<u64> {
            let start = high.checked_sub(len)? & !(align - 1);
            (start >= low.max(MMAP_MIN_ADDR)).then_some(start)
        };
        for (_, v) in self.vmas.range(..MMAP_BASE).rev() {
            if v.end < high {
                if let Some(s) = fit(v.end, high) {
                    return Ok(s);
                }
            }
            high = high.min(v.start);
        }
        fit(MMAP_MIN_ADDR, high).ok_or(Errno::NoMem)
    }

    /// Splits the VMA containing `addr` (if any, and if `addr` is inside it)
    /// into `[start, addr)` and `[addr, end)` (`split_vma()`).
    fn split_at(&mut self, addr: u64) {
        let Some((&s, v)) = self.vmas.range(..addr).next_back() else {
            return;
        };
        if v.end <= addr {
            return;
        }
        let mut hi = *v;
        hi.start = addr;
        self.vmas.get_mut(&s).expect("vma").end = addr;
        self.vmas.insert(addr, hi);
    }

    /// Merges VMAs around `[start, end)` with equal flags that touch
    /// (`vma_merge_new_range()`/`vma_modify()`'s merge step).
    ///
    /// `fresh` is the start of a VMA that `mmap()` inserted just now: no
    /// lookup can have cached it, so its disappearing into the VMA below does
    /// not invalidate the VMA caches (the kernel never allocated it: 4.19's
    /// `vma_merge()` only extends the previous VMA). Every other VMA that
    /// leaves the tree does.
    fn merge_range(&mut self, start: u64, end: u64, fresh: Option<u64>) {
        let first = self
            .vmas
            .range(..start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(start);
        let keys: Vec<u64> = self.vmas.range(first..=end).map(|(&s, _)| s).collect();
        let mut cur: Option<u64> = None;
        for k in keys {
            let v = self.vmas[&k];
            if let Some(c) = cur {
                let cv = self.vmas[&c];
                if cv.end == v.start && cv.flags == v.flags {
                    self.vmas.remove(&k);
                    if fresh != Some(k) {
                        crate::vmacache::vmacache_invalidate(self);
                    }
                    self.vmas.get_mut(&c).expect("vma").end = v.end;
                    continue;
                }
            }
            cur = Some(k);
        }
    }

    /// Models `do_mmap()` of an anonymous private read-write mapping:
    /// `mmap(hint, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS
    /// [|MAP_FIXED], -1, 0)`. Returns the address.
    pub fn mmap(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        hint: u64,
        len: u64,
        fixed: bool,
    ) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::Inval);
        }
        let len = page_align(len).ok_or(Errno::NoMem)?;
        let addr = if fixed {
            if !hint.is_multiple_of(PAGE_SIZE) {
                return Err(Errno::Inval);
            }
            if hint > TASK_SIZE || len > TASK_SIZE - hint || hint < MMAP_MIN_ADDR {
                return Err(Errno::NoMem);
            }
            // MAP_FIXED replaces whatever was there.
            self.munmap(pa, cx, hint, len)?;
            hint
        } else {
            self.get_unmapped_area(cx, len, hint)?
        };
        let flags = VmFlags::READ.or(VmFlags::WRITE).or(VmFlags::ANON_PRIVATE);
        self.vmas.insert(
            addr,
            Vma {
                start: addr,
                end: addr + len,
                flags,
            },
        );
        self.merge_range(addr, addr + len, Some(addr));
        Ok(addr)
    }

    /// Models `do_vmi_munmap()`: unmaps `[addr, addr + len)`, splitting
    /// VMAs that straddle its ends, freeing the pages and then the page
    /// tables that only the removed range used.
    pub fn munmap(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        len: u64,
    ) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) || addr > TASK_SIZE || len > TASK_SIZE - addr {
            return Err(Errno::Inval);
        }
        let len = page_align(len).ok_or(Errno::Inval)?;
        if len == 0 {
            return Err(Errno::Inval);
        }
        let end = addr + len;
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        self.split_at(addr);
        self.split_at(end);
        let gone: Vec<u64> = self.vmas.range(addr..end).map(|(&s, _)| s).collect();
        if gone.is_empty() {
            return Ok(());
        }
        for s in &gone {
            let v = self.vmas.remove(s).expect("vma");
            // Detaching a VMA is what makes cached pointers to it stale
            // (`detach_vmas_to_be_unmapped()` calls `vmacache_invalidate()`).
            crate::vmacache::vmacache_invalidate(self);
            crate::memory::zap_page_range(pa, cx, self, v.start, v.end);
        }
        // Page tables may be freed up to the neighbouring VMAs (the kernel's
        // floor and ceiling in free_pgtables()).
        let floor = self
            .vmas
            .range(..addr)
            .next_back()
            .map_or(0, |(_, v)| v.end);
        let ceiling = self
            .vmas
            .range(end..)
            .next()
            .map_or(u64::MAX, |(_, v)| v.start);
        self.pgt.free_pgd_range(pa, cx, floor, ceiling);
        Ok(())
    }

    /// Models `do_madvise()` for the advice the model has. Applies to the
    /// mapped parts of the range and returns `ENOMEM` if part of it is
    /// unmapped, as the kernel does.
    pub fn madvise(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::Inval);
        }
        let len = page_align(len).ok_or(Errno::Inval)?;
        let end = addr.checked_add(len).ok_or(Errno::Inval)?;
        if len == 0 {
            return Ok(());
        }
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        let mut unmapped = false;
        let mut pos = addr;
        for (_, v) in self.vmas.range(..end) {
            if v.end > pos && v.start < end {
                unmapped |= v.start > pos;
                pos = v.end;
            }
        }
        unmapped |= pos < end;
        match advice {
            Advice::DontNeed => {
                let parts: Vec<(u64, u64)> = self
                    .vmas
                    .range(..end)
                    .filter(|(_, v)| v.end > addr)
                    .map(|(_, v)| (v.start.max(addr), v.end.min(end)))
                    .collect();
                for (s, e) in parts {
                    crate::memory::zap_page_range(pa, cx, self, s, e);
                }
            }
            Advice::HugePage | Advice::NoHugePage => {
                // A PMD leaf may not straddle a VMA boundary: split it first,
                // as __split_vma() does through vma_adjust_trans_huge().
                crate::memory::vma_adjust_trans_huge(pa, cx, self, addr);
                crate::memory::vma_adjust_trans_huge(pa, cx, self, end);
                self.split_at(addr);
                self.split_at(end);
                let (set, clear) = if advice == Advice::HugePage {
                    (VmFlags::HUGEPAGE, VmFlags::NOHUGEPAGE)
                } else {
                    (VmFlags::NOHUGEPAGE, VmFlags::HUGEPAGE)
                };
                for (_, v) in self.vmas.range_mut(addr..end) {
                    v.flags = v.flags.without(clear).or(set);
                }
                self.merge_range(addr, end, None);
            }
        }
        if unmapped {
            Err(Errno::NoMem)
        } else {
            Ok(())
        }
    }

    /// Checks the VMA tree's invariants: sorted, non-overlapping, aligned,
    /// keyed by start, and no two mergeable neighbours left unmerged.
    pub fn check_vmas(&self) {
        let mut prev: Option<Vma> = None;
        for (&k, v) in &self.vmas {
            assert_eq!(k, v.start, "vma keyed by {k:#x} starts at {:#x}", v.start);
            assert!(
                v.start < v.end
                    && v.start.is_multiple_of(PAGE_SIZE)
                    && v.end.is_multiple_of(PAGE_SIZE),
                "bad vma {v:?}"
            );
            if let Some(p) = prev {
                assert!(p.end <= v.start, "overlapping vmas {p:?} {v:?}");
                assert!(
                    !(p.end == v.start && p.flags == v.flags),
                    "unmerged neighbours {p:?} {v:?}"
                );
            }
            prev = Some(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::CostTable;
    use crate::page_alloc::{MemoryLayout, NodeLayout, VmSysctl};
    use crate::types::VcpuId;

    const P: u64 = PAGE_SIZE;

    fn setup() -> (PageAlloc, Cx, MmStruct) {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 1,
                nr_pages: 1 << 16,
            }],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
        let mm = MmStruct::new(&mut pa, &mut cx, MmapLayout::ThpAligned).unwrap();
        (pa, cx, mm)
    }

    fn spans(mm: &MmStruct) -> Vec<(u64, u64)> {
        mm.check_vmas();
        mm.vmas.values().map(|v| (v.start, v.end)).collect()
    }

    #[test]
    fn split_and_merge_scenario() {
        let (mut pa, mut cx, mut mm) = setup();
        let b = 0x1000_0000;
        // AAAAAAAAAA      one mapping of 10 pages
        mm.mmap(&mut pa, &mut cx, b, 10 * P, true).unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 10 * P)]);
        // AAA BBBB AAA    MADV_HUGEPAGE in the middle splits it in three
        mm.madvise(&mut pa, &mut cx, b + 3 * P, 4 * P, Advice::HugePage)
            .unwrap();
        assert_eq!(
            spans(&mm),
            vec![
                (b, b + 3 * P),
                (b + 3 * P, b + 7 * P),
                (b + 7 * P, b + 10 * P)
            ]
        );
        // AAAAAAAAAA      MADV_NOHUGEPAGE over all of it: equal flags merge back
        mm.madvise(&mut pa, &mut cx, b, 10 * P, Advice::NoHugePage)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 10 * P)]);
        // AA  AAAAAA      munmap of two pages leaves a hole
        mm.munmap(&mut pa, &mut cx, b + 2 * P, 2 * P).unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 2 * P), (b + 4 * P, b + 10 * P)]);
        // AA  AAAAAA      madvise across the hole applies to both sides, ENOMEM
        assert_eq!(
            mm.madvise(&mut pa, &mut cx, b, 10 * P, Advice::HugePage),
            Err(Errno::NoMem)
        );
        // AACCAAAAAA      a fixed mapping filling the hole merges all three
        mm.mmap(&mut pa, &mut cx, b + 2 * P, 2 * P, true).unwrap();
        mm.madvise(&mut pa, &mut cx, b + 2 * P, 2 * P, Advice::HugePage)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 10 * P)]);
    }

    #[test]
    fn errors_are_the_kernels() {
        let (mut pa, mut cx, mut mm) = setup();
        assert_eq!(mm.mmap(&mut pa, &mut cx, 0, 0, false), Err(Errno::Inval));
        assert_eq!(
            mm.mmap(&mut pa, &mut cx, 0x1001, P, true),
            Err(Errno::Inval)
        );
        assert_eq!(
            mm.mmap(&mut pa, &mut cx, 0, TASK_SIZE, false),
            Err(Errno::NoMem)
        );
        assert_eq!(mm.munmap(&mut pa, &mut cx, 0x1001, P), Err(Errno::Inval));
        assert_eq!(mm.munmap(&mut pa, &mut cx, 0x10000, 0), Err(Errno::Inval));
    }

    #[test]
    fn top_down_placement_aligns_pmd_multiples() {
        let (mut pa, mut cx, mut mm) = setup();
        let a = mm.mmap(&mut pa, &mut cx, 0, 3 * P, false).unwrap();
        assert_eq!(a + 3 * P, MMAP_BASE);
        let b = mm.mmap(&mut pa, &mut cx, 0, 2 * PMD_SIZE, false).unwrap();
        assert!(b.is_multiple_of(PMD_SIZE) && b + 2 * PMD_SIZE <= a);
        assert_eq!(mm.maple_depth(), 1);
    }
}
