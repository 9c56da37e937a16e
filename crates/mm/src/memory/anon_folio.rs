//! Large anonymous folios at the PTE level: the order of the folio an
//! anonymous write fault allocates (`alloc_anon_folio()` in mm/memory.c),
//! in the forms the idea took on its way into the kernel (seed 004).
//!
//! | policy   | kernel                       | order chosen at a fault |
//! |----------|------------------------------|-------------------------|
//! | `off`    | ≤ 6.7                        | 0 (4 KiB)               |
//! | `v1`     | RFC v1 (2023-06, not merged) | highest naturally aligned order ≤ preferred that lies inside the VMA with all PTEs none; an allocation failure retries the next lower order |
//! | `v2`     | v2 (2023-07, the seed; not merged) | as v1, but an allocation failure goes straight to order 0 |
//! | `simple` | Yu Zhao's suggestion in v2's cover letter (not merged) | the preferred order if it fits, else 0 |
//! | `mthp`   | merged in 6.8 ("multi-size THP") | per-size sysfs knobs decide the allowed orders; from the highest allowed order that fits, allocation failures step down through the allowed ones |
//!
//! The preferred order of v1/v2/simple is `arch_wants_pte_order()`: 64 KiB
//! (order 4) unless the arch overrides it (knob `mmlab.arch_wants_pte_order`).
//! Order 1 is never used: an anonymous folio needs order ≥ 2 for the
//! deferred-split list (`folio->_deferred_list` lives in the third page).
//!
//! Under `mthp` the PMD order is not handled here: `handle_mm_fault()` tries
//! `do_huge_pmd_anonymous_page()` first when the PMD is empty and the PMD
//! size is allowed (as today); only orders below it reach this path
//! (`thp_vma_allowable_orders(.., BIT(PMD_ORDER) - 1)`).
//!
//! # Mapping a large folio
//!
//! One fault maps all N pages: N PTEs are written at once (`set_ptes()`),
//! charged as one [`Cost::PteSet`] (the first PTE and the folio-wide part:
//! the large mapcount, the LRU add, the counters) and N − 1 ×
//! [`Cost::SetPtesPage`]: for a PTE-mapped large folio
//! `folio_add_new_anon_rmap()` of 6.18 initialises every page's `_mapcount`
//! and sets its `PageAnonExclusive` (one `struct page` line per page, as
//! well as its PTE), so the work grows with N. A PMD-mapped THP's rmap
//! update is per folio (one [`Cost::PteSet`] for its PMD).
//!
//! History: write faults of 16K-128K folios cost 100-200 ns per page more
//! than a PMD-mapped THP's on this project's host, which the model charged
//! as N × [`Cost::PteSet`] (session 5; one per folio before). Timing the
//! faults without the program's accesses to the folio's other pages
//! (2026-11-24) put almost all of that outside the kernel: the first
//! access to each of those pages right after the fault costs ~90 ns
//! ([`crate::cost::Cost::FreshPteTouch`], charged by the engine on the
//! access), while the fault itself costs ~195 ns per page against ~175
//! for a THP's (`perf`: `set_ptes()`, `native_set_pte()` and
//! `folio_add_new_anon_rmap()` ~4 % of a 64K fault loop's samples).
//!
//! The large folio's own fixed work, [`Cost::AllocAnonFolio`], is charged
//! once when the folio is allocated (session 9, 2026-11-25): live, the
//! 16K-128K faults lie on one line whose fixed part is ~300 ns above a 4K
//! fault's (16K 2.35-2.39, 64K 5.65-5.66 µs per fault with one write per
//! page against 4K 1.22-1.25 µs: a C loop, thread CPU time, best of 30
//! runs, load ~2), which the model, charging a large fault the fixed work
//! of a 4K one, could only put into the per-page [`Cost::SetPtesPage`]
//! (fitted at 62-74 ns where `perf` says ~15), over-predicting the
//! largest folios. `perf record` of those loops (CPU clock in the guest,
//! so attribution is approximate) puts the extra fixed time in the
//! page-table lock taken right after `folio_zero_user()` (its stores
//! draining), the memcg page counter, `do_anonymous_page()`'s large
//! branch, the immediate LRU add and the order selection; in
//! `get_page_from_freelist()`, where `prep_compound_page()` writes the
//! tails, it stays ~40-50 ns per fault from 4K to 64K, so the tail
//! `struct page` writes are no per-page cost of their own here.
//! The folio gets N references, one per PTE
//! (the convention of `page.rs`), and no entire mapcount. It is zeroed per
//! 4 KiB page by [`super::huge_order::folio_zero_user`], in the order of
//! [`super::huge_order`] for the faulting address: N × [`Cost::ClearPage`],
//! or, with the engine's cache model on, N page clears played through it.
//!
//! # Partial unmap and the deferred split queue
//!
//! When an unmap (munmap, `MADV_DONTNEED`) leaves a large folio mapped only
//! in part, the kernel puts it on the deferred split queue
//! (`deferred_split_folio(folio, true)`): `split_deferred` and
//! `nr_anon_partially_mapped` of its size go up once per folio. The model
//! marks the folio with [`crate::page::PG_PARTIALLY_MAPPED`]; no shrinker
//! splits it (`split` stays 0). When its last mapping goes, the folio is
//! freed whole and the gauge goes down.
//!
//! Deviations:
//! - No per-page mapcount: "partially mapped" is decided at the end of each
//!   zapped page-table range as "references left, and not a whole number of
//!   mappings of the folio". Exact for a folio mapped by one process; for a
//!   folio shared after fork the kernel (which looks at per-page mapcounts)
//!   may not flag a folio the model flags.
//! - A COW of one page of a PTE-mapped large folio copies 4 KiB and drops one
//!   reference, but does not check for deferred split (after fork the page
//!   usually stays mapped by the other process, so the kernel does not
//!   either).
//! - No memcg (`anon_fault_fallback_charge` stays 0), no userfaultfd, no
//!   concurrent faults (the PTE recheck under the lock always succeeds), no
//!   swap, no khugepaged.
//! - v1/v2/simple count the per-size statistics too (those series had none),
//!   so that the policies can be compared on the same counters.

use super::{ThpEnabled, VmFault};
use crate::cost::Cost;
use crate::page::PG_PARTIALLY_MAPPED;
use crate::page_alloc::{Gfp, PageAlloc};
use crate::pgtable::{
    mk_entry, Slot, PAGE_ACCESSED, PAGE_ANON_EXCLUSIVE, PAGE_DIRTY, PAGE_PRESENT, PAGE_RW,
};
use crate::types::{Pfn, HPAGE_PMD_ORDER, PAGE_SIZE};
use crate::vma::{VmFlags, Vma};
use crate::vmstat::{MthpStat, MTHP_NR_ORDERS};
use std::fmt;

/// Default `arch_wants_pte_order()`: 64 KiB folios (v2's generic default).
pub const DEFAULT_PTE_ORDER: u8 = 4;

/// How an anonymous PTE-level fault chooses the folio order. Only `Off` and
/// `Mthp` were merged; `V1`, `V2` and `Simple` are model-only and are
/// selected by the model-only knob `mmlab.anon_folio_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnonFolioPolicy {
    /// Order 0 only (Linux ≤ 6.7).
    Off,
    /// "variable-order, large folios for anonymous memory" v1 (2023-06):
    /// intermediate orders retried on allocation failure.
    V1,
    /// The same series' v2 (2023-07, seed 004): fit-based order, allocation
    /// failure goes straight to order 0.
    V2,
    /// The "simple order" variant measured in v2's cover letter: the
    /// preferred order or 0.
    Simple,
    /// Multi-size THP, merged in 6.8: per-size `hugepages-<size>kB/enabled`.
    Mthp,
}

impl AnonFolioPolicy {
    /// Every policy.
    pub const ALL: &'static [AnonFolioPolicy] = &[
        AnonFolioPolicy::Off,
        AnonFolioPolicy::V1,
        AnonFolioPolicy::V2,
        AnonFolioPolicy::Simple,
        AnonFolioPolicy::Mthp,
    ];

    /// The knob value.
    pub fn name(self) -> &'static str {
        match self {
            AnonFolioPolicy::Off => "off",
            AnonFolioPolicy::V1 => "v1",
            AnonFolioPolicy::V2 => "v2",
            AnonFolioPolicy::Simple => "simple",
            AnonFolioPolicy::Mthp => "mthp",
        }
    }

    /// The policy whose knob value is `s`.
    pub fn parse(s: &str) -> Option<AnonFolioPolicy> {
        AnonFolioPolicy::ALL.iter().copied().find(|p| p.name() == s)
    }
}

impl fmt::Display for AnonFolioPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `/sys/kernel/mm/transparent_hugepage/hugepages-<size>kB/enabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MthpEnabled {
    /// This size for every anonymous VMA.
    Always,
    /// Follow the top-level `transparent_hugepage/enabled`.
    Inherit,
    /// This size only for `MADV_HUGEPAGE` VMAs.
    Madvise,
    /// Never this size.
    Never,
}

impl MthpEnabled {
    /// The sysfs word.
    pub fn name(self) -> &'static str {
        match self {
            MthpEnabled::Always => "always",
            MthpEnabled::Inherit => "inherit",
            MthpEnabled::Madvise => "madvise",
            MthpEnabled::Never => "never",
        }
    }

    /// The value whose sysfs word is `s`.
    pub fn parse(s: &str) -> Option<MthpEnabled> {
        [
            MthpEnabled::Always,
            MthpEnabled::Inherit,
            MthpEnabled::Madvise,
            MthpEnabled::Never,
        ]
        .into_iter()
        .find(|v| v.name() == s)
    }
}

/// The kernel's defaults (6.8+): the PMD size `inherit`, every other size
/// `never`. Indexed by order; orders 0 and 1 have no knob.
pub const MTHP_DEFAULTS: [MthpEnabled; MTHP_NR_ORDERS] = {
    let mut a = [MthpEnabled::Never; MTHP_NR_ORDERS];
    a[HPAGE_PMD_ORDER as usize] = MthpEnabled::Inherit;
    a
};

/// A set of folio orders, bit `o` for order `o`.
pub type Orders = u32;

/// Models `thp_vma_allowable_orders()` of 6.8+ (mm/huge_memory.c,
/// `__thp_vma_allowable_orders()` for an anonymous VMA at fault time): the
/// orders of `mask` that the per-size knobs allow for `vma`. For a
/// `VM_HUGEPAGE` VMA: `always`, `madvise`, and `inherit` if the top-level
/// knob is `always` or `madvise`; otherwise `always`, and `inherit` if the
/// top-level knob is `always`. `VM_NOHUGEPAGE` allows none.
#[inline]
pub fn thp_vma_allowable_orders(
    top: ThpEnabled,
    per_size: &[MthpEnabled; MTHP_NR_ORDERS],
    vma: &Vma,
    mask: Orders,
) -> Orders {
    if vma.flags.contains(VmFlags::NOHUGEPAGE) {
        return 0;
    }
    let madv = vma.flags.contains(VmFlags::HUGEPAGE);
    let mut orders = 0;
    // Only the orders asked for (every fault asks, so the loop visits the
    // set bits of `mask` from order 2 up, not every knob).
    let knobs: Orders = ((1u64 << MTHP_NR_ORDERS) - 1) as Orders & !0b11;
    let mut todo = mask & knobs;
    while todo != 0 {
        let o = todo.trailing_zeros() as usize;
        todo &= todo - 1;
        let on = match per_size[o] {
            MthpEnabled::Always => true,
            MthpEnabled::Madvise => madv,
            MthpEnabled::Inherit => match top {
                ThpEnabled::Always => true,
                ThpEnabled::Madvise => madv,
                ThpEnabled::Never => false,
            },
            MthpEnabled::Never => false,
        };
        if on {
            orders |= 1 << o;
        }
    }
    orders & mask
}

/// Models `thp_vma_suitable_orders()`: the orders of `orders` whose naturally
/// aligned block around `addr` lies inside the VMA.
#[inline]
pub fn thp_vma_suitable_orders(vma: &Vma, addr: u64, orders: Orders) -> Orders {
    let mut out = 0;
    let mut todo = orders;
    while todo != 0 {
        let o = todo.trailing_zeros();
        todo &= todo - 1;
        let size = PAGE_SIZE << o;
        let haddr = addr & !(size - 1);
        if haddr >= vma.start && haddr + size <= vma.end {
            out |= 1 << o;
        }
    }
    out
}

/// Models `pte_range_none()`: the `1 << order` PTEs of the naturally aligned
/// block around `addr` in the table of `pte` are all none.
#[inline]
fn pte_range_none(mm: &crate::vma::MmStruct, pte: Slot, addr: u64, order: u8) -> bool {
    let nr = 1usize << order;
    let first = crate::pgtable::Level::Pte.index(addr & !((PAGE_SIZE << order) - 1));
    let t = mm.pgt.entries(pte);
    t[first..first + nr].iter().all(|&e| e == 0)
}

#[inline]
fn highest(orders: Orders) -> u8 {
    31 - orders.leading_zeros() as u8
}

/// The orders `alloc_anon_folio()` may try for a write fault at `addr`, as a
/// set of candidates from the highest that fits (naturally aligned, inside the
/// VMA, all PTEs none) downwards, and whether a failed allocation may try the
/// next lower candidate (else it goes straight to order 0).
#[inline]
fn candidate_orders(
    cfg: &super::MmConfig,
    mm: &crate::vma::MmStruct,
    vma: &Vma,
    pte: Slot,
    addr: u64,
) -> (Orders, bool) {
    // Orders 2..PMD_ORDER-1: order 1 is never an anonymous folio, and the
    // PMD order is the PMD path's.
    let below_pmd: Orders = ((1 << HPAGE_PMD_ORDER) - 1) & !0b11;
    if vma.flags.contains(VmFlags::STACK_INCOMPLETE_SETUP) {
        // vma_is_temporary_stack(): an exec's argument pages are order 0.
        return (0, false);
    }
    let (allowed, retry) = match cfg.anon_folio {
        AnonFolioPolicy::Off => return (0, false),
        AnonFolioPolicy::Mthp => (
            thp_vma_allowable_orders(cfg.thp_enabled, &cfg.mthp_enabled, vma, below_pmd),
            true,
        ),
        p => {
            if vma.flags.contains(VmFlags::NOHUGEPAGE) {
                return (0, false);
            }
            let pref = cfg.arch_pte_order.min(HPAGE_PMD_ORDER - 1);
            if pref < 2 {
                // Order 1 becomes 0.
                return (0, false);
            }
            let upto: Orders = ((1 << (pref + 1)) - 1) & !0b11;
            match p {
                AnonFolioPolicy::Simple => (1 << pref, false),
                AnonFolioPolicy::V1 => (upto, true),
                _ => (upto, false),
            }
        }
    };
    let mut orders = thp_vma_suitable_orders(vma, addr, allowed);
    // Step down from the highest allowed order to the first whose PTE range
    // is all none; smaller blocks around `addr` lie inside it, so they are
    // all none too.
    while orders != 0 {
        let o = highest(orders);
        if pte_range_none(mm, pte, addr, o) {
            break;
        }
        orders &= !(1 << o);
    }
    (orders, retry)
}

/// Models `alloc_anon_folio()` (6.8+ for `mthp`, the v1/v2 series for the
/// others; see the module documentation): allocates the folio for a write
/// fault at `addr` and returns its first pfn and order. Large orders that
/// fail to allocate count `anon_fault_fallback`; a large folio allocated
/// counts `anon_fault_alloc` and `nr_anon` and charges
/// [`Cost::AllocAnonFolio`] once (the fault's large-folio work besides its
/// pages'). The final fallback is order 0.
///
/// Deviation: the order selection of a fault that falls back to order 0
/// (a PTE range not none, a failed allocation) is not charged.
/// `pte` is the empty entry for the faulting address.
#[inline]
pub fn alloc_anon_folio(vmf: &mut super::Vmf, pte: Slot) -> Result<(Pfn, u8), VmFault> {
    let super::Vmf {
        pa,
        cx,
        g,
        mm,
        vma,
        address,
        ..
    } = vmf;
    let (mut orders, retry) = candidate_orders(&g.cfg, mm, vma, pte, address.0);
    while orders != 0 {
        let o = highest(orders);
        if let Ok(pfn) = pa.alloc_pages(cx, Gfp::HIGHUSER_MOVABLE, o) {
            // What a large folio's fault does once beyond an order-0
            // fault's (see the cost), charged outside the locks.
            cx.charge(Cost::AllocAnonFolio);
            pa.vmstat.count_mthp(o, MthpStat::AnonFaultAlloc, 1);
            pa.vmstat.count_mthp(o, MthpStat::NrAnon, 1);
            return Ok((pfn, o));
        }
        pa.vmstat.count_mthp(o, MthpStat::AnonFaultFallback, 1);
        if !retry {
            break;
        }
        orders &= !(1 << o);
    }
    let pfn = pa
        .alloc_pages(cx, Gfp::HIGHUSER_MOVABLE, 0)
        .map_err(|_| VmFault::Oom)?;
    // Order 0 has no sysfs directory; its slot counts the 4 KiB folios
    // allocated here, so that the order mix can be reported (model-only).
    pa.vmstat.count_mthp(0, MthpStat::AnonFaultAlloc, 1);
    Ok((pfn, 0))
}

/// Maps the new folio `pfn` of `order` at the naturally aligned block around
/// the faulting address (`pte` is its entry): zeroes it, gives it one
/// reference per page and sets all its PTEs at once (`set_ptes()`),
/// writable and dirty.
#[inline]
pub fn map_anon_folio(vmf: &mut super::Vmf, pte: Slot, pfn: Pfn, order: u8) {
    let super::Vmf {
        pa,
        cx,
        g,
        mm,
        address,
        ..
    } = vmf;
    let addr = address.0;
    let nr = 1u32 << order;
    super::huge_order::folio_zero_user(cx, g.cfg.clear_order, pfn, nr, *address);
    pa.llc_stream(cx, pfn, nr as u64);
    pa.mem.set_refcount(pfn, nr);
    let first = crate::pgtable::Level::Pte.index(addr & !((PAGE_SIZE << order) - 1));
    let ptl = super::pte_lockptr(pte);
    cx.lock(ptl);
    cx.charge(Cost::PteSet);
    cx.charge_n(Cost::SetPtesPage, nr as u64 - 1);
    let t = mm.pgt.entries_mut(pte);
    for (i, e) in t[first..first + nr as usize].iter_mut().enumerate() {
        *e = mk_entry(
            pfn.offset(i as u64),
            PAGE_PRESENT | PAGE_RW | PAGE_ACCESSED | PAGE_DIRTY | PAGE_ANON_EXCLUSIVE,
        );
    }
    cx.unlock(ptl);
    g.lru_add.folio_add_lru(cx.cpu, order > 0);
}

/// After an unmap left `head` with references: models the partial-mapping
/// check of `__folio_remove_rmap()` and `deferred_split_folio(folio, true)`.
/// A large folio mapped by a number of references that is not a multiple of
/// its size is partially mapped (see the module's deviations); the first
/// time, it counts `split_deferred` and `nr_anon_partially_mapped`.
pub fn check_partially_mapped(pa: &mut PageAlloc, head: Pfn) {
    let flags = pa.mem.flags(head);
    let order = pa.mem.order(head);
    if order < 2 || flags & PG_PARTIALLY_MAPPED != 0 {
        return;
    }
    let r = pa.mem.refcount(head);
    if r > 0 && !r.is_multiple_of(1 << order) {
        pa.mem.set_flags(head, flags | PG_PARTIALLY_MAPPED);
        pa.vmstat.count_mthp(order, MthpStat::SplitDeferred, 1);
        pa.vmstat
            .count_mthp(order, MthpStat::NrAnonPartiallyMapped, 1);
    }
}

/// Before a large anonymous folio is freed: takes it off the per-size gauges
/// (and the deferred split queue).
pub fn folio_undo_large_anon(pa: &mut PageAlloc, head: Pfn, order: u8) {
    if order == 0 || order as usize >= MTHP_NR_ORDERS {
        return;
    }
    pa.vmstat.sub_mthp(order, MthpStat::NrAnon, 1);
    let f = pa.mem.flags(head);
    if f & PG_PARTIALLY_MAPPED != 0 {
        pa.mem.set_flags(head, f & !PG_PARTIALLY_MAPPED);
        pa.vmstat
            .sub_mthp(order, MthpStat::NrAnonPartiallyMapped, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(flags: VmFlags) -> Vma {
        Vma::anon(
            0x4000_0000,
            0x8000_0000,
            VmFlags::READ.or(VmFlags::WRITE).or(flags),
        )
    }

    #[test]
    fn allowable_orders_follow_the_kernels_table() {
        use MthpEnabled::*;
        let mut k = MTHP_DEFAULTS;
        k[2] = Always;
        k[3] = Inherit;
        k[4] = Madvise;
        k[5] = Never;
        let all = u32::MAX;
        let plain = vma(VmFlags::ANON_PRIVATE);
        let madv = vma(VmFlags::ANON_PRIVATE.or(VmFlags::HUGEPAGE));
        let noh = vma(VmFlags::ANON_PRIVATE.or(VmFlags::NOHUGEPAGE));
        // Top-level always: inherit (3 and the PMD order 9) on everywhere.
        let t = ThpEnabled::Always;
        assert_eq!(
            thp_vma_allowable_orders(t, &k, &plain, all),
            1 << 2 | 1 << 3 | 1 << 9
        );
        assert_eq!(
            thp_vma_allowable_orders(t, &k, &madv, all),
            1 << 2 | 1 << 3 | 1 << 4 | 1 << 9
        );
        assert_eq!(thp_vma_allowable_orders(t, &k, &noh, all), 0);
        // Top-level madvise: inherit only in MADV_HUGEPAGE VMAs.
        let t = ThpEnabled::Madvise;
        assert_eq!(thp_vma_allowable_orders(t, &k, &plain, all), 1 << 2);
        assert_eq!(
            thp_vma_allowable_orders(t, &k, &madv, all),
            1 << 2 | 1 << 3 | 1 << 4 | 1 << 9
        );
        // Top-level never: inherit off, explicit sizes still on.
        let t = ThpEnabled::Never;
        assert_eq!(thp_vma_allowable_orders(t, &k, &madv, all), 1 << 2 | 1 << 4);
        // The mask restricts (the PTE path asks for orders below PMD).
        let below_pmd = ((1 << HPAGE_PMD_ORDER) - 1) & !0b11;
        assert_eq!(
            thp_vma_allowable_orders(ThpEnabled::Always, &k, &plain, below_pmd),
            1 << 2 | 1 << 3
        );
    }

    #[test]
    fn suitable_orders_need_the_aligned_block_inside_the_vma() {
        let v = Vma::anon(0x20_3000, 0x40_0000 - 0x2000, VmFlags::ANON_PRIVATE);
        let all: Orders = 0b11_1111_1100;
        // At 0x20_4000: 16 KiB block [0x20_4000, 0x20_8000) fits; 32 KiB
        // starts at 0x20_0000, before the VMA.
        assert_eq!(thp_vma_suitable_orders(&v, 0x20_4000, all), 1 << 2);
        // At 0x30_0000: blocks up to 512 KiB fit; 1 MiB runs past the end.
        assert_eq!(thp_vma_suitable_orders(&v, 0x30_0000, all), 0b00_1111_1100);
        // Near the end: the last 16 KiB block runs past it.
        assert_eq!(thp_vma_suitable_orders(&v, 0x3f_f000, all), 0);
    }
}
