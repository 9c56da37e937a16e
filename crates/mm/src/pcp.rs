//! Per-CPU pagesets: models the PCP parts of mm/page_alloc.c, from Linux 6.6
//! (before auto-tuning) through the ten patches of the PCP `high` auto-tuning
//! series (seed 003, merged in 6.7) to today's form (6.18).
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
//! # The auto-tuning series, patch by patch
//!
//! [`PcpPolicy::patches`] applies the first N patches of the series on top of
//! 6.6, so that each row of the seed's tables is a kernel of its own; the
//! code asks for a patch by name ([`PcpPatch`], `pol.has(PcpPatch::TuneHigh)`):
//!
//! 1. `PCPF_PREV_FREE_HIGH_ORDER`: drain everything on a high-order free only
//!    if the previous free was high-order too (not on the lone order-1 frees
//!    of process exit).
//! 2. The per-CPU share of the LLC (`per_cpu_data_slice_size`), set by
//!    [`PageAlloc::setup_pcp_cacheinfo`].
//! 3. `PCPF_FREE_HIGH_BATCH`: with a slice larger than `3 * batch` pages, keep
//!    `batch` pages before a high-order drain.
//! 4. `CONFIG_PCP_BATCH_SCALE_MAX`: cap the free scale factor, and the pages
//!    one high-order drain frees, at `batch << SCALE_MAX`.
//! 5. `alloc_factor`: consecutive refills without a free in between take
//!    doubling batches (`nr_pcp_alloc()`).
//! 6. The framework: `high_min`/`high_max`, `high` clamped between them.
//! 7. Tune `high`: grow by a batch on each refill, shrink on high-order drains
//!    and under reclaim, decay by 1/8 a second from vmstat work.
//! 8. Shrink `high` while the zone is below its high watermark (`ZONE_BELOW_HIGH`).
//! 9. Avoid reducing `high` unnecessarily: decay never below what the CPU
//!    holds minus one maximal batch.
//! 10. `free_count` replaces `free_factor`: consecutive frees are counted in
//!     pages, which detects high-order free bursts sooner.
//!
//! Deviation: the series as posted (the seed) differs in details from the
//! merged 6.7 form; the model follows the merged code for each patch's idea
//! (e.g. patch 9 posted a `count_min` tracker; merged 6.7 bounds the decay by
//! `count - (batch << SCALE_MAX)` instead). Where a patch's intermediate code
//! is not known exactly, the model uses the merged form of the same rule.
//!
//! # Deviations from the kernel
//!
//! - Deviation: the per-CPU lock is always available to its CPU (no
//!   `pcp_spin_trylock()` failure): nothing in the model drains another
//!   CPU's lists concurrently with its owner.
//! - Deviation: no remote-node `expire` draining from vmstat work.

use crate::cost::{Cost, Cx};
use crate::page::{PageList, PfnIdx, MT_SHIFT, PG_PCP};
use crate::page_alloc::{
    MigrateType, PageAlloc, Wmark, ZoneType, MIGRATE_PCPTYPES, PAGEBLOCK_ORDER,
    PAGE_ALLOC_COSTLY_ORDER,
};
use crate::vmstat::VmEvent;

/// PCP lists for orders 0..=3 (`NR_LOWORDER_PCP_LISTS`).
pub const NR_LOWORDER_PCP_LISTS: usize = MIGRATE_PCPTYPES * (PAGE_ALLOC_COSTLY_ORDER as usize + 1);
/// All PCP lists: the low orders plus one for THP (`NR_PCP_LISTS` in 6.6).
pub const NR_PCP_LISTS: usize = NR_LOWORDER_PCP_LISTS + 1;
/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION`: the smallest nonzero
/// `vm.percpu_pagelist_high_fraction`.
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u32 = 8;
/// Default of `CONFIG_PCP_BATCH_SCALE_MAX` (range 0..=6).
pub const PCP_BATCH_SCALE_MAX_DEFAULT: u8 = 5;

/// `PCPF_PREV_FREE_HIGH_ORDER`: the previous free on this CPU was of an
/// order in 1..=3 (patch 1).
pub const PCPF_PREV_FREE_HIGH_ORDER: u8 = 1 << 0;
/// `PCPF_FREE_HIGH_BATCH`: this CPU's share of the LLC holds more than
/// `3 * batch` pages (patch 3).
pub const PCPF_FREE_HIGH_BATCH: u8 = 1 << 1;

/// When `nr_pcp_alloc()` may grow `high`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcpGrowth {
    /// Merged 6.7: unless kswapd is reclaiming (`ZONE_RECLAIM_ACTIVE`).
    UnlessReclaimActive,
    /// Today: unless the zone is below its high watermark (`ZONE_BELOW_HIGH`).
    UnlessBelowHigh,
}

/// The ten patches of the PCP `high` auto-tuning series (seed 003, merged
/// in Linux 6.7), in series order: the discriminant is the patch's number,
/// and the title its subject line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum PcpPatch {
    /// 1, "mm, pcp: avoid to drain PCP when process exit":
    /// `PCPF_PREV_FREE_HIGH_ORDER`.
    AvoidDrainOnExit = 1,
    /// 2, "cacheinfo: calculate per-CPU data cache size": the per-CPU slice
    /// of the LLC that patch 3 uses (the model takes it as given,
    /// [`PageAlloc::setup_pcp_cacheinfo`]).
    PerCpuCacheSize = 2,
    /// 3, "mm, pcp: reduce lock contention for draining high-order pages":
    /// `PCPF_FREE_HIGH_BATCH`.
    FreeHighBatch = 3,
    /// 4, "mm: restrict the pcp batch scale factor to avoid too long
    /// latency": `CONFIG_PCP_BATCH_SCALE_MAX`.
    BatchScaleMax = 4,
    /// 5, "mm, page_alloc: scale the number of pages that are batch
    /// allocated": `alloc_factor`.
    AllocFactor = 5,
    /// 6, "mm: add framework for PCP high auto-tuning": `high_min` and
    /// `high_max`.
    HighBounds = 6,
    /// 7, "mm: tune PCP high automatically": grow on refills, shrink on
    /// drains, decay from vmstat work.
    TuneHigh = 7,
    /// 8, "mm, pcp: decrease PCP high if free pages < high watermark":
    /// `ZONE_BELOW_HIGH`.
    BelowHighWatermark = 8,
    /// 9, "mm, pcp: avoid to reduce PCP high unnecessarily": a floor under
    /// the decay.
    DecayFloor = 9,
    /// 10, "mm, pcp: reduce detecting time of consecutive high order page
    /// freeing": `free_count`.
    FreeCount = 10,
}

/// Which PCP behaviours are in force: Linux 6.6 plus the first `patches`
/// patches of the auto-tuning series, and the later changes of today's kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpPolicy {
    /// Patches of the auto-tuning series applied (0 = Linux 6.6, 10 = 6.7).
    pub patches: u8,
    /// `CONFIG_PCP_BATCH_SCALE_MAX` (patch 4 onwards).
    pub batch_scale_max: u8,
    /// When refills grow `high` (patch 7 onwards).
    pub growth: PcpGrowth,
    /// Today's `free_high` threshold `free_count >= batch + high_min / 2`
    /// (2025) instead of 6.7's `free_count >= batch`.
    pub free_high_half_high_min: bool,
    /// Today's draining in chunks of `batch` pages, releasing the zone lock
    /// between chunks (`drain_pages_zone()`, `decay_pcp_high()`).
    pub chunked_drain: bool,
}

impl Default for PcpPolicy {
    /// Linux 6.6.
    fn default() -> Self {
        PcpPolicy::series(0)
    }
}

impl PcpPolicy {
    /// Linux 6.6 with the first `n` patches of the series (0..=10).
    pub fn series(n: u8) -> PcpPolicy {
        PcpPolicy {
            patches: n.min(10),
            batch_scale_max: PCP_BATCH_SCALE_MAX_DEFAULT,
            growth: PcpGrowth::UnlessReclaimActive,
            free_high_half_high_min: false,
            chunked_drain: false,
        }
    }

    /// Linux 6.7: the whole series as merged.
    pub fn linux_6_7() -> PcpPolicy {
        PcpPolicy::series(10)
    }

    /// Linux 6.18: the series plus later changes.
    pub fn linux_6_18() -> PcpPolicy {
        PcpPolicy {
            growth: PcpGrowth::UnlessBelowHigh,
            free_high_half_high_min: true,
            chunked_drain: true,
            ..PcpPolicy::series(10)
        }
    }

    /// True if `patch` is applied (the series applies in order: patch N
    /// comes with every patch before it).
    #[inline]
    pub fn has(&self, patch: PcpPatch) -> bool {
        self.patches >= patch as u8
    }

    /// `CONFIG_PCP_BATCH_SCALE_MAX` in force: unlimited (in effect) before patch 4.
    #[inline]
    fn scale_max(&self) -> u8 {
        if self.has(PcpPatch::BatchScaleMax) {
            self.batch_scale_max
        } else {
            u8::MAX
        }
    }
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

/// One CPU's pageset for one zone (`struct per_cpu_pages`).
///
/// Invariant: `count` is the number of base pages on `lists`;
/// `high_min <= high <= high_max` once the pageset is set up (asserted by
/// [`PerCpuPages::set_high`] at every change and by
/// [`PageAlloc::check_invariants`]).
#[derive(Clone, Debug, Default)]
pub struct PerCpuPages {
    /// Pages on the lists.
    pub count: i32,
    /// Drain to the zone when `count` reaches this.
    pub high: i32,
    /// Lower bound of `high` (patch 6).
    pub high_min: i32,
    /// Upper bound of `high` (patch 6).
    pub high_max: i32,
    /// Pages moved to or from the zone at a time.
    pub batch: i32,
    /// `PCPF_*` flags.
    pub flags: u8,
    /// Scale of the batch freed while freeing without allocating
    /// (`free_factor`, before patch 10).
    pub free_factor: u8,
    /// Scale of the batch allocated while allocating without freeing (patch 5).
    pub alloc_factor: u8,
    /// Pages freed since the last allocation, halved on each allocation
    /// (patch 10).
    pub free_count: i32,
    /// The lists, by [`order_to_pindex`].
    pub lists: [PageList; NR_PCP_LISTS],
}

impl PerCpuPages {
    /// The first non-empty list after `idx`, round-robin, `idx` itself
    /// last (the search of `free_pcppages_bulk()`); `None` if all are empty.
    pub fn next_nonempty_list(&self, idx: usize) -> Option<usize> {
        (1..=NR_PCP_LISTS)
            .map(|k| (idx + k) % NR_PCP_LISTS)
            .find(|&i| !self.lists[i].is_empty())
    }

    /// The base pages on the lists, by their lengths (what `count` must be).
    pub fn nr_list_pages(&self) -> i32 {
        self.lists
            .iter()
            .enumerate()
            .map(|(i, l)| (l.len() as i32) << pindex_to_order(i))
            .sum()
    }

    /// Sets `high`: every change of `high` comes through here, so that the
    /// bounds are checked where they could first break.
    #[inline]
    pub fn set_high(&mut self, high: i32) {
        self.high = high;
        self.check_high_bounds();
    }

    /// Panics unless `high_min <= high <= high_max`. With tuning (patch 6
    /// on) `high` moves between the two; without it both bounds equal
    /// `high` ([`PageAlloc::pageset_update_all`]).
    #[inline]
    pub fn check_high_bounds(&self) {
        assert!(
            self.high_min <= self.high && self.high <= self.high_max,
            "pcp->high {} outside [high_min {}, high_max {}]",
            self.high,
            self.high_min,
            self.high_max
        );
    }
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

/// Models `zone_highsize()`: the zone's low watermark (or `managed /
/// fraction` when a fraction is given) shared among the node's CPUs, at
/// least `4 * batch`.
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
    // The kernel's int; saturated so that a zone of petabytes on few CPUs
    // does not wrap (the kernel truncates; no real machine gets there).
    ((total / cpus).min(i32::MAX as u64) as i32).max(batch << 2)
}

/// `(batch, high_min, high_max)` of a zone's pagesets
/// (`zone_set_pageset_high_and_batch()`): without tuning, or with a
/// `vm.percpu_pagelist_high_fraction`, both bounds are the one size; with
/// tuning (patch 7 onwards), `high_min` comes from the low watermark and
/// `high_max` from an eighth of the zone.
pub fn pageset_high_bounds(
    low_wmark: u64,
    managed_pages: u64,
    fraction: u32,
    tuning: bool,
    node_cpus: u32,
) -> (i32, i32, i32) {
    // A tiny zone computes a batch of 0; the pageset uses at least 1.
    let batch = zone_batchsize(managed_pages).max(1);
    let high_min = zone_highsize(low_wmark, managed_pages, fraction, batch, node_cpus);
    let high_max = if tuning && fraction == 0 {
        zone_highsize(
            low_wmark,
            managed_pages,
            MIN_PERCPU_PAGELIST_HIGH_FRACTION,
            batch,
            node_cpus,
        )
    } else {
        high_min
    };
    (batch, high_min, high_max)
}

/// A configuration whose PCP bounds would be out of order on a machine
/// ([`check_pageset_bounds`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HighBoundsError {
    /// The zone, e.g. `node 0 Normal`.
    pub zone: String,
    /// Its low watermark and managed pages.
    pub low_wmark: u64,
    /// Its managed pages.
    pub managed_pages: u64,
    /// The bounds a CPU's pageset would get.
    pub high_min: i32,
    /// See `high_min`.
    pub high_max: i32,
}

impl std::fmt::Display for HighBoundsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "zone {}: the low watermark ({} pages) is above an eighth of the zone ({} of {} pages), \
             so a CPU's PCP high_min ({}) would exceed its high_max ({})",
            self.zone,
            self.low_wmark,
            self.managed_pages / MIN_PERCPU_PAGELIST_HIGH_FRACTION as u64,
            self.managed_pages,
            self.high_min,
            self.high_max
        )
    }
}

/// Checks that every zone of `layout` gets `high_min <= high_max` under
/// `sysctl` and `policy`, as [`PageAlloc::pageset_update_all`] will size
/// them, without building the allocator.
///
/// Why: Linux 6.7+ accepts a low watermark above an eighth of the zone
/// (`vm.watermark_scale_factor` up to 3000, `vm.min_free_kbytes` without an
/// upper limit), and its `clamp()` (`__clamp()` of `include/linux/minmax.h`,
/// `val >= hi ? hi : val <= lo ? lo : val`, which does not check `lo <= hi`
/// at run time) then moves `pcp->high` between the two bounds in turn. The
/// model keeps `high_min <= high <= high_max` as an invariant and refuses
/// such a configuration instead, with this error.
pub fn check_pageset_bounds(
    layout: &crate::page_alloc::MemoryLayout,
    sysctl: &crate::page_alloc::VmSysctl,
    policy: PcpPolicy,
) -> Result<(), HighBoundsError> {
    let zones = crate::page_alloc::zone_sizes(layout);
    let managed: Vec<u64> = zones.iter().map(|z| z.2).collect();
    let (_, wmarks) = crate::page_alloc::zone_watermarks(&managed, sysctl);
    for ((zone_type, node, pages), w) in zones.iter().zip(wmarks) {
        let low = w[Wmark::Low as usize];
        let node_cpus = layout.nodes[node.0 as usize].nr_cpus;
        let (_, high_min, high_max) = pageset_high_bounds(
            low,
            *pages,
            sysctl.percpu_pagelist_high_fraction,
            policy.has(PcpPatch::TuneHigh),
            node_cpus,
        );
        if high_min > high_max {
            return Err(HighBoundsError {
                zone: format!("node {} {zone_type:?}", node.0),
                low_wmark: low,
                managed_pages: *pages,
                high_min,
                high_max,
            });
        }
    }
    Ok(())
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

    /// Recomputes `batch`, `high_min` and `high_max` (`zone_pcp_update()`).
    /// With auto-tuning and no `vm.percpu_pagelist_high_fraction`, `high`
    /// may move between the low-watermark share and an eighth of the zone;
    /// a fraction pins both bounds to it, which turns tuning off.
    pub fn pageset_update_all(&mut self) {
        let nz = self.zones.len();
        let fraction = self.sysctl.percpu_pagelist_high_fraction;
        let tuning = self.pcp_policy.has(PcpPatch::TuneHigh);
        for zi in 0..nz {
            let z = &self.zones[zi];
            let node_cpus = self.node_nr_cpus(z.node);
            let low = z.wmark_pages(Wmark::Low);
            let (batch, high_min, high_max) =
                pageset_high_bounds(low, z.managed_pages, fraction, tuning, node_cpus);
            for cpu in 0..self.nr_cpus() as usize {
                let p = &mut self.pcp[cpu * nz + zi];
                p.batch = batch;
                p.high_min = high_min;
                p.high_max = high_max;
                p.set_high(p.high.clamp(high_min, high_max));
            }
        }
    }

    /// Models `setup_pcp_cacheinfo()` / `zone_pcp_update_cacheinfo()`
    /// (patches 2 and 3): sets `PCPF_FREE_HIGH_BATCH` where this CPU's share
    /// of the last-level cache holds more than `3 * batch` pages.
    pub fn setup_pcp_cacheinfo(&mut self, per_cpu_data_slice_bytes: u64) {
        let on = self.pcp_policy.has(PcpPatch::FreeHighBatch);
        let slice_pages = (per_cpu_data_slice_bytes / crate::types::PAGE_SIZE) as i64;
        for p in &mut self.pcp {
            if on && slice_pages > 3 * p.batch as i64 {
                p.flags |= PCPF_FREE_HIGH_BATCH;
            } else {
                p.flags &= !PCPF_FREE_HIGH_BATCH;
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
    #[inline]
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
        let locked = z.lock(cx);
        // `__rmqueue()` per block, as the kernel calls it; the model takes
        // the blocks that come from one free block at once (`rmqueue_run`).
        let mut i = 0;
        while i < count {
            let Some((first, nr)) = z.rmqueue_run(
                &locked,
                &mut self.mem,
                cx,
                &mut self.vmstat,
                order,
                mt,
                (count - i) as u32,
            ) else {
                break;
            };
            for b in 0..nr {
                // Blocks arrive in physical order; adding at the tail keeps
                // the list in that order for the caller. The flags keep the
                // list's migratetype (`set_pcppage_migratetype()`).
                let pfn = first.offset(b << order);
                let flags = ((mt as u32) << MT_SHIFT) | PG_PCP | order as u32;
                self.mem.set_flags(pfn, flags);
                self.pcp[pi].lists[pindex].add_tail(&mut self.mem, pfn);
            }
            cx.charge_n(Cost::PcpListOp, nr as u64);
            i += nr as i32;
        }
        z.nr_free_pages -= (i as u64) << order;
        z.unlock(cx, locked);
        self.vmstat.count(VmEvent::PCP_BULK_ALLOC, 1);
        i
    }

    /// May `high` grow on a refill now (patch 7's growth rule)?
    fn growth_allowed(&self, zi: usize) -> bool {
        let f = self.zones[zi].flags;
        match self.pcp_policy.growth {
            PcpGrowth::UnlessReclaimActive => !f.reclaim_active,
            PcpGrowth::UnlessBelowHigh => !f.below_high,
        }
    }

    /// Models `nr_pcp_alloc()` (6.7+) and the batch scaling of 6.6's
    /// `__rmqueue_pcplist()`: how many blocks a refill takes.
    fn nr_pcp_alloc(&mut self, pi: usize, zi: usize, order: u8) -> i32 {
        let pol = self.pcp_policy;
        let grow = pol.has(PcpPatch::TuneHigh) && self.growth_allowed(zi);
        let p = &mut self.pcp[pi];
        let base = p.batch;
        let mut high = p.high;
        if pol.has(PcpPatch::HighBounds) {
            high = p.high.clamp(p.high_min, p.high_max);
            p.set_high(high);
            // A pageset that must not hoard pages takes one at a time.
            if high < base {
                return 1;
            }
        }
        let mut batch = if pol.has(PcpPatch::AllocFactor) && order == 0 {
            base << p.alloc_factor
        } else {
            base
        };
        // A larger high would have saved this trip to the zone.
        if grow && p.high_min != p.high_max {
            high = (high + batch).min(p.high_max);
            p.set_high(high);
        }
        if pol.has(PcpPatch::AllocFactor) && order == 0 {
            let max_nr_alloc = (high - p.count - base).max(base);
            // Each refill without a free in between doubles the next one.
            if batch <= max_nr_alloc && p.alloc_factor < pol.scale_max() {
                p.alloc_factor += 1;
            }
            batch = batch.min(max_nr_alloc);
        }
        // A batch of 1 marks a pageset that must not hoard pages.
        if batch > 1 {
            batch = (batch >> order).max(2);
        }
        batch
    }

    /// Models `rmqueue_pcplist()` and `__rmqueue_pcplist()`: pops a block
    /// from this CPU's list, refilling an empty list from the zone.
    pub(crate) fn rmqueue_pcplist(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        order: u8,
        mt: MigrateType,
    ) -> Option<PfnIdx> {
        let pi = self.pcp_index(cx.cpu, zi);
        cx.charge(Cost::PcpLock);
        // An allocation damps the scale of the next bulk free.
        if self.pcp_policy.has(PcpPatch::FreeCount) {
            self.pcp[pi].free_count >>= 1;
        } else {
            self.pcp[pi].free_factor >>= 1;
        }
        let pindex = order_to_pindex(mt, order);
        if self.pcp[pi].lists[pindex].is_empty() {
            let batch = self.nr_pcp_alloc(pi, zi, order);
            let got = self.rmqueue_bulk(cx, zi, pi, order, batch, mt);
            self.pcp[pi].count += got << order;
            self.nr_pcp_pages += (got as u64) << order;
            if got == 0 {
                return None;
            }
        }
        let p = &mut self.pcp[pi];
        let pfn = p.lists[pindex]
            .pop_first(&mut self.mem)
            .expect("list refilled");
        p.count -= 1 << order;
        self.nr_pcp_pages -= 1 << order;
        cx.charge(Cost::PcpListOp);
        let f = self.mem.flags(pfn);
        self.mem.set_flags(pfn, f & !PG_PCP);
        Some(pfn)
    }

    /// Pages the CPU has been freeing in a row: `free_count` (patch 10) or
    /// `batch << free_factor` before it.
    fn free_amount(p: &PerCpuPages, pol: &PcpPolicy) -> i32 {
        if pol.has(PcpPatch::FreeCount) {
            p.free_count
        } else {
            p.batch
                .checked_shl(p.free_factor as u32)
                .unwrap_or(i32::MAX)
                .max(p.batch)
        }
    }

    /// Models `nr_pcp_high()`: the count at which to drain now, adjusting
    /// `high` on the way when it is tuned.
    fn nr_pcp_high(&mut self, pi: usize, zi: usize, free_high: bool) -> i32 {
        let pol = self.pcp_policy;
        let flags = self.zones[zi].flags;
        let p = &mut self.pcp[pi];
        let batch = p.batch;
        if !pol.has(PcpPatch::HighBounds) {
            if p.high == 0 || free_high {
                return 0;
            }
            if !flags.reclaim_active {
                return p.high;
            }
            // Under reclaim, keep few pages on the lists.
            return (batch << 2).min(p.high);
        }
        let (hmin, hmax) = (p.high_min, p.high_max);
        let mut high = p.high.clamp(hmin, hmax);
        p.set_high(high);
        if high == 0 {
            return 0;
        }
        let tune = pol.has(PcpPatch::TuneHigh);
        let big_batch = batch
            .checked_shl(pol.scale_max().min(30) as u32)
            .unwrap_or(i32::MAX);
        if free_high {
            if tune {
                p.set_high((high - big_batch).max(hmin));
            }
            return 0;
        }
        if flags.reclaim_active {
            if tune {
                let fc = Self::free_amount(p, &pol).max(batch);
                p.set_high((high - fc).max(hmin));
            }
            return (batch << 2).min(p.high);
        }
        if hmin == hmax {
            return high;
        }
        if pol.has(PcpPatch::BelowHighWatermark) && flags.below_high {
            // Memory is short: shrink high by what is being freed, and drain
            // now down to what the CPU holds.
            let fc = Self::free_amount(p, &pol).max(batch);
            p.set_high((high - fc).max(hmin));
            high = p.count.max(hmin);
        } else if tune && p.count >= high {
            // high should hold a whole freed batch.
            let need_high = Self::free_amount(p, &pol).saturating_add(batch);
            if p.high < need_high {
                p.set_high(need_high.clamp(hmin, hmax));
            }
        }
        high
    }

    /// Models `nr_pcp_free()`: how many pages to drain now.
    fn nr_pcp_free(p: &mut PerCpuPages, pol: &PcpPolicy, high: i32, free_high: bool) -> i32 {
        let batch = p.batch;
        if free_high {
            // Patch 4 bounds how long one drain holds the zone lock.
            if pol.has(PcpPatch::BatchScaleMax) {
                let cap = batch
                    .checked_shl(pol.scale_max() as u32)
                    .unwrap_or(i32::MAX);
                return p.count.min(cap);
            }
            return p.count;
        }
        if high < batch {
            return 1;
        }
        let (min_nr_free, max_nr_free) = (batch, (high - batch).max(batch));
        if pol.has(PcpPatch::FreeCount) {
            // Free as many pages as were freed in a row.
            return p.free_count.clamp(min_nr_free, max_nr_free);
        }
        // Each consecutive drain without an allocation in between doubles
        // the amount freed.
        let scaled = batch.checked_shl(p.free_factor as u32).unwrap_or(i32::MAX);
        if scaled < max_nr_free && p.free_factor < pol.scale_max().min(30) {
            p.free_factor += 1;
        }
        scaled.clamp(min_nr_free, max_nr_free)
    }

    /// Models `free_unref_page()`: a block to the freeing CPU's list.
    pub(crate) fn free_unref_page(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        pfn: PfnIdx,
        order: u8,
        mt: MigrateType,
    ) {
        let pi = self.pcp_index(cx.cpu, zi);
        cx.charge(Cost::PcpLock);
        self.free_unref_page_commit(cx, zi, pi, pfn, order, mt);
    }

    /// Models `free_unref_page_commit()` (6.6 to 6.7; `free_frozen_page_commit()`
    /// today): adds the block at the list head and drains when the CPU holds
    /// `high` pages.
    fn free_unref_page_commit(
        &mut self,
        cx: &mut Cx,
        zi: usize,
        pi: usize,
        pfn: PfnIdx,
        order: u8,
        mt: MigrateType,
    ) {
        let pindex = order_to_pindex(mt, order);
        self.mem
            .set_flags(pfn, PG_PCP | order as u32 | ((mt as u32) << MT_SHIFT));
        let pol = self.pcp_policy;
        let p = &mut self.pcp[pi];
        if pol.has(PcpPatch::AllocFactor) {
            // A free damps the scale of the next refill.
            p.alloc_factor >>= 1;
        }
        p.lists[pindex].add(&mut self.mem, pfn);
        p.count += 1 << order;
        self.nr_pcp_pages += 1 << order;
        cx.charge(Cost::PcpListOp);
        let batch = p.batch;

        // High-order pages other than THP fragment memory while they sit on
        // PCP lists, so a CPU that keeps freeing them without allocating gives
        // them back.
        let high_order = order > 0 && order <= PAGE_ALLOC_COSTLY_ORDER;
        let mut free_high = false;
        if high_order {
            let freeing = if pol.has(PcpPatch::FreeCount) {
                let threshold = if pol.free_high_half_high_min {
                    batch + p.high_min / 2
                } else {
                    batch
                };
                p.free_count >= threshold
            } else {
                p.free_factor != 0
            };
            let prev_ok =
                !pol.has(PcpPatch::AvoidDrainOnExit) || p.flags & PCPF_PREV_FREE_HIGH_ORDER != 0;
            let keep_batch_ok = !pol.has(PcpPatch::FreeHighBatch)
                || p.flags & PCPF_FREE_HIGH_BATCH == 0
                || p.count >= batch;
            free_high = freeing && prev_ok && keep_batch_ok;
            p.flags |= PCPF_PREV_FREE_HIGH_ORDER;
        } else {
            p.flags &= !PCPF_PREV_FREE_HIGH_ORDER;
        }
        if pol.has(PcpPatch::FreeCount) {
            let cap = batch
                .checked_shl(pol.scale_max() as u32)
                .unwrap_or(i32::MAX);
            if p.free_count < cap {
                p.free_count += 1 << order;
            }
        }
        let high = self.nr_pcp_high(pi, zi, free_high);
        if self.pcp[pi].count >= high {
            if free_high {
                self.vmstat.count(VmEvent::PCP_FREE_HIGH, 1);
            }
            let n = Self::nr_pcp_free(&mut self.pcp[pi], &pol, high, free_high);
            self.free_pcppages_bulk(cx, zi, pi, n, pindex);
            let z = &mut self.zones[zi];
            if pol.has(PcpPatch::BelowHighWatermark) && z.flags.below_high {
                cx.charge(Cost::WatermarkCheck);
                if z.watermark_ok(0, z.wmark_pages(Wmark::High), ZoneType::Normal) {
                    z.flags.below_high = false;
                }
            }
        }
    }

    /// Models `decay_pcp_high()` (patch 7; bounded by patch 9), run for every
    /// zone from this CPU's vmstat work once a second: lowers `high` by an
    /// eighth towards `high_min` and drains what is above it.
    pub fn decay_pcp_high(&mut self, cx: &mut Cx, cpu: crate::types::VcpuId) {
        let pol = self.pcp_policy;
        if !pol.has(PcpPatch::TuneHigh) {
            return;
        }
        for zi in 0..self.zones.len() {
            let pi = self.pcp_index(cpu, zi);
            let p = &mut self.pcp[pi];
            let big_batch = p
                .batch
                .checked_shl(pol.scale_max().min(30) as u32)
                .unwrap_or(i32::MAX);
            if p.high > p.high_min {
                let step = p.high - (p.high >> 3);
                p.set_high(if pol.has(PcpPatch::DecayFloor) {
                    // Never below what the CPU is actively using.
                    // Deviation: the kernel's max3() can leave high above
                    // high_max when a list holds more than high_max plus a
                    // big batch (the next nr_pcp_high() clamps it back);
                    // the model keeps high within its bounds.
                    (p.count.saturating_sub(big_batch))
                        .max(step)
                        .max(p.high_min)
                        .min(p.high_max.max(p.high_min))
                } else {
                    step.max(p.high_min)
                });
            }
            let to_drain = p.count - p.high;
            if to_drain > 0 {
                cx.charge(Cost::PcpLock);
                self.drain_in_chunks(cx, zi, pi, to_drain);
            }
        }
    }

    /// Frees `count` pages of a pageset, in `batch`-sized zone-lock sections
    /// with today's policy or in one section before it.
    fn drain_in_chunks(&mut self, cx: &mut Cx, zi: usize, pi: usize, mut count: i32) {
        if !self.pcp_policy.chunked_drain {
            self.free_pcppages_bulk(cx, zi, pi, count, 0);
            return;
        }
        let batch = self.pcp[pi].batch.max(1);
        while count > 0 && self.pcp[pi].count > 0 {
            let n = count.min(batch);
            self.free_pcppages_bulk(cx, zi, pi, n, 0);
            count -= n;
        }
    }

    /// Models `free_pcppages_bulk()` of 6.6: moves `count` pages from a
    /// pageset to the buddy lists under one `zone->lock` section, emptying
    /// list `pindex` first and then the others round-robin, oldest pages
    /// (the tail) first.
    ///
    /// Bounded: `pcp->count` is asserted to be the pages on the lists (the
    /// kernel trusts it and searches the lists without a bound; the model
    /// once spun here forever on a count whose pages had left the lists
    /// when another zone's pages had corrupted them). So while pages are
    /// left to free some list holds one: every round-robin search ends
    /// within one turn, and every pass of the outer loop frees a block (a
    /// list whose length promises an entry it does not have panics too).
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
        let on_lists = self.pcp[pi].nr_list_pages();
        assert_eq!(
            self.pcp[pi].count, on_lists,
            "pcp->count of pageset {pi} is {} but its lists hold {on_lists} pages",
            self.pcp[pi].count
        );
        let z = &mut self.zones[zi];
        let locked = z.lock(cx);
        let mut idx = pindex;
        let mut first = true;
        while count > 0 {
            if !first {
                idx = self.pcp[pi]
                    .next_nonempty_list(idx)
                    .expect("pcp->count matched the lists: a page is left on one");
            } else if self.pcp[pi].lists[idx].is_empty() {
                first = false;
                continue;
            }
            first = false;
            let order = pindex_to_order(idx);
            let nr = 1i32 << order;
            loop {
                let p = &mut self.pcp[pi];
                if p.lists[idx].is_empty() {
                    break;
                }
                let pfn = p.lists[idx].pop_last(&mut self.mem).unwrap_or_else(|| {
                    panic!("pcp list {idx} of pageset {pi} has a length but no entries")
                });
                let mt = MigrateType::from_u8(self.mem.stored_mt(pfn));
                self.mem.set_flags(pfn, 0);
                count -= nr;
                p.count -= nr;
                self.nr_pcp_pages -= nr as u64;
                cx.charge(Cost::PcpListOp);
                z.free_one_page(&locked, &mut self.mem, cx, pfn, order, mt);
                self.vmstat.count(VmEvent::MM_PAGE_PCPU_DRAIN, 1);
                if count <= 0 {
                    break;
                }
            }
        }
        z.unlock(cx, locked);
        self.vmstat.count(VmEvent::PCP_BULK_FREE, 1);
    }

    /// Models `drain_pages()`: empties every pageset of `cpu`
    /// (`drain_local_pages()`, CPU hotplug, `drain_all_pages()`).
    pub fn drain_pages(&mut self, cx: &mut Cx, cpu: crate::types::VcpuId) {
        for zi in 0..self.zones.len() {
            self.drain_pages_zone(cx, zi, cpu);
        }
    }

    /// Models `drain_pages_zone()`: empties `cpu`'s pageset of zone `zi`.
    pub fn drain_pages_zone(&mut self, cx: &mut Cx, zi: usize, cpu: crate::types::VcpuId) {
        let pi = self.pcp_index(cpu, zi);
        let count = self.pcp[pi].count;
        if count > 0 {
            cx.charge(Cost::PcpLock);
            self.drain_in_chunks(cx, zi, pi, count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_apply_in_series_order() {
        let p = PcpPolicy::series(7);
        assert!(p.has(PcpPatch::AvoidDrainOnExit));
        assert!(p.has(PcpPatch::TuneHigh));
        assert!(!p.has(PcpPatch::BelowHighWatermark));
        assert!(!PcpPolicy::default().has(PcpPatch::AvoidDrainOnExit));
        assert!(PcpPolicy::linux_6_7().has(PcpPatch::FreeCount));
        assert!(PcpPolicy::linux_6_18().has(PcpPatch::FreeCount));
    }

    #[test]
    fn set_high_within_bounds() {
        let mut p = PerCpuPages {
            high_min: 100,
            high_max: 800,
            ..PerCpuPages::default()
        };
        p.set_high(100);
        p.set_high(800);
        assert_eq!(p.high, 800);
    }

    /// Fuzz trace input 29964 spun forever in `free_pcppages_bulk()`: a
    /// pageset whose `count` said pages were left while every list was
    /// empty (its lists had been corrupted through another zone's pages,
    /// which `move_freepages_block()` no longer moves). A count that
    /// disagrees with the lists now panics saying so, instead of hanging.
    #[test]
    #[should_panic(expected = "pcp->count of pageset 0 is 1 but its lists hold 0 pages")]
    fn free_pcppages_bulk_refuses_a_count_without_pages() {
        let layout = crate::page_alloc::MemoryLayout {
            nodes: vec![crate::page_alloc::NodeLayout {
                nr_cpus: 1,
                nr_pages: 4096,
            }],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(&layout, Default::default(), PcpPolicy::default());
        let mut cx = Cx::new(crate::types::VcpuId(0), crate::cost::CostTable::uniform(1));
        let pfn = pa
            .rmqueue_pcplist(&mut cx, 0, 0, MigrateType::Movable)
            .expect("a free page");
        // The refill left other pages on the list: give them back first.
        let n = pa.pcp[0].count;
        pa.free_pcppages_bulk(&mut cx, 0, 0, n, 0);
        pa.free_unref_page(&mut cx, 0, pfn, 0, MigrateType::Movable);
        assert_eq!((pa.pcp[0].count, pa.pcp[0].nr_list_pages()), (1, 1));
        // Break the invariant as the corrupted lists did: the page leaves
        // the lists, the count keeps it.
        let pindex = order_to_pindex(MigrateType::Movable, 0);
        pa.pcp[0].lists[pindex].pop_first(&mut pa.mem);
        pa.free_pcppages_bulk(&mut cx, 0, 0, 1, pindex);
    }

    #[test]
    fn next_nonempty_list_searches_round_robin_once() {
        let mut mem = crate::page::MemMap::new(8);
        mem.materialise(0);
        let mut p = PerCpuPages::default();
        assert_eq!(p.next_nonempty_list(3), None);
        p.lists[2].add(&mut mem, PfnIdx(5));
        assert_eq!(p.next_nonempty_list(3), Some(2));
        assert_eq!(p.next_nonempty_list(2), Some(2));
        p.lists[4].add(&mut mem, PfnIdx(6));
        assert_eq!(p.next_nonempty_list(2), Some(4));
        assert_eq!(
            p.nr_list_pages(),
            (1 << pindex_to_order(2)) + (1 << pindex_to_order(4))
        );
    }

    #[test]
    #[should_panic(expected = "pcp->high 801 outside [high_min 100, high_max 800]")]
    fn set_high_refuses_a_high_above_high_max() {
        let mut p = PerCpuPages {
            high_min: 100,
            high_max: 800,
            ..PerCpuPages::default()
        };
        p.set_high(801);
    }
}
