//! `mprotect()` (mm/mprotect.c; Linux 6.18).
//!
//! # What a protection change does
//!
//! `do_mprotect_pkey()` walks the VMAs of the range in address order; each
//! one must start where the previous ended (a hole is `ENOMEM`, after the
//! VMAs before it were already changed, as in the kernel). For each,
//! `mprotect_fixup()` computes the new flags (the requested read/write/exec
//! bits plus the VMA's other flags); if they differ it splits the VMA at the
//! range's ends, sets the flags, rewrites the page-table entries
//! (`change_protection()`) and merges the result with equal neighbours.
//!
//! The entries are rewritten as `pte_modify()` with the VMA's new
//! `vm_page_prot` does on x86: a private mapping's `vm_page_prot` is never
//! writable (`PAGE_COPY`), so every entry loses its write bit, and
//! `PROT_NONE` makes it a `_PAGE_PROTNONE` entry. Then, for a writable VMA,
//! `can_change_pte_writable()` gives the write bit back to entries that map
//! an exclusive anonymous page (`PageAnonExclusive()`), so that a
//! `PROT_READ` → `PROT_READ|PROT_WRITE` round trip takes no fault on pages
//! the process owns alone; the zero page and pages shared since a fork stay
//! read-only and take a write fault (COW or reuse). A later write to a
//! `PROT_READ` VMA, or any access to a `PROT_NONE` one, is a SIGSEGV
//! (`access_error()`, see [`crate::memory::handle_mm_fault`]).
//!
//! A PMD leaf whose 2 MiB the range covers is changed whole
//! (`change_huge_pmd()`); one that the range covers only in part is split
//! (`thp_split_pmd`), as is one that a VMA split cuts
//! (`vma_adjust_trans_huge()`).
//!
//! Deviations:
//! - No `VM_MAY*` flags (every anonymous private mapping may be made
//!   readable, writable and executable, so `EACCES` never happens), no
//!   pkeys, no `READ_IMPLIES_EXEC`, no `VM_ACCOUNT` commit charge.
//! - `PROT_GROWSDOWN`/`PROT_GROWSUP` are `EINVAL` (no VMA grows in the
//!   model), after the kernel's `ENOMEM` checks.
//! - No TLB flush cost; each rewritten entry is charged one
//!   [`Cost::PteSet`] (an estimate: no rmap update is involved).

use crate::cost::{Cost, Cx};
use crate::memory::split_huge_pmd;
use crate::page_alloc::PageAlloc;
use crate::pgtable::{
    present, Level, PAGE_ANON_EXCLUSIVE, PAGE_PROTNONE, PAGE_PSE, PAGE_RW, PAGE_SPECIAL, PMD_SIZE,
};
use crate::types::{Vaddr, PAGE_SIZE};
use crate::vma::{Errno, MmStruct, VmFlags};
use std::fmt;

/// The `prot` argument of `mprotect()` (include/uapi/asm-generic/mman-common.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Prot(pub u32);

impl Prot {
    /// `PROT_NONE`.
    pub const NONE: Prot = Prot(0);
    /// `PROT_READ`.
    pub const READ: Prot = Prot(0x1);
    /// `PROT_WRITE`.
    pub const WRITE: Prot = Prot(0x2);
    /// `PROT_EXEC`.
    pub const EXEC: Prot = Prot(0x4);
    /// `PROT_SEM` (accepted and ignored, as on x86).
    pub const SEM: Prot = Prot(0x8);
    /// `PROT_GROWSDOWN`.
    pub const GROWSDOWN: Prot = Prot(0x0100_0000);
    /// `PROT_GROWSUP`.
    pub const GROWSUP: Prot = Prot(0x0200_0000);
    /// `PROT_READ | PROT_WRITE`.
    pub const RW: Prot = Prot(0x3);

    /// Union.
    pub const fn or(self, other: Prot) -> Prot {
        Prot(self.0 | other.0)
    }

    /// The `VM_READ`/`VM_WRITE`/`VM_EXEC` bits (`calc_vm_prot_bits()`: the
    /// bit values are the same).
    pub fn vm_flags(self) -> VmFlags {
        VmFlags(self.0 & VmFlags::ACCESS.0)
    }

    /// The word a trace or a table shows: `rw-`, `r--`, `---`.
    pub fn name(self) -> String {
        let b = |bit: Prot, c: char| if self.0 & bit.0 != 0 { c } else { '-' };
        [b(Prot::READ, 'r'), b(Prot::WRITE, 'w'), b(Prot::EXEC, 'x')]
            .into_iter()
            .collect()
    }
}

impl fmt::Display for Prot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl MmStruct {
    /// Models `do_mprotect_pkey()` with `pkey = -1` (`mprotect(start, len,
    /// prot)`), with the kernel's checks in the kernel's order.
    pub fn mprotect(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        start: Vaddr,
        len: u64,
        prot: Prot,
    ) -> Result<(), Errno> {
        let start = start.0;
        let grows = prot.0 & (Prot::GROWSDOWN.0 | Prot::GROWSUP.0);
        let prot = Prot(prot.0 & !grows);
        if grows == Prot::GROWSDOWN.0 | Prot::GROWSUP.0 {
            return Err(Errno::Inval);
        }
        if !start.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::Inval);
        }
        if len == 0 {
            return Ok(());
        }
        // PAGE_ALIGN() wrapping to 0, or start + len wrapping: end <= start.
        let end = len
            .checked_add(PAGE_SIZE - 1)
            .map(|l| l & !(PAGE_SIZE - 1))
            .and_then(|l| start.checked_add(l))
            .ok_or(Errno::NoMem)?;
        let valid = Prot::READ.0 | Prot::WRITE.0 | Prot::EXEC.0 | Prot::SEM.0;
        if prot.0 & !valid != 0 {
            return Err(Errno::Inval);
        }
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        let first = self
            .find_vma_uncharged(start)
            .filter(|v| v.start < end)
            .ok_or(Errno::NoMem)?;
        if grows == Prot::GROWSDOWN.0 {
            return Err(Errno::Inval);
        }
        if first.start > start {
            return Err(Errno::NoMem);
        }
        if grows == Prot::GROWSUP.0 {
            return Err(Errno::Inval);
        }
        let mut nstart = start;
        while nstart < end {
            let Some(v) = self.find_vma_uncharged(nstart).filter(|v| v.start < end) else {
                break;
            };
            if v.start > nstart {
                // A hole: the VMAs before it keep their new protection.
                return Err(Errno::NoMem);
            }
            let newflags = prot.vm_flags().or(v.flags.without(VmFlags::ACCESS));
            let tmp = v.end.min(end);
            if v.flags != newflags {
                // A hugetlb VMA splits only at huge page boundaries.
                self.may_split_at(nstart)?;
                self.may_split_at(tmp)?;
            }
            mprotect_fixup(pa, cx, self, nstart, tmp, newflags);
            nstart = tmp;
        }
        if nstart < end {
            return Err(Errno::NoMem);
        }
        Ok(())
    }
}

/// Models `mprotect_fixup()`: gives `[start, end)`, which lies inside one
/// VMA, the flags `newflags`: split, set, rewrite the entries, merge.
pub fn mprotect_fixup(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &mut MmStruct,
    start: u64,
    end: u64,
    newflags: VmFlags,
) {
    let v = mm.vma_at(start).expect("mprotect_fixup inside a VMA");
    debug_assert!(v.end >= end, "mprotect_fixup across VMAs");
    if v.flags == newflags {
        return;
    }
    mm.split_at(pa, cx, start);
    mm.split_at(pa, cx, end);
    mm.vmas.get_mut(&start).expect("split above").flags = newflags;
    change_protection(pa, cx, mm, start, end, newflags);
    mm.merge_range(start, end, None);
}

/// `pte_modify()` with the `vm_page_prot` of `newflags`, then
/// `can_change_pte_writable()`'s upgrade for exclusive anonymous pages of a
/// writable VMA. Applies to PTEs and PMD leaves alike.
pub fn pte_modify(e: u64, newflags: VmFlags) -> u64 {
    let mut ne = e & !(PAGE_RW | PAGE_PROTNONE);
    if newflags.0 & VmFlags::ACCESS.0 == 0 {
        ne |= PAGE_PROTNONE;
    } else if newflags.contains(VmFlags::WRITE)
        && e & PAGE_ANON_EXCLUSIVE != 0
        && e & PAGE_SPECIAL == 0
    {
        ne |= PAGE_RW;
    }
    ne
}

/// Models `change_protection()` → `change_pmd_range()` /
/// `change_huge_pmd()` / `change_pte_range()` over `[start, end)` for a VMA
/// whose flags are now `newflags`. Returns the number of base pages whose
/// entries were visited (the kernel's `pages`).
pub fn change_protection(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &mut MmStruct,
    start: u64,
    end: u64,
    newflags: VmFlags,
) -> u64 {
    let mut pages = 0;
    let mut addr = start;
    while addr < end {
        let next = ((addr | (PMD_SIZE - 1)) + 1).min(end);
        let pmd = match mm.pgt.lookup_or_skip(addr, Level::Pmd) {
            Ok(pmd) => pmd,
            // change_pud_range(): no PMD table up to `skip`.
            Err(skip) => {
                addr = skip.min(end);
                continue;
            }
        };
        let e = mm.pgt.get(pmd);
        if present(e) && e & PAGE_PSE != 0 {
            if next - addr == PMD_SIZE {
                let ptl = crate::memory::pmd_lockptr(pmd);
                cx.lock(ptl);
                cx.charge(Cost::PteSet);
                mm.pgt.set(pmd, pte_modify(e, newflags));
                cx.unlock(ptl);
                pages += PMD_SIZE / PAGE_SIZE;
                addr = next;
                continue;
            }
            split_huge_pmd(pa, cx, mm, pmd);
        }
        if let Some(pte) = mm.pgt.pte_table(pmd) {
            let ptl = crate::memory::pte_lockptr(pte);
            cx.lock(ptl);
            let mut a = addr;
            while a < next {
                let slot = pte.with_index(Level::Pte.index(a));
                let pe = mm.pgt.get(slot);
                if present(pe) {
                    let ne = pte_modify(pe, newflags);
                    if ne != pe {
                        cx.charge(Cost::PteSet);
                        mm.pgt.set(slot, ne);
                    }
                    pages += 1;
                }
                a += PAGE_SIZE;
            }
            cx.unlock(ptl);
        }
        addr = next;
    }
    pages
}
