//! What each CPU's lists held when the recording started, inferred from the
//! trace itself.
//!
//! # Why
//!
//! `/proc/zoneinfo` gives each CPU's `count` per zone, not how those pages
//! are spread over the lists (order × migratetype). It matters: a CPU
//! whose 200 000 pages are order-2 page-cache folios refills its empty
//! order-0 movable list on the first allocation and drains as soon as
//! frees come; the same count on the order-0 movable list serves the first
//! 200 000 allocations without a refill and drains nothing for minutes
//! (measured: the replay of a 4-minute system-wide recording whose
//! recorded lists were mostly order 2 took 40 % fewer zone-locked
//! allocations and drains than the kernel when they were warmed as order 0).
//!
//! # How
//!
//! A trace of every process's allocator events shows every page that
//! enters one of a CPU's lists (a free of order 0-3 or THP on that CPU,
//! a refill: `mm_page_alloc_zone_locked` with `percpu_refill`) or leaves
//! it (an allocation of such an order, a drain: `mm_page_pcpu_drain`). A
//! refill happens only when its list is empty (`__rmqueue_pcplist()`), so
//! at a list's first refill, what it held at the start is exactly what
//! left it before minus what entered: *exact*. For a list never refilled,
//! the most that ever left it beyond what entered is a *lower bound*. The
//! recorded count's rest is spread over the lists never refilled in
//! proportion to their lower bounds: an *estimate*, reported as one.
//!
//! Deviations: a free is counted on the list of its allocation's
//! migratetype (the kernel uses its pageblock's, which differs after a
//! fallback); a free of a page allocated before the recording is counted
//! as movable; since 6.18 flags every order-0..3 `__rmqueue_smallest()` of
//! a PCP migratetype as `percpu_refill`, a direct buddy allocation (when
//! the CPU's list lock was taken) reads as a refill; pages taken by
//! `__rmqueue_steal()` fire no event at all.

use std::collections::BTreeMap;

use crate::event::{Event, EventKind, Zone};

/// The orders with per-CPU lists: 0 to `PAGE_ALLOC_COSTLY_ORDER`, and
/// the PMD order (THP).
fn pcp_order(order: u32) -> bool {
    order <= 3 || order == 9
}

/// The list a migratetype's pages go to: the three PCP types; any other
/// (highatomic, CMA) is freed to the movable list, as
/// `free_frozen_pages()` does.
fn pcp_mt(mt: i32) -> u8 {
    match mt {
        0 | 2 => mt as u8,
        _ => 1,
    }
}

/// One list's start, as inferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListStart {
    pub order: u8,
    /// 0 unmovable, 1 movable, 2 reclaimable.
    pub migratetype: u8,
    /// Blocks of `2^order` pages on the list at the start.
    pub blocks: u64,
    /// How `blocks` is known.
    pub how: Inferred,
}

/// How a list's start content is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inferred {
    /// From the list's first refill.
    Exact,
    /// The least the list must have held (never refilled).
    LowerBound,
    /// Its lower bound plus a share of the recorded count's rest.
    Estimate,
}

/// Per (recorded CPU, index of the zone in the header): the lists' start.
pub type PcpStart = BTreeMap<(u32, usize), Vec<ListStart>>;

#[derive(Default)]
struct ListState {
    /// Blocks that entered minus blocks that left, so far.
    net: i64,
    min_net: i64,
    /// `-net` at the first refill.
    at_first_refill: Option<i64>,
}

/// The first pass's state: per list, what entered and left it.
pub(crate) struct PcpInference {
    /// Zone starts (pfn) with the zone's index in the header, ascending.
    zone_starts: Vec<(u64, usize)>,
    lists: BTreeMap<(u32, usize, u8, u8), ListState>,
    /// The migratetype of each allocated block, by pfn (live blocks only).
    mt_of: BTreeMap<u64, u8>,
}

impl PcpInference {
    /// For a trace of `zones` (their `start_pfn`, or x86-64's zone
    /// boundaries by name where the snapshot did not say).
    pub(crate) fn new(zones: &[Zone]) -> PcpInference {
        let mut zone_starts: Vec<(u64, usize)> = zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.managed > 0)
            .map(|(i, z)| {
                let start = z.start_pfn.unwrap_or(match z.name.as_str() {
                    "DMA" => 0,
                    "DMA32" => 1 << 12,
                    _ => 1 << 20,
                });
                (start, i)
            })
            .collect();
        zone_starts.sort_unstable();
        PcpInference {
            zone_starts,
            lists: BTreeMap::new(),
            mt_of: BTreeMap::new(),
        }
    }

    fn zone_of(&self, pfn: u64) -> Option<usize> {
        self.zone_starts
            .iter()
            .rev()
            .find(|(s, _)| *s <= pfn)
            .map(|(_, i)| *i)
    }

    /// Counts one event.
    pub(crate) fn observe(&mut self, ev: &Event) {
        let (pfn, order, mt, delta, refill) = match ev.kind {
            EventKind::PageAlloc {
                pfn,
                order,
                migratetype,
                ..
            } => {
                self.mt_of.insert(pfn, pcp_mt(migratetype));
                (pfn, order, pcp_mt(migratetype), -1, false)
            }
            EventKind::PageFree { pfn, order } => {
                let mt = self.mt_of.remove(&pfn).unwrap_or(1);
                (pfn, order, mt, 1, false)
            }
            EventKind::PageAllocZoneLocked {
                pfn,
                order,
                migratetype,
                percpu_refill: true,
            } => (pfn, order, pcp_mt(migratetype), 1, true),
            EventKind::PagePcpuDrain {
                pfn,
                order,
                migratetype,
            } => (pfn, order, pcp_mt(migratetype), -1, false),
            _ => return,
        };
        if !pcp_order(order) {
            return;
        }
        let Some(zone) = self.zone_of(pfn) else {
            return;
        };
        let l = self
            .lists
            .entry((ev.cpu, zone, order as u8, mt))
            .or_default();
        if refill && l.at_first_refill.is_none() {
            l.at_first_refill = Some(-l.net);
        }
        l.net += delta;
        l.min_net = l.min_net.min(l.net);
    }

    /// The lists' start per CPU and zone, the recorded `count` of each
    /// (pages, from the header's pagesets) shared out as the module doc
    /// says.
    pub(crate) fn finish(self, zones: &[Zone]) -> PcpStart {
        let mut out: PcpStart = BTreeMap::new();
        for ((cpu, zone, order, mt), l) in self.lists {
            let (blocks, how) = match l.at_first_refill {
                Some(b) => (b.max(0) as u64, Inferred::Exact),
                None => ((-l.min_net).max(0) as u64, Inferred::LowerBound),
            };
            if blocks > 0 || how == Inferred::LowerBound {
                out.entry((cpu, zone)).or_default().push(ListStart {
                    order,
                    migratetype: mt,
                    blocks,
                    how,
                });
            }
        }
        for ((cpu, zone), lists) in out.iter_mut() {
            let count = zones
                .get(*zone)
                .and_then(|z| z.pagesets.iter().find(|p| p.cpu == *cpu))
                .map_or(0, |p| p.count);
            share_rest(lists, count);
        }
        out
    }
}

/// Gives the lists never refilled the part of `count` (pages) that the
/// exact lists and the lower bounds leave, in proportion to their lower
/// bounds; scales everything down when the inferred pages exceed `count`
/// (the trace's accounting is not exact: see the module doc).
fn share_rest(lists: &mut [ListStart], count: u64) {
    let pages = |l: &ListStart| l.blocks << l.order;
    let known: u64 = lists.iter().map(pages).sum();
    if known > count {
        for l in lists.iter_mut() {
            l.blocks = (l.blocks as u128 * count as u128 / known as u128) as u64;
        }
        return;
    }
    let open: u64 = lists
        .iter()
        .filter(|l| l.how == Inferred::LowerBound)
        .map(pages)
        .sum();
    if open == 0 {
        return;
    }
    let rest = (count - known) as u128;
    for l in lists.iter_mut().filter(|l| l.how == Inferred::LowerBound) {
        let extra_pages = rest * pages(l) as u128 / open as u128;
        let extra = (extra_pages >> l.order) as u64;
        if extra > 0 {
            l.blocks += extra;
            l.how = Inferred::Estimate;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Pageset;

    fn zone(count: u64) -> Zone {
        Zone {
            name: "Normal".into(),
            managed: 1 << 20,
            start_pfn: Some(1 << 20),
            pagesets: vec![Pageset {
                cpu: 0,
                count,
                ..Pageset::default()
            }],
            ..Zone::default()
        }
    }

    fn ev(kind: EventKind) -> Event {
        Event {
            ts_ns: 0,
            cpu: 0,
            pid: 1,
            tid: 1,
            kind,
        }
    }

    const BASE: u64 = 1 << 20;

    #[test]
    fn a_refill_tells_what_the_list_held_and_the_rest_goes_to_the_others() {
        let mut inf = PcpInference::new(&[zone(100)]);
        // Three order-0 movable allocations from the list, then a refill:
        // the list held 3 pages.
        for i in 0..3 {
            inf.observe(&ev(EventKind::PageAlloc {
                pfn: BASE + i,
                order: 0,
                migratetype: 1,
                gfp_flags: 0,
            }));
        }
        inf.observe(&ev(EventKind::PageAllocZoneLocked {
            pfn: BASE + 10,
            order: 0,
            migratetype: 1,
            percpu_refill: true,
        }));
        // Two order-2 unmovable blocks left the list, never refilled: at
        // least 2 blocks (8 pages).
        for i in 0..2 {
            inf.observe(&ev(EventKind::PageAlloc {
                pfn: BASE + 64 + 4 * i,
                order: 2,
                migratetype: 0,
                gfp_flags: 0,
            }));
        }
        let start = inf.finish(&[zone(100)]);
        let lists = &start[&(0, 0)];
        let movable = lists.iter().find(|l| l.order == 0).expect("order 0");
        assert_eq!((movable.blocks, movable.how), (3, Inferred::Exact));
        let unmovable = lists.iter().find(|l| l.order == 2).expect("order 2");
        // 100 pages recorded, 3 exact: the order-2 list takes the other 97
        // (24 blocks: 96 pages), an estimate.
        assert_eq!((unmovable.blocks, unmovable.how), (24, Inferred::Estimate));
    }

    #[test]
    fn more_inferred_than_recorded_is_scaled_down() {
        let mut l = vec![
            ListStart {
                order: 0,
                migratetype: 1,
                blocks: 150,
                how: Inferred::Exact,
            },
            ListStart {
                order: 1,
                migratetype: 0,
                blocks: 25,
                how: Inferred::LowerBound,
            },
        ];
        share_rest(&mut l, 100);
        assert_eq!((l[0].blocks, l[1].blocks), (75, 12));
    }
}
