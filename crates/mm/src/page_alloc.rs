//! The zoned buddy allocator: models mm/page_alloc.c of Linux 6.6.
//!
//! # How a buddy system works
//!
//! Free memory of a zone is kept as naturally aligned blocks of `2^order`
//! pages, order 0 to [`MAX_ORDER`], one free list per (order, migratetype).
//! Two blocks of the same order are *buddies* when they differ only in bit
//! `order` of their pfn. Allocating order `o` takes the smallest free block of
//! order ≥ `o` and splits it in halves (`expand()`), putting the unused upper
//! halves back on lower-order lists. Freeing a block looks up its buddy; if
//! the buddy is free and of the same order they merge into one block of the
//! next order, and the step repeats (`__free_one_page()`). So as long as
//! everything allocated is freed, the free lists return to their initial
//! state: a few maximal blocks.
//!
//! # Migratetypes and fallback
//!
//! Memory is grouped by mobility in pageblocks of `2^pageblock_order` pages,
//! each with a migratetype. An allocation looks on its own migratetype's lists
//! first and, only when they are empty, *falls back* to another type's lists,
//! in the kernel's fixed order, preferring the largest block and possibly
//! stealing its whole pageblock (`__rmqueue_fallback()`). Pageblocks are
//! aligned in the physical address space, not to a zone: a zone that begins
//! or ends inside one (a small ZONE_DMA32, a node of odd size) has a partial
//! pageblock there, and no pageblock operation crosses the zone's edge.
//!
//! # Deviations from Linux 6.6
//!
//! - Deviation: three migratetypes only (unmovable, movable, reclaimable): no
//!   CMA, no highatomic reserves, no isolation (no memory hotplug or
//!   `alloc_contig_range()` in the model).
//! - Deviation: no reclaim, no kswapd, no compaction: an allocation that fails
//!   at the min watermark fails (`ALLOC_FAIL` counts it), as an allocation
//!   with no reclaimable memory would end in the kernel.
//! - Deviation: every zone's pages are all managed (no memblock reservations),
//!   and a node's zones are contiguous (no holes).
//! - Deviation: every allocated block is prepared as a compound page (tails
//!   point at their head); the kernel does so only with `__GFP_COMP`.
//! - Deviation: no free page reporting, shuffling or page poisoning.

use crate::cacheline::{CpuTopology, LineOwners, MissWindow, PageData};
use crate::cost::{Cost, Cx, LockClass, LockId};
use crate::page::{
    FreeList, LazyRun, MemMap, PfnIdx, MT_MASK, MT_SHIFT, NIL, ORDER_MASK, PAGES_PER_SECTION,
    PFN_SECTION_SHIFT, PG_BUDDY, PG_HEAD, PG_PCP,
};
use crate::types::{NodeId, Pfn};
use crate::vmstat::{VmEvent, VmStat};
use std::fmt;

/// The largest buddy order (`MAX_ORDER` in 6.6, `MAX_PAGE_ORDER` since 6.8):
/// blocks of up to 4 MiB.
pub const MAX_ORDER: u8 = 10;
/// Number of buddy orders.
pub const NR_PAGE_ORDERS: usize = MAX_ORDER as usize + 1;
/// Order of a pageblock, the unit of mobility grouping (`pageblock_order` =
/// `HPAGE_PMD_ORDER` on x86-64 with THP).
pub const PAGEBLOCK_ORDER: u8 = 9;
/// Pages in a pageblock.
pub const PAGEBLOCK_NR_PAGES: u64 = 1 << PAGEBLOCK_ORDER;
/// Orders above this are "costly" and never kept on PCP lists, except the
/// pageblock order for THP.
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;

pub use crate::page::PG_TAIL;

/// The mobility of an allocation and of a pageblock (`enum migratetype`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum MigrateType {
    /// Kernel allocations that can never move.
    Unmovable = 0,
    /// User pages and page cache: can be migrated.
    Movable = 1,
    /// Slab caches that can be shrunk.
    Reclaimable = 2,
}

/// Number of migratetypes kept on PCP lists (`MIGRATE_PCPTYPES`).
pub const MIGRATE_PCPTYPES: usize = 3;
/// Number of migratetypes in the model.
pub const MIGRATE_TYPES: usize = 3;

impl MigrateType {
    /// Every migratetype, in the kernel's numbering.
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
    ];

    /// The migratetype numbered `v`.
    pub fn from_u8(v: u8) -> MigrateType {
        match v {
            0 => MigrateType::Unmovable,
            1 => MigrateType::Movable,
            2 => MigrateType::Reclaimable,
            _ => panic!("no migratetype {v}"),
        }
    }

    /// The name /proc/pagetypeinfo uses.
    pub fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "Unmovable",
            MigrateType::Movable => "Movable",
            MigrateType::Reclaimable => "Reclaimable",
        }
    }

    /// The order in which other types' lists are tried (`fallbacks[]`).
    fn fallbacks(self) -> [MigrateType; 2] {
        match self {
            MigrateType::Unmovable => [MigrateType::Reclaimable, MigrateType::Movable],
            MigrateType::Movable => [MigrateType::Reclaimable, MigrateType::Unmovable],
            MigrateType::Reclaimable => [MigrateType::Unmovable, MigrateType::Movable],
        }
    }
}

/// A zone type (`enum zone_type`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum ZoneType {
    /// Memory below 4 GiB, for devices that can address only 32 bits.
    Dma32,
    /// All other memory.
    Normal,
}

impl ZoneType {
    /// The zone's name as in /proc/zoneinfo.
    pub fn name(self) -> &'static str {
        match self {
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
        }
    }
}

/// Allocation flags (`gfp_t`), reduced to what the model distinguishes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Gfp(pub u32);

impl Gfp {
    /// `__GFP_MOVABLE`: the allocation can be migrated; also allows ZONE_NORMAL.
    pub const MOVABLE: Gfp = Gfp(1 << 0);
    /// `__GFP_RECLAIMABLE`: slab that can be shrunk.
    pub const RECLAIMABLE: Gfp = Gfp(1 << 1);
    /// `__GFP_DMA32`: only ZONE_DMA32 or below.
    pub const DMA32: Gfp = Gfp(1 << 2);
    /// `__GFP_THISNODE`: no fallback to other nodes.
    pub const THISNODE: Gfp = Gfp(1 << 3);
    /// `__GFP_ZERO`: the allocator clears the pages before returning them
    /// (`post_alloc_hook()` → `kernel_init_pages()`), as for an anonymous
    /// fault's page (6.6 `vma_alloc_zeroed_movable_folio()`:
    /// `GFP_HIGHUSER_MOVABLE | __GFP_ZERO`), a kernel stack or a page table.
    pub const ZERO: Gfp = Gfp(1 << 4);
    /// `GFP_KERNEL`: unmovable kernel memory.
    pub const KERNEL: Gfp = Gfp(0);
    /// `GFP_HIGHUSER_MOVABLE`: user pages.
    pub const HIGHUSER_MOVABLE: Gfp = Gfp::MOVABLE;

    /// True if every flag of `other` is set.
    pub fn contains(self, other: Gfp) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two flag sets.
    pub const fn or(self, other: Gfp) -> Gfp {
        Gfp(self.0 | other.0)
    }

    /// The migratetype of an allocation (`gfp_migratetype()`).
    pub fn migratetype(self) -> MigrateType {
        if self.contains(Gfp::MOVABLE) {
            MigrateType::Movable
        } else if self.contains(Gfp::RECLAIMABLE) {
            MigrateType::Reclaimable
        } else {
            MigrateType::Unmovable
        }
    }

    /// The highest zone the allocation may use (`gfp_zone()`).
    pub fn zone(self) -> ZoneType {
        if self.contains(Gfp::DMA32) {
            ZoneType::Dma32
        } else {
            ZoneType::Normal
        }
    }
}

/// Why an allocation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// No zone had a free block of the order above the min watermark
    /// (`-ENOMEM` in the kernel, after reclaim and the OOM killer).
    NoMem,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::NoMem => write!(f, "out of memory (ENOMEM)"),
        }
    }
}

impl std::error::Error for AllocError {}

/// Watermarks, indexed as the kernel's `enum zone_watermarks`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wmark {
    /// `WMARK_MIN`: only atomic/reclaim allocations go below it.
    Min = 0,
    /// `WMARK_LOW`: kswapd is woken below it; the fast path's mark.
    Low = 1,
    /// `WMARK_HIGH`: kswapd sleeps above it.
    High = 2,
}

/// Zone flags the model uses (`enum zone_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ZoneFlags {
    /// `ZONE_RECLAIM_ACTIVE`: kswapd is reclaiming. Never set in the model,
    /// which has no reclaim; kept so the PCP code reads like the kernel's.
    pub reclaim_active: bool,
    /// `ZONE_BELOW_HIGH` (6.7+): the zone failed its high watermark check.
    pub below_high: bool,
}

/// One zone of one node (`struct zone`).
///
/// Invariants (checked by [`PageAlloc::check_invariants`]): every free block
/// is on exactly the list of its order and stored migratetype, is naturally
/// aligned, lies inside the zone, and has no free buddy of the same order;
/// `nr_free_pages` is the sum of the free blocks' pages.
#[derive(Clone, Debug)]
pub struct Zone {
    /// Zone type.
    pub zone_type: ZoneType,
    /// Node the zone belongs to.
    pub node: NodeId,
    /// First pfn.
    pub zone_start_pfn: u64,
    /// Pages spanned (all managed in the model).
    pub spanned_pages: u64,
    /// Pages the buddy allocator manages (`zone_managed_pages()`).
    pub managed_pages: u64,
    /// Free lists per order and migratetype (`free_area[].free_list[]`).
    pub free_area: [[FreeList; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    /// Free blocks per order (`free_area[].nr_free`).
    pub nr_free: [u64; NR_PAGE_ORDERS],
    /// Free pages in the buddy lists (`NR_FREE_PAGES`).
    pub nr_free_pages: u64,
    /// min, low, high watermarks in pages.
    pub watermark: [u64; 3],
    /// Pages kept back from allocations whose highest zone is the index
    /// (`lowmem_reserve[]`), indexed by `ZoneType as usize`.
    pub lowmem_reserve: [u64; 2],
    /// Zone flags.
    pub flags: ZoneFlags,
    /// Index of the zone in [`PageAlloc::zones`] (and of its lock).
    pub idx: u32,
    /// Who last wrote the lines the zone lock protects (the `free_area[]`
    /// heads and the buddies' `struct page`s), when the machine's topology
    /// is known ([`PageAlloc::set_cpu_topology`]), or the `struct page`
    /// lines alone when only the LLC's size is ([`PageAlloc::set_llc_lines`]).
    lines: Option<Box<ZoneLines>>,
}

/// The last writers of a zone's lines under `zone->lock` ([`crate::cacheline`]).
#[derive(Clone, Debug)]
struct ZoneLines {
    /// The topology; `None`: only the LLC model's `struct page` lines are
    /// kept, and free-list operations keep their whole-operation costs.
    topo: Option<CpuTopology>,
    /// One line per order: the order's list heads and `nr_free`.
    free_area: LineOwners,
    /// One line per page: its `struct page` (64 bytes on x86-64).
    pages: PageLines,
    /// The misses of the current hold of the lock, overlapped as the core
    /// overlaps them ([`MissWindow`]); charged at the unlock.
    window: MissWindow,
}

/// The key of `free_area[order]`'s line in a [`MissWindow`] (the pages'
/// lines are keyed by pfn, which never comes near it).
#[inline]
fn free_area_key(order: u8) -> u64 {
    u64::MAX - order as u64
}

/// The `struct page` lines of a zone, by section: a section's records exist
/// once one of its pages is touched (a machine of petabytes keeps a few
/// bytes per section), as the memmap itself.
#[derive(Clone, Debug, Default)]
struct PageLines {
    /// Per section of the zone (from the zone's first section): 0, or the
    /// index + 1 of its records in `sections`.
    slot: Vec<u32>,
    sections: Vec<SectionLines>,
}

/// One section's records: its `struct page` lines, and its pages' data.
#[derive(Clone, Debug)]
struct SectionLines {
    owners: LineOwners,
    data: Vec<PageData>,
}

impl PageLines {
    fn new(zone_start_pfn: u64, spanned_pages: u64) -> PageLines {
        let first = zone_start_pfn / PAGES_PER_SECTION;
        let end = (zone_start_pfn + spanned_pages).div_ceil(PAGES_PER_SECTION);
        PageLines {
            slot: vec![0; (end - first) as usize],
            sections: Vec::new(),
        }
    }

    /// The records of `pfn`'s section, made on first use.
    #[inline]
    fn section(&mut self, pfn: u64, zone_start_pfn: u64) -> &mut SectionLines {
        let i = (pfn / PAGES_PER_SECTION - zone_start_pfn / PAGES_PER_SECTION) as usize;
        if self.slot[i] == 0 {
            self.sections.push(SectionLines {
                owners: LineOwners::new(PAGES_PER_SECTION as usize),
                data: vec![0; PAGES_PER_SECTION as usize],
            });
            self.slot[i] = self.sections.len() as u32;
        }
        &mut self.sections[self.slot[i] as usize - 1]
    }
}

impl Zone {
    fn new(zone_type: ZoneType, node: NodeId, start: u64, pages: u64, idx: u32) -> Zone {
        Zone {
            zone_type,
            node,
            zone_start_pfn: start,
            spanned_pages: pages,
            managed_pages: pages,
            free_area: std::array::from_fn(|_| std::array::from_fn(|_| FreeList::default())),
            nr_free: [0; NR_PAGE_ORDERS],
            nr_free_pages: 0,
            watermark: [0; 3],
            lowmem_reserve: [0; 2],
            flags: ZoneFlags::default(),
            idx,
            lines: None,
        }
    }

    /// True if free-list operations are charged per line they touch (the
    /// ownership model is on: the topology is known).
    #[inline]
    fn charges_lines(&self) -> bool {
        self.lines.as_ref().is_some_and(|l| l.topo.is_some())
    }

    /// This CPU reads and writes the `free_area[order]` line, whose
    /// address is known from the start: adds the transfer from its last
    /// writer to the hold's [`MissWindow`] and returns when the line is
    /// ready (nothing, 0, without a topology).
    #[inline]
    fn touch_free_area(&mut self, cx: &mut Cx, order: u8) -> u64 {
        let Some(l) = self.lines.as_deref_mut() else {
            return 0;
        };
        if l.topo.is_none() {
            return 0;
        }
        let cpu = cx.cpu;
        let (table, clocks) = cx.table_and_llc();
        let ns = l.free_area.touch(
            order as usize,
            cpu,
            self.node.0 as u32,
            l.topo.as_ref(),
            clocks,
            table,
        );
        l.window.miss(free_area_key(order), ns, 0)
    }

    /// A free-list operation reads and writes `pfn`'s `struct page`, whose
    /// address was known at `after` (0: computed; else when the line with
    /// the pointer to it arrived): adds the transfer from its last writer,
    /// or DRAM, to the hold's [`MissWindow`] and returns when the line is
    /// ready (nothing, 0, without a topology: the operation's whole cost
    /// covers it).
    #[inline]
    fn touch_page(&mut self, cx: &mut Cx, pfn: u64, after: u64) -> u64 {
        if !self.charges_lines() {
            return 0;
        }
        let ns = self.touch_struct_page(cx, pfn);
        match self.lines.as_deref_mut() {
            Some(l) => l.window.miss(pfn, ns, after),
            None => 0,
        }
    }

    /// This CPU reads and writes `pfn`'s `struct page` line (with the line
    /// records on): the nanoseconds the read waits, not charged.
    #[inline]
    fn touch_struct_page(&mut self, cx: &mut Cx, pfn: u64) -> u64 {
        let Some(l) = self.lines.as_deref_mut() else {
            return 0;
        };
        let sec = l.pages.section(pfn, self.zone_start_pfn);
        let i = (pfn % PAGES_PER_SECTION) as usize;
        let cpu = cx.cpu;
        let (table, clocks) = cx.table_and_llc();
        sec.owners
            .touch(i, cpu, self.node.0 as u32, l.topo.as_ref(), clocks, table)
    }

    /// One free-list operation's own work: its instructions and, without
    /// the line model, the miss on the `struct page` it charges as a whole.
    #[inline]
    fn charge_list_op(&self, cx: &mut Cx, whole: Cost) {
        cx.charge(if self.charges_lines() {
            Cost::BuddyListInsn
        } else {
            whole
        });
    }

    /// The zone's lock.
    #[inline]
    pub fn lock_id(&self) -> LockId {
        LockId {
            class: LockClass::Zone,
            index: self.idx,
        }
    }

    /// Takes `zone->lock` (`spin_lock_irqsave()`), recorded into `cx`.
    #[inline]
    pub fn lock(&self, cx: &mut Cx) -> ZoneLocked {
        cx.lock(self.lock_id());
        cx.charge(Cost::ZoneLockAcquire);
        ZoneLocked {
            lock: self.lock_id(),
        }
    }

    /// Releases `zone->lock`, taken by [`Zone::lock`], after charging the
    /// hold's line misses as the core overlapped them ([`MissWindow::finish`]).
    #[inline]
    pub fn unlock(&mut self, cx: &mut Cx, locked: ZoneLocked) {
        locked.check(self);
        // The hold's misses, as the core overlapped them.
        if let Some(l) = self.lines.as_deref_mut() {
            cx.charge_ns(l.window.finish());
        }
        cx.unlock(self.lock_id());
    }

    /// One past the last pfn.
    pub fn end_pfn(&self) -> u64 {
        self.zone_start_pfn + self.spanned_pages
    }

    /// True if `pfn` lies in the zone (`zone_spans_pfn()`).
    #[inline]
    pub fn spans(&self, pfn: u64) -> bool {
        pfn >= self.zone_start_pfn && pfn < self.end_pfn()
    }

    /// A watermark in pages.
    #[inline]
    pub fn wmark_pages(&self, w: Wmark) -> u64 {
        self.watermark[w as usize]
    }

    /// Puts a free block on a list (`__add_to_free_list()`).
    #[inline]
    fn add_to_free_list(
        &mut self,
        mem: &mut MemMap,
        p: PfnIdx,
        order: u8,
        mt: MigrateType,
        tail: bool,
    ) {
        mem.set_flags(p, buddy_flags(order, mt));
        let list = &mut self.free_area[order as usize][mt as usize];
        if tail {
            list.add_tail(mem, p);
        } else {
            list.add(mem, p);
        }
        self.nr_free[order as usize] += 1;
    }

    /// Takes a free block off its list (`del_page_from_free_list()`).
    #[inline]
    fn del_from_free_list(&mut self, mem: &mut MemMap, p: PfnIdx, order: u8) {
        let mt = mem.stored_mt(p) as usize;
        self.free_area[order as usize][mt].del(mem, p);
        mem.set_flags(p, 0);
        self.nr_free[order as usize] -= 1;
    }

    /// The first block of the `(order, mt)` list (`get_page_from_free_area()`),
    /// materialising its section if it is the front of a lazy run.
    #[inline]
    fn first_free(&mut self, mem: &mut MemMap, order: u8, mt: MigrateType) -> Option<PfnIdx> {
        self.free_area[order as usize][mt as usize].first(mem, buddy_flags(order, mt), 1 << order)
    }

    /// Moves a free block to another migratetype's list (`move_to_free_list()`).
    fn move_to_free_list(&mut self, mem: &mut MemMap, p: PfnIdx, order: u8, mt: MigrateType) {
        self.del_from_free_list(mem, p, order);
        self.add_to_free_list(mem, p, order, mt, true);
    }

    /// Models `expand()`: splits the block of order `high` at `p` down to
    /// order `low`, putting each unused upper half on the `mt` list. The
    /// block's address was known at `after` (in the hold's [`MissWindow`]):
    /// each half is at a computed offset from it; the list's old first
    /// entry, whose `prev` the add rewrites, is found through the head.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn expand(
        &mut self,
        mem: &mut MemMap,
        cx: &mut Cx,
        p: PfnIdx,
        low: u8,
        mut high: u8,
        mt: MigrateType,
        after: u64,
    ) {
        while high > low {
            high -= 1;
            let half = p.offset(1u32 << high);
            if self.charges_lines() {
                let head = self.touch_free_area(cx, high);
                if let Some(first) =
                    self.free_area[high as usize][mt as usize].first_pfn(mem, 1 << high)
                {
                    self.touch_page(cx, first, head);
                }
                self.touch_page(cx, mem.pfn(half).0, after);
            }
            self.add_to_free_list(mem, half, high, mt, false);
            cx.charge(Cost::BuddySplitStep);
        }
    }

    /// Models `__rmqueue_smallest()`: the smallest free block of order ≥
    /// `order` on `mt`'s lists, split down to `order`.
    ///
    /// With `max` > 1 (and no line model) it stands for up to `max` calls
    /// in a row, as `rmqueue_bulk()` makes them: returns the first block and
    /// how many consecutive blocks of `order` were taken (see
    /// [`Zone::expand_run`]); the lists, flags and charges end as `max`
    /// single calls would leave them. With `max` = 1 it is one call.
    #[inline]
    fn rmqueue_smallest(
        &mut self,
        mem: &mut MemMap,
        cx: &mut Cx,
        vmstat: &mut VmStat,
        order: u8,
        mt: MigrateType,
        max: u32,
    ) -> Option<(PfnIdx, u32)> {
        for current in order..=MAX_ORDER {
            let Some(p) = self.first_free(mem, current, mt) else {
                continue;
            };
            // The head, the block's struct page, then its successor (whose
            // prev pointer the unlink rewrites): three dependent lines. The
            // block may be the successor an earlier step fetched: it is
            // ready when that fetch arrived.
            let (mut head, mut at) = (0, 0);
            if self.charges_lines() {
                self.charge_list_op(cx, Cost::BuddyListOp);
                head = self.touch_free_area(cx, current);
                at = self.touch_page(cx, mem.pfn(p).0, head);
            }
            self.del_from_free_list(mem, p, current);
            if self.charges_lines() {
                let list = &self.free_area[current as usize][mt as usize];
                if let Some(next) = list.first_pfn(mem, 1 << current) {
                    self.touch_page(cx, next, at);
                }
                // The halves' addresses are the block's plus an offset,
                // known once the head gave the block.
                self.expand(mem, cx, p, order, current, mt, head);
                vmstat.count(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED, 1);
                return Some((p, 1));
            }
            let nr = max.clamp(1, 1 << (current - order));
            cx.charge_n(Cost::BuddyListOp, nr as u64);
            self.expand_run(mem, cx, p, order, current, mt, nr);
            vmstat.count(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED, nr as u64);
            return Some((p, nr));
        }
        None
    }

    /// `expand()` of the block of order `high` at `p` as `nr` calls of
    /// `__rmqueue_smallest()` for order `low` in a row leave it (no line
    /// model): they take its first `nr` blocks of order `low`, in address
    /// order, and the rest of it stays on the `mt` lists as aligned blocks.
    ///
    /// Why that is exact: the lists of orders `low..high` were empty (the
    /// search passed them), and each call takes the head of the lowest
    /// non-empty list, which is the lowest free part of this block; so after
    /// `j` calls the free part `[p + j << low, p + 1 << high)` lies on those
    /// lists as one block of each order whose bit is set in its size, the
    /// smallest lowest, each alone on its list. Every split makes one more
    /// piece, so the calls made `nr` + (pieces left) − 1 splits, each
    /// charged [`Cost::BuddySplitStep`]. With `nr` = 1 this is `expand()`.
    /// (Host speed only: the pages of the block are not put on lists and
    /// taken off again one by one.)
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn expand_run(
        &mut self,
        mem: &mut MemMap,
        cx: &mut Cx,
        p: PfnIdx,
        low: u8,
        high: u8,
        mt: MigrateType,
        nr: u32,
    ) {
        let left = (1u32 << high) - (nr << low);
        let mut end = 1u32 << high;
        for h in (low..high).rev() {
            if left & (1 << h) != 0 {
                end -= 1 << h;
                self.add_to_free_list(mem, p.offset(end), h, mt, false);
            }
        }
        cx.charge_n(Cost::BuddySplitStep, (nr + left.count_ones() - 1) as u64);
    }

    /// Models `can_steal_fallback()`: may a fallback allocation of `order`
    /// claim the whole pageblock for `start_mt`?
    fn can_steal_fallback(order: u8, start_mt: MigrateType) -> bool {
        order >= PAGEBLOCK_ORDER
            || order >= PAGEBLOCK_ORDER / 2
            || start_mt == MigrateType::Reclaimable
            || start_mt == MigrateType::Unmovable
    }

    /// Models `find_suitable_fallback()` with `only_stealable == false`.
    fn find_suitable_fallback(
        &self,
        order: u8,
        start_mt: MigrateType,
    ) -> Option<(MigrateType, bool)> {
        if self.nr_free[order as usize] == 0 {
            return None;
        }
        for fb in start_mt.fallbacks() {
            if self.free_area[order as usize][fb as usize].is_empty() {
                continue;
            }
            return Some((fb, Self::can_steal_fallback(order, start_mt)));
        }
        None
    }

    /// Models `move_freepages_block()` of 6.6: moves every free block of the
    /// pageblock holding `p` to `mt`'s lists; returns (free pages moved,
    /// pages of allocated movable blocks). Why the zone checks: a zone need
    /// not start or end on a pageblock boundary (a small ZONE_DMA32, a node
    /// of odd size), and the pages of its first or last pageblock that lie
    /// outside it are another zone's, under another lock and on another
    /// zone's lists. As the kernel does, a pageblock that begins before the
    /// zone is walked from `p` on, and one that ends after it is not moved
    /// at all (`(0, 0)`: the caller moves the block it found alone). A
    /// pageblock never crosses a section, so its pages are materialised
    /// together and contiguous in `PfnIdx`.
    fn move_freepages_block(&mut self, mem: &mut MemMap, p: PfnIdx, mt: MigrateType) -> (u64, u64) {
        let mut start = p.align_down(PAGEBLOCK_ORDER);
        let end = start.offset(PAGEBLOCK_NR_PAGES as u32);
        let first_pfn = mem.pfn(start).0;
        if !self.spans(first_pfn) {
            start = p;
        }
        if !self.spans(first_pfn + PAGEBLOCK_NR_PAGES - 1) {
            return (0, 0);
        }
        let (mut moved, mut movable) = (0u64, 0u64);
        let mut p = start;
        while p < end {
            let f = mem.flags(p);
            if f & PG_BUDDY != 0 {
                let o = (f & ORDER_MASK) as u8;
                self.move_to_free_list(mem, p, o, mt);
                moved += 1 << o;
                p = p.offset(1 << o);
            } else if f & (PG_HEAD | PG_PCP) != 0 {
                let o = (f & ORDER_MASK) as u8;
                let is_movable = ((f >> MT_SHIFT) & MT_MASK) as u8 == MigrateType::Movable as u8;
                if f & PG_HEAD != 0 && is_movable {
                    movable += 1 << o;
                }
                p = p.offset(1 << o);
            } else {
                p = p.offset(1);
            }
        }
        (moved, movable)
    }

    /// Models `steal_suitable_fallback()` of 6.6: how much of a foreign
    /// pageblock a fallback allocation takes over. Why: mixing mobility
    /// types in one pageblock fragments memory for good, so a block large
    /// enough is converted whole; a smaller one moves its free pages to
    /// `start_mt`'s lists and changes the pageblock's type only if at least
    /// half of it is then free or already of a compatible kind, so that
    /// pages freed later land on the lists that keep like with like.
    fn steal_suitable_fallback(
        &mut self,
        mem: &mut MemMap,
        p: PfnIdx,
        current_order: u8,
        start_mt: MigrateType,
        whole_block: bool,
    ) {
        let old_block_type = pageblock_migratetype(mem, p);
        if current_order >= PAGEBLOCK_ORDER {
            // A block of pageblock order or more: change every pageblock it spans.
            let nr_blocks = 1u32 << (current_order - PAGEBLOCK_ORDER);
            for b in 0..nr_blocks {
                mem.set_pageblock_mt(p.offset(b << PAGEBLOCK_ORDER), start_mt as u8);
            }
        } else if whole_block {
            let (free_pages, movable_pages) = self.move_freepages_block(mem, p, start_mt);
            if free_pages == 0 {
                // The pageblock crosses the zone's edge: only the block
                // found changes lists (the kernel's `goto single_page`).
                self.move_to_free_list(mem, p, current_order, start_mt);
                return;
            }
            // Pages compatible with the allocation: free ones, plus those of
            // the same mobility (the kernel can only tell movable from not).
            let alike_pages = if start_mt == MigrateType::Movable {
                movable_pages
            } else if old_block_type == MigrateType::Movable {
                PAGEBLOCK_NR_PAGES - (free_pages + movable_pages)
            } else {
                0
            };
            if free_pages + alike_pages >= PAGEBLOCK_NR_PAGES / 2 {
                mem.set_pageblock_mt(p, start_mt as u8);
            }
            // move_freepages_block() already moved the block we found.
            return;
        }
        self.move_to_free_list(mem, p, current_order, start_mt);
    }

    /// Models `__rmqueue_fallback()` of 6.6 (without `ALLOC_NOFRAGMENT`):
    /// moves a block of another migratetype onto `start_mt`'s lists.
    fn rmqueue_fallback(
        &mut self,
        mem: &mut MemMap,
        cx: &mut Cx,
        vmstat: &mut VmStat,
        order: u8,
        start_mt: MigrateType,
    ) -> bool {
        let mut found = None;
        // The largest available block approximates the pageblock with the
        // most free pages, which would be too costly to find exactly.
        for current in (order..=MAX_ORDER).rev() {
            let Some((fb, can_steal)) = self.find_suitable_fallback(current, start_mt) else {
                continue;
            };
            if !can_steal && start_mt == MigrateType::Movable && current > order {
                // A movable allocation that cannot claim the block: split the
                // smallest block instead, to limit fragmentation.
                for small in order..=MAX_ORDER {
                    if let Some((fb, cs)) = self.find_suitable_fallback(small, start_mt) {
                        found = Some((small, fb, cs));
                        break;
                    }
                }
            } else {
                found = Some((current, fb, can_steal));
            }
            break;
        }
        let Some((current, fb, can_steal)) = found else {
            return false;
        };
        let p = self
            .first_free(mem, current, fb)
            .expect("find_suitable_fallback found a non-empty list");
        cx.charge(Cost::BuddyListOp);
        self.steal_suitable_fallback(mem, p, current, start_mt, can_steal);
        vmstat.count(VmEvent::MM_PAGE_ALLOC_EXTFRAG, 1);
        true
    }

    /// Models `__rmqueue()`: a block of `order` for `mt`, falling back to
    /// other migratetypes, under the zone lock.
    pub(crate) fn rmqueue(
        &mut self,
        locked: &ZoneLocked,
        mem: &mut MemMap,
        cx: &mut Cx,
        vmstat: &mut VmStat,
        order: u8,
        mt: MigrateType,
    ) -> Option<PfnIdx> {
        let (p, _) = self.rmqueue_run(locked, mem, cx, vmstat, order, mt, 1)?;
        // Remember the migratetype of the list the block came from: the PCP
        // and the free path use it (`set_pcppage_migratetype()`).
        mem.set_flags(p, order as u32 | ((mt as u32) << MT_SHIFT));
        Some(p)
    }

    /// [`Zone::rmqueue`] called up to `max` times in a row (`rmqueue_bulk()`'s
    /// loop), as far as the blocks come from one free block: the first
    /// block taken and how many consecutive blocks of `order` (at least 1)
    /// follow it; `None` if there is none. The blocks' flags are the
    /// caller's to set. See [`Zone::rmqueue_smallest`].
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn rmqueue_run(
        &mut self,
        locked: &ZoneLocked,
        mem: &mut MemMap,
        cx: &mut Cx,
        vmstat: &mut VmStat,
        order: u8,
        mt: MigrateType,
        max: u32,
    ) -> Option<(PfnIdx, u32)> {
        locked.check(self);
        loop {
            if let Some(run) = self.rmqueue_smallest(mem, cx, vmstat, order, mt, max) {
                return Some(run);
            }
            if !self.rmqueue_fallback(mem, cx, vmstat, order, mt) {
                return None;
            }
        }
    }

    /// Models `buddy_merge_likely()`: is the parent block's buddy free, so
    /// that this block will probably merge further soon? (`p` is at `pfn`.)
    /// Reading the parent's buddy's struct page costs its line (inside the
    /// zone: the model keeps no lines outside it).
    fn buddy_merge_likely(
        &mut self,
        mem: &MemMap,
        cx: &mut Cx,
        p: PfnIdx,
        pfn: u64,
        order: u8,
    ) -> bool {
        if order >= MAX_ORDER - 1 {
            return false;
        }
        let higher_buddy = p.align_down(order + 1).buddy(order + 1);
        let higher_buddy_pfn = (pfn & !(1u64 << order)) ^ (1u64 << (order + 1));
        if !self.spans(higher_buddy_pfn) {
            return false;
        }
        self.touch_page(cx, higher_buddy_pfn, 0);
        mem.is_buddy_of_order(higher_buddy, order + 1)
    }

    /// Models `__free_one_page()`: returns a block to the buddy lists,
    /// merging it with free buddies as far as it goes, under the zone lock.
    pub(crate) fn free_one_page(
        &mut self,
        locked: &ZoneLocked,
        mem: &mut MemMap,
        cx: &mut Cx,
        mut p: PfnIdx,
        mut order: u8,
        mt: MigrateType,
    ) {
        locked.check(self);
        debug_assert!(p.is_aligned(order), "unaligned free of {p} order {order}");
        // The buddy is in the same section, so pfn and index move together;
        // the pfn is for the zone's bounds.
        let mut pfn = mem.pfn(p).0;
        self.nr_free_pages += 1 << order;
        while order < MAX_ORDER {
            let buddy = p.buddy(order);
            if !self.spans(pfn ^ (1u64 << order)) {
                break;
            }
            if !mem.is_buddy_of_order(buddy, order) {
                // find_buddy_page_pfn() read the buddy's struct page to
                // learn that it is not free: a line its user last wrote,
                // at an address computed from the pfn.
                self.touch_page(cx, pfn ^ (1u64 << order), 0);
                break;
            }
            if self.charges_lines() {
                cx.charge(Cost::BuddyListInsn);
            } else {
                cx.charge(Cost::BuddyMergeStep);
            }
            let at = self.touch_page(cx, pfn ^ (1u64 << order), 0);
            self.touch_free_area(cx, order);
            // list_del() of the buddy rewrites its neighbours' list
            // pointers: their struct pages (or the list head, above),
            // found through the buddy's line.
            if self.charges_lines() {
                for n in [mem.prev(buddy), mem.next(buddy)] {
                    if n != NIL {
                        self.touch_page(cx, mem.pfn(PfnIdx(n)).0, at);
                    }
                }
            }
            self.del_from_free_list(mem, buddy, order);
            p = p.align_down(order + 1);
            pfn &= !(1u64 << order);
            order += 1;
        }
        let to_tail = self.buddy_merge_likely(mem, cx, p, pfn, order);
        self.charge_list_op(cx, Cost::BuddyListOp);
        if self.charges_lines() {
            let list = &self.free_area[order as usize][mt as usize];
            let neighbour = if to_tail {
                list.last_pfn(mem)
            } else {
                list.first_pfn(mem, 1 << order)
            };
            // The neighbour is found through the head (or, at the tail,
            // through the head's prev pointer).
            let head = self.touch_free_area(cx, order);
            if let Some(n) = neighbour {
                self.touch_page(cx, n, head);
            }
            self.touch_page(cx, pfn, 0);
        }
        self.add_to_free_list(mem, p, order, mt, to_tail);
    }

    /// Models `__zone_watermark_ok()`: are there `mark` pages free beyond the
    /// lowmem reserve for an allocation whose highest zone is `highest`, and
    /// a free block of at least `order`?
    pub fn watermark_ok(&self, order: u8, mark: u64, highest: ZoneType) -> bool {
        let free = self.nr_free_pages as i64 - ((1i64 << order) - 1);
        let reserve = if highest > self.zone_type {
            self.lowmem_reserve[highest as usize]
        } else {
            0
        };
        if free <= (mark + reserve) as i64 {
            return false;
        }
        if order == 0 {
            return true;
        }
        (order..=MAX_ORDER).any(|o| {
            self.nr_free[o as usize] > 0
                && MigrateType::ALL
                    .iter()
                    .any(|&mt| !self.free_area[o as usize][mt as usize].is_empty())
        })
    }
}

/// Proof that the caller holds a zone's `zone->lock`: where the kernel says
/// in a comment that "the caller holds the zone lock" (`__rmqueue()`,
/// `__free_one_page()`), the model asks for this token. Only [`Zone::lock`]
/// makes one (and [`ZoneLocked::at_boot`], before any CPU runs), and
/// [`Zone::unlock`] consumes it, so a token cannot outlive its lock section
/// or be used on another zone.
#[must_use = "a zone lock that is never released"]
#[derive(Debug)]
pub struct ZoneLocked {
    lock: LockId,
}

impl ZoneLocked {
    /// The zone's lock at boot (`memblock_free_all()`), when nothing else
    /// runs: the model neither records nor times it.
    fn at_boot(zone: &Zone) -> ZoneLocked {
        ZoneLocked {
            lock: zone.lock_id(),
        }
    }

    /// Panics if this token is not for `zone`'s lock.
    #[inline]
    fn check(&self, zone: &Zone) {
        debug_assert_eq!(self.lock, zone.lock_id(), "zone lock token of another zone");
    }
}

/// The flags of a free block's head on a buddy list: `PG_buddy`, its order
/// and the migratetype of its list.
#[inline]
fn buddy_flags(order: u8, mt: MigrateType) -> u32 {
    PG_BUDDY | order as u32 | ((mt as u32) << MT_SHIFT)
}

/// The migratetype of the pageblock holding `p` (`get_pageblock_migratetype()`).
#[inline]
pub fn pageblock_migratetype(mem: &MemMap, p: PfnIdx) -> MigrateType {
    MigrateType::from_u8(mem.pageblock_mt(p))
}

/// The layout of one node's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLayout {
    /// CPUs of the node.
    pub nr_cpus: u32,
    /// Pages of memory on the node.
    pub nr_pages: u64,
}

/// The machine's memory and CPUs as the allocator sees them.
///
/// CPUs are numbered node by node: node 0 has CPUs `0..nodes[0].nr_cpus`.
/// Node 0's first `dma32_pages` form ZONE_DMA32 (4 GiB on x86-64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLayout {
    /// Nodes in order.
    pub nodes: Vec<NodeLayout>,
    /// Pages of node 0 that form ZONE_DMA32.
    pub dma32_pages: u64,
}

impl MemoryLayout {
    /// Total pages of the machine.
    pub fn total_pages(&self) -> u64 {
        self.nodes.iter().map(|n| n.nr_pages).sum()
    }

    /// Total CPUs of the machine.
    pub fn nr_cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.nr_cpus).sum()
    }

    /// The zones of the machine, node by node, lowest first:
    /// `(node, zone type, first pfn, pages)`. Node 0's memory below the
    /// DMA32 limit is ZONE_DMA32; the rest of every node is ZONE_NORMAL.
    /// Empty zones are left out.
    pub fn zone_ranges(&self) -> Vec<(NodeId, ZoneType, u64, u64)> {
        let mut zones = Vec::new();
        let mut start = 0u64;
        for (nid, node) in self.nodes.iter().enumerate() {
            let dma = if nid == 0 {
                self.dma32_pages.min(node.nr_pages)
            } else {
                0
            };
            for (zone_type, pages) in [
                (ZoneType::Dma32, dma),
                (ZoneType::Normal, node.nr_pages - dma),
            ] {
                if pages > 0 {
                    zones.push((NodeId(nid as u16), zone_type, start, pages));
                    start += pages;
                }
            }
        }
        zones
    }

    /// The sections that booting on this layout materialises: those a zone
    /// boundary or the end of memory cuts (see [`PageAlloc::new`]).
    pub fn boot_sections(&self) -> std::collections::BTreeSet<u64> {
        let mut cut = std::collections::BTreeSet::new();
        for (_, _, start, pages) in self.zone_ranges() {
            let end = start + pages;
            let (full_lo, full_hi) = (
                start.next_multiple_of(PAGES_PER_SECTION),
                end / PAGES_PER_SECTION * PAGES_PER_SECTION,
            );
            if full_lo >= full_hi {
                cut.extend(start >> PFN_SECTION_SHIFT..=(end - 1) >> PFN_SECTION_SHIFT);
                continue;
            }
            if start < full_lo {
                cut.insert(start >> PFN_SECTION_SHIFT);
            }
            if full_hi < end {
                cut.insert(full_hi >> PFN_SECTION_SHIFT);
            }
        }
        cut
    }

    /// Host bytes of the page allocator right after booting on this layout:
    /// the section table, the sections [`MemoryLayout::boot_sections`]
    /// materialises and the per-CPU pagesets. Independent of how much
    /// memory is free. A workload adds 16 bytes for each page of every
    /// section it touches ([`MemMap::BYTES_PER_MATERIALISED_SECTION`] a
    /// section) and its page tables.
    pub fn boot_host_bytes(&self) -> u64 {
        let sections = self.total_pages().div_ceil(PAGES_PER_SECTION);
        let nr_zones = self.zone_ranges().len() as u64;
        sections * MemMap::BYTES_PER_SECTION as u64
            + self.boot_sections().len() as u64 * MemMap::BYTES_PER_MATERIALISED_SECTION
            + self.nr_cpus() as u64 * nr_zones * std::mem::size_of::<PerCpuPages>() as u64
    }
}

/// The allocator's sysctls (`vm.*`), by their kernel names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmSysctl {
    /// `vm.min_free_kbytes`; `None` lets the kernel compute it at boot.
    pub min_free_kbytes: Option<u64>,
    /// `vm.watermark_scale_factor`, in 1/10000 of a zone (default 10).
    pub watermark_scale_factor: u64,
    /// `vm.percpu_pagelist_high_fraction`: 0 (size `high` from the low
    /// watermark) or ≥ 8 (a fraction of the zone).
    pub percpu_pagelist_high_fraction: u32,
    /// `vm.lowmem_reserve_ratio` of ZONE_DMA32 (default 256).
    pub lowmem_reserve_ratio_dma32: u64,
}

impl Default for VmSysctl {
    fn default() -> Self {
        VmSysctl {
            min_free_kbytes: None,
            watermark_scale_factor: 10,
            percpu_pagelist_high_fraction: 0,
            lowmem_reserve_ratio_dma32: 256,
        }
    }
}

/// The zones [`PageAlloc::new`] makes on `layout`, in order: `(type, node,
/// pages)`. Node 0's memory below the DMA32 limit is ZONE_DMA32; the rest of
/// every node is ZONE_NORMAL. Empty zones are not created. Every page is
/// managed (the model reserves none at boot).
pub fn zone_sizes(layout: &MemoryLayout) -> Vec<(ZoneType, NodeId, u64)> {
    layout
        .zone_ranges()
        .into_iter()
        .map(|(node, zone_type, _, pages)| (zone_type, node, pages))
        .collect()
}

/// Models `__setup_per_zone_wmarks()` of 6.6 on zones of `managed` pages:
/// `min_free_kbytes` in force and each zone's `[min, low, high]`. The min
/// watermarks share `min_free_kbytes` by zone size; low and high lie one and
/// two "kswapd distances" above: a quarter of min, or
/// `watermark_scale_factor` ten-thousandths of the zone, whichever is larger.
pub fn zone_watermarks(managed: &[u64], sysctl: &VmSysctl) -> (u64, Vec<[u64; 3]>) {
    let lowmem_pages: u64 = managed.iter().sum();
    let min_free_kbytes = sysctl
        .min_free_kbytes
        .unwrap_or_else(|| calculate_min_free_kbytes(lowmem_pages));
    let pages_min = min_free_kbytes >> 2;
    let wmarks = managed
        .iter()
        .map(|&m| {
            // u128: min_free_kbytes times a zone's pages overflows u64 on a
            // large machine with a large (accepted) min_free_kbytes.
            let min = (pages_min as u128 * m as u128 / lowmem_pages.max(1) as u128) as u64;
            let dist = (min >> 2).max(m * sysctl.watermark_scale_factor / 10_000);
            [min, min + dist, min + 2 * dist]
        })
        .collect();
    (min_free_kbytes, wmarks)
}

/// Integer square root (`int_sqrt()`).
fn int_sqrt(x: u64) -> u64 {
    if x < 2 {
        return x;
    }
    let mut r = (x as f64).sqrt() as u64;
    while r * r > x {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= x {
        r += 1;
    }
    r
}

/// Models `calculate_min_free_kbytes()` of 6.6: `sqrt(lowmem_kbytes * 16)`,
/// clamped to [128, 262144].
pub fn calculate_min_free_kbytes(lowmem_pages: u64) -> u64 {
    let lowmem_kbytes = lowmem_pages * 4;
    int_sqrt(lowmem_kbytes * 16).clamp(128, 262_144)
}

pub use crate::pcp::PerCpuPages;

/// The page allocator of the whole machine: every node's zones, the per-CPU
/// pagesets, the page metadata and the counters.
#[derive(Clone, Debug)]
pub struct PageAlloc {
    /// Per-page metadata.
    pub mem: MemMap,
    /// Every zone, node by node, lowest zone first within a node.
    pub zones: Vec<Zone>,
    /// Per-CPU pagesets, `pcp[cpu * zones.len() + zone]`. Their `count`s
    /// change only through the PCP functions (which keep `nr_pcp_pages`).
    pub pcp: Vec<PerCpuPages>,
    /// The sum of every pageset's `count`.
    pub(crate) nr_pcp_pages: u64,
    /// Counters.
    pub vmstat: VmStat,
    /// The sysctls in force.
    pub sysctl: VmSysctl,
    /// The PCP policy in force.
    pub pcp_policy: crate::pcp::PcpPolicy,
    /// `min_free_kbytes` in force (computed or set).
    pub min_free_kbytes: u64,
    /// The hugetlb pool of the 2 MiB page size (`default_hstate`), whose
    /// pages are allocated blocks of this allocator.
    pub hugetlb: crate::hugetlb::Hstate,
    layout: MemoryLayout,
    cpu_node: Vec<NodeId>,
    /// Per node, the zones to try in order (`zonelist`), highest zone of the
    /// local node first, then the other nodes by distance.
    zonelists: Vec<Vec<u32>>,
    /// `node_distance(a, b)` as the firmware's SLIT gives it (10 = local),
    /// row-major; by default 10 on the diagonal and 20 elsewhere.
    distance: Vec<u32>,
    /// Per CPU, the memory policy of the task running there
    /// (`current->mempolicy`): `Some(node)` for `MPOL_PREFERRED`, `None`
    /// for the default (local) policy. Set by the driver whenever a task's
    /// operation starts on the CPU.
    task_mempolicy: Vec<Option<NodeId>>,
}

impl PageAlloc {
    /// Boots the allocator on `layout`: every page free, in maximal blocks,
    /// every pageblock movable, watermarks and pagesets sized as the kernel
    /// does.
    pub fn new(
        layout: &MemoryLayout,
        sysctl: VmSysctl,
        pcp_policy: crate::pcp::PcpPolicy,
    ) -> PageAlloc {
        let total = layout.total_pages();
        let zones: Vec<Zone> = layout
            .zone_ranges()
            .into_iter()
            .enumerate()
            .map(|(i, (node, zone_type, start, pages))| {
                Zone::new(zone_type, node, start, pages, i as u32)
            })
            .collect();
        let mut cpu_node = Vec::new();
        for (nid, node) in layout.nodes.iter().enumerate() {
            cpu_node.extend(std::iter::repeat_n(
                NodeId(nid as u16),
                node.nr_cpus as usize,
            ));
        }
        let nr_nodes = layout.nodes.len();
        // REMOTE_DISTANCE (20) between every pair until the machine's SLIT
        // is given (`set_node_distance`).
        let distance = (0..nr_nodes * nr_nodes)
            .map(|i| if i / nr_nodes == i % nr_nodes { 10 } else { 20 })
            .collect();
        let mut pa = PageAlloc {
            mem: MemMap::new(total),
            zones,
            pcp: Vec::new(),
            nr_pcp_pages: 0,
            vmstat: VmStat::default(),
            sysctl,
            pcp_policy,
            min_free_kbytes: 0,
            hugetlb: crate::hugetlb::Hstate::new(layout.nodes.len()),
            layout: layout.clone(),
            cpu_node,
            zonelists: Vec::new(),
            distance,
            task_mempolicy: Vec::new(),
        };
        pa.task_mempolicy = vec![None; pa.cpu_node.len()];
        pa.build_zonelists();
        pa.free_all_bootmem();
        pa.setup_per_zone_wmarks();
        pa.setup_lowmem_reserve();
        pa.setup_per_cpu_pagesets();
        pa
    }

    /// Models `build_zonelists()`: per node, its own zones (highest first),
    /// then the other nodes' in order of distance, nearer first and, on a
    /// tie, the lower node number first (as `find_next_best_node()` settles
    /// ties, less its load balancing between equally distant nodes).
    fn build_zonelists(&mut self) {
        let nr_nodes = self.layout.nodes.len();
        self.zonelists = (0..nr_nodes)
            .map(|local| {
                let mut order: Vec<usize> = (0..nr_nodes).collect();
                order.sort_by_key(|&n| (self.distance[local * nr_nodes + n], n != local, n));
                order
                    .into_iter()
                    .flat_map(|n| {
                        self.zones
                            .iter()
                            .filter(move |z| z.node.0 as usize == n)
                            .rev()
                            .map(|z| z.idx)
                            .collect::<Vec<_>>()
                    })
                    .collect()
            })
            .collect();
    }

    /// Sets the node distances (the ACPI SLIT, `node_distance()`), row-major
    /// `nodes × nodes`, and rebuilds the zonelists from them.
    ///
    /// Panics if the matrix is not square over the allocator's nodes or a
    /// node is not nearest to itself: the caller validates machine files.
    pub fn set_node_distance(&mut self, distance: &[u32]) {
        let n = self.layout.nodes.len();
        assert_eq!(
            distance.len(),
            n * n,
            "a distance matrix for {n} nodes needs {} entries",
            n * n
        );
        for a in 0..n {
            for b in 0..n {
                assert!(
                    distance[a * n + a] <= distance[a * n + b],
                    "node {a} must be nearest to itself"
                );
            }
        }
        self.distance = distance.to_vec();
        self.build_zonelists();
    }

    /// Turns on the cache-line ownership model of the zone lock's lines
    /// ([`crate::cacheline`]) for a machine of topology `topo`: from now on
    /// each free-list operation under `zone->lock` is charged its
    /// instructions (`buddy_list_insn_ns`) and a transfer of every line it
    /// touches that another CPU wrote last.
    pub fn set_cpu_topology(&mut self, topo: CpuTopology) {
        self.set_lines(Some(topo));
    }

    /// Keeps the `struct page` line records without a topology, for the
    /// LLC model ([`crate::cacheline::LlcClocks`], which the caller gives
    /// the [`Cx`]): the touches the fault paths make
    /// ([`PageAlloc::touch_struct_page`]) find a line cached or evicted;
    /// free-list operations keep their whole-operation costs. Nothing if
    /// the topology is already set.
    pub fn set_llc_lines(&mut self) {
        if self.zones.first().is_some_and(|z| z.lines.is_none()) {
            self.set_lines(None);
        }
    }

    fn set_lines(&mut self, topo: Option<CpuTopology>) {
        for z in &mut self.zones {
            z.lines = Some(Box::new(ZoneLines {
                topo,
                free_area: LineOwners::new(NR_PAGE_ORDERS),
                pages: PageLines::new(z.zone_start_pfn, z.spanned_pages),
                window: MissWindow::new(1),
            }));
        }
    }

    /// The core keeps `mlp` misses in flight under `zone->lock` (its L1
    /// line fill buffers): the lines a hold touches at addresses it already
    /// has overlap ([`MissWindow`]). 1 (the default) charges every line in
    /// turn. Nothing without the line records ([`PageAlloc::set_cpu_topology`]).
    pub fn set_lock_mlp(&mut self, mlp: u32) {
        for z in &mut self.zones {
            if let Some(l) = z.lines.as_deref_mut() {
                l.window = MissWindow::new(mlp);
            }
        }
    }

    /// The machine's CPU topology, if the cache-line model is on.
    pub fn cpu_topology(&self) -> Option<CpuTopology> {
        self.zones.first()?.lines.as_ref().and_then(|l| l.topo)
    }

    /// CPU `cx.cpu` reads and writes `pfn`'s `struct page` outside the
    /// zone lock (a fault's `page_folio()`, an rmap update): returns the
    /// nanoseconds the first load waits (a transfer from the line's last
    /// writer, or DRAM if nobody wrote it or its LLC has pushed it out;
    /// [`crate::cacheline::LineOwners::touch`]), 0 without line records.
    /// The caller charges it, or not where a fitted cost already holds it.
    #[inline]
    pub fn touch_struct_page(&mut self, cx: &mut Cx, pfn: Pfn) -> u64 {
        if self.zones.first().is_none_or(|z| z.lines.is_none()) {
            return 0;
        }
        let zi = self.page_zone(pfn);
        self.zones[zi].touch_struct_page(cx, pfn.0)
    }

    /// CPU `cx.cpu` clears or copies the `nr` pages from `pfn` (a copy
    /// calls this for the source and for the destination): their lines go
    /// through its LLC, pushing older lines out (the LLC model's clock;
    /// nothing without it). Charges nothing: the clear and copy costs are
    /// the caller's.
    #[inline]
    pub fn llc_stream(&mut self, cx: &mut Cx, pfn: Pfn, nr: u64) {
        if cx.llc_mut().is_none() || self.zones.first().is_none_or(|z| z.lines.is_none()) {
            return;
        }
        self.llc_stream_lines(cx, pfn, nr);
    }

    /// [`PageAlloc::llc_stream`] with the LLC model on (out of line: every
    /// fault calls the check, which is all there is without the model).
    #[inline(never)]
    fn llc_stream_lines(&mut self, cx: &mut Cx, pfn: Pfn, nr: u64) {
        let cpu = cx.cpu.0;
        // A folio lies in one zone and one section.
        let zi = self.page_zone(pfn);
        let z = &mut self.zones[zi];
        debug_assert!(z.spans(pfn.0 + nr - 1), "a stream across zones");
        let (Some(l), Some(c)) = (z.lines.as_deref_mut(), cx.llc_mut()) else {
            return;
        };
        let mut p = pfn.0;
        while p < pfn.0 + nr {
            let sec = l.pages.section(p, z.zone_start_pfn);
            let end = (pfn.0 + nr).min((p / PAGES_PER_SECTION + 1) * PAGES_PER_SECTION);
            for q in p..end {
                c.stream_page(cpu, &mut sec.data[(q % PAGES_PER_SECTION) as usize]);
            }
            p = end;
        }
    }

    /// `node_distance(a, b)`: 10 for a node to itself, larger further away.
    pub fn node_distance(&self, a: NodeId, b: NodeId) -> u32 {
        let n = self.layout.nodes.len();
        self.distance[a.0 as usize * n + b.0 as usize]
    }

    /// Number of nodes (`nr_node_ids`).
    pub fn nr_nodes(&self) -> usize {
        self.layout.nodes.len()
    }

    /// The first CPU of `node` (CPUs are numbered node by node).
    pub fn node_first_cpu(&self, node: NodeId) -> u32 {
        self.layout.nodes[..node.0 as usize]
            .iter()
            .map(|n| n.nr_cpus)
            .sum()
    }

    /// The node of the page `pfn` (`page_to_nid()`).
    pub fn pfn_to_nid(&self, pfn: Pfn) -> NodeId {
        self.zones[self.page_zone(pfn)].node
    }

    /// Models `split_page()`: turns the allocated block of `order` at `pfn`
    /// into `2^order` allocated order-0 blocks with the same migratetype,
    /// each freed on its own later. Refcounts are the caller's business
    /// (`__split_huge_page()` hands them out).
    pub fn split_page(&mut self, pfn: Pfn, order: u8) {
        let head = self.mem.idx(pfn);
        let f = self.mem.flags(head);
        assert!(
            f & PG_HEAD != 0 && (f & ORDER_MASK) as u8 == order,
            "split_page of {pfn}: not an allocated head of order {order} (flags {f:#x})"
        );
        let mt = (f >> MT_SHIFT) & MT_MASK;
        for t in 0..1u32 << order {
            self.mem
                .set_flags(head.offset(t), PG_HEAD | (mt << MT_SHIFT));
            self.mem.set_private(head.offset(t), 0);
        }
    }

    /// Hands every page of every zone to the buddy lists (`memblock_free_all()`).
    ///
    /// Deviation (see `page.rs`): the max-order blocks of sections that lie
    /// wholly inside a zone are not freed one by one; they go on the
    /// zone's movable max-order list as one lazy run, where the kernel's
    /// ascending frees (each to the list head) would have put them. Only
    /// the sections a zone boundary cuts are materialised. Boot costs
    /// O(zones), and O(sections) for the section table.
    fn free_all_bootmem(&mut self) {
        let mut cx = Cx::new(crate::types::VcpuId(0), crate::cost::CostTable::uniform(0));
        for zi in 0..self.zones.len() {
            let (start, end) = (self.zones[zi].zone_start_pfn, self.zones[zi].end_pfn());
            let full_lo = start.next_multiple_of(PAGES_PER_SECTION);
            let full_hi = end / PAGES_PER_SECTION * PAGES_PER_SECTION;
            if full_lo >= full_hi {
                self.free_bootmem_range(&mut cx, zi, start, end);
                continue;
            }
            self.free_bootmem_range(&mut cx, zi, start, full_lo);
            let z = &mut self.zones[zi];
            let run = LazyRun {
                lo: full_lo >> PFN_SECTION_SHIFT,
                hi: full_hi >> PFN_SECTION_SHIFT,
            };
            let blocks_per_section = PAGES_PER_SECTION >> MAX_ORDER;
            z.free_area[MAX_ORDER as usize][MigrateType::Movable as usize]
                .add_run(run, blocks_per_section);
            z.nr_free[MAX_ORDER as usize] += run.nr_sections() * blocks_per_section;
            z.nr_free_pages += full_hi - full_lo;
            self.free_bootmem_range(&mut cx, zi, full_hi, end);
        }
    }

    /// Frees the pages `[start, end)` of zone `zi` at boot in the largest
    /// aligned blocks, ascending (`__free_pages_memory()`), materialising
    /// their sections.
    fn free_bootmem_range(&mut self, cx: &mut Cx, zi: usize, start: u64, end: u64) {
        let mut pfn = start;
        while pfn < end {
            let mut order = MAX_ORDER.min(pfn.trailing_zeros() as u8);
            while pfn + (1 << order) > end {
                order -= 1;
            }
            let base = self.mem.materialise(pfn >> PFN_SECTION_SHIFT);
            let p = base.offset((pfn & (PAGES_PER_SECTION - 1)) as u32);
            let z = &mut self.zones[zi];
            z.free_one_page(
                &ZoneLocked::at_boot(z),
                &mut self.mem,
                cx,
                p,
                order,
                MigrateType::Movable,
            );
            pfn += 1 << order;
        }
    }

    /// Models `__setup_per_zone_wmarks()` of 6.6: shares `min_free_kbytes`
    /// among the zones by size (the min watermark) and sets low and high a
    /// kswapd distance above it. Why: the min reserve is what atomic and
    /// reclaim-time allocations may dip into; low and high bound kswapd's
    /// background reclaim so that ordinary allocations rarely reach min.
    pub fn setup_per_zone_wmarks(&mut self) {
        let managed: Vec<u64> = self.zones.iter().map(|z| z.managed_pages).collect();
        let (min_free_kbytes, wmarks) = zone_watermarks(&managed, &self.sysctl);
        self.min_free_kbytes = min_free_kbytes;
        for (z, w) in self.zones.iter_mut().zip(wmarks) {
            z.watermark = w;
        }
    }

    /// Models `setup_per_zone_lowmem_reserve()`: what ZONE_DMA32 keeps back
    /// from allocations that could use ZONE_NORMAL.
    fn setup_lowmem_reserve(&mut self) {
        let normal_pages: u64 = self
            .zones
            .iter()
            .filter(|z| z.node.0 == 0 && z.zone_type == ZoneType::Normal)
            .map(|z| z.managed_pages)
            .sum();
        for z in &mut self.zones {
            if z.zone_type == ZoneType::Dma32 {
                z.lowmem_reserve[ZoneType::Normal as usize] =
                    normal_pages / self.sysctl.lowmem_reserve_ratio_dma32.max(1);
            }
        }
    }

    /// The memory layout the allocator was booted on.
    pub fn layout(&self) -> &MemoryLayout {
        &self.layout
    }

    /// Number of CPUs.
    pub fn nr_cpus(&self) -> u32 {
        self.cpu_node.len() as u32
    }

    /// The node of `cpu` (`cpu_to_node()`).
    pub fn cpu_to_node(&self, cpu: crate::types::VcpuId) -> NodeId {
        self.cpu_node[cpu.idx()]
    }

    /// The nodes in the order `node`'s zonelist visits them (`node` first,
    /// then the others by distance).
    pub fn zonelist_nodes(&self, node: NodeId) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = Vec::new();
        for &zi in &self.zonelists[node.0 as usize] {
            let n = self.zones[zi as usize].node;
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
        nodes
    }

    /// Number of CPUs on `node`.
    pub fn node_nr_cpus(&self, node: NodeId) -> u32 {
        self.layout.nodes[node.0 as usize].nr_cpus
    }

    /// The zone holding `pfn` (`page_zone()`).
    #[inline]
    pub fn page_zone(&self, pfn: Pfn) -> usize {
        // Few zones: a linear scan beats a search.
        self.zones
            .iter()
            .position(|z| z.spans(pfn.0))
            .unwrap_or_else(|| panic!("{pfn} outside every zone"))
    }

    /// Total free pages in the buddy lists of every zone.
    pub fn nr_free_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.nr_free_pages).sum()
    }

    /// Total pages held on PCP lists of every CPU (O(1): kept as the
    /// lists change, since the engine asks after every operation).
    #[inline]
    pub fn nr_pcp_pages(&self) -> u64 {
        self.nr_pcp_pages
    }

    /// Marks a freshly allocated block as in use (`prep_new_page()`): the
    /// head carries the order and migratetype, tails point at the head.
    fn prep_new_page(&mut self, p: PfnIdx, order: u8, mt: MigrateType) {
        self.mem
            .set_flags(p, PG_HEAD | order as u32 | ((mt as u32) << MT_SHIFT));
        for t in 1..(1u32 << order) {
            self.mem.set_flags(p.offset(t), PG_TAIL);
            self.mem.set_private(p.offset(t), p.0);
        }
    }

    /// `prep_new_page()` and `free_pages_prepare()` write the block's head
    /// `struct page` (flags, count): with line records on, its line becomes
    /// this CPU's. Not charged: the allocator's and the free path's fitted
    /// costs hold these stores. Deviation: the tails' lines, which
    /// `prep_compound_page()` and `free_tail_page_prepare()` also write,
    /// keep their records (512 more records per THP would cost the model a
    /// fifth of its speed; a tail's line is next read by a split, which
    /// writes them all, or by the buddy code after the block is split).
    #[inline]
    fn block_written(&mut self, cx: &mut Cx, zi: usize, p: PfnIdx, order: u8) {
        let _ = order;
        if self.zones[zi].lines.is_some() {
            let pfn = self.mem.pfn(p);
            self.zones[zi].touch_struct_page(cx, pfn.0);
        }
    }

    /// Undoes [`PageAlloc::prep_new_page`] (`free_pages_prepare()`); returns
    /// the migratetype the block was allocated with.
    fn free_pages_prepare(&mut self, pfn: Pfn, p: PfnIdx, order: u8) -> MigrateType {
        let f = self.mem.flags(p);
        assert!(
            f & PG_HEAD != 0 && (f & ORDER_MASK) as u8 == order,
            "bad free of {pfn} order {order}: flags {f:#x} (not an allocated head of that order)"
        );
        for t in 1..(1u32 << order) {
            self.mem.set_flags(p.offset(t), 0);
            self.mem.set_private(p.offset(t), 0);
        }
        self.mem.set_flags(p, 0);
        MigrateType::from_u8(((f >> MT_SHIFT) & MT_MASK) as u8)
    }

    /// Models `rmqueue_buddy()`: a block straight from the buddy lists under
    /// the zone lock.
    fn rmqueue_buddy(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        order: u8,
        mt: MigrateType,
    ) -> Option<PfnIdx> {
        let z = &mut self.zones[zi];
        let locked = z.lock(cx);
        let pfn = z.rmqueue(&locked, &mut self.mem, cx, &mut self.vmstat, order, mt);
        if pfn.is_some() {
            z.nr_free_pages -= 1 << order;
        }
        z.unlock(cx, locked);
        pfn
    }

    /// Models `rmqueue()`: from the PCP for small orders and THP, else from
    /// the buddy lists.
    fn rmqueue(&mut self, cx: &mut Cx, zi: usize, order: u8, mt: MigrateType) -> Option<PfnIdx> {
        if crate::pcp::pcp_allowed_order(order) {
            if let Some(pfn) = self.rmqueue_pcplist(cx, zi, order, mt) {
                return Some(pfn);
            }
        }
        self.rmqueue_buddy(cx, zi, order, mt)
    }

    /// Models `get_page_from_freelist()`: walks the zonelist for the first
    /// zone above `mark` and allocates there. Returns the block and the
    /// zone's index (as a `u32`, so that the pair comes back in a register).
    #[inline(always)]
    fn get_page_from_freelist(
        &mut self,
        cx: &mut Cx,
        gfp: Gfp,
        order: u8,
        mark: Wmark,
        node: NodeId,
    ) -> Option<(PfnIdx, u32)> {
        let highest = gfp.zone();
        let mt = gfp.migratetype();
        for i in 0..self.zonelists[node.0 as usize].len() {
            let zi = self.zonelists[node.0 as usize][i] as usize;
            let z = &self.zones[zi];
            if z.zone_type > highest || (gfp.contains(Gfp::THISNODE) && z.node != node) {
                continue;
            }
            // Patch 8 of the PCP series: remember that the zone fell below its
            // high watermark, so that PCP high shrinks until a drain lifts it.
            if self
                .pcp_policy
                .has(crate::pcp::PcpPatch::BelowHighWatermark)
                && !z.flags.below_high
            {
                cx.charge(Cost::WatermarkCheck);
                if !z.watermark_ok(order, z.wmark_pages(Wmark::High), highest) {
                    self.zones[zi].flags.below_high = true;
                }
            }
            let z = &self.zones[zi];
            cx.charge(Cost::WatermarkCheck);
            if !z.watermark_ok(order, z.wmark_pages(mark), highest) {
                continue;
            }
            if let Some(pfn) = self.rmqueue(cx, zi, order, mt) {
                return Some((pfn, zi as u32));
            }
        }
        None
    }

    /// Models `alloc_pages()`: a block of `2^order` pages, from the local
    /// node of `cx.cpu` first, or from the preferred node of the running
    /// task's `MPOL_PREFERRED` policy (`alloc_pages_mpol()` with
    /// `policy_node()`; see [`PageAlloc::set_task_mempolicy`]). The fast
    /// path uses the low watermark; the slow path retries at the min
    /// watermark and, since the model has no reclaim, fails after that.
    ///
    /// Deviation: the policy is the task's (`set_mempolicy()`); VMA
    /// policies (`mbind()`), `MPOL_BIND`, `MPOL_INTERLEAVE` and the other
    /// modes are not modelled.
    #[inline]
    pub fn alloc_pages(&mut self, cx: &mut Cx, gfp: Gfp, order: u8) -> Result<Pfn, AllocError> {
        let node = self.task_mempolicy[cx.cpu.idx()].unwrap_or_else(|| self.cpu_to_node(cx.cpu));
        let got = self.alloc_pages_node(cx, node, gfp, order);
        if gfp.contains(Gfp::ZERO) {
            if let Ok(pfn) = got {
                self.clear_new_pages(cx, pfn, order);
            }
        }
        got
    }

    /// Sets the memory policy of the task now running on `cpu`
    /// (`current->mempolicy` as `set_mempolicy()` left it): `Some(node)` is
    /// `MPOL_PREFERRED` for `node`, `None` the default local policy.
    pub fn set_task_mempolicy(&mut self, cpu: crate::types::VcpuId, preferred: Option<NodeId>) {
        self.task_mempolicy[cpu.idx()] = preferred;
    }

    /// Models `__alloc_pages(gfp, order, nid, NULL)` (`alloc_pages_node()`):
    /// as [`PageAlloc::alloc_pages`] but starting from `node`'s zonelist;
    /// with `__GFP_THISNODE` only `node`'s zones are tried. Migration
    /// targets (`alloc_migration_target()`) come from here.
    pub fn alloc_pages_node(
        &mut self,
        cx: &mut Cx,
        node: NodeId,
        gfp: Gfp,
        order: u8,
    ) -> Result<Pfn, AllocError> {
        cx.charge(Cost::AllocPagesEntry);
        // The fast path at the low watermark, then the slow path's retry at
        // the min one. (One call site, so that the walk is inlined here and
        // its result stays in registers: host speed only.)
        let mut got = None;
        for mark in [Wmark::Low, Wmark::Min] {
            got = self.get_page_from_freelist(cx, gfp, order, mark, node);
            if got.is_some() {
                break;
            }
        }
        let Some((p, zi)) = got else {
            self.vmstat.count(VmEvent::ALLOC_FAIL, 1);
            return Err(AllocError::NoMem);
        };
        self.prep_new_page(p, order, gfp.migratetype());
        self.block_written(cx, zi as usize, p, order);
        let ev = match self.zones[zi as usize].zone_type {
            ZoneType::Dma32 => VmEvent::PGALLOC_DMA32,
            ZoneType::Normal => VmEvent::PGALLOC_NORMAL,
        };
        self.vmstat.count(ev, 1 << order);
        Ok(self.mem.pfn(p))
    }

    /// `__GFP_ZERO`'s clear of a new block (`kernel_init_pages()` in 6.6
    /// `post_alloc_hook()`): each page is cleared on this CPU, and its lines
    /// go through this CPU's caches (the LLC and L2 models' clocks). Out of
    /// line: the allocation's fast path stays as small as without it.
    #[cold]
    #[inline(never)]
    fn clear_new_pages(&mut self, cx: &mut Cx, pfn: Pfn, order: u8) {
        for i in 0..1u64 << order {
            cx.clear_page(Pfn(pfn.0 + i));
        }
        self.llc_stream(cx, pfn, 1 << order);
    }

    /// Models `__free_pages()`: returns a block allocated with `order`. Small
    /// orders and THP go to this CPU's PCP list (`free_unref_page()`), the
    /// rest to the buddy lists under the zone lock (`__free_pages_ok()`).
    pub fn free_pages(&mut self, cx: &mut Cx, pfn: Pfn, order: u8) {
        let p = self.mem.idx(pfn);
        cx.charge(Cost::FreePagesEntry);
        self.free_pages_prepare(pfn, p, order);
        let zi = self.page_zone(pfn);
        self.block_written(cx, zi, p, order);
        // The kernel frees to the pageblock's current migratetype.
        let mt = pageblock_migratetype(&self.mem, p);
        self.vmstat.count(VmEvent::PGFREE, 1 << order);
        if crate::pcp::pcp_allowed_order(order) {
            self.free_unref_page(cx, zi, p, order, mt);
        } else {
            self.free_one_page(cx, zi, p, order, mt);
        }
    }

    /// Models `free_one_page()`: one block to the buddy lists under the zone lock.
    pub(crate) fn free_one_page(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        p: PfnIdx,
        order: u8,
        mt: MigrateType,
    ) {
        let z = &mut self.zones[zi];
        let locked = z.lock(cx);
        z.free_one_page(&locked, &mut self.mem, cx, p, order, mt);
        z.unlock(cx, locked);
    }

    /// Checks every invariant of the allocator (like CONFIG_DEBUG_VM): free
    /// lists (lazy runs included), counts, flags, PCP lists, and that no
    /// page is in two places. Panics with a message naming the broken
    /// invariant. O(materialised pages + sections).
    pub fn check_invariants(&self) {
        self.hugetlb.check_pages(&self.mem);
        // Per materialised page: 0 unseen, 1 buddy, 2 pcp.
        let mut owner = vec![0u8; self.mem.nr_materialised() as usize];
        let mut runs = Vec::new();
        for z in &self.zones {
            self.check_free_area(z, &mut owner, &mut runs);
        }
        self.check_lazy_runs(&mut runs);
        self.check_pcp_lists(&mut owner);
        self.check_allocated(&owner);
    }

    /// The free lists of `z`: every block flagged, of its list's order and
    /// migratetype, aligned, inside the zone, merged with its buddy, and
    /// counted; its lazy runs are collected in `runs`.
    fn check_free_area(&self, z: &Zone, owner: &mut [u8], runs: &mut Vec<LazyRun>) {
        let name = z.zone_type.name();
        let mut free = 0u64;
        for order in 0..NR_PAGE_ORDERS {
            let mut n = 0u64;
            for mt in MigrateType::ALL {
                let list = &z.free_area[order][mt as usize];
                let mut len = 0u32;
                for p in list.iter(&self.mem) {
                    len += 1;
                    self.check_free_block(z, p, order as u8, mt, owner);
                }
                assert_eq!(len, list.materialised_len(), "free list length is wrong");
                for run in list.runs() {
                    assert_eq!(
                        order, MAX_ORDER as usize,
                        "{name}: a lazy run on the order-{order} list"
                    );
                    assert!(
                        run.lo < run.hi
                            && z.spans(run.lo * PAGES_PER_SECTION)
                            && z.spans(run.hi * PAGES_PER_SECTION - 1),
                        "{name}: lazy run {run:?} is empty or leaves its zone"
                    );
                    runs.push(run);
                }
                let lazy: u64 = list.runs().map(|r| r.nr_sections()).sum::<u64>()
                    * (PAGES_PER_SECTION >> MAX_ORDER);
                assert_eq!(lazy, list.nr_lazy_blocks(), "{name}: lazy block count");
                n += list.len();
            }
            assert_eq!(n, z.nr_free[order], "nr_free[{order}] of {name} is wrong");
            free += n << order;
        }
        assert_eq!(
            free, z.nr_free_pages,
            "NR_FREE_PAGES of {name} is {} but the lists hold {free}",
            z.nr_free_pages
        );
    }

    /// One materialised block `p` on the `(order, mt)` free list of `z`.
    fn check_free_block(&self, z: &Zone, p: PfnIdx, order: u8, mt: MigrateType, owner: &mut [u8]) {
        let pfn = self.mem.pfn(p);
        let f = self.mem.flags(p);
        assert!(
            f & PG_BUDDY != 0,
            "{}: {pfn} on a free list without PG_buddy",
            z.zone_type.name()
        );
        assert_eq!(
            (f & ORDER_MASK) as u8,
            order,
            "{pfn} on the order-{order} list has order {}",
            f & ORDER_MASK
        );
        assert_eq!(
            self.mem.stored_mt(p),
            mt as u8,
            "{pfn} on the {} list stores another migratetype",
            mt.name()
        );
        assert!(
            p.is_aligned(order) && pfn.0 & ((1 << order) - 1) == 0,
            "free block {pfn} of order {order} is not aligned"
        );
        assert!(
            z.spans(pfn.0) && z.spans(pfn.0 + (1 << order) - 1),
            "free block {pfn} leaves its zone"
        );
        for t in 0..1u32 << order {
            let i = p.offset(t).0 as usize;
            assert_eq!(
                owner[i],
                0,
                "{} is in two free blocks",
                pfn.offset(t as u64)
            );
            owner[i] = 1;
        }
        if order < MAX_ORDER {
            let buddy_pfn = pfn.0 ^ (1 << order);
            assert!(
                !(z.spans(buddy_pfn) && self.mem.is_buddy_of_order(p.buddy(order), order)),
                "free blocks {pfn} and {} of order {order} are buddies but did not merge",
                Pfn(buddy_pfn)
            );
        }
    }

    /// The lazy runs of every zone: disjoint, of unmaterialised sections,
    /// and together every section that is not materialised.
    fn check_lazy_runs(&self, runs: &mut [LazyRun]) {
        runs.sort_by_key(|r| r.lo);
        for w in runs.windows(2) {
            assert!(
                w[0].hi <= w[1].lo,
                "lazy runs {:?} and {:?} overlap",
                w[0],
                w[1]
            );
        }
        let mut lazy_sections = 0u64;
        for r in runs.iter() {
            for s in r.lo..r.hi {
                assert!(
                    !self.mem.section_materialised(s),
                    "section {s} of lazy run {r:?} is materialised"
                );
            }
            lazy_sections += r.nr_sections();
        }
        let materialised = self.mem.nr_materialised() / PAGES_PER_SECTION;
        assert_eq!(
            lazy_sections + materialised,
            self.mem.nr_sections(),
            "{} sections are neither materialised nor in a lazy run",
            self.mem.nr_sections() - lazy_sections - materialised
        );
    }

    /// Every PCP list: its blocks flagged and of its order, on no other
    /// list, and `count` right.
    fn check_pcp_lists(&self, owner: &mut [u8]) {
        let total: u64 = self.pcp.iter().map(|p| p.count as u64).sum();
        assert_eq!(
            total, self.nr_pcp_pages,
            "nr_pcp_pages is not the pagesets' sum"
        );
        for (i, pcp) in self.pcp.iter().enumerate() {
            pcp.check_high_bounds();
            let mut count = 0u64;
            for (pindex, list) in pcp.lists.iter().enumerate() {
                let order = crate::pcp::pindex_to_order(pindex);
                for p in list.iter(&self.mem) {
                    let pfn = self.mem.pfn(p);
                    let f = self.mem.flags(p);
                    assert!(
                        f & PG_PCP != 0,
                        "{pfn} on pcp list {pindex} of pageset {i} without PG_pcp"
                    );
                    assert_eq!(
                        (f & ORDER_MASK) as u8,
                        order,
                        "{pfn} on pcp list {pindex} has the wrong order"
                    );
                    for t in 0..1u32 << order {
                        let o = &mut owner[p.offset(t).0 as usize];
                        assert_eq!(
                            *o,
                            0,
                            "{} is both on a PCP list and elsewhere",
                            pfn.offset(t as u64)
                        );
                        *o = 2;
                    }
                    count += 1 << order;
                }
            }
            assert_eq!(
                count, pcp.count as u64,
                "pcp->count of pageset {i} is {} but its lists hold {count}",
                pcp.count
            );
        }
    }

    /// Every materialised page of the machine that is not free belongs to
    /// exactly one allocated block, whose tails point at its head.
    fn check_allocated(&self, owner: &[u8]) {
        for (base, section) in self.mem.materialised_sections() {
            let first_pfn = section * PAGES_PER_SECTION;
            let nr = PAGES_PER_SECTION.min(self.mem.len() - first_pfn) as u32;
            let mut off = 0u32;
            while off < nr {
                let p = base.offset(off);
                if owner[p.0 as usize] != 0 {
                    off += 1;
                    continue;
                }
                let pfn = Pfn(first_pfn + off as u64);
                let f = self.mem.flags(p);
                assert!(
                    f & PG_HEAD != 0,
                    "{pfn} is neither free nor the head of an allocated block (flags {f:#x})"
                );
                let order = (f & ORDER_MASK) as u8;
                for t in 1..(1u32 << order) {
                    let tail = p.offset(t);
                    assert!(
                        self.mem.flags(tail) & PG_TAIL != 0 && self.mem.private(tail) == p.0,
                        "tail {} of block {pfn} does not point at its head",
                        pfn.offset(t as u64)
                    );
                    assert_eq!(
                        owner[tail.0 as usize],
                        0,
                        "{} is both allocated and free",
                        pfn.offset(t as u64)
                    );
                }
                off += 1 << order;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cacheline::{LlcClocks, LINES_PER_PAGE};
    use crate::cost::CostTable;
    use crate::rng::SplitMix64;
    use crate::types::SimTime;
    use crate::types::VcpuId;

    /// A one-zone machine whose buddy lists hold blocks of many orders: a
    /// seeded mix of allocations of orders 0-3 and frees of some of them.
    fn fragmented(seed: u64) -> PageAlloc {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 1,
                nr_pages: 2 * PAGES_PER_SECTION,
            }],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
        let mut rng = SplitMix64(seed);
        let mut held = Vec::new();
        for _ in 0..3000 {
            if held.is_empty() || rng.below(3) != 0 {
                let order = rng.below(4) as u8;
                if let Some(p) = pa.rmqueue_buddy(&mut cx, 0, order, MigrateType::Movable) {
                    held.push((p, order));
                }
            } else {
                let (p, order) = held.swap_remove(rng.below(held.len() as u64) as usize);
                pa.free_one_page(&mut cx, 0, p, order, MigrateType::Movable);
            }
        }
        pa
    }

    /// Every free list of zone 0 as pfns, every materialised page's flags
    /// except those of `taken`, and the zone's counts.
    fn buddy_state(pa: &PageAlloc, taken: &[PfnIdx]) -> (Vec<Vec<u64>>, Vec<u32>, Vec<u64>) {
        let z = &pa.zones[0];
        let lists = z
            .free_area
            .iter()
            .flatten()
            .map(|l| l.iter(&pa.mem).map(|p| pa.mem.pfn(p).0).collect())
            .collect();
        let flags = (0..pa.mem.nr_materialised() as u32)
            .map(PfnIdx)
            .filter(|p| !taken.contains(p))
            .map(|p| pa.mem.flags(p))
            .collect();
        let mut counts = z.nr_free.to_vec();
        counts.push(z.nr_free_pages);
        (lists, flags, counts)
    }

    /// `rmqueue_run(max)` leaves the lists, flags, counters and charges as
    /// the same number of `rmqueue()` calls in a row, and hands out the
    /// blocks those calls return, in their order.
    #[test]
    fn rmqueue_run_is_rmqueue_repeated() {
        let mut table = CostTable::uniform(1);
        table.set(Cost::BuddyListOp, 100);
        table.set(Cost::BuddySplitStep, 10_000);
        let mut runs_longer_than_one = 0;
        for seed in 0..6 {
            let base = fragmented(seed);
            for order in [0u8, 1, 3] {
                for max in [1u32, 2, 5, 64, 1024] {
                    let (mut a, mut b) = (base.clone(), base.clone());
                    let mut cxa = Cx::new(VcpuId(0), table.clone());
                    let mut cxb = Cx::new(VcpuId(0), table.clone());
                    let mt = MigrateType::Movable;
                    let z = &mut a.zones[0];
                    let locked = ZoneLocked::at_boot(z);
                    let (first, nr) = z
                        .rmqueue_run(&locked, &mut a.mem, &mut cxa, &mut a.vmstat, order, mt, max)
                        .expect("free memory");
                    assert!((1..=max).contains(&nr));
                    runs_longer_than_one += (nr > 1) as u32;
                    let z = &mut b.zones[0];
                    let mut taken = Vec::new();
                    for _ in 0..nr {
                        let p = z
                            .rmqueue(&locked, &mut b.mem, &mut cxb, &mut b.vmstat, order, mt)
                            .expect("free memory");
                        taken.push(p);
                    }
                    let run: Vec<PfnIdx> = (0..nr).map(|i| first.offset(i << order)).collect();
                    assert_eq!(run, taken, "seed {seed} order {order} max {max}");
                    assert_eq!(buddy_state(&a, &taken), buddy_state(&b, &taken));
                    assert_eq!(a.vmstat, b.vmstat);
                    assert_eq!(cxa.compute_ns(), cxb.compute_ns());
                }
            }
        }
        assert!(runs_longer_than_one > 10, "the runs were all single blocks");
    }

    /// `__free_one_page()` reads the struct page of the buddy that ends its
    /// merging (`find_buddy_page_pfn()` finds it in use) and that of the
    /// parent block's buddy (`buddy_merge_likely()`): each read costs a
    /// transfer when another CPU wrote the line last, nothing when the
    /// freeing CPU did.
    ///
    /// ```text
    ///   pfn   P   P^1  P+2 P+3
    ///         A   A    [ free ]    CPU 0 takes P and P^1 (one split)
    ///         .   A    [ free ]    CPU 1 frees P: P^1 is in use (read),
    ///                              and the order-1 block at P+2 (read)
    /// ```
    #[test]
    fn a_free_reads_the_buddy_that_stops_it_and_the_parent_buddy() {
        const XFER: u64 = 1000;
        let (mut base, table) = two_cpu_lines(XFER);
        let mut cx = Cx::new(VcpuId(0), table.clone());
        let mt = MigrateType::Movable;
        let p = base.rmqueue_buddy(&mut cx, 0, 0, mt).expect("free memory");
        let q = base.rmqueue_buddy(&mut cx, 0, 0, mt).expect("free memory");
        assert_eq!(q, p.buddy(0), "the second page is the first one's buddy");
        let (buddy, higher) = (base.mem.pfn(q), Pfn(base.mem.pfn(p).0 + 2));
        // CPU 1 frees P after making the given lines its own first.
        let free_cost = |own: &[Pfn]| cpu1_free_ns(&base, &table, p, own);
        let all_remote = free_cost(&[]);
        assert_eq!(all_remote - free_cost(&[buddy]), XFER);
        assert_eq!(all_remote - free_cost(&[higher]), XFER);
        assert_eq!(all_remote - free_cost(&[buddy, higher]), 2 * XFER);
    }

    /// A merge takes the buddy off its list, and `list_del()` rewrites the
    /// list pointers of the buddy's two neighbours: their lines are
    /// charged like the buddy's own.
    ///
    /// ```text
    ///   pfn    B  +1  +2  +3  +4  +5  +6  +7
    ///          A   A   A   A   A   A   A   A   CPU 0 takes eight pages
    ///          A   .   A   .   A   .   A   A   CPU 0 frees +1, +3, +5:
    ///                                          order-0 list +5, +3, +1
    ///          A   .  [ +2+3 ]  A  .   A   A   CPU 1 frees +2: +3 leaves
    ///                                          the list between +5 and +1
    /// ```
    #[test]
    fn a_merge_pays_for_the_buddys_list_neighbours() {
        const XFER: u64 = 1000;
        let (base, table, b) = cpu0_takes_eight_frees(XFER, &[1, 3, 5]);
        let pfn = |i: u32| base.mem.pfn(b.offset(i));
        let (before, after) = (pfn(5), pfn(1));
        let free_cost = |own: &[Pfn]| cpu1_free_ns(&base, &table, b.offset(2), own);
        let all_remote = free_cost(&[]);
        assert_eq!(all_remote - free_cost(&[before]), XFER);
        assert_eq!(all_remote - free_cost(&[after]), XFER);
        assert_eq!(all_remote - free_cost(&[before, after]), 2 * XFER);
    }

    /// With the core's misses overlapped (`set_lock_mlp`), a merge still
    /// waits for the buddy before it can find the buddy's list neighbours
    /// (the same picture as above): the hold's memory time is that chain
    /// of two transfers, where every miss in turn costs each of its lines.
    #[test]
    fn overlapped_misses_leave_the_buddy_then_its_neighbours() {
        const XFER: u64 = 1000;
        let (mut base, table, b) = cpu0_takes_eight_frees(XFER, &[1, 3, 5]);
        let serial = cpu1_free_ns(&base, &table, b.offset(2), &[]);
        assert!(serial >= 5 * XFER, "every line in turn: {serial}");
        base.set_lock_mlp(16);
        assert_eq!(cpu1_free_ns(&base, &table, b.offset(2), &[]), 2 * XFER);
        // The buddy already CPU 1's: only the neighbours' transfer is left.
        let buddy = base.mem.pfn(b.offset(3));
        assert_eq!(cpu1_free_ns(&base, &table, b.offset(2), &[buddy]), XFER);
    }

    /// A refill that walks a free list of pages another CPU freed waits for
    /// each successor before it can find the next one: overlapping misses
    /// gains nothing there (CPU 0 frees four pages, CPU 1 takes them back
    /// in one hold: the head line, then four pages one after another).
    #[test]
    fn a_list_walk_under_the_lock_stays_serial() {
        const XFER: u64 = 1000;
        let (base, table, _) = cpu0_takes_eight_frees(XFER, &[1, 3, 5, 7]);
        let mt = MigrateType::Movable;
        let take_four = |mlp: u32| {
            let mut pa = base.clone();
            pa.set_lock_mlp(mlp);
            let mut cx = Cx::new(VcpuId(1), table.clone());
            cx.begin(VcpuId(1), SimTime(0));
            let z = &mut pa.zones[0];
            let locked = z.lock(&mut cx);
            for _ in 0..4 {
                z.rmqueue_run(&locked, &mut pa.mem, &mut cx, &mut pa.vmstat, 0, mt, 1)
                    .expect("a free page");
            }
            z.unlock(&mut cx, locked);
            cx.compute_ns()
        };
        assert_eq!(take_four(1), 5 * XFER);
        assert_eq!(take_four(16), 5 * XFER);
    }

    /// [`two_cpu_lines`] after CPU 0 took eight order-0 Movable pages (one
    /// split: neighbours from the first, which it returns) and freed those
    /// at the offsets `freed` from it, in that order.
    fn cpu0_takes_eight_frees(xfer_ns: u64, freed: &[u32]) -> (PageAlloc, CostTable, PfnIdx) {
        let (mut base, table) = two_cpu_lines(xfer_ns);
        let mut cx = Cx::new(VcpuId(0), table.clone());
        let mt = MigrateType::Movable;
        let pages: Vec<PfnIdx> = (0..8)
            .map(|_| base.rmqueue_buddy(&mut cx, 0, 0, mt).expect("free memory"))
            .collect();
        let b = pages[0];
        assert!(
            (0..8u32).all(|i| pages.contains(&b.offset(i))),
            "one split hands out eight neighbouring pages"
        );
        for &i in freed {
            base.free_one_page(&mut cx, 0, b.offset(i), 0, mt);
        }
        (base, table, b)
    }

    /// One node of two CPUs sharing an LLC, with the line model on, and a
    /// cost table in which only a core-to-core transfer (`xfer_ns`) costs.
    /// What CPU 1 computes to free the order-0 `page` of `base` (Movable)
    /// once the `struct page` lines of `own` are its own.
    fn cpu1_free_ns(base: &PageAlloc, table: &CostTable, page: PfnIdx, own: &[Pfn]) -> u64 {
        let mut pa = base.clone();
        let mut cx = Cx::new(VcpuId(1), table.clone());
        for &pfn in own {
            pa.touch_struct_page(&mut cx, pfn);
        }
        cx.begin(VcpuId(1), SimTime(0));
        pa.free_one_page(&mut cx, 0, page, 0, MigrateType::Movable);
        cx.compute_ns()
    }

    #[test]
    fn gfp_zero_clears_every_page_of_the_block_through_the_cpus_caches() {
        let (mut pa, mut table) = two_cpu_lines(0);
        table.set(Cost::ClearPage, 100);
        pa.set_llc_lines();
        let ns = |mut pa: PageAlloc, gfp: Gfp| {
            let mut cx = Cx::new(VcpuId(0), table.clone());
            cx.set_llc(LlcClocks::new(1 << 20, Some(TWO_CPUS), 2));
            cx.begin(VcpuId(0), SimTime(0));
            pa.alloc_pages(&mut cx, gfp, 2).expect("free memory");
            let llc = cx.llc_mut().map(|c| c.now(0));
            (cx.compute_ns(), llc)
        };
        let (plain, plain_llc) = ns(pa.clone(), Gfp::KERNEL);
        let (zeroed, zeroed_llc) = ns(pa, Gfp::KERNEL.or(Gfp::ZERO));
        assert_eq!(zeroed, plain + 4 * 100);
        // Its four pages' lines went through CPU 0's LLC.
        assert_eq!(zeroed_llc, plain_llc.map(|n| n + 4 * LINES_PER_PAGE));
        assert_eq!(
            Gfp::KERNEL.or(Gfp::ZERO).migratetype(),
            MigrateType::Unmovable
        );
    }

    /// Two CPUs, each a core of its own, sharing one LLC.
    const TWO_CPUS: CpuTopology = CpuTopology {
        cpus_per_node: 2,
        threads_per_core: 1,
        cores_per_llc: 2,
    };

    fn two_cpu_lines(xfer_ns: u64) -> (PageAlloc, CostTable) {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 2,
                nr_pages: 2 * PAGES_PER_SECTION,
            }],
            dma32_pages: 0,
        };
        let mut table = CostTable::uniform(0);
        table.set(Cost::C2cSameLlc, xfer_ns);
        let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
        pa.set_cpu_topology(TWO_CPUS);
        (pa, table)
    }
}
