//! Per-CPU pagesets: models the PCP parts of mm/page_alloc.c of Linux 6.6,
//! before the `high` auto-tuning series (seed 003).
//!
//! # Why per-CPU lists
//!
//! Taking `zone->lock` for every page would serialise all CPUs on one cache
//! line. So each CPU keeps, per zone, short lists of free pages of orders 0 to
//! `PAGE_ALLOC_COSTLY_ORDER` (and the pageblock order, for THP), one list per
//! migratetype and order. An allocation pops from its list; an empty list is
//! refilled with `batch` pages in one `zone->lock` section (`rmqueue_bulk()`).
//! A free pushes onto the freeing CPU's list; when the CPU holds `high` pages
//! or more, a batch goes back to the buddy lists in one lock section
//! (`free_pcppages_bulk()`). `batch` and `high` trade lock traffic against
//! memory held idle on the lists: the smaller `high`, the more often the zone
//! lock is taken.
//!
//! # Deviations from Linux 6.6
//!
//! - Deviation: the per-CPU lock is always available to its CPU (no
//!   `pcp_spin_trylock()` failure): nothing in the model drains another
//!   CPU's lists concurrently with its owner.
//! - Deviation: no remote-node `expire` draining from vmstat work.

use crate::cost::{Cost, Cx};
use crate::page::{PageList, MT_SHIFT, ORDER_MASK, PG_PCP};
use crate::page_alloc::{
    MigrateType, PageAlloc, MIGRATE_PCPTYPES, PAGEBLOCK_ORDER, PAGE_ALLOC_COSTLY_ORDER,
};
use crate::vmstat::VmEvent;

/// PCP lists for orders 0..=3 (`NR_LOWORDER_PCP_LISTS`).
pub const NR_LOWORDER_PCP_LISTS: usize = MIGRATE_PCPTYPES * (PAGE_ALLOC_COSTLY_ORDER as usize + 1);
/// All PCP lists: the low orders plus one for THP (`NR_PCP_LISTS` in 6.6).
pub const NR_PCP_LISTS: usize = NR_LOWORDER_PCP_LISTS + 1;
/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION`: the smallest nonzero
/// `vm.percpu_pagelist_high_fraction`.
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u32 = 8;

/// `PCPF_PREV_FREE_HIGH_ORDER`: the previous free on this CPU was of an
/// order in 1..=3 (seed 003, patch 1).
pub const PCPF_PREV_FREE_HIGH_ORDER: u8 = 1 << 0;

/// Which PCP behaviours are in force. Linux 6.6 is the default; the auto-tuning
/// series adds its patches here one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PcpPolicy {
    /// Seed 003 patch 1 ("avoid to drain PCP when process exit"): a free
    /// drains everything only if the previous free was also of order 1..=3
    /// (`PCPF_PREV_FREE_HIGH_ORDER`).
    pub prev_free_high_order: bool,
}

/// True if blocks of `order` are kept on PCP lists (`pcp_allowed_order()`).
#[inline]
pub fn pcp_allowed_order(order: u8) -> bool {
    order <= PAGE_ALLOC_COSTLY_ORDER || order == PAGEBLOCK_ORDER
}

/// The list index of (migratetype, order) (`order_to_pindex()`).
#[inline]
pub fn order_to_pindex(mt: MigrateType, order: u8) -> usize {
    if order > PAGE_ALLOC_COSTLY_ORDER {
        debug_assert_eq!(order, PAGEBLOCK_ORDER);
        return NR_LOWORDER_PCP_LISTS;
    }
    MIGRATE_PCPTYPES * order as usize + mt as usize
}

/// The order of the blocks on list `pindex` (`pindex_to_order()`).
#[inline]
pub fn pindex_to_order(pindex: usize) -> u8 {
    if pindex == NR_LOWORDER_PCP_LISTS {
        PAGEBLOCK_ORDER
    } else {
        (pindex / MIGRATE_PCPTYPES) as u8
    }
}

/// One CPU's pageset for one zone (`struct per_cpu_pages`, 6.6 layout).
///
/// Invariant: `count` is the number of base pages on `lists`.
#[derive(Clone, Debug, Default)]
pub struct PerCpuPages {
    /// Pages on the lists.
    pub count: i32,
    /// Drain to the zone when `count` reaches this.
    pub high: i32,
    /// Pages moved to or from the zone at a time.
    pub batch: i32,
    /// Scale of the batch freed while freeing without allocating
    /// (`free_factor`, 6.6).
    pub free_factor: u8,
    /// `PCPF_*` flags.
    pub flags: u8,
    /// The lists, by [`order_to_pindex`].
    pub lists: [PageList; NR_PCP_LISTS],
}

/// Models `zone_batchsize()`: about 0.1 % of the zone or 1 MiB, whichever is
/// smaller, divided by four and rounded to `2^n - 1` (63 for zones over 1 GiB).
pub fn zone_batchsize(managed_pages: u64) -> i32 {
    let mut batch = (managed_pages >> 10).min((1 << 20) / crate::types::PAGE_SIZE) / 4;
    if batch < 1 {
        batch = 1;
    }
    // A power of two minus one avoids cache aliasing between CPUs that
    // alternately take batches.
    let b = batch + batch / 2;
    let pow = 1u64 << (63 - b.leading_zeros());
    (pow - 1) as i32
}

/// Models `zone_highsize()` of 6.6: the zone's low watermark (or
/// `managed / fraction` when `vm.percpu_pagelist_high_fraction` is set)
/// shared among the node's CPUs, at least `4 * batch`.
pub fn zone_highsize(
    low_wmark: u64,
    managed_pages: u64,
    fraction: u32,
    batch: i32,
    node_cpus: u32,
) -> i32 {
    let total = if fraction == 0 {
        low_wmark
    } else {
        managed_pages / fraction as u64
    };
    let cpus = node_cpus.max(1) as u64;
    ((total / cpus) as i32).max(batch << 2)
}

impl PageAlloc {
    /// Sizes every CPU's pageset for every zone (`setup_per_cpu_pageset()`,
    /// `zone_set_pageset_high_and_batch()`).
    pub(crate) fn setup_per_cpu_pagesets(&mut self) {
        let nz = self.zones.len();
        let ncpu = self.nr_cpus() as usize;
        self.pcp = vec![PerCpuPages::default(); ncpu * nz];
        self.pageset_update_all();
    }

    /// Recomputes `high` and `batch` after a sysctl changed
    /// (`zone_pcp_update()`).
    pub fn pageset_update_all(&mut self) {
        let nz = self.zones.len();
        for zi in 0..nz {
            let z = &self.zones[zi];
            // A tiny zone computes a batch of 0; the pageset uses at least 1.
            let batch = zone_batchsize(z.managed_pages).max(1);
            let node_cpus = self.node_nr_cpus(z.node);
            let high = zone_highsize(
                z.wmark_pages(crate::page_alloc::Wmark::Low),
                z.managed_pages,
                self.sysctl.percpu_pagelist_high_fraction,
                batch,
                node_cpus,
            );
            for cpu in 0..self.nr_cpus() as usize {
                let p = &mut self.pcp[cpu * nz + zi];
                p.batch = batch;
                p.high = high;
            }
        }
    }

    /// The pageset of `cpu` for zone `zi`.
    #[inline]
    pub fn pcp_index(&self, cpu: crate::types::VcpuId, zi: usize) -> usize {
        cpu.idx() * self.zones.len() + zi
    }

    /// Models `rmqueue_bulk()`: moves up to `count` blocks of `order` from the
    /// buddy lists to the tail of a PCP list, under one `zone->lock` section.
    /// Returns the number of blocks moved.
    fn rmqueue_bulk(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        pi: usize,
        order: u8,
        count: i32,
        mt: MigrateType,
    ) -> i32 {
        let pindex = order_to_pindex(mt, order);
        let z = &mut self.zones[zi];
        cx.lock(z.lock_id());
        cx.charge(Cost::ZoneLockAcquire);
        let mut i = 0;
        while i < count {
            let Some(pfn) = z.rmqueue(&mut self.mem, cx, &mut self.vmstat, order, mt) else {
                break;
            };
            // Blocks arrive in physical order; adding at the tail keeps the
            // list in that order for the caller.
            let stored = self.mem.flags(pfn) & !ORDER_MASK;
            self.mem.set_flags(pfn, stored | PG_PCP | order as u32);
            self.pcp[pi].lists[pindex].add_tail(&mut self.mem, pfn);
            cx.charge(Cost::PcpListOp);
            i += 1;
        }
        z.nr_free_pages -= (i as u64) << order;
        cx.unlock(z.lock_id());
        self.vmstat.count(VmEvent::PCP_BULK_ALLOC, 1);
        i
    }

    /// Models `rmqueue_pcplist()` and `__rmqueue_pcplist()` of 6.6: pops a
    /// block from this CPU's list, refilling an empty list with a batch
    /// scaled down by the order.
    pub(crate) fn rmqueue_pcplist(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        order: u8,
        mt: MigrateType,
    ) -> Option<u32> {
        let pi = self.pcp_index(cx.cpu, zi);
        cx.charge(Cost::PcpLock);
        // An allocation halves the scale of the next bulk free.
        self.pcp[pi].free_factor >>= 1;
        let pindex = order_to_pindex(mt, order);
        if self.pcp[pi].lists[pindex].is_empty() {
            let mut batch = self.pcp[pi].batch;
            // A batch of 1 marks a pageset that must not hoard pages.
            if batch > 1 {
                batch = (batch >> order).max(2);
            }
            let got = self.rmqueue_bulk(cx, zi, pi, order, batch, mt);
            self.pcp[pi].count += got << order;
            if got == 0 {
                return None;
            }
        }
        let p = &mut self.pcp[pi];
        let pfn = p.lists[pindex]
            .pop_first(&mut self.mem)
            .expect("list refilled");
        p.count -= 1 << order;
        cx.charge(Cost::PcpListOp);
        let f = self.mem.flags(pfn);
        self.mem.set_flags(pfn, f & !PG_PCP);
        Some(pfn)
    }

    /// Models `nr_pcp_high()` of 6.6: the count at which to drain.
    fn nr_pcp_high(&self, pi: usize, zi: usize, free_high: bool) -> i32 {
        let p = &self.pcp[pi];
        if p.high == 0 || free_high {
            return 0;
        }
        if !self.zones[zi].flags.reclaim_active {
            return p.high;
        }
        // Under reclaim, keep few pages on the lists.
        (p.batch << 2).min(p.high)
    }

    /// Models `nr_pcp_free()` of 6.6: how many pages to drain now.
    fn nr_pcp_free(p: &mut PerCpuPages, high: i32, free_high: bool) -> i32 {
        let batch = p.batch;
        if free_high {
            return p.count;
        }
        if high < batch {
            return 1;
        }
        let (min_nr_free, max_nr_free) = (batch, high - batch);
        // Each consecutive drain without an allocation in between doubles
        // the amount freed.
        let scaled = batch << p.free_factor;
        if scaled < max_nr_free {
            p.free_factor += 1;
        }
        scaled.clamp(min_nr_free, max_nr_free.max(min_nr_free))
    }

    /// Models `free_unref_page()`: a block to the freeing CPU's list.
    pub(crate) fn free_unref_page(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        pfn: u32,
        order: u8,
        mt: MigrateType,
    ) {
        let pi = self.pcp_index(cx.cpu, zi);
        cx.charge(Cost::PcpLock);
        self.free_unref_page_commit(cx, zi, pi, pfn, order, mt);
    }

    /// Models `free_unref_page_commit()` of 6.6 (with seed 003 patch 1 as a
    /// policy): adds the block at the list head and drains a batch when the
    /// CPU holds `high` pages.
    fn free_unref_page_commit(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        pi: usize,
        pfn: u32,
        order: u8,
        mt: MigrateType,
    ) {
        let pindex = order_to_pindex(mt, order);
        self.mem
            .set_flags(pfn, PG_PCP | order as u32 | ((mt as u32) << MT_SHIFT));
        let policy = self.pcp_policy;
        let p = &mut self.pcp[pi];
        p.lists[pindex].add(&mut self.mem, pfn);
        p.count += 1 << order;
        cx.charge(Cost::PcpListOp);

        // High-order pages other than THP fragment memory while they sit on
        // PCP lists, so a CPU that keeps freeing them without allocating gives
        // them all back.
        let high_order = order > 0 && order <= PAGE_ALLOC_COSTLY_ORDER;
        let free_high = if policy.prev_free_high_order {
            let prev = p.flags & PCPF_PREV_FREE_HIGH_ORDER != 0;
            if high_order {
                p.flags |= PCPF_PREV_FREE_HIGH_ORDER;
            } else {
                p.flags &= !PCPF_PREV_FREE_HIGH_ORDER;
            }
            high_order && p.free_factor != 0 && prev
        } else {
            high_order && p.free_factor != 0
        };
        let high = self.nr_pcp_high(pi, zi, free_high);
        if self.pcp[pi].count >= high {
            if free_high {
                self.vmstat.count(VmEvent::PCP_FREE_HIGH, 1);
            }
            let n = Self::nr_pcp_free(&mut self.pcp[pi], high, free_high);
            self.free_pcppages_bulk(cx, zi, pi, n, pindex);
        }
    }

    /// Models `free_pcppages_bulk()` of 6.6: moves `count` pages from a
    /// pageset to the buddy lists under one `zone->lock` section, emptying
    /// list `pindex` first and then the others round-robin, oldest pages
    /// (the tail) first.
    pub(crate) fn free_pcppages_bulk(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        pi: usize,
        count: i32,
        pindex: usize,
    ) {
        let mut count = count.min(self.pcp[pi].count);
        if count <= 0 {
            return;
        }
        let z = &mut self.zones[zi];
        cx.lock(z.lock_id());
        cx.charge(Cost::ZoneLockAcquire);
        let mut idx = pindex;
        let mut first = true;
        while count > 0 {
            if !first {
                loop {
                    idx = (idx + 1) % NR_PCP_LISTS;
                    if !self.pcp[pi].lists[idx].is_empty() {
                        break;
                    }
                }
            } else if self.pcp[pi].lists[idx].is_empty() {
                first = false;
                continue;
            }
            first = false;
            let order = pindex_to_order(idx);
            let nr = 1i32 << order;
            loop {
                let p = &mut self.pcp[pi];
                let Some(pfn) = p.lists[idx].pop_last(&mut self.mem) else {
                    break;
                };
                let mt = MigrateType::from_u8(self.mem.stored_mt(pfn));
                self.mem.set_flags(pfn, 0);
                count -= nr;
                p.count -= nr;
                cx.charge(Cost::PcpListOp);
                z.free_one_page(&mut self.mem, cx, pfn, order, mt);
                self.vmstat.count(VmEvent::MM_PAGE_PCPU_DRAIN, 1);
                if count <= 0 {
                    break;
                }
            }
        }
        cx.unlock(z.lock_id());
        self.vmstat.count(VmEvent::PCP_BULK_FREE, 1);
    }

    /// Models `drain_pages()`: empties every pageset of `cpu`
    /// (`drain_local_pages()`, CPU hotplug, `drain_all_pages()`).
    pub fn drain_pages(&mut self, cx: &mut Cx, cpu: crate::types::VcpuId) {
        for zi in 0..self.zones.len() {
            let pi = self.pcp_index(cpu, zi);
            let count = self.pcp[pi].count;
            if count > 0 {
                cx.charge(Cost::PcpLock);
                self.free_pcppages_bulk(cx, zi, pi, count, 0);
            }
        }
    }
}
