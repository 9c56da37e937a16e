//! The order in which the sub-pages of a huge page are cleared and copied.
//!
//! Models `process_huge_page()` of Linux 6.x mm/memory.c and its two users,
//! `folio_zero_user()` (called `clear_huge_page()` before 6.10) and
//! `copy_user_large_folio()` (called `copy_user_huge_page()` before 6.7).
//!
//! # Why the order matters
//!
//! Clearing or copying a 2 MiB huge page streams 2 MiB (clear) or 4 MiB (copy:
//! source and destination) through the caches. The faulting thread then goes
//! on to touch the page near the faulting address. If the sub-pages are
//! processed from the first to the last, the sub-page the thread is about to
//! touch may already have been pushed out of the last-level cache by the rest
//! of the page, especially when other CPUs share that cache. Processing the
//! target sub-page last keeps its cache lines hot (commit c79b57e462b5d, 2017,
//! for clearing; the 2018 series of seed 000 for copying).
//!
//! # The policies
//!
//! [`HugeOrderPolicy`] is the closed set of orders that kernels have used:
//!
//! - `sequential`: sub-page 0, 1, ..., N−1. Clearing before Linux 4.14 and
//!   copying before Linux 4.18.
//! - `target-last`: the `process_huge_page()` order, the kernel's choice from
//!   4.14 (clear) / 4.18 (copy) on. Let t be the target index. If 2t ≤ N the
//!   sub-pages N−1 down to 2t are processed first, one by one, and then the
//!   window [0, 2t) is processed from both of its ends towards t, left then
//!   right: 0, 2t−1, 1, 2t−2, ..., t−1, t. If 2t > N, with b = 2t − N, the
//!   sub-pages 0 up to b−1 go first and then the window [b, N) converges on t
//!   the same way. Either way the target is last and its lower neighbour is
//!   just before it, and the sub-pages nearest the target are processed
//!   latest, so the cache lines most likely to be touched next are the
//!   youngest.
//! - `neighbourhood`: 2025–26 work on `folio_zero_user()` that the reference
//!   marks **unconfirmed** (not verified in kernel source). Our exact
//!   definition, with radius r = [`NEIGHBOURHOOD_RADIUS`] = 2 and the
//!   neighbourhood [lo, hi] = [max(t − r, 0), min(t + r, N − 1)]:
//!   first the right fringe hi+1, ..., N−1 ascending, then the left fringe
//!   0, ..., lo−1 ascending (both fringes in ascending order, which is what
//!   the hardware prefetcher likes and the reason for that work), then the
//!   neighbourhood from its outside in, at each distance the right member
//!   before the left one, as `process_huge_page()` orders the sub-pages at
//!   equal distance: t+2, t−2, t+1, t−1, t (members outside [0, N) are
//!   skipped). The target is last and its lower neighbour just before it.
//!
//! Gigantic folios, with more sub-pages than [`MAX_ORDER_NR_PAGES`], are
//! always processed with the plain sequential loop whatever the policy, as
//! the kernel does (`clear_gigantic_page()`, `copy_user_gigantic_page()`).
//!
//! # Deviations
//!
//! - Deviation: the kernel passes a callback per sub-page and stops at the
//!   first error (machine-check-safe copy returning -EHWPOISON); this module
//!   only yields the order, and the caller does the work. Hardware poison is
//!   not modeled.
//! - Deviation: `cond_resched()` between sub-pages is not modeled here; the
//!   caller decides where a simulated task may be preempted.
//! - Deviation: the kernel derives the target from the fault address
//!   (`addr_hint`); [`process_huge_page_order`] takes the target index and
//!   [`target_subpage_index`] does the kernel's arithmetic.
//! - Deviation: `neighbourhood` is applied to copying as well as clearing so
//!   that the policies can be compared on both; the unconfirmed kernel work
//!   changed only `folio_zero_user()`. Our recollection, also unverified, is
//!   that the posted patch clears the neighbourhood as one ascending run
//!   (so t+1 and t+2 would come after t); this model follows the reference's
//!   description, target last.
//! - Deviation: [`MAX_ORDER_NR_PAGES`] is fixed at x86-64's 1024 (4 MiB of
//!   4 KiB pages); other architectures and configurations differ.

use std::fmt;
use std::iter::FusedIterator;

use crate::cost::Cx;
use crate::types::{Pfn, Vaddr, PAGE_SHIFT};

/// Base pages in the largest block the buddy allocator hands out
/// (`MAX_ORDER_NR_PAGES`, 1 << `MAX_PAGE_ORDER` = 1024 on x86-64). A folio
/// larger than this is gigantic and the kernel clears and copies it with a
/// plain sequential loop.
pub const MAX_ORDER_NR_PAGES: u32 = 1024;

/// Radius of the neighbourhood of the target that the `neighbourhood` policy
/// processes last (2 sub-pages on each side).
pub const NEIGHBOURHOOD_RADIUS: u32 = 2;

/// The order in which the sub-pages of a huge page are cleared and copied.
///
/// There is no sysfs knob for this in the kernel: each value is the behaviour
/// of a range of kernel versions (see the module documentation). The default
/// is `target-last`, the behaviour of Linux 4.18 to at least 6.x.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub enum HugeOrderPolicy {
    /// Sub-pages 0, 1, ..., N−1 (clearing before 4.14, copying before 4.18).
    Sequential,
    /// `process_huge_page()`: far end first, converging on the target last.
    #[default]
    TargetLast,
    /// Right fringe, left fringe, then the radius-2 neighbourhood of the
    /// target, target last. Unconfirmed 2025–26 work; see the module docs.
    Neighbourhood,
}

impl HugeOrderPolicy {
    /// Every policy, in the order of kernel history.
    pub const ALL: [HugeOrderPolicy; 3] = [
        HugeOrderPolicy::Sequential,
        HugeOrderPolicy::TargetLast,
        HugeOrderPolicy::Neighbourhood,
    ];

    /// The policy's name as experiments and tables spell it.
    pub fn name(self) -> &'static str {
        match self {
            HugeOrderPolicy::Sequential => "sequential",
            HugeOrderPolicy::TargetLast => "target-last",
            HugeOrderPolicy::Neighbourhood => "neighbourhood",
        }
    }

    /// The policy called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<HugeOrderPolicy> {
        HugeOrderPolicy::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for HugeOrderPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The index of the sub-page that contains `addr_hint` in a huge page of
/// `nr_subpages` base pages (a power of two) naturally aligned in the virtual
/// address space, as `process_huge_page()` computes it.
pub fn target_subpage_index(addr_hint: Vaddr, nr_subpages: u32) -> u32 {
    assert!(
        nr_subpages.is_power_of_two(),
        "a huge page has a power-of-two number of sub-pages, not {nr_subpages}"
    );
    let size_bytes = (nr_subpages as u64) << PAGE_SHIFT;
    let base = addr_hint.0 & !(size_bytes - 1);
    ((addr_hint.0 - base) >> PAGE_SHIFT) as u32
}

/// The order in which to process the `nr_subpages` sub-pages of a huge page
/// whose sub-page `target` is about to be touched, under `policy`.
///
/// Models process_huge_page() of Linux 6.x mm/memory.c for `target-last`,
/// and the gigantic-folio fallback of `folio_zero_user()` and
/// `copy_user_large_folio()`. Deviations: see the module documentation.
///
/// The iterator yields every index in `0..nr_subpages` exactly once and
/// allocates nothing. Panics if `target >= nr_subpages`.
pub fn process_huge_page_order(
    policy: HugeOrderPolicy,
    nr_subpages: u32,
    target: u32,
) -> HugeOrderIter {
    assert!(
        target < nr_subpages,
        "target sub-page {target} is outside a huge page of {nr_subpages} sub-pages"
    );
    let layout = if nr_subpages > MAX_ORDER_NR_PAGES {
        Layout::Sequential
    } else {
        match policy {
            HugeOrderPolicy::Sequential => Layout::Sequential,
            HugeOrderPolicy::TargetLast => target_last_layout(nr_subpages, target),
            HugeOrderPolicy::Neighbourhood => neighbourhood_layout(nr_subpages, target),
        }
    };
    HugeOrderIter {
        layout,
        step: 0,
        nr_subpages,
    }
}

fn target_last_layout(nr: u32, t: u32) -> Layout {
    if 2 * t <= nr {
        // The target is in the first half: the far end [2t, N) goes first,
        // downwards, and the window [0, 2t) converges on t.
        Layout::TargetLast {
            nr_fringe: nr - 2 * t,
            fringe_descending: true,
            base: 0,
            half: t,
        }
    } else {
        // The target is in the second half: [0, b) goes first, upwards, and
        // the window [b, N) converges on t.
        let b = 2 * t - nr;
        Layout::TargetLast {
            nr_fringe: b,
            fringe_descending: false,
            base: b,
            half: nr - t,
        }
    }
}

fn neighbourhood_layout(nr: u32, t: u32) -> Layout {
    let lo = t.saturating_sub(NEIGHBOURHOOD_RADIUS);
    let hi = (t + NEIGHBOURHOOD_RADIUS).min(nr - 1);
    let mut tail = [0u32; NEIGHBOURHOOD_LEN];
    let mut nr_tail = 0usize;
    // From the outside in, right before left at each distance, so that the
    // lower neighbour comes just before the target as in process_huge_page().
    for d in (1..=NEIGHBOURHOOD_RADIUS).rev() {
        if t + d <= hi {
            tail[nr_tail] = t + d;
            nr_tail += 1;
        }
        if t >= d {
            tail[nr_tail] = t - d;
            nr_tail += 1;
        }
    }
    tail[nr_tail] = t;
    Layout::Neighbourhood {
        nr_right: nr - 1 - hi,
        right_start: hi + 1,
        nr_left: lo,
        tail,
    }
}

/// Sub-pages in a full neighbourhood: the target and `NEIGHBOURHOOD_RADIUS`
/// on each side.
const NEIGHBOURHOOD_LEN: usize = 2 * NEIGHBOURHOOD_RADIUS as usize + 1;

/// The shape of one order, from which the i-th sub-page is computed in O(1).
#[derive(Clone, Copy, Debug)]
enum Layout {
    Sequential,
    /// `nr_fringe` sub-pages at one end one by one, then the window
    /// `[base, base + 2 * half)` alternately from its left and right ends.
    TargetLast {
        nr_fringe: u32,
        fringe_descending: bool,
        base: u32,
        half: u32,
    },
    /// `right_start..right_start + nr_right`, then `0..nr_left`, then the
    /// neighbourhood in `tail` (only its first `nr_subpages - nr_right -
    /// nr_left` entries are used).
    Neighbourhood {
        nr_right: u32,
        right_start: u32,
        nr_left: u32,
        tail: [u32; NEIGHBOURHOOD_LEN],
    },
}

/// Iterator over sub-page indices in processing order; see
/// [`process_huge_page_order`].
#[derive(Clone, Debug)]
pub struct HugeOrderIter {
    layout: Layout,
    step: u32,
    nr_subpages: u32,
}

impl HugeOrderIter {
    /// The sub-page processed at step `step` (0-based), `step < nr_subpages`.
    fn subpage_at(&self, step: u32) -> u32 {
        match self.layout {
            Layout::Sequential => step,
            Layout::TargetLast {
                nr_fringe,
                fringe_descending,
                base,
                half,
            } => {
                if step < nr_fringe {
                    if fringe_descending {
                        self.nr_subpages - 1 - step
                    } else {
                        step
                    }
                } else {
                    let j = step - nr_fringe;
                    let k = j / 2;
                    if j & 1 == 0 {
                        base + k
                    } else {
                        base + 2 * half - 1 - k
                    }
                }
            }
            Layout::Neighbourhood {
                nr_right,
                right_start,
                nr_left,
                tail,
            } => {
                if step < nr_right {
                    right_start + step
                } else if step < nr_right + nr_left {
                    step - nr_right
                } else {
                    tail[(step - nr_right - nr_left) as usize]
                }
            }
        }
    }
}

impl Iterator for HugeOrderIter {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.step >= self.nr_subpages {
            return None;
        }
        let idx = self.subpage_at(self.step);
        self.step += 1;
        Some(idx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.nr_subpages - self.step) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for HugeOrderIter {}
impl FusedIterator for HugeOrderIter {}

/// One clear or copy of a huge page, as a tracepoint on `folio_zero_user()`
/// or `copy_user_large_folio()` would record it: which folio, and the
/// sub-pages in the order they were processed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePageOp {
    /// The folio written (cleared, or the copy's destination).
    pub dst: Pfn,
    /// The copy's source; `None` for a clear.
    pub src: Option<Pfn>,
    /// Sub-page indices in processing order.
    pub subpages: Vec<u32>,
}

/// An optional record of huge page clears and copies (off by default: it
/// costs a vector per huge page). Tests turn it on to check the order; a
/// cache model can read the same sequence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HugePageLog(pub Option<Vec<HugePageOp>>);

impl HugePageLog {
    /// A log that records.
    pub fn recording() -> HugePageLog {
        HugePageLog(Some(Vec::new()))
    }

    /// Records one clear (`src` `None`) or copy in the order given.
    pub fn record(&mut self, dst: Pfn, src: Option<Pfn>, order: HugeOrderIter) {
        if let Some(ops) = &mut self.0 {
            ops.push(HugePageOp {
                dst,
                src,
                subpages: order.collect(),
            });
        }
    }
}

/// Models `folio_zero_user()` of Linux 6.x mm/memory.c (`clear_huge_page()`
/// before 6.10): zeroes the `nr_pages` base pages of the folio at `pfn`,
/// sub-page by sub-page in the order `policy` gives for the sub-page that
/// holds `addr_hint` (the fault address). A single page is one
/// `clear_user_highpage()`.
///
/// Each sub-page is a [`Cx::clear_page`]: a [`crate::cost::Seg::Mem`]
/// segment for an engine with a cache model, otherwise one
/// [`crate::cost::Cost::ClearPage`].
///
/// Deviation: `cond_resched()` between sub-pages is not modeled.
#[inline]
pub fn folio_zero_user(
    cx: &mut Cx,
    policy: HugeOrderPolicy,
    pfn: Pfn,
    nr_pages: u32,
    addr_hint: Vaddr,
) {
    if nr_pages == 1 {
        cx.clear_page(pfn);
        return;
    }
    if !cx.records_mem() {
        // Without memory traffic every sub-page's clear is the same charge,
        // so their order changes nothing: one charge of all of them (the
        // same time and segments as one per sub-page; host speed only).
        cx.charge_n(crate::cost::Cost::ClearPage, nr_pages as u64);
        return;
    }
    let target = target_subpage_index(addr_hint, nr_pages);
    for sub in process_huge_page_order(policy, nr_pages, target) {
        cx.clear_page(pfn.offset(sub as u64));
    }
}

/// Models `copy_user_large_folio()` of Linux 6.x mm/memory.c
/// (`copy_user_huge_page()` before 6.7): copies the `nr_pages` base pages of
/// the folio at `src` to the one at `dst`, sub-page by sub-page in the order
/// `policy` gives for the sub-page that holds `addr_hint`.
///
/// Deviation: the machine-check-safe copy's poison handling and
/// `cond_resched()` are not modeled.
pub fn copy_user_large_folio(
    cx: &mut Cx,
    policy: HugeOrderPolicy,
    dst: Pfn,
    src: Pfn,
    nr_pages: u32,
    addr_hint: Vaddr,
) {
    let target = target_subpage_index(addr_hint, nr_pages);
    for sub in process_huge_page_order(policy, nr_pages, target) {
        cx.copy_page(dst.offset(sub as u64), src.offset(sub as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(policy: HugeOrderPolicy, n: u32, t: u32) -> Vec<u32> {
        process_huge_page_order(policy, n, t).collect()
    }

    /// Sizes from a single page up to a PMD huge page (512 sub-pages).
    fn sizes() -> impl Iterator<Item = u32> {
        (0..=9).map(|s| 1u32 << s)
    }

    /// Asserts that `seq` visits each of `0..n` exactly once.
    fn assert_permutation(seq: &[u32], n: u32, what: &str) {
        assert_eq!(seq.len(), n as usize, "{what}: wrong length");
        let mut seen = vec![false; n as usize];
        for &i in seq {
            assert!(i < n, "{what}: index {i} out of range");
            assert!(!seen[i as usize], "{what}: index {i} produced twice");
            seen[i as usize] = true;
        }
    }

    #[test]
    fn reference_examples() {
        use HugeOrderPolicy::TargetLast;
        assert_eq!(order(TargetLast, 8, 2), [7, 6, 5, 4, 0, 3, 1, 2]);
        assert_eq!(order(TargetLast, 8, 6), [0, 1, 2, 3, 4, 7, 5, 6]);
    }

    #[test]
    fn target_zero_is_reverse() {
        for n in sizes() {
            let want: Vec<u32> = (0..n).rev().collect();
            assert_eq!(order(HugeOrderPolicy::TargetLast, n, 0), want, "n={n}");
        }
    }

    #[test]
    fn sequential_is_ascending() {
        for n in sizes() {
            for t in 0..n {
                let want: Vec<u32> = (0..n).collect();
                assert_eq!(order(HugeOrderPolicy::Sequential, n, t), want);
            }
        }
    }

    #[test]
    fn every_policy_is_a_permutation_with_exact_size() {
        for policy in HugeOrderPolicy::ALL {
            for n in sizes() {
                for t in 0..n {
                    let it = process_huge_page_order(policy, n, t);
                    assert_eq!(it.len(), n as usize);
                    let seq: Vec<u32> = it.collect();
                    assert_permutation(&seq, n, &format!("{policy} n={n} t={t}"));
                }
            }
        }
    }

    #[test]
    fn target_last_ends_with_lower_neighbour_then_target() {
        for n in sizes() {
            for t in 0..n {
                let seq = order(HugeOrderPolicy::TargetLast, n, t);
                assert_eq!(*seq.last().unwrap(), t, "n={n} t={t}");
                if t > 0 {
                    assert_eq!(seq[seq.len() - 2], t - 1, "n={n} t={t}");
                }
            }
        }
    }

    /// The property the order exists for: the further a sub-page is from
    /// the target, the earlier it is processed, up to the left-right
    /// alternation (a sub-page at distance d comes before any at distance
    /// d − 1 except its mirror image, which may come one step earlier).
    #[test]
    fn target_last_processes_far_before_near() {
        for n in sizes() {
            for t in 0..n {
                let seq = order(HugeOrderPolicy::TargetLast, n, t);
                let dist: Vec<u32> = seq.iter().map(|&i| i.abs_diff(t)).collect();
                for w in dist.windows(3) {
                    assert!(
                        w[2] <= w[0],
                        "n={n} t={t}: distance rose from {} to {}",
                        w[0],
                        w[2]
                    );
                }
            }
        }
    }

    #[test]
    fn neighbourhood_comes_last_and_target_is_last() {
        for n in sizes() {
            for t in 0..n {
                let seq = order(HugeOrderPolicy::Neighbourhood, n, t);
                assert_eq!(*seq.last().unwrap(), t, "n={n} t={t}");
                let near = |i: u32| i.abs_diff(t) <= NEIGHBOURHOOD_RADIUS;
                let first_near = seq.iter().position(|&i| near(i)).unwrap();
                assert!(
                    seq[first_near..].iter().all(|&i| near(i)),
                    "n={n} t={t}: a sub-page outside the neighbourhood came after it: {seq:?}"
                );
                // Both fringes ascend, right fringe first.
                let outside: Vec<u32> = seq[..first_near].to_vec();
                let split = outside.iter().position(|&i| i < t).unwrap_or(outside.len());
                assert!(outside[..split].iter().all(|&i| i > t));
                assert!(outside[split..].iter().all(|&i| i < t));
                assert!(outside[..split].windows(2).all(|w| w[0] < w[1]));
                assert!(outside[split..].windows(2).all(|w| w[0] < w[1]));
            }
        }
    }

    #[test]
    fn neighbourhood_example() {
        assert_eq!(
            order(HugeOrderPolicy::Neighbourhood, 16, 5),
            [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 7, 3, 6, 4, 5]
        );
        assert_eq!(
            order(HugeOrderPolicy::Neighbourhood, 8, 0),
            [3, 4, 5, 6, 7, 2, 1, 0]
        );
        assert_eq!(
            order(HugeOrderPolicy::Neighbourhood, 8, 7),
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn gigantic_folios_are_sequential_whatever_the_policy() {
        let n = 2 * MAX_ORDER_NR_PAGES;
        for policy in HugeOrderPolicy::ALL {
            assert!(process_huge_page_order(policy, n, n / 3).eq(0..n));
        }
        // The largest folio that is not gigantic still gets the ordering.
        let seq = order(HugeOrderPolicy::TargetLast, MAX_ORDER_NR_PAGES, 100);
        assert_eq!(*seq.last().unwrap(), 100);
    }

    #[test]
    fn target_index_from_fault_address() {
        let base = 0x7f00_0020_0000u64;
        assert_eq!(target_subpage_index(Vaddr(base), 512), 0);
        assert_eq!(target_subpage_index(Vaddr(base + 0x3123), 512), 3);
        assert_eq!(target_subpage_index(Vaddr(base + 0x1f_ffff), 512), 511);
    }

    #[test]
    fn names_round_trip() {
        for p in HugeOrderPolicy::ALL {
            assert_eq!(HugeOrderPolicy::from_name(p.name()), Some(p));
        }
        assert_eq!(HugeOrderPolicy::from_name("reverse"), None);
        assert_eq!(HugeOrderPolicy::default(), HugeOrderPolicy::TargetLast);
    }

    #[test]
    #[should_panic(expected = "outside a huge page")]
    fn target_out_of_range_panics() {
        let _ = process_huge_page_order(HugeOrderPolicy::TargetLast, 8, 8);
    }
}
