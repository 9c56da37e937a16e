//! Four-level x86-64 page tables (arch/x86/include/asm/pgtable*.h, mm/pgtable-generic.c).
//!
//! # Representation
//!
//! Each table is one 4 KiB page taken from the page allocator with
//! `Gfp::KERNEL` at order 0, exactly as `pte_alloc_one()`/`pmd_alloc_one()`
//! do, so page tables count against free memory and return through the PCP
//! when freed. Its 512 entries live beside the allocator in a `BTreeMap` from
//! the table's pfn to a boxed `[u64; 512]` (the simulated machine has no
//! memory contents of its own).
//!
//! An entry is a `u64` in the hardware's layout, reduced to the bits the model
//! uses: present, write, young (accessed), dirty, PSE (a PMD leaf) and the
//! software bit `_PAGE_SPECIAL` that marks the zero pages; bits 12 and up hold
//! the pfn of the page or of the next-level table.
//!
//! Deviation: the model has no 5-level paging, no PTE/PMD split locks (the
//! engine runs one kernel entry at a time), and the huge zero page's "pfn" is
//! a marker outside the simulated memory (see `memory.rs`).

use crate::cost::Cx;
use crate::page_alloc::{AllocError, Gfp, PageAlloc};
use crate::types::{Pfn, PAGE_SHIFT, PMD_SHIFT};
use std::collections::BTreeMap;

/// Entries per table.
pub const PTRS_PER_TABLE: usize = 512;
/// Bits of virtual address translated per level.
const LEVEL_BITS: u32 = 9;
/// Bytes mapped by one PUD entry (1 GiB).
pub const PUD_SHIFT: u32 = PMD_SHIFT + LEVEL_BITS;
/// Bytes mapped by one PGD entry (512 GiB).
pub const PGDIR_SHIFT: u32 = PUD_SHIFT + LEVEL_BITS;
/// Bytes mapped by a PMD entry.
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;

/// `_PAGE_PRESENT`.
pub const PAGE_PRESENT: u64 = 1 << 0;
/// `_PAGE_RW`: writable.
pub const PAGE_RW: u64 = 1 << 1;
/// `_PAGE_ACCESSED` (young).
pub const PAGE_ACCESSED: u64 = 1 << 5;
/// `_PAGE_DIRTY`.
pub const PAGE_DIRTY: u64 = 1 << 6;
/// `_PAGE_PSE`: a PMD entry that maps a huge page rather than a PTE table.
pub const PAGE_PSE: u64 = 1 << 7;
/// `_PAGE_PROTNONE` (x86 reuses `_PAGE_GLOBAL`, bit 8): a `PROT_NONE`
/// entry. The kernel clears `_PAGE_PRESENT` in such an entry and treats it
/// as present (`pte_present()` tests both bits); the model keeps
/// [`PAGE_PRESENT`] set and adds this bit, which the hardware walk of
/// [`crate::memory::access_ok`] refuses.
pub const PAGE_PROTNONE: u64 = 1 << 8;
/// `_PAGE_SPECIAL`: no `struct page` behind it (the zero pages here).
pub const PAGE_SPECIAL: u64 = 1 << 9;
/// Model-only software bit (58, one the hardware ignores): the mapped
/// anonymous page is `PageAnonExclusive()`. The kernel keeps that flag in
/// the `struct page`; a page that is exclusive has exactly one mapping, so
/// the model keeps it in that mapping's entry (a PMD leaf: the head page's
/// flag). Set when a fault maps a new page or reuses one, inherited by a PMD
/// split, cleared on both sides by fork (`folio_try_dup_anon_rmap_*()`);
/// `mprotect()` makes only exclusive pages writable again.
pub const PAGE_ANON_EXCLUSIVE: u64 = 1 << 58;
/// A non-present entry that is a migration entry (the kernel encodes it as
/// a swap entry of type `SWP_MIGRATION_*`; the model keeps the pfn of the
/// page being migrated in the pfn bits and the original RW, accessed,
/// dirty and PSE bits beside this marker). Present is clear.
pub const SWP_MIGRATION: u64 = 1 << 10;
/// Bits holding the pfn.
pub const PFN_MASK: u64 = ((1u64 << 52) - 1) & !((1u64 << PAGE_SHIFT) - 1);

/// Makes an entry for `pfn` with `flags`.
#[inline]
pub fn mk_entry(pfn: Pfn, flags: u64) -> u64 {
    (pfn.0 << PAGE_SHIFT) | flags
}

/// The pfn an entry points to.
#[inline]
pub fn entry_pfn(e: u64) -> Pfn {
    Pfn((e & PFN_MASK) >> PAGE_SHIFT)
}

/// True if the entry is present.
#[inline]
pub fn present(e: u64) -> bool {
    e & PAGE_PRESENT != 0
}

/// The bits of an entry that hold the pfn.
#[inline]
pub fn entry_pfn_mask() -> u64 {
    PFN_MASK
}

/// True if the entry is a migration entry.
#[inline]
pub fn is_migration_entry(e: u64) -> bool {
    !present(e) && e & SWP_MIGRATION != 0
}

/// A page-table level below the PGD, by the size one of its entries maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// PGD entries (512 GiB each).
    Pgd,
    /// PUD entries (1 GiB each).
    Pud,
    /// PMD entries (2 MiB each).
    Pmd,
    /// PTE entries (4 KiB each).
    Pte,
}

impl Level {
    /// Shift of the bytes one entry maps.
    pub fn shift(self) -> u32 {
        match self {
            Level::Pgd => PGDIR_SHIFT,
            Level::Pud => PUD_SHIFT,
            Level::Pmd => PMD_SHIFT,
            Level::Pte => PAGE_SHIFT,
        }
    }

    /// Index of `addr` in a table of this level (`pgd_index()` etc.).
    #[inline]
    pub fn index(self, addr: u64) -> usize {
        ((addr >> self.shift()) as usize) & (PTRS_PER_TABLE - 1)
    }

    fn next(self) -> Option<Level> {
        match self {
            Level::Pgd => Some(Level::Pud),
            Level::Pud => Some(Level::Pmd),
            Level::Pmd => Some(Level::Pte),
            Level::Pte => None,
        }
    }
}

/// Where one entry lives: the table's pfn and the index in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slot {
    /// The table holding the entry.
    pub table: u32,
    /// Index of the entry.
    pub index: usize,
}

/// One process's page tables.
///
/// Invariant: every table reachable from `pgd` is in `tables`, and every
/// table in `tables` is reachable from `pgd` exactly once; each is an
/// allocated order-0 block of the page allocator.
#[derive(Clone, Debug)]
pub struct PageTables {
    /// The PGD's pfn.
    pub pgd: u32,
    tables: BTreeMap<u32, Box<[u64; PTRS_PER_TABLE]>>,
    /// PTE tables deposited with PMD leaves (`pgtable_trans_huge_deposit()`),
    /// by the PMD slot: a THP fault allocates the table a later split needs,
    /// so that splitting never fails for want of memory.
    deposited: BTreeMap<Slot, u32>,
}

impl PageTables {
    /// Models `pgd_alloc()`: allocates and clears the top-level table.
    pub fn new(pa: &mut PageAlloc, cx: &mut Cx) -> Result<PageTables, AllocError> {
        let mut pt = PageTables {
            pgd: 0,
            tables: BTreeMap::new(),
            deposited: BTreeMap::new(),
        };
        pt.pgd = pt.alloc_table(pa, cx)?;
        Ok(pt)
    }

    /// Number of tables, the PGD included (`mm_pgtables_bytes()` / 4 KiB).
    pub fn nr_tables(&self) -> u64 {
        self.tables.len() as u64
    }

    /// Allocates one zeroed table (`__pte_alloc()` and friends: `GFP_PGTABLE_USER`
    /// includes `__GFP_ZERO`, so the clear is charged).
    fn alloc_table(&mut self, pa: &mut PageAlloc, cx: &mut Cx) -> Result<u32, AllocError> {
        let pfn = pa.alloc_pages(cx, Gfp::KERNEL, 0)?;
        cx.clear_page(pfn);
        let p = crate::page::pfn_idx(pfn);
        self.tables.insert(p, Box::new([0; PTRS_PER_TABLE]));
        Ok(p)
    }

    /// Frees a table that no entry references any more (`pte_free()` etc.).
    fn free_table(&mut self, pa: &mut PageAlloc, cx: &mut Cx, table: u32) {
        self.tables
            .remove(&table)
            .expect("freeing a table that is not ours");
        pa.free_pages(cx, Pfn(table as u64), 0);
    }

    /// The entry at `slot`.
    #[inline]
    pub fn get(&self, slot: Slot) -> u64 {
        self.tables[&slot.table][slot.index]
    }

    /// Sets the entry at `slot` (`set_pte_at()`, `set_pmd_at()`).
    #[inline]
    pub fn set(&mut self, slot: Slot, e: u64) {
        self.tables
            .get_mut(&slot.table)
            .expect("slot in a known table")[slot.index] = e;
    }

    /// The slot of `addr` at `level`, without allocating: `None` if a table
    /// above it is missing or a PMD leaf stands in the way of a PTE.
    pub fn lookup(&self, addr: u64, level: Level) -> Option<Slot> {
        let mut table = self.pgd;
        let mut l = Level::Pgd;
        loop {
            let slot = Slot {
                table,
                index: l.index(addr),
            };
            if l == level {
                return Some(slot);
            }
            let e = self.get(slot);
            if !present(e) || e & PAGE_PSE != 0 {
                return None;
            }
            table = entry_pfn(e).0 as u32;
            l = l.next().expect("level below PTE");
        }
    }

    /// The leaf entry that maps `addr`, in one walk: a PMD leaf's slot,
    /// [`Level::Pmd`] and its entry, or the PTE slot, [`Level::Pte`] and its
    /// entry; `None` if a table on the way is missing. (The hardware walk of
    /// a user access.)
    #[inline]
    pub fn leaf(&self, addr: u64) -> Option<(Slot, Level, u64)> {
        let mut table = self.pgd;
        let mut l = Level::Pgd;
        loop {
            let index = l.index(addr);
            let e = self.tables[&table][index];
            let slot = Slot { table, index };
            if l == Level::Pte {
                return Some((slot, l, e));
            }
            if !present(e) {
                return None;
            }
            if e & PAGE_PSE != 0 {
                return Some((slot, l, e));
            }
            table = entry_pfn(e).0 as u32;
            l = l.next().expect("level below PTE");
        }
    }

    /// The PTE slot of `addr` under the PMD entry `pmd`, allocating the PTE
    /// table if the entry is empty (`pte_alloc()` once the PMD is known).
    ///
    /// Panics if `pmd` is a leaf: the caller splits it first.
    pub fn pte_alloc(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        pmd: Slot,
        addr: u64,
    ) -> Result<Slot, AllocError> {
        let e = self.get(pmd);
        assert!(e & PAGE_PSE == 0, "pte_alloc under a PMD leaf at {addr:#x}");
        let table = if present(e) {
            entry_pfn(e).0 as u32
        } else {
            let t = self.alloc_table(pa, cx)?;
            self.set(pmd, mk_entry(Pfn(t as u64), PAGE_PRESENT | PAGE_RW));
            t
        };
        Ok(Slot {
            table,
            index: Level::Pte.index(addr),
        })
    }

    /// The slot of `addr` at `level`, allocating missing tables above it
    /// (`p4d_alloc()`, `pud_alloc()`, `pmd_alloc()`, `pte_alloc()`).
    ///
    /// Panics if a PMD leaf stands in the way: the caller splits it first.
    pub fn walk_alloc(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        level: Level,
    ) -> Result<Slot, AllocError> {
        let mut table = self.pgd;
        let mut l = Level::Pgd;
        loop {
            let slot = Slot {
                table,
                index: l.index(addr),
            };
            if l == level {
                return Ok(slot);
            }
            let e = self.get(slot);
            assert!(e & PAGE_PSE == 0, "walk through a PMD leaf at {addr:#x}");
            table = if present(e) {
                entry_pfn(e).0 as u32
            } else {
                let t = self.alloc_table(pa, cx)?;
                self.set(slot, mk_entry(Pfn(t as u64), PAGE_PRESENT | PAGE_RW));
                t
            };
            l = l.next().expect("level below PTE");
        }
    }

    /// Allocates a PTE table and deposits it with the PMD leaf at `slot`.
    pub fn deposit(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        slot: Slot,
    ) -> Result<(), AllocError> {
        let t = self.alloc_table(pa, cx)?;
        let old = self.deposited.insert(slot, t);
        assert!(old.is_none(), "two tables deposited at {slot:?}");
        Ok(())
    }

    /// Takes back the table deposited at `slot` (`pgtable_trans_huge_withdraw()`).
    pub fn withdraw(&mut self, slot: Slot) -> u32 {
        self.deposited
            .remove(&slot)
            .expect("no table deposited with this PMD")
    }

    /// Withdraws and frees the table deposited at `slot` (zap of a PMD leaf).
    pub fn free_deposit(&mut self, pa: &mut PageAlloc, cx: &mut Cx, slot: Slot) {
        let t = self.withdraw(slot);
        self.free_table(pa, cx, t);
    }

    /// The entries of table `table`, to set several at once (`set_ptes()`).
    pub fn table_mut(&mut self, table: u32) -> &mut [u64; PTRS_PER_TABLE] {
        self.tables.get_mut(&table).expect("a known table")
    }

    /// The entries of table `table` (read-only).
    pub fn table(&self, table: u32) -> &[u64; PTRS_PER_TABLE] {
        &self.tables[&table]
    }

    /// Models `free_pgtables()`/`free_pgd_range()`: frees every table below
    /// the PGD that maps only addresses in `[floor, ceiling)` and holds no
    /// present entry, bottom-up. Tables whose range reaches outside
    /// `[floor, ceiling)` stay, because a neighbouring VMA may use them.
    /// With `floor = 0, ceiling = u64::MAX` it frees every empty table.
    pub fn free_pgd_range(&mut self, pa: &mut PageAlloc, cx: &mut Cx, floor: u64, ceiling: u64) {
        let pgd = self.pgd;
        self.free_range_in(pa, cx, pgd, Level::Pgd, 0, floor, ceiling);
    }

    /// Frees empty child tables of `table` (of `level`, mapping from `base`)
    /// inside `[floor, ceiling)`; returns true if `table` is now empty.
    fn free_range_in(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        table: u32,
        level: Level,
        base: u64,
        floor: u64,
        ceiling: u64,
    ) -> bool {
        let Some(child_level) = level.next() else {
            return self.tables[&table].iter().all(|&e| !present(e));
        };
        let span = 1u64 << level.shift();
        for i in 0..PTRS_PER_TABLE {
            let e = self.tables[&table][i];
            if !present(e) || e & PAGE_PSE != 0 {
                continue;
            }
            let start = base + i as u64 * span;
            let end = start.saturating_add(span);
            if end <= floor || start >= ceiling {
                continue;
            }
            let child = entry_pfn(e).0 as u32;
            let empty = self.free_range_in(pa, cx, child, child_level, start, floor, ceiling);
            if empty && start >= floor && end <= ceiling {
                self.set(Slot { table, index: i }, 0);
                self.free_table(pa, cx, child);
            }
        }
        self.tables[&table].iter().all(|&e| !present(e))
    }

    /// Frees the PGD itself (`pgd_free()`); every lower table must be gone.
    pub fn free_pgd(mut self, pa: &mut PageAlloc, cx: &mut Cx) {
        assert_eq!(
            self.tables.len(),
            1,
            "pgd_free with {} lower tables left",
            self.tables.len() - 1
        );
        let pgd = self.pgd;
        self.free_table(pa, cx, pgd);
    }

    /// Every table's pfn (for checks).
    pub fn table_pfns(&self) -> impl Iterator<Item = u32> + '_ {
        self.tables.keys().copied()
    }

    /// The tables deposited with PMD leaves: `(PMD slot, table pfn)`.
    pub fn deposited(&self) -> impl Iterator<Item = (Slot, u32)> + '_ {
        self.deposited.iter().map(|(&s, &t)| (s, t))
    }

    /// Calls `f(addr, level, slot, entry)` for every present leaf entry (PTE,
    /// or a PMD leaf), in address order. For checks and differential tests.
    pub fn for_each_leaf(&self, mut f: impl FnMut(u64, Level, Slot, u64)) {
        self.leaves_in(self.pgd, Level::Pgd, 0, &mut f);
    }

    fn leaves_in(
        &self,
        table: u32,
        level: Level,
        base: u64,
        f: &mut impl FnMut(u64, Level, Slot, u64),
    ) {
        let span = 1u64 << level.shift();
        for (i, &e) in self.tables[&table].iter().enumerate() {
            if !present(e) {
                continue;
            }
            let addr = base + i as u64 * span;
            let slot = Slot { table, index: i };
            match level.next() {
                None => f(addr, level, slot, e),
                Some(_) if level == Level::Pmd && e & PAGE_PSE != 0 => f(addr, level, slot, e),
                Some(child) => self.leaves_in(entry_pfn(e).0 as u32, child, addr, f),
            }
        }
    }

    /// Moves the PTE table deposited at `from` to the PMD slot `to`
    /// (`move_huge_pmd()` with `pmd_move_must_withdraw()`).
    pub fn move_deposit(&mut self, from: Slot, to: Slot) {
        let t = self.withdraw(from);
        let old = self.deposited.insert(to, t);
        assert!(old.is_none(), "two tables deposited at {to:?}");
    }
}
