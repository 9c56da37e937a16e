//! Seed 000's experiment in the cache model: anon-cow-seq on one socket of a
//! 2 × Xeon E5-2699 v3, huge pages copied in address order (Linux before
//! 4.18) or with the target sub-page last (`process_huge_page()`, 4.18+).
//!
//! vm-scalability's anon-cow-seq maps and populates an anonymous area with
//! transparent huge pages, forks N children, and each child writes the area
//! from its beginning to its end. Each child's first write to a huge page is
//! a copy-on-write fault that copies the parent's 2 MiB page into a new one
//! (`copy_user_huge_page()`, as in 2018; since 5.8 an anonymous THP COW
//! splits the PMD instead, see MECHANISMS.md §1), and the child then writes
//! the rest of the page. The write starts at the page's first byte, so the
//! target sub-page is sub-page 0 and target-last copies sub-pages 511 down
//! to 0, leaving the sub-pages the child writes first the most recently
//! copied.
//!
//! # The model of the run
//!
//! 36 children on the 36 CPUs of one socket share its 45 MiB inclusive LLC
//! (each CPU with a private 256 KiB L2). That machine takes about 40 s in an
//! unoptimized test build, so a debug build runs a scaled machine with the
//! same LLC share per CPU (12 CPUs sharing 15 MiB, 1.25 MiB each, as the
//! seed's cover letter computes), and an optimized build (`cargo test
//! --release -p sim --test huge_copy_cache -- --nocapture`) runs both.
//! Each child handles `NR_HUGE` huge
//! pages: copy (512 sub-page copies, in the policy's order) then write every
//! cache line of the page in address order. The children run round-robin,
//! one 4 KiB unit of work (a sub-page copy or a sub-page of writes) per turn,
//! with their starts staggered so that they are not in lock-step. The parent's
//! source pages are shared by all children, as after a fork.
//!
//! Simplifications: every 4 KiB unit takes one turn whether it is a copy or a
//! write (the model has no timing here), and a child writes every line of
//! the page (usemem's exact stride is not modeled). The numbers are the
//! model's, not the seed's; only robust orderings are asserted.

use mm::memory::huge_order::{process_huge_page_order, HugeOrderPolicy};
use mm::{VcpuId, PAGE_SIZE};
use sim::cache::{AccessKind, CacheConfig, CacheModel, CacheStats};

const NR_HUGE: u64 = 2;
const NR_SUBPAGES: u32 = 512;
const HUGE_BYTES: u64 = NR_SUBPAGES as u64 * PAGE_SIZE;

/// Physical layout: the parent's pages at 1 GiB, the children's copies
/// after 4 GiB, each child's pages contiguous.
const PARENT_BASE: u64 = 1 << 30;
const CHILD_BASE: u64 = 4 << 30;

#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
struct Result {
    copy: CacheStats,
    touch: CacheStats,
    /// LLC misses of the first write pass over the target sub-page, the one
    /// the fault was on.
    target_misses: u64,
    target_refs: u64,
}

/// The seed's socket with `nr_children` CPUs and an LLC of 1.25 MiB per
/// CPU (20 ways), so that each CPU's share is the seed machine's.
fn machine(nr_children: u32) -> CacheConfig {
    CacheConfig {
        sockets: 1,
        cpus_per_socket: nr_children,
        llc_size_bytes: nr_children as u64 * (5 << 18),
        ..CacheConfig::haswell_e5_2699_v3()
    }
}

fn run(policy: HugeOrderPolicy, nr_children: u32) -> Result {
    let cfg = machine(nr_children);
    // Turns between the starts of consecutive children: spreads them over
    // one huge page's worth of work (1024 units).
    let stagger_turns = 2 * NR_SUBPAGES as u64 / nr_children as u64;
    let mut cache = CacheModel::new(cfg).unwrap();
    let mut res = Result::default();
    // Units of work per child: per huge page, 512 copies then 512 writes.
    let units = NR_HUGE * 2 * NR_SUBPAGES as u64;
    let turns = units + stagger_turns * (nr_children as u64 - 1);
    // Each child's copy order for the page in hand; the target is sub-page
    // 0 (the write starts at the page's first byte).
    let target = 0;
    let mut orders: Vec<_> = (0..nr_children)
        .map(|_| process_huge_page_order(policy, NR_SUBPAGES, target))
        .collect();
    for turn in 0..turns {
        for child in 0..nr_children {
            let start = child as u64 * stagger_turns;
            if turn < start || turn >= start + units {
                continue;
            }
            let unit = turn - start;
            let page = unit / (2 * NR_SUBPAGES as u64);
            let step = unit % (2 * NR_SUBPAGES as u64);
            let cpu = VcpuId(child);
            let src = PARENT_BASE + page * HUGE_BYTES;
            let dst = CHILD_BASE + (child as u64 * NR_HUGE + page) * HUGE_BYTES;
            if step < NR_SUBPAGES as u64 {
                if step == 0 {
                    orders[child as usize] = process_huge_page_order(policy, NR_SUBPAGES, target);
                }
                let sub = orders[child as usize].next().unwrap() as u64;
                let off = sub * PAGE_SIZE;
                cache.copy_range(cpu, dst + off, src + off, PAGE_SIZE, &mut res.copy);
            } else {
                let sub = step - NR_SUBPAGES as u64;
                let mut st = CacheStats::default();
                let at = dst + sub * PAGE_SIZE;
                cache.access_range(cpu, at, PAGE_SIZE, AccessKind::Write, &mut st);
                if sub == target as u64 {
                    res.target_misses += st.llc_misses;
                    res.target_refs += st.llc_references();
                }
                res.touch += st;
            }
        }
    }
    cache.check_invariants();
    res
}

#[test]
fn target_last_copy_reduces_llc_misses_of_the_first_touch() {
    // The scaled machine always; the seed's own in optimized builds only,
    // for time (see the module documentation).
    check(12);
    if !cfg!(debug_assertions) {
        check(36);
    }
}

fn check(nr_children: u32) {
    let cfg = machine(nr_children);
    println!(
        "{nr_children} children, {} MiB LLC ({} ways), L2 {:?}, {NR_HUGE} huge pages each",
        cfg.llc_size_bytes >> 20,
        cfg.llc_ways,
        cfg.l2
    );
    let mut results = Vec::new();
    for policy in HugeOrderPolicy::ALL {
        let r = run(policy, nr_children);
        let mut all = r.copy;
        all += r.touch;
        println!(
            "{:<14} copy miss {:>5.1}%  touch miss {:>5.1}%  target sub-page miss {:>5.1}%  \
             all {:>5.1}%  (LLC misses: copy {}, touch {}, references {})",
            policy.name(),
            r.copy.miss_rate_pct(),
            r.touch.miss_rate_pct(),
            r.target_misses as f64 * 100.0 / r.target_refs.max(1) as f64,
            all.miss_rate_pct(),
            r.copy.llc_misses,
            r.touch.llc_misses,
            all.llc_references(),
        );
        results.push((policy, r));
    }
    let get = |p| results.iter().find(|(q, _)| *q == p).unwrap().1;
    let seq = get(HugeOrderPolicy::Sequential);
    let last = get(HugeOrderPolicy::TargetLast);
    // The sub-page the fault was on is the most recently copied one, so the
    // child's first writes find it in the LLC.
    assert!(
        last.target_misses < seq.target_misses,
        "target sub-page misses: target-last {} vs sequential {}",
        last.target_misses,
        seq.target_misses
    );
    // And so, since the child goes on upward from the target, do the
    // writes over the rest of the page.
    assert!(
        last.touch.llc_misses < seq.touch.llc_misses,
        "touch misses: target-last {} vs sequential {}",
        last.touch.llc_misses,
        seq.touch.llc_misses
    );
    // Every run did the same work.
    assert_eq!(seq.touch.accesses(), last.touch.accesses());
    assert_eq!(seq.copy.accesses(), last.copy.accesses());
}
