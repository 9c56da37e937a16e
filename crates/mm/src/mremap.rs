//! `mremap()` (mm/mremap.c; the rules of Linux 6.16–6.18 for a range inside
//! one VMA).
//!
//! # Shrink, grow in place, move
//!
//! `do_mremap()` checks its arguments (`check_mremap_params()`), finds the
//! VMA at `addr` (none: `EFAULT`) and then:
//! - without `MREMAP_FIXED`/`MREMAP_DONTUNMAP` (`mremap_at()`): the same
//!   length returns `addr`; a shorter one unmaps the tail
//!   (`shrink_vma()`); a longer one must lie inside the VMA (`EFAULT`
//!   otherwise, `remap_is_valid()`) and grows the VMA in place when the
//!   range ends at the VMA's end and the addresses after it are free
//!   (`vma_expandable()`), else moves it if `MREMAP_MAYMOVE` allows
//!   (`ENOMEM` if not);
//! - with `MREMAP_FIXED` (`mremap_to()`): the target must not overlap the
//!   source (`EINVAL`), whatever is mapped at the target is unmapped, a
//!   shrink unmaps the tail first, then the range moves there.
//!
//! A move (`move_vma()`) makes a new VMA with the old one's flags and page
//! offset (`copy_vma()`, which may merge it with a neighbour), moves the page
//! tables (`move_page_tables()`), and unmaps the old range, which by then
//! maps nothing (`MREMAP_DONTUNMAP` keeps it, empty). Data is never copied:
//! entries move, and whole tables move where both addresses allow.
//!
//! # Moving page tables
//!
//! `move_page_tables()` goes extent by extent, an extent ending at the next
//! PUD or PMD boundary of the old *or* the new address. An extent of a whole
//! 1 GiB moves the PUD entry (its PMD table) when the target has none
//! (`move_normal_pud()`, x86 has `HAVE_MOVE_PUD`); of a whole 2 MiB, a PMD
//! leaf moves as it is with its deposited table (`move_huge_pmd()`) and a PTE
//! table moves by its PMD entry (`move_normal_pmd()`, `HAVE_MOVE_PMD`).
//! Otherwise a PMD leaf is split (`thp_split_pmd`) and the PTEs move one by
//! one (`move_ptes()`). When the old and new addresses are equally
//! misaligned and nothing is mapped below either down to the PMD boundary,
//! both are first aligned down (`try_realign_addr()`), so that the first
//! table moves whole too. A non-fixed move places the new range at an
//! address congruent to the old one modulo 2 MiB
//! ([`MmStruct::get_unmapped_area_pgoff`]), so THPs and tables move whole.
//!
//! Deviations:
//! - Since 6.17 a move with `MREMAP_FIXED` and unchanged length may span
//!   several VMAs; the model follows the one-VMA rule (`EFAULT` if the range
//!   runs past its VMA).
//! - No `VM_ACCOUNT`, mlock, userfaultfd, hugetlb, `vm_max_map_count` or
//!   mseal checks. A page-table allocation failure during a move reverts
//!   the move and fails with `ENOMEM`, as the kernel does.
//! - Each moved entry (a PTE, a PMD leaf, a table's PMD or PUD entry) is
//!   charged one [`Cost::PteCopy`] (an estimate: a move clears one entry and
//!   sets another, without a reference or an rmap update).

use crate::cost::{Cost, Cx};
use crate::memory::{pte_lockptr, split_huge_pmd};
use crate::page_alloc::PageAlloc;
use crate::pgtable::{present, Level, Slot, PAGE_PSE, PMD_SIZE, PUD_SHIFT};
use crate::types::{Vaddr, PAGE_SIZE};
use crate::vma::{Errno, MmStruct, Vma, TASK_SIZE};

/// Bytes mapped by one PUD entry.
const PUD_SIZE: u64 = 1 << PUD_SHIFT;

/// The `flags` argument of `mremap()` (include/uapi/linux/mman.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MremapFlags(pub u32);

impl MremapFlags {
    /// `MREMAP_MAYMOVE`: the range may move if it cannot grow in place.
    pub const MAYMOVE: MremapFlags = MremapFlags(1);
    /// `MREMAP_FIXED`: move to `new_addr`, replacing what is there.
    pub const FIXED: MremapFlags = MremapFlags(2);
    /// `MREMAP_DONTUNMAP`: move the pages but keep the old VMA.
    pub const DONTUNMAP: MremapFlags = MremapFlags(4);

    /// Union.
    pub const fn or(self, other: MremapFlags) -> MremapFlags {
        MremapFlags(self.0 | other.0)
    }

    /// True if every bit of `other` is set.
    pub fn contains(self, other: MremapFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

fn page_align_wrapping(len: u64) -> u64 {
    len.wrapping_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

impl MmStruct {
    /// Models `do_mremap()`: `mremap(addr, old_len, new_len, flags,
    /// new_addr)`. Returns the address of the range afterwards.
    #[allow(clippy::too_many_arguments)]
    pub fn mremap(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: Vaddr,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: Vaddr,
    ) -> Result<Vaddr, Errno> {
        let (addr, new_addr) = (addr.0, new_addr.0);
        // check_mremap_params()
        let known = MremapFlags::MAYMOVE
            .or(MremapFlags::FIXED)
            .or(MremapFlags::DONTUNMAP);
        if flags.0 & !known.0 != 0 || !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::Inval);
        }
        if page_align_wrapping(new_len) == 0 {
            return Err(Errno::Inval);
        }
        let implies_new = flags.0 & (MremapFlags::FIXED.0 | MremapFlags::DONTUNMAP.0) != 0;
        if implies_new {
            if !new_addr.is_multiple_of(PAGE_SIZE) || !flags.contains(MremapFlags::MAYMOVE) {
                return Err(Errno::Inval);
            }
            if flags.contains(MremapFlags::DONTUNMAP) && old_len != new_len {
                return Err(Errno::Inval);
            }
        }
        let old_len = page_align_wrapping(old_len);
        let new_len = page_align_wrapping(new_len);
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        self.vma_at(addr).ok_or(Errno::Fault)?;
        let moved = if implies_new {
            self.mremap_to(pa, cx, addr, old_len, new_len, flags, new_addr)
        } else {
            self.mremap_at(pa, cx, addr, old_len, new_len, flags)
        };
        moved.map(Vaddr)
    }

    /// Models `mremap_at()`: resize in place, or move anywhere.
    fn mremap_at(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
    ) -> Result<u64, Errno> {
        if new_len == old_len {
            return Ok(addr);
        }
        if new_len < old_len {
            // shrink_vma(): whatever lies in the tail is unmapped.
            self.munmap(pa, cx, Vaddr(addr + new_len), old_len - new_len)?;
            return Ok(addr);
        }
        let vma = self.vma_at(addr).ok_or(Errno::Fault)?;
        remap_is_valid(&vma, addr, old_len, new_len)?;
        let delta = new_len - old_len;
        if vma.end - addr == old_len && self.vma_expandable(&vma, delta) {
            // expand_vma_in_place() → vma_merge_extend().
            self.vmas.get_mut(&vma.start).expect("vma").end += delta;
            self.merge_range(vma.start, vma.end + delta, None);
            return Ok(addr);
        }
        if !flags.contains(MremapFlags::MAYMOVE) {
            return Err(Errno::NoMem);
        }
        let target = self.get_unmapped_area_pgoff(cx, new_len, 0, vma.pgoff_of(addr))?;
        self.move_vma(pa, cx, addr, old_len, target, new_len, false)
    }

    /// Models `mremap_to()`: a move to `new_addr` (`MREMAP_FIXED`), or to a
    /// place found with `new_addr` as a hint (`MREMAP_DONTUNMAP` alone).
    #[allow(clippy::too_many_arguments)]
    fn mremap_to(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        mut old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        if new_len > TASK_SIZE || new_addr > TASK_SIZE - new_len {
            return Err(Errno::Inval);
        }
        let overlaps = addr.saturating_add(old_len) > new_addr && new_addr + new_len > addr;
        if overlaps {
            return Err(Errno::Inval);
        }
        let fixed = flags.contains(MremapFlags::FIXED);
        if fixed {
            self.munmap(pa, cx, Vaddr(new_addr), new_len)?;
            self.vma_at(addr).ok_or(Errno::Fault)?;
        }
        if new_len < old_len {
            self.munmap(pa, cx, Vaddr(addr + new_len), old_len - new_len)?;
            self.vma_at(addr).ok_or(Errno::Fault)?;
            old_len = new_len;
        }
        let vma = self.vma_at(addr).ok_or(Errno::Fault)?;
        remap_is_valid(&vma, addr, old_len, new_len)?;
        let target = if fixed {
            new_addr
        } else {
            self.get_unmapped_area_pgoff(cx, new_len, new_addr, vma.pgoff_of(addr))?
        };
        let dontunmap = flags.contains(MremapFlags::DONTUNMAP);
        self.move_vma(pa, cx, addr, old_len, target, new_len, dontunmap)
    }

    /// Models `vma_expandable()`: nothing is mapped in the `delta` bytes
    /// after `vma`, and they are below `TASK_SIZE`.
    fn vma_expandable(&self, vma: &Vma, delta: u64) -> bool {
        let Some(end) = vma.end.checked_add(delta) else {
            return false;
        };
        let clear = self
            .vmas
            .range(..end)
            .next_back()
            .is_none_or(|(_, v)| v.end <= vma.end);
        clear && end <= TASK_SIZE
    }

    /// Models `move_vma()`: a new VMA at `new_addr` with the old one's flags
    /// and page offset, the page tables moved under it, the old range
    /// unmapped (unless `dontunmap`).
    #[allow(clippy::too_many_arguments)]
    fn move_vma(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        old_len: u64,
        new_addr: u64,
        new_len: u64,
        dontunmap: bool,
    ) -> Result<u64, Errno> {
        let vma = self.vma_at(addr).expect("checked by the caller");
        // copy_vma(): a fresh VMA, merged with its neighbours if it can be.
        self.vmas.insert(
            new_addr,
            Vma {
                start: new_addr,
                end: new_addr + new_len,
                flags: vma.flags,
                pgoff: vma.pgoff_of(addr),
            },
        );
        self.merge_range(new_addr, new_addr + new_len, Some(new_addr));
        let moved = move_page_tables(pa, cx, self, addr, new_addr, old_len);
        if moved < old_len {
            // Put back what moved, then undo the new mapping instead.
            let back = move_page_tables(pa, cx, self, new_addr, addr, moved);
            assert_eq!(back, moved, "reverting a move must find its tables");
            self.munmap(pa, cx, Vaddr(new_addr), new_len)
                .expect("unmapping the new range");
            return Err(Errno::NoMem);
        }
        if !dontunmap {
            self.munmap(pa, cx, Vaddr(addr), old_len)
                .expect("unmapping the old range");
        }
        Ok(new_addr)
    }
}

/// Models `remap_is_valid()` for a private anonymous VMA.
fn remap_is_valid(vma: &Vma, addr: u64, old_len: u64, new_len: u64) -> Result<(), Errno> {
    if old_len == 0 {
        // "Duplicating" a private mapping makes no sense: refused.
        return Err(Errno::Inval);
    }
    if old_len > vma.end - addr {
        return Err(Errno::Fault);
    }
    let _ = new_len;
    Ok(())
}

/// `get_extent()`: the bytes from `old` to the next `size` boundary of the
/// old or the new address, and not past `old_end`.
fn get_extent(size: u64, old: u64, old_end: u64, new: u64) -> u64 {
    let mask = !(size - 1);
    let mut extent = (old.wrapping_add(size) & mask).wrapping_sub(old);
    extent = extent.min(old_end - old);
    extent.min((new.wrapping_add(size) & mask).wrapping_sub(new))
}

/// `can_align_down()`: `addr` starts its VMA and nothing is mapped between
/// the PMD boundary below it and it.
fn can_align_down(mm: &MmStruct, addr: u64) -> bool {
    let Some(v) = mm.vma_at(addr) else {
        return false;
    };
    if v.start != addr {
        return false;
    }
    let masked = addr & !(PMD_SIZE - 1);
    mm.vmas
        .range(..addr)
        .next_back()
        .is_none_or(|(_, p)| p.end <= masked)
}

/// Models `move_page_tables()`: moves the entries of `[old_addr, old_addr +
/// len)` to `new_addr`, which maps nothing yet. Returns the bytes moved
/// (`len` unless a page table could not be allocated).
pub fn move_page_tables(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &mut MmStruct,
    old_addr: u64,
    new_addr: u64,
    len: u64,
) -> u64 {
    if len == 0 {
        return 0;
    }
    let old_end = old_addr + len;
    let (mut old, mut new) = (old_addr, new_addr);
    // try_realign_addr()
    let old_align = old & (PMD_SIZE - 1);
    if old_align != 0
        && len >= PMD_SIZE - old_align
        && old_align == new & (PMD_SIZE - 1)
        && can_align_down(mm, old)
        && can_align_down(mm, new)
    {
        old &= !(PMD_SIZE - 1);
        new &= !(PMD_SIZE - 1);
    }
    let progress = |old: u64| old.saturating_sub(old_addr);
    while old < old_end {
        let extent = get_extent(PUD_SIZE, old, old_end, new);
        let Some(old_pud) = mm.pgt.lookup(old, Level::Pud) else {
            (old, new) = (old + extent, new + extent);
            continue;
        };
        let Ok(new_pud) = mm.pgt.walk_alloc(pa, cx, new, Level::Pud) else {
            return progress(old);
        };
        if extent == PUD_SIZE && move_entry(cx, mm, old_pud, new_pud) {
            (old, new) = (old + extent, new + extent);
            continue;
        }
        let extent = get_extent(PMD_SIZE, old, old_end, new);
        let Some(old_pmd) = mm.pgt.lookup(old, Level::Pmd) else {
            (old, new) = (old + extent, new + extent);
            continue;
        };
        let e = mm.pgt.get(old_pmd);
        if !present(e) {
            (old, new) = (old + extent, new + extent);
            continue;
        }
        let Ok(new_pmd) = mm.pgt.walk_alloc(pa, cx, new, Level::Pmd) else {
            return progress(old);
        };
        if e & PAGE_PSE != 0 {
            if extent == PMD_SIZE && mm.pgt.get(new_pmd) == 0 {
                // move_huge_pmd(): the leaf and its deposited table.
                move_entry(cx, mm, old_pmd, new_pmd);
                mm.pgt.move_deposit(old_pmd, new_pmd);
                (old, new) = (old + extent, new + extent);
                continue;
            }
            split_huge_pmd(pa, cx, mm, old_pmd);
        } else if extent == PMD_SIZE && move_entry(cx, mm, old_pmd, new_pmd) {
            // move_normal_pmd(): the whole PTE table.
            (old, new) = (old + extent, new + extent);
            continue;
        }
        let Ok(new_pte) = mm.pgt.walk_alloc(pa, cx, new, Level::Pte) else {
            return progress(old);
        };
        let old_table = mm
            .pgt
            .pte_table(old_pmd)
            .expect("a present, non-leaf PMD points to a PTE table");
        move_ptes(cx, mm, old_table, new_pte, old, new, extent);
        (old, new) = (old + extent, new + extent);
    }
    len
}

/// Moves the entry at `from` to `to` if `to` is empty (a PMD leaf, or a
/// table's PMD or PUD entry); false if `to` is in use.
fn move_entry(cx: &mut Cx, mm: &mut MmStruct, from: Slot, to: Slot) -> bool {
    let e = mm.pgt.get(from);
    if !present(e) || mm.pgt.get(to) != 0 {
        return false;
    }
    let (lf, lt) = (pte_lockptr(from), pte_lockptr(to));
    cx.lock(lf);
    if lt != lf {
        cx.lock(lt);
    }
    cx.charge(Cost::PteCopy);
    mm.pgt.set(from, 0);
    mm.pgt.set(to, e);
    if lt != lf {
        cx.unlock(lt);
    }
    cx.unlock(lf);
    true
}

/// Models `move_ptes()`: moves the PTEs of `extent` bytes from `old` in
/// the table of the slot `old_table` to `new` in the table of `new_table`,
/// under both PTLs.
fn move_ptes(
    cx: &mut Cx,
    mm: &mut MmStruct,
    old_table: Slot,
    new_table: Slot,
    old: u64,
    new: u64,
    extent: u64,
) {
    let (lo, ln) = (pte_lockptr(old_table), pte_lockptr(new_table));
    cx.lock(lo);
    if ln != lo {
        cx.lock(ln);
    }
    for i in 0..extent / PAGE_SIZE {
        let from = old_table.with_index(Level::Pte.index(old + i * PAGE_SIZE));
        let e = mm.pgt.get(from);
        if e == 0 {
            continue;
        }
        let to = new_table.with_index(Level::Pte.index(new + i * PAGE_SIZE));
        debug_assert_eq!(mm.pgt.get(to), 0, "moving onto a used PTE");
        cx.charge(Cost::PteCopy);
        mm.pgt.set(from, 0);
        mm.pgt.set(to, e);
    }
    if ln != lo {
        cx.unlock(ln);
    }
    cx.unlock(lo);
}
