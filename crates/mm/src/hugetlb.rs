//! The hugetlb page pool and `MAP_HUGETLB` mappings (mm/hugetlb.c and the
//! anonymous-file part of fs/hugetlbfs/inode.c; Linux 6.18).
//!
//! # The pool
//!
//! Huge pages for hugetlb mappings do not come from the page allocator at
//! fault time: they come from a pool per page size (`struct hstate`), filled
//! when the administrator writes `vm.nr_hugepages` (or
//! `/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages`).
//! [`set_max_huge_pages`] takes order-9 blocks from the buddy allocator
//! (`alloc_pool_huge_folio()`, one node after the other) and puts them on
//! the per-node free lists; shrinking the pool gives free ones back
//! (`update_and_free_hugetlb_folio()`). A pool page stays an allocated block
//! for the page allocator all the time it is in the pool.
//!
//! /proc/meminfo's four counters are the hstate's: `HugePages_Total` =
//! [`Hstate::nr_huge_pages`], `HugePages_Free` = [`Hstate::free_huge_pages`],
//! `HugePages_Rsvd` = [`Hstate::resv_huge_pages`] (promised to mappings but
//! not yet faulted), `HugePages_Surp` = [`Hstate::surplus_huge_pages`]
//! (pages above `nr_hugepages`, allocated on demand up to
//! `nr_overcommit_hugepages` and freed to the buddy allocator when no longer
//! used).
//!
//! # Reservations
//!
//! `mmap(MAP_HUGETLB)` reserves every huge page of the mapping at once
//! ([`hugetlb_reserve_pages`]); if the pool (plus what overcommit may add)
//! cannot promise them, mmap fails with `ENOMEM`. A fault then consumes the
//! reservation of its page. For a private mapping only the process that
//! called mmap owns reservations (`HPAGE_RESV_OWNER`); its reservation map
//! records which pages have consumed theirs. A forked child has none: its
//! copy-on-write faults take free pages that nobody reserved, or fail with
//! SIGBUS. `MAP_NORESERVE` skips the reservation altogether.
//!
//! # Faults and copy-on-write
//!
//! [`hugetlb_fault`] maps a whole huge page by one PMD entry.
//! [`hugetlb_no_page`] takes a page from the pool and clears it with
//! [`folio_zero_user`] in the kernel's sub-page order around the fault
//! address; a read fault on a private mapping maps it read-only (a later
//! write faults again and reuses it). [`hugetlb_wp`] handles a write to a
//! write-protected entry: the page is reused if this is its only mapping,
//! else a new one is taken from the pool and the whole huge page is copied
//! with [`copy_user_large_folio`] (unlike anonymous THP since 5.8, hugetlb
//! copy-on-write still copies 2 MiB). [`copy_hugetlb_page_range`] shares the
//! pages with a forked child, write-protecting private ones in both.
//!
//! # Deviations
//!
//! - Only the 2 MiB hstate exists (no 1 GiB gigantic pages, no
//!   `hugepagesz=`/`default_hugepagesz=`, no `MAP_HUGE_1GB`).
//! - Only `MAP_PRIVATE` anonymous hugetlb mappings; no hugetlbfs files, no
//!   `MAP_SHARED` (so no page cache, no PMD sharing, no subpools), no
//!   `SHM_HUGETLB`, no mremap, no userfaultfd, no memory policies
//!   (allocations start at the faulting CPU's node and fall back by
//!   distance), no cgroups, no vmemmap optimisation, no demotion.
//! - `hugetlb_lock`, the fault mutex table and the page-table lock are not
//!   modelled as locks; a pool list operation costs `buddy_list_op_ns` (a
//!   list move on a cold `struct page`, as for the buddy lists).
//! - When the reservation owner's copy-on-write finds no free page, the
//!   kernel unmaps the page from the children (`unmap_ref_private()`, they
//!   get SIGBUS if they touch it again) and retries; the model has no
//!   reverse map across processes and sends SIGBUS to the owner.
//! - `HPageRestoreReserve`: the model never fails between allocating a
//!   folio and mapping it, so a reservation is never given back at free.
//! - `nr_hugetlb` is decremented only for folios that `alloc_hugetlb_folio()`
//!   handed out (surplus pages freed unused by `gather_surplus_pages()` never
//!   counted).

use crate::cost::{Cost, Cx};
use crate::memory::huge_order::{
    copy_user_large_folio, folio_zero_user, process_huge_page_order, target_subpage_index,
    HugePageLog,
};
use crate::memory::{VmFault, Vmf};
use crate::page_alloc::{Gfp, PageAlloc};
use crate::pgtable::{
    entry_pfn, mk_entry, present, Level, PAGE_ACCESSED, PAGE_DIRTY, PAGE_PRESENT, PAGE_PSE,
    PAGE_RW, PMD_SIZE,
};
use crate::types::{NodeId, Pfn, Vaddr, HPAGE_PMD_ORDER};
use crate::vma::{Errno, MapFlags, MmStruct, VmFlags, Vma, MMAP_MIN_ADDR, TASK_SIZE};
use crate::vmstat::VmEvent;
use std::fmt;

/// Order of the (only) hugetlb page size, 2 MiB on x86-64 (`HUGETLB_PAGE_ORDER`).
pub const HUGETLB_PAGE_ORDER: u8 = HPAGE_PMD_ORDER;
/// Bytes in a hugetlb page (`huge_page_size(&default_hstate)`).
pub const HPAGE_SIZE: u64 = PMD_SIZE;
/// Base pages in a hugetlb page (`pages_per_huge_page()`).
pub const PAGES_PER_HUGE_PAGE: u32 = 1 << HUGETLB_PAGE_ORDER;
/// Page flag of an allocated block that is a hugetlb folio
/// (`folio_test_hugetlb()`), set on the head while the block belongs to
/// the pool or is mapped; bit 12 is `PG_PARTIALLY_MAPPED`.
pub const PG_HUGETLB: u32 = 1 << 13;

/// The pool's state on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct HstateNode {
    nr_huge_pages: u64,
    free_huge_pages: u64,
    surplus_huge_pages: u64,
    /// `hugepage_freelists[nid]`: free folios by head pfn; the kernel adds
    /// and takes at the list head, so the last entry is the head.
    freelist: Vec<Pfn>,
}

/// `struct hstate` of the 2 MiB page size: the pool, its counters and the
/// knobs that size it.
///
/// Invariants ([`Hstate::check`]): the global counters are the sums of the
/// per-node ones; each node's free list holds exactly its free pages;
/// `free <= nr`, `surplus <= nr`, `resv <= free`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hstate {
    /// `HugePages_Total`: pages in the pool, persistent and surplus.
    pub nr_huge_pages: u64,
    /// `HugePages_Free`: pool pages not in use.
    pub free_huge_pages: u64,
    /// `HugePages_Rsvd`: free pages promised to mappings.
    pub resv_huge_pages: u64,
    /// `HugePages_Surp`: pages above the persistent pool size.
    pub surplus_huge_pages: u64,
    /// `nr_overcommit_hugepages`: the most surplus pages allowed.
    pub nr_overcommit_huge_pages: u64,
    /// `max_huge_pages`: the persistent pool size last set.
    pub max_huge_pages: u64,
    nodes: Vec<HstateNode>,
    next_nid_to_alloc: usize,
    next_nid_to_free: usize,
    /// Huge page clears and copies, when recording (tests, cache models).
    pub log: HugePageLog,
}

/// The hugetlb lines of `/proc/meminfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HugetlbMeminfo {
    /// `HugePages_Total`.
    pub total: u64,
    /// `HugePages_Free`.
    pub free: u64,
    /// `HugePages_Rsvd`.
    pub rsvd: u64,
    /// `HugePages_Surp`.
    pub surp: u64,
}

impl fmt::Display for HugetlbMeminfo {
    /// As `hugetlb_report_meminfo()` prints them (2 MiB default hstate).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "HugePages_Total:   {:5}", self.total)?;
        writeln!(f, "HugePages_Free:    {:5}", self.free)?;
        writeln!(f, "HugePages_Rsvd:    {:5}", self.rsvd)?;
        writeln!(f, "HugePages_Surp:    {:5}", self.surp)?;
        writeln!(f, "Hugepagesize:   {:8} kB", HPAGE_SIZE >> 10)?;
        writeln!(
            f,
            "Hugetlb:        {:8} kB",
            self.total * (HPAGE_SIZE >> 10)
        )
    }
}

impl Hstate {
    /// An empty pool for a machine of `nr_nodes` nodes.
    pub fn new(nr_nodes: usize) -> Hstate {
        Hstate {
            nr_huge_pages: 0,
            free_huge_pages: 0,
            resv_huge_pages: 0,
            surplus_huge_pages: 0,
            nr_overcommit_huge_pages: 0,
            max_huge_pages: 0,
            nodes: vec![HstateNode::default(); nr_nodes.max(1)],
            next_nid_to_alloc: 0,
            next_nid_to_free: 0,
            log: HugePageLog::default(),
        }
    }

    /// The hugetlb lines of `/proc/meminfo`.
    pub fn meminfo(&self) -> HugetlbMeminfo {
        HugetlbMeminfo {
            total: self.nr_huge_pages,
            free: self.free_huge_pages,
            rsvd: self.resv_huge_pages,
            surp: self.surplus_huge_pages,
        }
    }

    /// `/sys/devices/system/node/node<N>/hugepages/hugepages-2048kB/`:
    /// (nr_hugepages, free_hugepages, surplus_hugepages) of `node`.
    pub fn node_counts(&self, node: NodeId) -> (u64, u64, u64) {
        let n = &self.nodes[node.0 as usize];
        (n.nr_huge_pages, n.free_huge_pages, n.surplus_huge_pages)
    }

    /// `persistent_huge_pages()`.
    pub fn persistent_huge_pages(&self) -> u64 {
        self.nr_huge_pages - self.surplus_huge_pages
    }

    /// `available_huge_pages()`: free pages nobody reserved.
    pub fn available_huge_pages(&self) -> u64 {
        self.free_huge_pages - self.resv_huge_pages
    }

    /// Checks the invariants stated on [`Hstate`]; panics naming the broken one.
    pub fn check(&self) {
        let sum = |f: fn(&HstateNode) -> u64| self.nodes.iter().map(f).sum::<u64>();
        assert_eq!(
            self.nr_huge_pages,
            sum(|n| n.nr_huge_pages),
            "nr_huge_pages"
        );
        assert_eq!(
            self.free_huge_pages,
            sum(|n| n.free_huge_pages),
            "free_huge_pages"
        );
        assert_eq!(
            self.surplus_huge_pages,
            sum(|n| n.surplus_huge_pages),
            "surplus_huge_pages"
        );
        for (nid, n) in self.nodes.iter().enumerate() {
            assert_eq!(
                n.freelist.len() as u64,
                n.free_huge_pages,
                "node {nid}: free list length vs free_huge_pages_node"
            );
            assert!(
                n.free_huge_pages <= n.nr_huge_pages,
                "node {nid}: free > nr"
            );
            assert!(
                n.surplus_huge_pages <= n.nr_huge_pages,
                "node {nid}: surplus > nr"
            );
        }
        assert!(
            self.resv_huge_pages <= self.free_huge_pages,
            "resv_huge_pages {} > free_huge_pages {}",
            self.resv_huge_pages,
            self.free_huge_pages
        );
    }

    /// [`Hstate::check`], and that every folio on a free list is an
    /// allocated order-9 block marked hugetlb, with no reference.
    pub fn check_pages(&self, mem: &crate::page::MemMap) {
        self.check();
        for (nid, n) in self.nodes.iter().enumerate() {
            for &head in &n.freelist {
                let f = mem.flags(head);
                assert!(
                    f & crate::page::PG_HEAD != 0
                        && f & PG_HUGETLB != 0
                        && (f & crate::page::ORDER_MASK) as u8 == HUGETLB_PAGE_ORDER,
                    "node {nid}: free hugetlb folio {head} has flags {f:#x}"
                );
                assert_eq!(
                    mem.refcount(head),
                    0,
                    "node {nid}: free hugetlb folio {head} has references"
                );
            }
        }
    }

    /// `hstate_next_node_to_alloc()`: the node to try, advancing the cursor.
    fn next_node_to_alloc(&mut self) -> usize {
        let nid = self.next_nid_to_alloc % self.nodes.len();
        self.next_nid_to_alloc = (nid + 1) % self.nodes.len();
        nid
    }

    /// `hstate_next_node_to_free()`.
    fn next_node_to_free(&mut self) -> usize {
        let nid = self.next_nid_to_free % self.nodes.len();
        self.next_nid_to_free = (nid + 1) % self.nodes.len();
        nid
    }
}

fn folio_nid(pa: &PageAlloc, head: Pfn) -> usize {
    pa.zones[pa.page_zone(head)].node.0 as usize
}

/// Models `alloc_buddy_hugetlb_folio()`: an order-9 block from the page
/// allocator (`htlb_alloc_mask()` is GFP_HIGHUSER_MOVABLE for the 2 MiB
/// size), on exactly `node` if given (`__GFP_THISNODE`), else from the
/// faulting CPU's node by distance; counts `htlb_buddy_alloc_success` or
/// `htlb_buddy_alloc_fail`. The block is marked as a hugetlb folio.
fn alloc_buddy_hugetlb_folio(pa: &mut PageAlloc, cx: &mut Cx, node: Option<NodeId>) -> Option<Pfn> {
    let r = match node {
        Some(n) => pa.alloc_pages_node(
            cx,
            n,
            Gfp::HIGHUSER_MOVABLE.or(Gfp::THISNODE),
            HUGETLB_PAGE_ORDER,
        ),
        None => pa.alloc_pages(cx, Gfp::HIGHUSER_MOVABLE, HUGETLB_PAGE_ORDER),
    };
    match r {
        Ok(pfn) => {
            pa.vmstat.count(VmEvent::HTLB_BUDDY_PGALLOC, 1);
            let head = pfn;
            let f = pa.mem.flags(head);
            pa.mem.set_flags(head, f | PG_HUGETLB);
            pa.mem.set_refcount(head, 0);
            pa.mem.set_entire_mapcount(head, 0);
            Some(head)
        }
        Err(_) => {
            pa.vmstat.count(VmEvent::HTLB_BUDDY_PGALLOC_FAIL, 1);
            None
        }
    }
}

/// Models `account_new_hugetlb_folio()`: a fresh folio joins the pool's count.
fn account_new_hugetlb_folio(pa: &mut PageAlloc, head: Pfn) {
    let nid = folio_nid(pa, head);
    let h = &mut pa.hugetlb;
    h.nr_huge_pages += 1;
    h.nodes[nid].nr_huge_pages += 1;
}

/// Models `enqueue_hugetlb_folio()`: a folio no one uses goes on its node's
/// free list.
fn enqueue_hugetlb_folio(pa: &mut PageAlloc, cx: &mut Cx, head: Pfn) {
    cx.charge(Cost::BuddyListOp);
    let nid = folio_nid(pa, head);
    let h = &mut pa.hugetlb;
    h.nodes[nid].freelist.push(head);
    h.nodes[nid].free_huge_pages += 1;
    h.free_huge_pages += 1;
}

/// Models `dequeue_hugetlb_folio_nodemask()`: the first free folio on the
/// nodes in `node`'s zonelist order.
fn dequeue_hugetlb_folio_nodemask(pa: &mut PageAlloc, cx: &mut Cx, node: NodeId) -> Option<Pfn> {
    for n in pa.zonelist_nodes(node) {
        let hn = &mut pa.hugetlb.nodes[n.0 as usize];
        if let Some(head) = hn.freelist.pop() {
            cx.charge(Cost::BuddyListOp);
            hn.free_huge_pages -= 1;
            pa.hugetlb.free_huge_pages -= 1;
            return Some(head);
        }
    }
    None
}

/// Models `remove_hugetlb_folio()`: `head` leaves the pool (off the free
/// list if it is on it), as a surplus page if `adjust_surplus`.
fn remove_hugetlb_folio(pa: &mut PageAlloc, head: Pfn, adjust_surplus: bool) {
    let nid = folio_nid(pa, head);
    let h = &mut pa.hugetlb;
    if let Some(i) = h.nodes[nid].freelist.iter().position(|&p| p == head) {
        h.nodes[nid].freelist.remove(i);
        h.nodes[nid].free_huge_pages -= 1;
        h.free_huge_pages -= 1;
    }
    if adjust_surplus {
        h.nodes[nid].surplus_huge_pages -= 1;
        h.surplus_huge_pages -= 1;
    }
    h.nodes[nid].nr_huge_pages -= 1;
    h.nr_huge_pages -= 1;
}

/// Models `update_and_free_hugetlb_folio()`: the block goes back to the
/// page allocator.
fn update_and_free_hugetlb_folio(pa: &mut PageAlloc, cx: &mut Cx, head: Pfn) {
    let f = pa.mem.flags(head);
    pa.mem.set_flags(head, f & !PG_HUGETLB);
    pa.free_pages(cx, head, HUGETLB_PAGE_ORDER);
}

/// Models `alloc_pool_huge_folio()`: one fresh folio for the persistent
/// pool, trying each node once from the allocation cursor on
/// (`__GFP_THISNODE`). Returns false if no node had one.
pub fn alloc_pool_huge_folio(pa: &mut PageAlloc, cx: &mut Cx) -> bool {
    for _ in 0..pa.hugetlb.nodes.len() {
        let nid = pa.hugetlb.next_node_to_alloc();
        if let Some(head) = alloc_buddy_hugetlb_folio(pa, cx, Some(NodeId(nid as u16))) {
            account_new_hugetlb_folio(pa, head);
            enqueue_hugetlb_folio(pa, cx, head);
            return true;
        }
    }
    false
}

/// Models `remove_pool_hugetlb_folio()`: takes a free folio off the pool,
/// from the free cursor's node on; with `acct_surplus` only from nodes
/// that have surplus pages, and counted as one.
fn remove_pool_hugetlb_folio(pa: &mut PageAlloc, acct_surplus: bool) -> Option<Pfn> {
    for _ in 0..pa.hugetlb.nodes.len() {
        let nid = pa.hugetlb.next_node_to_free();
        let n = &pa.hugetlb.nodes[nid];
        if (!acct_surplus || n.surplus_huge_pages > 0) && !n.freelist.is_empty() {
            let head = *n.freelist.last().expect("not empty");
            remove_hugetlb_folio(pa, head, acct_surplus);
            return Some(head);
        }
    }
    None
}

/// Models `adjust_pool_surplus()`: turns one surplus page into a
/// persistent one (`delta < 0`) or one persistent page into surplus.
fn adjust_pool_surplus(h: &mut Hstate, delta: i8) -> bool {
    for _ in 0..h.nodes.len() {
        let nid = if delta < 0 {
            h.next_node_to_alloc()
        } else {
            h.next_node_to_free()
        };
        let n = &mut h.nodes[nid];
        if delta < 0 && n.surplus_huge_pages > 0 {
            n.surplus_huge_pages -= 1;
            h.surplus_huge_pages -= 1;
            return true;
        }
        if delta > 0 && n.surplus_huge_pages < n.nr_huge_pages {
            n.surplus_huge_pages += 1;
            h.surplus_huge_pages += 1;
            return true;
        }
    }
    false
}

/// Models `set_max_huge_pages()`: a write of `count` to `nr_hugepages`.
/// Grows the persistent pool (first by taking surplus pages into it, then
/// with fresh folios from the buddy allocator, stopping at the first node
/// round that finds none), or shrinks it: free pages go back to the buddy
/// allocator as long as the reservations stay covered, and pages in use
/// above `count` become surplus, freed when their last user lets go.
/// Returns the persistent pool size reached (`max_huge_pages`).
pub fn set_max_huge_pages(pa: &mut PageAlloc, cx: &mut Cx, count: u64) -> u64 {
    while pa.hugetlb.surplus_huge_pages > 0 && count > pa.hugetlb.persistent_huge_pages() {
        if !adjust_pool_surplus(&mut pa.hugetlb, -1) {
            break;
        }
    }
    while count > pa.hugetlb.persistent_huge_pages() {
        if !alloc_pool_huge_folio(pa, cx) {
            break;
        }
    }
    let h = &pa.hugetlb;
    let min_count = count.max(h.resv_huge_pages + h.nr_huge_pages - h.free_huge_pages);
    while min_count < pa.hugetlb.persistent_huge_pages() {
        let Some(head) = remove_pool_hugetlb_folio(pa, false) else {
            break;
        };
        update_and_free_hugetlb_folio(pa, cx, head);
    }
    while count < pa.hugetlb.persistent_huge_pages() {
        if !adjust_pool_surplus(&mut pa.hugetlb, 1) {
            break;
        }
    }
    pa.hugetlb.max_huge_pages = pa.hugetlb.persistent_huge_pages();
    pa.hugetlb.max_huge_pages
}

/// Models `alloc_surplus_hugetlb_folio()`: a fresh folio beyond the
/// persistent pool, if `nr_overcommit_hugepages` allows one more; it is in
/// use (not on a free list) when returned.
fn alloc_surplus_hugetlb_folio(pa: &mut PageAlloc, cx: &mut Cx) -> Option<Pfn> {
    if pa.hugetlb.surplus_huge_pages >= pa.hugetlb.nr_overcommit_huge_pages {
        return None;
    }
    let head = alloc_buddy_hugetlb_folio(pa, cx, None)?;
    account_new_hugetlb_folio(pa, head);
    let nid = folio_nid(pa, head);
    pa.hugetlb.surplus_huge_pages += 1;
    pa.hugetlb.nodes[nid].surplus_huge_pages += 1;
    Some(head)
}

/// Frees a folio that is in no one's use: back on the free list, or to the
/// buddy allocator if its node has surplus pages (the tail of
/// `free_huge_folio()`).
fn free_unused_folio(pa: &mut PageAlloc, cx: &mut Cx, head: Pfn) {
    let nid = folio_nid(pa, head);
    if pa.hugetlb.nodes[nid].surplus_huge_pages > 0 {
        remove_hugetlb_folio(pa, head, true);
        update_and_free_hugetlb_folio(pa, cx, head);
    } else {
        enqueue_hugetlb_folio(pa, cx, head);
    }
}

/// Models `free_huge_folio()`: the last reference to a hugetlb folio in use
/// is gone.
pub fn free_huge_folio(pa: &mut PageAlloc, cx: &mut Cx, head: Pfn) {
    debug_assert_eq!(pa.mem.refcount(head), 0, "freeing a referenced folio");
    pa.vmstat
        .sub(VmEvent::NR_HUGETLB, PAGES_PER_HUGE_PAGE as u64);
    free_unused_folio(pa, cx, head);
}

/// Models `gather_surplus_pages()`: makes the pool big enough to reserve
/// `delta` more pages, allocating surplus pages if overcommit allows, and
/// commits the reservation. Fails (and frees what it allocated) if it
/// cannot.
fn gather_surplus_pages(pa: &mut PageAlloc, cx: &mut Cx, delta: u64) -> Result<(), Errno> {
    let h = &pa.hugetlb;
    let needed = (h.resv_huge_pages + delta).saturating_sub(h.free_huge_pages);
    if needed == 0 {
        pa.hugetlb.resv_huge_pages += delta;
        return Ok(());
    }
    let mut surplus = Vec::new();
    for _ in 0..needed {
        match alloc_surplus_hugetlb_folio(pa, cx) {
            Some(head) => surplus.push(head),
            None => break,
        }
    }
    if (surplus.len() as u64) < needed {
        for head in surplus {
            free_unused_folio(pa, cx, head);
        }
        return Err(Errno::NoMem);
    }
    pa.hugetlb.resv_huge_pages += delta;
    for head in surplus {
        enqueue_hugetlb_folio(pa, cx, head);
    }
    Ok(())
}

/// Models `return_unused_surplus_pages()`: drops `unused` reservations and
/// frees as many free surplus pages (at most `unused`).
fn return_unused_surplus_pages(pa: &mut PageAlloc, cx: &mut Cx, unused: u64) {
    pa.hugetlb.resv_huge_pages -= unused;
    let nr = unused.min(pa.hugetlb.surplus_huge_pages);
    for _ in 0..nr {
        let Some(head) = remove_pool_hugetlb_folio(pa, true) else {
            break;
        };
        update_and_free_hugetlb_folio(pa, cx, head);
    }
}

/// Models `hugetlb_acct_memory()`: reserves (`delta > 0`) or releases
/// (`delta < 0`) pool pages. A reservation fails with `ENOMEM` if the pool
/// cannot be made to hold it or if it is more than the free pages
/// (`allowed_mems_nr()`, every node allowed).
pub fn hugetlb_acct_memory(pa: &mut PageAlloc, cx: &mut Cx, delta: i64) -> Result<(), Errno> {
    if delta > 0 {
        let d = delta as u64;
        gather_surplus_pages(pa, cx, d)?;
        if d > pa.hugetlb.free_huge_pages {
            return_unused_surplus_pages(pa, cx, d);
            return Err(Errno::NoMem);
        }
    } else if delta < 0 {
        return_unused_surplus_pages(pa, cx, delta.unsigned_abs());
    }
    Ok(())
}

/// Models `hugetlb_reserve_pages()` for a new private mapping of `nr_pages`
/// huge pages: nothing with `VM_NORESERVE`; else the whole range is
/// reserved (`chg = to - from`, no subpool on the internal mount) and the
/// VMA becomes the reservation owner. `ENOMEM` if the pool cannot.
pub fn hugetlb_reserve_pages(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    nr_pages: u64,
    flags: VmFlags,
) -> Result<VmFlags, Errno> {
    if flags.contains(VmFlags::NORESERVE) {
        return Ok(flags);
    }
    hugetlb_acct_memory(pa, cx, nr_pages as i64)?;
    Ok(flags.or(VmFlags::HUGETLB_RESV_OWNER))
}

/// True if `vma` is a hugetlb VMA (`is_vm_hugetlb_page()`).
pub fn is_vm_hugetlb_page(vma: &Vma) -> bool {
    vma.flags.contains(VmFlags::HUGETLB)
}

/// Models the `MAP_HUGETLB` path of `ksys_mmap_pgoff()` and
/// `hugetlbfs_file_mmap()`: `mmap(hint, len, PROT_READ | PROT_WRITE,
/// MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB [| MAP_NORESERVE] [|
/// MAP_FIXED])`. The length is rounded up to the huge page size; the
/// address is huge-page aligned (`EINVAL` for an unaligned `MAP_FIXED`
/// address); the huge pages are reserved (`ENOMEM` if the pool cannot),
/// before whatever a `MAP_FIXED` mapping replaces is unmapped (6.12+
/// `mmap_region()` unmaps the old range only once the new one is set up).
pub fn hugetlb_mmap(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &mut MmStruct,
    hint: Vaddr,
    len: u64,
    map_flags: MapFlags,
) -> Result<Vaddr, Errno> {
    let hint = hint.0;
    let fixed = map_flags.contains(MapFlags::FIXED);
    if len == 0 {
        return Err(Errno::Inval);
    }
    let len = len
        .checked_add(HPAGE_SIZE - 1)
        .map(|l| l & !(HPAGE_SIZE - 1))
        .ok_or(Errno::NoMem)?;
    if len > TASK_SIZE {
        return Err(Errno::NoMem);
    }
    let addr = if fixed {
        if !hint.is_multiple_of(HPAGE_SIZE) {
            return Err(Errno::Inval);
        }
        if hint > TASK_SIZE || len > TASK_SIZE - hint || hint < MMAP_MIN_ADDR {
            return Err(Errno::NoMem);
        }
        hint
    } else {
        hugetlb_get_unmapped_area(mm, cx, len, hint)?
    };
    let mut flags = VmFlags::READ.or(VmFlags::WRITE).or(VmFlags::HUGETLB);
    if map_flags.contains(MapFlags::NORESERVE) {
        flags = flags.or(VmFlags::NORESERVE);
    }
    let flags = hugetlb_reserve_pages(pa, cx, len / HPAGE_SIZE, flags)?;
    if fixed {
        if let Err(e) = mm.munmap(pa, cx, Vaddr(addr), len) {
            // The old mapping stays; give the new reservation back.
            if flags.contains(VmFlags::HUGETLB_RESV_OWNER) {
                hugetlb_acct_memory(pa, cx, -((len / HPAGE_SIZE) as i64))
                    .expect("releasing a reservation cannot fail");
            }
            return Err(e);
        }
    }
    mm.insert_vma(Vma::anon(addr, addr + len, flags));
    Ok(Vaddr(addr))
}

/// Models `hugetlb_get_unmapped_area()`: the hint rounded up to the huge
/// page size if that range is free, else the highest huge-page-aligned gap
/// below `mmap_base`.
fn hugetlb_get_unmapped_area(
    mm: &MmStruct,
    cx: &mut Cx,
    len: u64,
    hint: u64,
) -> Result<u64, Errno> {
    cx.charge_n(Cost::VmaLookupLevel, mm.maple_depth());
    if hint != 0 {
        let h = hint.div_ceil(HPAGE_SIZE) * HPAGE_SIZE;
        if h >= MMAP_MIN_ADDR && h <= TASK_SIZE - len && mm.range_is_free(h, h + len) {
            return Ok(h);
        }
    }
    let fit = |low: u64, high: u64| -> Option<u64> {
        let start = high.checked_sub(len)? & !(HPAGE_SIZE - 1);
        (start >= low.max(MMAP_MIN_ADDR)).then_some(start)
    };
    let mut high = mm.mmap_base;
    for v in mm.vmas.range(..mm.mmap_base).rev().map(|(_, v)| v) {
        if v.end < high {
            if let Some(s) = fit(v.end, high) {
                return Ok(s);
            }
        }
        high = high.min(v.start);
    }
    fit(MMAP_MIN_ADDR, high).ok_or(Errno::NoMem)
}

/// Models `hugetlb_vm_op_split()`: a hugetlb VMA can only be split at a
/// huge page boundary.
pub fn hugetlb_vm_op_split(vma: &Vma, addr: u64) -> Result<(), Errno> {
    if is_vm_hugetlb_page(vma) && !addr.is_multiple_of(HPAGE_SIZE) {
        return Err(Errno::Inval);
    }
    Ok(())
}

/// Models `hugetlb_vm_op_close()`: a VMA of the reservation owner goes
/// away; the reservations of its pages that were never consumed are given
/// back, and its part of the reservation map is forgotten.
pub fn hugetlb_vm_op_close(pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, vma: &Vma) {
    if !vma.flags.contains(VmFlags::HUGETLB_RESV_OWNER) {
        return;
    }
    let consumed: Vec<u64> = mm
        .hugetlb_resv_map
        .range(vma.start..vma.end)
        .copied()
        .collect();
    for a in &consumed {
        mm.hugetlb_resv_map.remove(a);
    }
    let reserve = (vma.end - vma.start) / HPAGE_SIZE - consumed.len() as u64;
    if reserve > 0 {
        hugetlb_acct_memory(pa, cx, -(reserve as i64)).expect("releasing cannot fail");
    }
}

/// Models `vma_needs_reservation()` for a private mapping: true if a fault
/// at `haddr` has no reservation to consume (not the owner, `VM_NORESERVE`,
/// or the page's reservation was consumed before).
fn vma_needs_reservation(mm: &MmStruct, vma: &Vma, haddr: u64) -> bool {
    !vma.flags.contains(VmFlags::HUGETLB_RESV_OWNER) || mm.hugetlb_resv_map.contains(&haddr)
}

/// Models `alloc_hugetlb_folio()`: a folio for a fault at `haddr`. It
/// consumes the page's reservation if there is one (and `cow_from_owner` is
/// false: the owner's copy-on-write must not eat a reservation that another
/// page of the mapping may still need), else only a free page nobody
/// reserved; failing a free page, a surplus page if overcommit allows.
/// `SIGBUS` (`-ENOSPC`) if there is none. The folio comes back with no
/// reference.
pub fn alloc_hugetlb_folio(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &mut MmStruct,
    vma: &Vma,
    haddr: u64,
    cow_from_owner: bool,
) -> Result<Pfn, VmFault> {
    let map_chg = cow_from_owner || vma_needs_reservation(mm, vma, haddr);
    // No subpool on the internal hugetlbfs mount: gbl_chg == map_chg.
    let has_reserve = !map_chg;
    let node = pa.cpu_to_node(cx.cpu);
    let mut folio = None;
    // dequeue_hugetlb_folio_vma(): a child must not steal reserved pages.
    if has_reserve || pa.hugetlb.available_huge_pages() > 0 {
        folio = dequeue_hugetlb_folio_nodemask(pa, cx, node);
    }
    let folio = match folio {
        Some(f) => f,
        None => alloc_surplus_hugetlb_folio(pa, cx).ok_or(VmFault::Sigbus)?,
    };
    if has_reserve {
        pa.hugetlb.resv_huge_pages -= 1;
    }
    // vma_commit_reservation() (skipped for the owner's copy-on-write,
    // `MAP_CHG_ENFORCED`): the owner's map records the consumption.
    if !cow_from_owner && vma.flags.contains(VmFlags::HUGETLB_RESV_OWNER) {
        mm.hugetlb_resv_map.insert(haddr);
    }
    pa.vmstat
        .count(VmEvent::NR_HUGETLB, PAGES_PER_HUGE_PAGE as u64);
    Ok(folio)
}

/// Models `hugetlb_fault()`: a fault in a hugetlb VMA, clearing and
/// copying in the configuration's sub-page orders. `pgfault` and the
/// task's fault count were taken by the caller.
pub fn hugetlb_fault(vmf: &mut Vmf) -> Result<(), VmFault> {
    let haddr = vmf.address.0 & !(HPAGE_SIZE - 1);
    // huge_pte_alloc(): the PMD entry, allocating the tables above it.
    let pmd = vmf
        .mm
        .pgt
        .walk_alloc(vmf.pa, vmf.cx, haddr, Level::Pmd)
        .map_err(|_| VmFault::Oom)?;
    let e = vmf.mm.pgt.get(pmd);
    debug_assert!(
        !present(e) || e & PAGE_PSE != 0,
        "a PTE table under the hugetlb VMA at {haddr:#x}"
    );
    if !present(e) {
        return hugetlb_no_page(vmf, pmd);
    }
    if vmf.write && e & PAGE_RW == 0 {
        return hugetlb_wp(vmf, pmd);
    }
    // Another thread mapped it first, or only the young/dirty bits change.
    let bits = PAGE_ACCESSED | if vmf.write { PAGE_DIRTY } else { 0 };
    vmf.mm.pgt.set(pmd, e | bits);
    Ok(())
}

/// Models `hugetlb_no_page()` for a private anonymous mapping: allocates a
/// folio, clears it in the clear-order policy's order around the faulting
/// address, maps it at the empty `pmd`, young, read-only on a read fault;
/// a write fault then makes it writable in place (`hugetlb_wp()` reuses a
/// page mapped only here).
pub fn hugetlb_no_page(vmf: &mut Vmf, pmd: crate::pgtable::Slot) -> Result<(), VmFault> {
    let Vmf {
        pa,
        cx,
        g,
        mm,
        vma,
        address,
        write,
    } = vmf;
    let (policy, addr, write) = (g.cfg.clear_order, address.0, *write);
    let haddr = addr & !(HPAGE_SIZE - 1);
    let folio = alloc_hugetlb_folio(pa, cx, mm, vma, haddr, false)?;
    pa.hugetlb.log.record(
        folio,
        None,
        process_huge_page_order(
            policy,
            PAGES_PER_HUGE_PAGE,
            target_subpage_index(Vaddr(addr), PAGES_PER_HUGE_PAGE),
        ),
    );
    folio_zero_user(cx, policy, folio, PAGES_PER_HUGE_PAGE, Vaddr(addr));
    pa.llc_stream(cx, folio, PAGES_PER_HUGE_PAGE as u64);
    pa.mem.set_refcount(folio, 1);
    pa.mem.set_entire_mapcount(folio, 1);
    let rw = if write { PAGE_RW | PAGE_DIRTY } else { 0 };
    cx.charge(Cost::PteSet);
    mm.pgt.set(
        pmd,
        mk_entry(folio, PAGE_PRESENT | PAGE_PSE | PAGE_ACCESSED | rw),
    );
    Ok(())
}

/// Models `hugetlb_wp()` for a private mapping: a write to a
/// write-protected huge page. Reused if this is its only mapping; else a
/// new folio (without consuming a reservation if this VMA owns them) gets a
/// copy of the whole huge page, in the copy-order policy's order around
/// the faulting address. `pmd` is the write-protected entry.
pub fn hugetlb_wp(vmf: &mut Vmf, pmd: crate::pgtable::Slot) -> Result<(), VmFault> {
    let Vmf {
        pa,
        cx,
        g,
        mm,
        vma,
        address,
        ..
    } = vmf;
    let (policy, addr) = (g.cfg.copy_order, address.0);
    let haddr = addr & !(HPAGE_SIZE - 1);
    let e = mm.pgt.get(pmd);
    let old = entry_pfn(e);
    if pa.mem.entire_mapcount(old) == 1 {
        mm.pgt.set(pmd, e | PAGE_RW | PAGE_DIRTY | PAGE_ACCESSED);
        return Ok(());
    }
    let cow_from_owner = vma.flags.contains(VmFlags::HUGETLB_RESV_OWNER);
    let new = alloc_hugetlb_folio(pa, cx, mm, vma, haddr, cow_from_owner)?;
    pa.hugetlb.log.record(
        new,
        Some(old),
        process_huge_page_order(
            policy,
            PAGES_PER_HUGE_PAGE,
            target_subpage_index(Vaddr(addr), PAGES_PER_HUGE_PAGE),
        ),
    );
    copy_user_large_folio(cx, policy, new, old, PAGES_PER_HUGE_PAGE, Vaddr(addr));
    pa.llc_stream(cx, new, PAGES_PER_HUGE_PAGE as u64);
    pa.llc_stream(cx, old, PAGES_PER_HUGE_PAGE as u64);
    pa.mem.set_refcount(new, 1);
    pa.mem.set_entire_mapcount(new, 1);
    cx.charge(Cost::PteSet);
    mm.pgt.set(
        pmd,
        mk_entry(
            new,
            PAGE_PRESENT | PAGE_PSE | PAGE_RW | PAGE_ACCESSED | PAGE_DIRTY,
        ),
    );
    hugetlb_folio_put(pa, cx, old);
    Ok(())
}

/// Drops one mapping and its reference of the hugetlb folio `head`
/// (`hugetlb_remove_rmap()` + `folio_put()`), freeing it at the last.
fn hugetlb_folio_put(pa: &mut PageAlloc, cx: &mut Cx, head: Pfn) {
    let m = pa.mem.entire_mapcount(head);
    let r = pa.mem.refcount(head);
    assert!(
        m > 0 && r > 0,
        "hugetlb folio {head}: put with {m} mappings, {r} references"
    );
    pa.mem.set_entire_mapcount(head, m - 1);
    pa.mem.set_refcount(head, r - 1);
    if r == 1 {
        free_huge_folio(pa, cx, head);
    }
}

/// Models `copy_hugetlb_page_range()` at fork for a private hugetlb VMA:
/// every mapped huge page gets one more mapping in the child; both entries
/// are write-protected (copy-on-write). Page tables above the PMD are
/// allocated for the child.
pub fn copy_hugetlb_page_range(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    parent: &mut MmStruct,
    child: &mut MmStruct,
    vma: &Vma,
) -> Result<(), VmFault> {
    let mut addr = vma.start;
    while addr < vma.end {
        let e = parent
            .pgt
            .lookup(addr, Level::Pmd)
            .map(|s| (s, parent.pgt.get(s)));
        if let Some((ps, e)) = e.filter(|&(_, e)| present(e)) {
            let cs = child
                .pgt
                .walk_alloc(pa, cx, addr, Level::Pmd)
                .map_err(|_| VmFault::Oom)?;
            let head = entry_pfn(e);
            let m = pa.mem.entire_mapcount(head);
            pa.mem.set_entire_mapcount(head, m + 1);
            let r = pa.mem.refcount(head);
            pa.mem.set_refcount(head, r + 1);
            let wp = e & !PAGE_RW;
            cx.charge(Cost::PteCopy);
            parent.pgt.set(ps, wp);
            child.pgt.set(cs, wp);
        }
        addr += HPAGE_SIZE;
    }
    Ok(())
}

/// Models `hugetlb_dup_vma_private()`: the child's copy of a private VMA
/// has no reservation map.
pub fn hugetlb_dup_vma_private(flags: VmFlags) -> VmFlags {
    flags.without(VmFlags::HUGETLB_RESV_OWNER)
}

/// Models `unmap_hugepage_range()`: clears the entries of
/// `[start, end)` (huge-page aligned) in `vma`, dropping the folios'
/// references; a folio whose last reference goes returns to the pool.
pub fn unmap_hugepage_range(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &mut MmStruct,
    start: u64,
    end: u64,
) {
    debug_assert!(start.is_multiple_of(HPAGE_SIZE) && end.is_multiple_of(HPAGE_SIZE));
    let mut addr = start;
    while addr < end {
        if let Some(s) = mm.pgt.lookup(addr, Level::Pmd) {
            let e = mm.pgt.get(s);
            if present(e) {
                debug_assert!(e & PAGE_PSE != 0, "hugetlb entry without PSE at {addr:#x}");
                cx.charge(Cost::PteZap);
                mm.pgt.set(s, 0);
                hugetlb_folio_put(pa, cx, entry_pfn(e));
            }
        }
        addr += HPAGE_SIZE;
    }
}

/// Unmaps a whole hugetlb VMA and closes it (the hugetlb part of
/// `unmap_vmas()` + `remove_vma()`).
pub fn hugetlb_unmap_vma(pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, vma: &Vma) {
    unmap_hugepage_range(pa, cx, mm, vma.start, vma.end);
    hugetlb_vm_op_close(pa, cx, mm, vma);
}

#[cfg(test)]
mod tests;
