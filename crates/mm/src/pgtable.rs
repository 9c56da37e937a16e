//! Four-level x86-64 page tables (arch/x86/include/asm/pgtable*.h, mm/pgtable-generic.c).
//!
//! # Representation
//!
//! Each table is one 4 KiB page taken from the page allocator with
//! `Gfp::KERNEL` at order 0, exactly as `pte_alloc_one()`/`pmd_alloc_one()`
//! do, so page tables count against free memory and return through the PCP
//! when freed. Its 512 entries live beside the allocator in a slab of
//! `[u64; 512]` arrays owned by the process's [`PageTables`] (the simulated
//! machine has no memory contents of its own); see [`PageTables`] for how a
//! walk finds them.
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
use std::cell::Cell;
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

/// Where one entry lives: the table's pfn and the index in it (and, for the
/// model's own use, the table's place in its [`PageTables`]' slab, so that
/// [`PageTables::get`] and [`PageTables::set`] index an array instead of
/// searching, and the table page's memmap index, which names its split
/// lock). Slots are made by the [`PageTables`] that holds the table and
/// are valid while that table is: a slot does not outlive `free_table()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slot {
    /// The table holding the entry (its pfn).
    pub table: Pfn,
    /// Index of the entry.
    pub index: usize,
    /// The table's slab index in its [`PageTables`] (low 32 bits) and the
    /// table page's [`crate::page::PfnIdx`] (high 32 bits): its `struct
    /// page` holds the split page-table lock (`ptlock_ptr()`), so this names
    /// the lock. Both are functions of `table`, so ordering by this word
    /// never decides anything. One word rather than two `u32`s so that a
    /// slot is written and read back in 8-byte pieces: the compiler copied
    /// the pair as one 8-byte load of two 4-byte stores, which the host CPU
    /// cannot forward (a stall on every fault; host speed only).
    tag: u64,
}

impl Slot {
    #[inline]
    fn new(table: Pfn, index: usize, id: u32, ptl: u32) -> Slot {
        Slot {
            table,
            index,
            tag: ((ptl as u64) << 32) | id as u64,
        }
    }

    /// The table's slab index (the low half of `tag`).
    #[inline]
    fn id(self) -> u32 {
        self.tag as u32
    }

    /// The index of the table's split page-table lock (see [`Slot`]).
    #[inline]
    pub fn ptl_index(self) -> u32 {
        (self.tag >> 32) as u32
    }

    /// The entry at `index` of the same table.
    #[inline]
    pub fn with_index(self, index: usize) -> Slot {
        debug_assert!(index < PTRS_PER_TABLE, "index {index} past a table");
        Slot { index, ..self }
    }
}

/// A [`Table::child`] value for an entry that points to no table.
const NO_TABLE: u32 = u32::MAX;

/// One page-table page of the model.
#[derive(Clone, Debug)]
struct Table {
    /// The 512 entries, in the hardware's layout.
    entries: Box<[u64; PTRS_PER_TABLE]>,
    /// For a PGD, PUD or PMD table, 512 long: the slab index of the table
    /// each entry points to, [`NO_TABLE`] where the entry is not a present
    /// table pointer (empty, a PMD leaf, a migration entry). Kept by
    /// [`PageTables::set`]. Empty for a PTE table (most tables), whose
    /// entries point to no table. The kernel needs no such side array (the
    /// pfn in the entry is the table's address); the model has no memory to
    /// address, and this lets a walk step down a level by indexing instead
    /// of searching by pfn.
    child: Box<[u32]>,
}

impl Table {
    /// An empty table holding `level` entries.
    fn new(level: Level) -> Table {
        Table {
            entries: Box::new([0; PTRS_PER_TABLE]),
            child: Table::new_child(level),
        }
    }

    fn new_child(level: Level) -> Box<[u32]> {
        if level == Level::Pte {
            Box::default()
        } else {
            vec![NO_TABLE; PTRS_PER_TABLE].into_boxed_slice()
        }
    }

    /// Empties a freed table for reuse at `level`.
    fn reset(&mut self, level: Level) {
        self.entries.fill(0);
        if (level == Level::Pte) == self.child.is_empty() {
            self.child.fill(NO_TABLE);
        } else {
            self.child = Table::new_child(level);
        }
    }
}

/// What the slab knows about a table besides its entries.
#[derive(Clone, Copy, Debug)]
struct TableMeta {
    /// The table's pfn (0 while the slab slot is free).
    pfn: Pfn,
    /// The table page's memmap index (its lock's name; see [`Slot`]).
    ptl: u32,
    /// The level of the entries the table holds.
    level: Level,
}

/// One process's page tables.
///
/// # Representation
///
/// The tables live in a slab, `slab[id]`, with a free list of ids that a
/// later table reuses (last freed, first reused), and a `BTreeMap` from each
/// table's pfn to its id for the few callers that name a table by its pfn.
/// A walk goes down by the ids in the parent's [`Table::child`], so that
/// neither a walk nor an entry's read or write searches a map.
///
/// Invariants: every table reachable from `pgd` is in `by_pfn`, and every
/// table in `by_pfn` is reachable from `pgd` exactly once or deposited with
/// a PMD leaf; each is an allocated order-0 block of the page allocator;
/// `by_pfn[meta[id].pfn] == id` for every table in use; in a PGD, PUD or
/// PMD table, `child[i]` is the id of the table that `entries[i]` points to,
/// or [`NO_TABLE`] if `entries[i]` is not a present table pointer.
#[derive(Clone, Debug)]
pub struct PageTables {
    /// The PGD's pfn.
    pub pgd: Pfn,
    /// The PGD's slab index.
    pgd_id: u32,
    slab: Vec<Table>,
    meta: Vec<TableMeta>,
    /// Slab indices of freed tables, to reuse.
    free_ids: Vec<u32>,
    /// Table pfn to slab index, for every table in use.
    by_pfn: BTreeMap<Pfn, u32>,
    /// PTE tables deposited with PMD leaves (`pgtable_trans_huge_deposit()`),
    /// by the PMD slot: a THP fault allocates the table a later split needs,
    /// so that splitting never fails for want of memory.
    deposited: BTreeMap<Slot, Pfn>,
    /// The model's own memo of the last walk through the PGD and PUD:
    /// `(addr >> PUD_SHIFT, id of the PMD table for that 1 GiB)`, or
    /// [`NO_HINT`] as the key. A walk of an address in the same 1 GiB starts
    /// at that PMD table (consecutive faults mostly fall in one). Forgotten
    /// whenever a PGD or PUD entry is set and whenever a table is freed, so
    /// that it always names the table a full walk would reach. Not the
    /// kernel's (it walks from the PGD every time); it changes no result.
    pmd_hint: Cell<(u64, u32)>,
    /// The same for the last user access's PTE table:
    /// `(addr >> PMD_SHIFT, id of the PTE table for that 2 MiB)`, or
    /// [`NO_HINT`]. Set by [`PageTables::leaf`]'s walk, forgotten whenever
    /// an entry above the PTE level is set and whenever a table is freed.
    /// Not the kernel's; it changes no result.
    pte_hint: Cell<(u64, u32)>,
}

/// The key of an empty [`PageTables::pmd_hint`] (no address has it).
const NO_HINT: u64 = u64::MAX;

impl PageTables {
    /// Models `pgd_alloc()`: allocates and clears the top-level table.
    pub fn new(pa: &mut PageAlloc, cx: &mut Cx) -> Result<PageTables, AllocError> {
        let mut pt = PageTables {
            pgd: Pfn(0),
            pgd_id: 0,
            slab: Vec::new(),
            meta: Vec::new(),
            free_ids: Vec::new(),
            by_pfn: BTreeMap::new(),
            deposited: BTreeMap::new(),
            pmd_hint: Cell::new((NO_HINT, NO_TABLE)),
            pte_hint: Cell::new((NO_HINT, NO_TABLE)),
        };
        pt.pgd_id = pt.alloc_table(pa, cx, Level::Pgd)?;
        pt.pgd = pt.meta[pt.pgd_id as usize].pfn;
        Ok(pt)
    }

    /// Number of tables, the PGD included (`mm_pgtables_bytes()` / 4 KiB).
    pub fn nr_tables(&self) -> u64 {
        self.by_pfn.len() as u64
    }

    /// Allocates one zeroed table holding `level` entries and returns its
    /// slab index (`__pte_alloc()` and friends: `GFP_PGTABLE_USER` includes
    /// `__GFP_ZERO`, so the clear is charged).
    fn alloc_table(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        level: Level,
    ) -> Result<u32, AllocError> {
        let pfn = pa.alloc_pages(cx, Gfp::KERNEL, 0)?;
        cx.clear_page(pfn);
        pa.llc_stream(cx, pfn, 1);
        let meta = TableMeta {
            pfn,
            ptl: pa.mem.idx(pfn).0,
            level,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.slab[id as usize].reset(level);
                self.meta[id as usize] = meta;
                id
            }
            None => {
                self.slab.push(Table::new(level));
                self.meta.push(meta);
                (self.slab.len() - 1) as u32
            }
        };
        let old = self.by_pfn.insert(pfn, id);
        assert!(old.is_none(), "table {pfn} allocated twice");
        Ok(id)
    }

    /// Frees a table that no entry references any more (`pte_free()` etc.).
    fn free_table(&mut self, pa: &mut PageAlloc, cx: &mut Cx, table: Pfn) {
        let id = self
            .by_pfn
            .remove(&table)
            .expect("freeing a table that is not ours");
        self.meta[id as usize].pfn = Pfn(0);
        self.free_ids.push(id);
        self.pmd_hint.set((NO_HINT, NO_TABLE));
        self.pte_hint.set((NO_HINT, NO_TABLE));
        pa.free_pages(cx, table, 0);
    }

    /// The slab index of the table `table` (a pfn).
    fn id_of(&self, table: Pfn) -> u32 {
        *self
            .by_pfn
            .get(&table)
            .unwrap_or_else(|| panic!("{table} is not one of this mm's page tables"))
    }

    /// The slot at `index` of the table with slab index `id`.
    #[inline(always)]
    fn slot_at(&self, id: u32, index: usize) -> Slot {
        let m = &self.meta[id as usize];
        Slot::new(m.pfn, index, id, m.ptl)
    }

    /// The slot at `index` of the table whose pfn is `table` (a table of
    /// this `PageTables`, e.g. one taken back by [`PageTables::withdraw`]).
    /// Searches by pfn: walk with [`PageTables::lookup`] where possible.
    pub fn slot(&self, table: Pfn, index: usize) -> Slot {
        self.slot_at(self.id_of(table), index)
    }

    /// The PTE table that the (non-leaf) PMD entry at `pmd` points to, as the
    /// slot of its entry 0; `None` if the entry is not a present table
    /// pointer (empty, or a PMD leaf).
    #[inline]
    pub fn pte_table(&self, pmd: Slot) -> Option<Slot> {
        let c = self.slab[pmd.id() as usize].child[pmd.index];
        (c != NO_TABLE).then(|| self.slot_at(c, 0))
    }

    /// The entry at `slot`.
    #[inline]
    pub fn get(&self, slot: Slot) -> u64 {
        debug_assert_eq!(
            self.meta[slot.id() as usize].pfn,
            slot.table,
            "stale slot {slot:?}"
        );
        self.slab[slot.id() as usize].entries[slot.index]
    }

    /// Sets the entry at `slot` (`set_pte_at()`, `set_pmd_at()`).
    #[inline]
    pub fn set(&mut self, slot: Slot, e: u64) {
        let id = slot.id() as usize;
        debug_assert_eq!(self.meta[id].pfn, slot.table, "stale slot {slot:?}");
        let level = self.meta[id].level;
        if level != Level::Pte {
            if level != Level::Pmd {
                self.pmd_hint.set((NO_HINT, NO_TABLE));
            }
            self.pte_hint.set((NO_HINT, NO_TABLE));
            let child = if present(e) && e & PAGE_PSE == 0 {
                self.id_of(entry_pfn(e))
            } else {
                NO_TABLE
            };
            self.slab[id].child[slot.index] = child;
        }
        self.slab[id].entries[slot.index] = e;
    }

    /// The child table of a present, non-leaf entry of the directory table
    /// `id` at `index`.
    #[inline]
    fn child_of(&self, id: u32, index: usize) -> u32 {
        let c = self.slab[id as usize].child[index];
        debug_assert!(c != NO_TABLE, "table pointer without a table");
        c
    }

    /// Where a walk of `addr` down to `level` starts: the PMD table of the
    /// [`PageTables::pmd_hint`] if it covers `addr` and the walk goes that
    /// far, else the PGD.
    #[inline(always)]
    fn walk_start(&self, addr: u64, level: Level) -> (u32, Level) {
        let (key, id) = self.pmd_hint.get();
        if key == addr >> PUD_SHIFT && matches!(level, Level::Pmd | Level::Pte) {
            debug_assert_eq!(self.pmd_table_uncached(addr), Some(id), "stale PMD hint");
            (id, Level::Pmd)
        } else {
            (self.pgd_id, Level::Pgd)
        }
    }

    /// The PMD table of `addr` by a walk through the PGD and PUD that
    /// ignores [`PageTables::pmd_hint`] (for checks).
    fn pmd_table_uncached(&self, addr: u64) -> Option<u32> {
        let mut id = self.pgd_id;
        for l in [Level::Pgd, Level::Pud] {
            let index = l.index(addr);
            let e = self.slab[id as usize].entries[index];
            if !present(e) || e & PAGE_PSE != 0 {
                return None;
            }
            id = self.child_of(id, index);
        }
        Some(id)
    }

    /// Notes that a walk of `addr` stepped from level `l` to the table `id`.
    #[inline]
    fn walked(&self, addr: u64, l: Level, id: u32) {
        if l == Level::Pud {
            self.pmd_hint.set((addr >> PUD_SHIFT, id));
        }
    }

    /// The slot of `addr` at `level`, without allocating: `None` if a table
    /// above it is missing or a PMD leaf stands in the way of a PTE.
    #[inline(always)]
    pub fn lookup(&self, addr: u64, level: Level) -> Option<Slot> {
        let (mut id, mut l) = self.walk_start(addr, level);
        loop {
            let index = l.index(addr);
            if l == level {
                return Some(self.slot_at(id, index));
            }
            let e = self.slab[id as usize].entries[index];
            if !present(e) || e & PAGE_PSE != 0 {
                return None;
            }
            id = self.child_of(id, index);
            self.walked(addr, l, id);
            l = l.next().expect("level below PTE");
        }
    }

    /// [`PageTables::lookup`] for a walk over a range, as the kernel's
    /// range walks (`zap_p4d_range()`, `copy_pud_range()`,
    /// `change_pud_range()`) do it: where the walk stops above `level` (an
    /// empty or leaf entry at a higher level), `Err` holds the end of the
    /// range that entry maps, the first address where the answer can differ
    /// (`pgd_addr_end()`/`pud_addr_end()`; `u64::MAX` at the top). Without
    /// this a walk of a 128 TiB mapping with nothing in it takes 2^26 steps of
    /// 2 MiB; the kernel's `pgd_none_or_clear_bad()` skips 512 GiB at once.
    #[inline]
    pub fn lookup_or_skip(&self, addr: u64, level: Level) -> Result<Slot, u64> {
        let (mut id, mut l) = self.walk_start(addr, level);
        loop {
            let index = l.index(addr);
            if l == level {
                return Ok(self.slot_at(id, index));
            }
            let e = self.slab[id as usize].entries[index];
            if !present(e) || e & PAGE_PSE != 0 {
                let mask = (1u64 << l.shift()) - 1;
                return Err((addr | mask).saturating_add(1));
            }
            id = self.child_of(id, index);
            self.walked(addr, l, id);
            l = l.next().expect("level below PTE");
        }
    }

    /// The leaf entry that maps `addr`, in one walk: a PMD leaf's slot,
    /// [`Level::Pmd`] and its entry, or the PTE slot, [`Level::Pte`] and its
    /// entry; `None` if a table on the way is missing. (The hardware walk of
    /// a user access.)
    #[inline(always)]
    pub fn leaf(&self, addr: u64) -> Option<(Slot, Level, u64)> {
        let (id, i, l) = self.leaf_pos(addr)?;
        Some((self.slot_at(id, i), l, self.slab[id as usize].entries[i]))
    }

    /// The entry [`PageTables::leaf`] finds, to read and update in place as
    /// the hardware's walk sets a leaf's accessed and dirty bits. Only for
    /// such updates: writing a leaf's other bits through it would bypass
    /// [`PageTables::set`] (which, for a PTE or a PMD leaf that stays a
    /// leaf, keeps nothing else: no child index, no hint).
    #[inline(always)]
    pub fn leaf_entry_mut(&mut self, addr: u64) -> Option<&mut u64> {
        let (id, i, _) = self.leaf_pos(addr)?;
        Some(&mut self.slab[id as usize].entries[i])
    }

    /// Where [`PageTables::leaf`]'s entry is: the table's slab index, the
    /// index in it and its level.
    #[inline(always)]
    fn leaf_pos(&self, addr: u64) -> Option<(u32, usize, Level)> {
        // The most common case: the same PTE table as the last access.
        let (key, id) = self.pte_hint.get();
        if key == addr >> PMD_SHIFT {
            debug_assert_eq!(self.pte_table_uncached(addr), Some(id), "stale PTE hint");
            return Some((id, Level::Pte.index(addr), Level::Pte));
        }
        // Then straight-line: the PMD hint covers `addr`, and the
        // walk is two fixed steps (host speed only; the same answer as the
        // loop of `leaf_walk`, which `check_leaf_paths` tests).
        let (key, id) = self.pmd_hint.get();
        if key != addr >> PUD_SHIFT {
            return self.leaf_walk(addr);
        }
        debug_assert_eq!(self.pmd_table_uncached(addr), Some(id), "stale PMD hint");
        let i = Level::Pmd.index(addr);
        let t = &self.slab[id as usize];
        let e = t.entries[i];
        if !present(e) {
            return None;
        }
        if e & PAGE_PSE != 0 {
            return Some((id, i, Level::Pmd));
        }
        let c = t.child[i];
        debug_assert!(c != NO_TABLE, "table pointer without a table");
        self.pte_hint.set((addr >> PMD_SHIFT, c));
        Some((c, Level::Pte.index(addr), Level::Pte))
    }

    /// The PTE table of `addr` by a full walk that ignores both hints (for
    /// checks).
    fn pte_table_uncached(&self, addr: u64) -> Option<u32> {
        let id = self.pmd_table_uncached(addr)?;
        let e = self.slab[id as usize].entries[Level::Pmd.index(addr)];
        if !present(e) || e & PAGE_PSE != 0 {
            return None;
        }
        Some(self.child_of(id, Level::Pmd.index(addr)))
    }

    /// [`PageTables::leaf_pos`] by a walk level by level from where
    /// [`PageTables::walk_start`] says.
    #[inline(never)]
    fn leaf_walk(&self, addr: u64) -> Option<(u32, usize, Level)> {
        let (mut id, mut l) = self.walk_start(addr, Level::Pte);
        loop {
            let index = l.index(addr);
            let t = &self.slab[id as usize];
            if l == Level::Pte {
                self.pte_hint.set((addr >> PMD_SHIFT, id));
                return Some((id, index, l));
            }
            let e = t.entries[index];
            if !present(e) {
                return None;
            }
            if e & PAGE_PSE != 0 {
                return Some((id, index, l));
            }
            id = t.child[index];
            debug_assert!(id != NO_TABLE, "table pointer without a table");
            self.walked(addr, l, id);
            l = l.next().expect("level below PTE");
        }
    }

    /// The PTE slot of `addr` under the PMD entry `pmd`, allocating the PTE
    /// table if the entry is empty (`pte_alloc()` once the PMD is known).
    ///
    /// Panics if `pmd` is a leaf: the caller splits it first.
    #[inline(always)]
    pub fn pte_alloc(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        pmd: Slot,
        addr: u64,
    ) -> Result<Slot, AllocError> {
        // The common case inline: the PTE table is there.
        match self.slab[pmd.id() as usize].child.get(pmd.index) {
            Some(&c) if c != NO_TABLE => Ok(self.slot_at(c, Level::Pte.index(addr))),
            _ => self.pte_alloc_slow(pa, cx, pmd, addr),
        }
    }

    /// [`PageTables::pte_alloc`] when the PMD entry is not a table pointer.
    #[cold]
    #[inline(never)]
    fn pte_alloc_slow(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        pmd: Slot,
        addr: u64,
    ) -> Result<Slot, AllocError> {
        let e = self.get(pmd);
        assert!(e & PAGE_PSE == 0, "pte_alloc under a PMD leaf at {addr:#x}");
        let id = if present(e) {
            self.child_of(pmd.id(), pmd.index)
        } else {
            let id = self.alloc_table(pa, cx, Level::Pte)?;
            let t = self.meta[id as usize].pfn;
            self.set(pmd, mk_entry(t, PAGE_PRESENT | PAGE_RW));
            id
        };
        Ok(self.slot_at(id, Level::Pte.index(addr)))
    }

    /// The slot of `addr` at `level`, allocating missing tables above it
    /// (`p4d_alloc()`, `pud_alloc()`, `pmd_alloc()`, `pte_alloc()`).
    ///
    /// Panics if a PMD leaf stands in the way: the caller splits it first.
    #[inline(always)]
    pub fn walk_alloc(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        level: Level,
    ) -> Result<Slot, AllocError> {
        // The common case inline: every table on the way is there. (A leaf
        // in the way also makes the lookup fail; the full walk panics then.)
        match self.lookup(addr, level) {
            Some(slot) => Ok(slot),
            None => self.walk_alloc_slow(pa, cx, addr, level),
        }
    }

    /// [`PageTables::walk_alloc`] when a table on the way is missing.
    #[cold]
    #[inline(never)]
    fn walk_alloc_slow(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: u64,
        level: Level,
    ) -> Result<Slot, AllocError> {
        let (mut id, mut l) = self.walk_start(addr, level);
        loop {
            let index = l.index(addr);
            if l == level {
                return Ok(self.slot_at(id, index));
            }
            let e = self.slab[id as usize].entries[index];
            assert!(e & PAGE_PSE == 0, "walk through a PMD leaf at {addr:#x}");
            let next = l.next().expect("level below PTE");
            id = if present(e) {
                self.child_of(id, index)
            } else {
                let c = self.alloc_table(pa, cx, next)?;
                let t = self.meta[c as usize].pfn;
                let slot = self.slot_at(id, index);
                self.set(slot, mk_entry(t, PAGE_PRESENT | PAGE_RW));
                c
            };
            self.walked(addr, l, id);
            l = next;
        }
    }

    /// Allocates a PTE table and deposits it with the PMD leaf at `slot`.
    pub fn deposit(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        slot: Slot,
    ) -> Result<(), AllocError> {
        let id = self.alloc_table(pa, cx, Level::Pte)?;
        let t = self.meta[id as usize].pfn;
        let old = self.deposited.insert(slot, t);
        assert!(old.is_none(), "two tables deposited at {slot:?}");
        Ok(())
    }

    /// Takes back the table deposited at `slot` (`pgtable_trans_huge_withdraw()`).
    pub fn withdraw(&mut self, slot: Slot) -> Pfn {
        self.deposited
            .remove(&slot)
            .expect("no table deposited with this PMD")
    }

    /// Withdraws and frees the table deposited at `slot` (zap of a PMD leaf).
    pub fn free_deposit(&mut self, pa: &mut PageAlloc, cx: &mut Cx, slot: Slot) {
        let t = self.withdraw(slot);
        self.free_table(pa, cx, t);
    }

    /// The entries of the PTE table holding `slot`, to set several at once
    /// (`set_ptes()`). Only for PTE tables: a directory table's entries go
    /// through [`PageTables::set`], which keeps its child index.
    #[inline]
    pub fn entries_mut(&mut self, slot: Slot) -> &mut [u64; PTRS_PER_TABLE] {
        let id = slot.id() as usize;
        debug_assert_eq!(self.meta[id].pfn, slot.table, "stale slot {slot:?}");
        assert!(
            self.meta[id].level == Level::Pte,
            "entries_mut on a {:?} table",
            self.meta[id].level
        );
        &mut self.slab[id].entries
    }

    /// The entries of the table holding `slot` (read-only).
    #[inline]
    pub fn entries(&self, slot: Slot) -> &[u64; PTRS_PER_TABLE] {
        debug_assert_eq!(
            self.meta[slot.id() as usize].pfn,
            slot.table,
            "stale slot {slot:?}"
        );
        &self.slab[slot.id() as usize].entries
    }

    /// The entries of table `table`, by its pfn (read-only; searches by pfn).
    pub fn table(&self, table: Pfn) -> &[u64; PTRS_PER_TABLE] {
        &self.slab[self.id_of(table) as usize].entries
    }

    /// Models `free_pgtables()`/`free_pgd_range()`: frees every table below
    /// the PGD that maps only addresses in `[floor, ceiling)` and holds no
    /// present entry, bottom-up. Tables whose range reaches outside
    /// `[floor, ceiling)` stay, because a neighbouring VMA may use them.
    /// With `floor = 0, ceiling = u64::MAX` it frees every empty table.
    pub fn free_pgd_range(&mut self, pa: &mut PageAlloc, cx: &mut Cx, floor: u64, ceiling: u64) {
        let pgd = self.pgd_id;
        self.free_range_in(pa, cx, pgd, Level::Pgd, 0, floor..ceiling);
    }

    /// Frees empty child tables of the table `id` (of `level`, mapping from
    /// `base`) inside `floor..ceiling`; returns true if the table is now
    /// empty.
    fn free_range_in(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        id: u32,
        level: Level,
        base: u64,
        bounds: std::ops::Range<u64>,
    ) -> bool {
        let (floor, ceiling) = (bounds.start, bounds.end);
        let Some(child_level) = level.next() else {
            return self.slab[id as usize].entries.iter().all(|&e| !present(e));
        };
        let span = 1u64 << level.shift();
        for i in 0..PTRS_PER_TABLE {
            let e = self.slab[id as usize].entries[i];
            if !present(e) || e & PAGE_PSE != 0 {
                continue;
            }
            let start = base + i as u64 * span;
            let end = start.saturating_add(span);
            if end <= floor || start >= ceiling {
                continue;
            }
            let child = self.child_of(id, i);
            let empty = self.free_range_in(pa, cx, child, child_level, start, floor..ceiling);
            if empty && start >= floor && end <= ceiling {
                let child_pfn = self.meta[child as usize].pfn;
                let slot = self.slot_at(id, i);
                self.set(slot, 0);
                self.free_table(pa, cx, child_pfn);
            }
        }
        self.slab[id as usize].entries.iter().all(|&e| !present(e))
    }

    /// Frees the PGD itself (`pgd_free()`); every lower table must be gone.
    pub fn free_pgd(mut self, pa: &mut PageAlloc, cx: &mut Cx) {
        assert_eq!(
            self.by_pfn.len(),
            1,
            "pgd_free with {} lower tables left",
            self.by_pfn.len() - 1
        );
        let pgd = self.pgd;
        self.free_table(pa, cx, pgd);
    }

    /// Every table's pfn, in pfn order (for checks).
    pub fn table_pfns(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.by_pfn.keys().copied()
    }

    /// The tables deposited with PMD leaves: `(PMD slot, table pfn)`.
    pub fn deposited(&self) -> impl Iterator<Item = (Slot, Pfn)> + '_ {
        self.deposited.iter().map(|(&s, &t)| (s, t))
    }

    /// Calls `f(addr, level, slot, entry)` for every present leaf entry (PTE,
    /// or a PMD leaf), in address order. For checks and differential tests.
    pub fn for_each_leaf(&self, mut f: impl FnMut(u64, Level, Slot, u64)) {
        self.leaves_in(self.pgd_id, Level::Pgd, 0, &mut f);
    }

    fn leaves_in(
        &self,
        id: u32,
        level: Level,
        base: u64,
        f: &mut impl FnMut(u64, Level, Slot, u64),
    ) {
        let span = 1u64 << level.shift();
        for (i, &e) in self.slab[id as usize].entries.iter().enumerate() {
            if !present(e) {
                continue;
            }
            let addr = base + i as u64 * span;
            let slot = self.slot_at(id, i);
            match level.next() {
                None => f(addr, level, slot, e),
                Some(_) if level == Level::Pmd && e & PAGE_PSE != 0 => f(addr, level, slot, e),
                Some(child) => self.leaves_in(self.child_of(id, i), child, addr, f),
            }
        }
    }

    /// Checks the representation's invariants (see [`PageTables`]): the
    /// pfn map and the slab agree, and every directory entry's child index
    /// names the table its pfn names. Panics with what is wrong.
    pub fn check_invariants(&self) {
        for (&pfn, &id) in &self.by_pfn {
            let m = self.meta[id as usize];
            assert_eq!(m.pfn, pfn, "table {pfn}: slab {id} holds {}", m.pfn);
            let t = &self.slab[id as usize];
            let want_len = if m.level == Level::Pte {
                0
            } else {
                PTRS_PER_TABLE
            };
            assert_eq!(t.child.len(), want_len, "table {pfn}: child index size");
            for i in 0..PTRS_PER_TABLE {
                let e = t.entries[i];
                if m.level == Level::Pte {
                    continue;
                }
                let want = if present(e) && e & PAGE_PSE == 0 {
                    self.id_of(entry_pfn(e))
                } else {
                    NO_TABLE
                };
                assert_eq!(
                    t.child[i], want,
                    "table {pfn} ({:?}) entry {i} ({e:#x}): child index {} but {want}",
                    m.level, t.child[i]
                );
            }
        }
        let (key, hint) = self.pmd_hint.get();
        if key != NO_HINT {
            let full = self.pmd_table_uncached(key << PUD_SHIFT);
            assert_eq!(
                full,
                Some(hint),
                "PMD-table hint for {:#x} is stale",
                key << PUD_SHIFT
            );
        }
        let (key, hint) = self.pte_hint.get();
        if key != NO_HINT {
            let full = self.pte_table_uncached(key << PMD_SHIFT);
            assert_eq!(
                full,
                Some(hint),
                "PTE-table hint for {:#x} is stale",
                key << PMD_SHIFT
            );
        }
        for &id in &self.free_ids {
            assert_eq!(
                self.meta[id as usize].pfn,
                Pfn(0),
                "free slab {id} names a table"
            );
        }
        assert_eq!(
            self.by_pfn.len() + self.free_ids.len(),
            self.slab.len(),
            "slab slots neither used nor free"
        );
    }

    /// Moves the PTE table deposited at `from` to the PMD slot `to`
    /// (`move_huge_pmd()` with `pmd_move_must_withdraw()`).
    pub fn move_deposit(&mut self, from: Slot, to: Slot) {
        let t = self.withdraw(from);
        let old = self.deposited.insert(to, t);
        assert!(old.is_none(), "two tables deposited at {to:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::CostTable;
    use crate::page_alloc::{MemoryLayout, NodeLayout, VmSysctl};
    use crate::types::VcpuId;

    const GIB: u64 = 1 << PUD_SHIFT;

    fn setup() -> (PageAlloc, Cx, PageTables) {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 1,
                nr_pages: 1 << 14,
            }],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
        let pt = PageTables::new(&mut pa, &mut cx).unwrap();
        (pa, cx, pt)
    }

    fn pte(pfn: u64) -> u64 {
        mk_entry(Pfn(pfn), PAGE_PRESENT | PAGE_RW)
    }

    #[test]
    fn freed_tables_are_reused_and_walks_follow_the_new_ones() {
        let (mut pa, mut cx, mut pt) = setup();
        let free = |pa: &PageAlloc| pa.nr_free_pages() + pa.nr_pcp_pages();
        let free0 = free(&pa);
        // One PTE under each of two 1 GiB regions: PGD + 2 PUD-level paths.
        let a = 3 * GIB + 0x20_1000;
        let b = 4 * GIB + 0x40_0000;
        for (addr, pfn) in [(a, 0x111), (b, 0x222)] {
            let s = pt.walk_alloc(&mut pa, &mut cx, addr, Level::Pte).unwrap();
            pt.set(s, pte(pfn));
            pt.check_invariants();
        }
        // PGD, one PUD (both in the same 512 GiB), two PMD and two PTE tables.
        assert_eq!(pt.nr_tables(), 6);
        assert_eq!(
            pt.leaf(a).map(|(_, l, e)| (l, e)),
            Some((Level::Pte, pte(0x111)))
        );
        assert_eq!(
            pt.leaf(b).map(|(_, l, e)| (l, e)),
            Some((Level::Pte, pte(0x222)))
        );
        // Empty the first region and free its tables: the PMD table that the
        // last walk of `a` went through is gone.
        let s = pt.lookup(a, Level::Pte).unwrap();
        pt.set(s, 0);
        pt.free_pgd_range(&mut pa, &mut cx, 3 * GIB, 4 * GIB);
        pt.check_invariants();
        assert_eq!(pt.nr_tables(), 4);
        assert_eq!(pt.lookup(a, Level::Pmd), None);
        assert_eq!(pt.leaf(a), None);
        // A new walk there takes slab slots from the free list, and both
        // regions still resolve to their own entries.
        let s = pt.walk_alloc(&mut pa, &mut cx, a, Level::Pte).unwrap();
        pt.set(s, pte(0x333));
        pt.check_invariants();
        assert_eq!(pt.slab.len(), 6, "freed slots reused, no new ones");
        assert_eq!(pt.leaf(a).map(|(_, _, e)| e), Some(pte(0x333)));
        assert_eq!(pt.leaf(b).map(|(_, _, e)| e), Some(pte(0x222)));
        // Everything back.
        for addr in [a, b] {
            let s = pt.lookup(addr, Level::Pte).unwrap();
            pt.set(s, 0);
        }
        pt.free_pgd_range(&mut pa, &mut cx, 0, u64::MAX);
        pt.check_invariants();
        pt.free_pgd(&mut pa, &mut cx);
        assert_eq!(free(&pa), free0 + 1, "every table and the PGD freed");
    }

    /// `leaf()`'s straight-line path (the PMD hint covers the address)
    /// answers as the level-by-level walk from the PGD does, for a PTE that
    /// is set, one that is empty, a PMD leaf, an empty PMD entry and an
    /// address in a 1 GiB with no PMD table:
    ///
    /// ```text
    ///   GiB 2:  [PTE table: pte(0x10) at +0x1000, empty at +0x2000]
    ///           [PMD leaf at +0x20_0000] [empty PMD entry at +0x40_0000]
    ///   GiB 3:  no PMD table
    /// ```
    #[test]
    fn check_leaf_paths() {
        let (mut pa, mut cx, mut pt) = setup();
        let base = 2 * GIB;
        let s = pt
            .walk_alloc(&mut pa, &mut cx, base + 0x1000, Level::Pte)
            .unwrap();
        pt.set(s, pte(0x10));
        let pmd = pt
            .walk_alloc(&mut pa, &mut cx, base + 0x20_0000, Level::Pmd)
            .unwrap();
        pt.set(pmd, mk_entry(Pfn(0x200), PAGE_PRESENT | PAGE_RW | PAGE_PSE));
        pt.check_invariants();
        let addrs = [
            base + 0x1000,
            base + 0x1fff,
            base + 0x2000,
            base + 0x20_0000,
            base + 0x3f_ffff,
            base + 0x40_0000,
            3 * GIB + 0x1000,
        ];
        for a in addrs {
            // Through the hint (walk once so that it covers `a`'s GiB)...
            let _ = pt.lookup(base, Level::Pmd);
            let hinted = pt.leaf_pos(a);
            let entry = pt.leaf(a).map(|(_, _, e)| e);
            assert_eq!(
                pt.leaf_entry_mut(a).map(|e| *e),
                entry,
                "leaf_entry_mut({a:#x})"
            );
            // ...and with it forgotten, from the PGD.
            pt.pmd_hint.set((NO_HINT, NO_TABLE));
            pt.pte_hint.set((NO_HINT, NO_TABLE));
            let walked = pt.leaf_walk(a);
            assert_eq!(hinted, walked, "leaf({a:#x})");
        }
        assert_eq!(
            pt.leaf(base + 0x1000).map(|(_, l, e)| (l, e)),
            Some((Level::Pte, pte(0x10)))
        );
        assert_eq!(
            pt.leaf(base + 0x2000).map(|(_, l, e)| (l, e)),
            Some((Level::Pte, 0))
        );
        assert_eq!(
            pt.leaf(base + 0x20_1000).map(|(_, l, _)| l),
            Some(Level::Pmd)
        );
        assert_eq!(pt.leaf(base + 0x40_0000), None);
        assert_eq!(pt.leaf(3 * GIB), None);
    }

    #[test]
    fn a_range_walk_skips_what_has_no_table_and_finds_every_pmd_slot() {
        // Two PTEs far apart in a 1 TiB range: one in the first 512 GiB
        // (PGD entry 0), one at 700 GiB (PGD entry 1), nothing else.
        //   PGD  [0: table]                  [1: table]
        //   PUD  [3: table]                  [188: table]
        //   PMD  [1: table]                  [0: table]
        let (mut pa, mut cx, mut pt) = setup();
        let a = 3 * GIB + PMD_SIZE + 0x5000;
        let b = 700 * GIB + 0x3000;
        for (addr, pfn) in [(a, 0x111), (b, 0x222)] {
            let s = pt.walk_alloc(&mut pa, &mut cx, addr, Level::Pte).unwrap();
            pt.set(s, pte(pfn));
        }
        // An empty PGD entry is skipped whole, an empty PUD entry to its
        // 1 GiB end; a present PMD table gives its slot.
        assert_eq!(pt.lookup_or_skip(1024 * GIB, Level::Pmd), Err(1536 * GIB));
        assert_eq!(pt.lookup_or_skip(GIB + 0x1000, Level::Pmd), Err(2 * GIB));
        assert_eq!(
            pt.lookup_or_skip(a, Level::Pmd),
            Ok(pt.lookup(a, Level::Pmd).unwrap())
        );
        assert_eq!(pt.lookup_or_skip(u64::MAX, Level::Pmd), Err(u64::MAX));
        // Walking [0, 1 TiB) by skips finds the same PMD slots as stepping
        // by 2 MiB: one step per entry of each PUD table and per slot of
        // each PMD table, instead of 2^19.
        let end = 1024 * GIB;
        let stepped: Vec<Slot> = (0..end)
            .step_by(PMD_SIZE as usize)
            .filter_map(|x| pt.lookup(x, Level::Pmd))
            .collect();
        let (mut skipped, mut steps, mut x) = (Vec::new(), 0, 0);
        while x < end {
            steps += 1;
            match pt.lookup_or_skip(x, Level::Pmd) {
                Ok(s) => {
                    skipped.push(s);
                    x += PMD_SIZE;
                }
                Err(skip) => x = skip.min(end),
            }
        }
        assert_eq!(skipped, stepped);
        assert_eq!(skipped.len(), 2 * 512, "two PMD tables' slots");
        assert_eq!(steps, 2 * (511 + 512));
    }

    #[test]
    fn moving_a_pud_entry_moves_the_walk() {
        // mremap()'s move of a whole PMD table: the PUD entry is set at the
        // new place and cleared at the old one; walks that went through the
        // old place must not find the table there any more.
        let (mut pa, mut cx, mut pt) = setup();
        let old = 5 * GIB + 0x1000;
        let new = 7 * GIB + 0x1000;
        let s = pt.walk_alloc(&mut pa, &mut cx, old, Level::Pte).unwrap();
        pt.set(s, pte(0x444));
        let from = pt.lookup(old, Level::Pud).unwrap();
        let to = pt.walk_alloc(&mut pa, &mut cx, new, Level::Pud).unwrap();
        assert!(pt.leaf(old).is_some(), "a walk of the old place first");
        let e = pt.get(from);
        pt.set(to, e);
        pt.set(from, 0);
        pt.check_invariants();
        assert_eq!(pt.leaf(old), None);
        assert_eq!(pt.lookup(old, Level::Pmd), None);
        assert_eq!(pt.leaf(new).map(|(_, _, e)| e), Some(pte(0x444)));
        let slot = pt.lookup(new, Level::Pte).unwrap();
        assert_eq!(slot, s, "the same PTE table, reached from the new place");
    }

    #[test]
    fn a_pmd_leaf_has_no_child_and_a_split_gets_one() {
        let (mut pa, mut cx, mut pt) = setup();
        let addr = GIB + PMD_SIZE;
        let pmd = pt.walk_alloc(&mut pa, &mut cx, addr, Level::Pmd).unwrap();
        pt.deposit(&mut pa, &mut cx, pmd).unwrap();
        pt.set(pmd, mk_entry(Pfn(0x200), PAGE_PRESENT | PAGE_RW | PAGE_PSE));
        pt.check_invariants();
        assert_eq!(pt.pte_table(pmd), None);
        assert_eq!(pt.leaf(addr + 0x5000).map(|(_, l, _)| l), Some(Level::Pmd));
        // Split: the deposited table replaces the leaf.
        let t = pt.withdraw(pmd);
        let first = pt.slot(t, 0);
        for i in 0..PTRS_PER_TABLE {
            pt.set(first.with_index(i), pte(0x200 + i as u64));
        }
        pt.set(pmd, mk_entry(t, PAGE_PRESENT | PAGE_RW));
        pt.check_invariants();
        assert_eq!(pt.pte_table(pmd), Some(first));
        assert_eq!(pt.leaf(addr + 0x5000).map(|(_, _, e)| e), Some(pte(0x205)));
    }
}
