//! Scenario tests drawn as `tools/testing/vma` draws them (one character per
//! page or per PMD, as each test says), a differential test against the tree,
//! and the seed's and the reviewer's claims.

use super::*;
use crate::cost::CostTable;
use crate::page_alloc::{MemoryLayout, NodeLayout, PageAlloc, VmSysctl};
use crate::types::Vaddr;
use crate::types::{VcpuId, PAGE_SIZE};
use crate::vma::{Advice, MmapLayout};

const P: u64 = PAGE_SIZE;
const PMD: u64 = 1 << PMD_SHIFT;
/// 2 MiB-aligned with PMD index ≡ 0 (mod 4), so that pmd hashes are easy to read.
const B: u64 = 0x1000_0000;

struct World {
    pa: PageAlloc,
    cx: Cx,
    vs: VmStat,
}

fn world() -> World {
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 1,
            nr_pages: 1 << 16,
        }],
        dma32_pages: 0,
    };
    World {
        pa: PageAlloc::new(&layout, VmSysctl::default(), Default::default()),
        cx: Cx::new(VcpuId(0), CostTable::uniform(1)),
        vs: VmStat::default(),
    }
}

impl World {
    fn mm(&mut self) -> MmStruct {
        MmStruct::new(&mut self.pa, &mut self.cx, MmapLayout::PageAligned).unwrap()
    }
    fn map(&mut self, mm: &mut MmStruct, addr: u64, len: u64) {
        assert_eq!(
            mm.mmap(
                &mut self.pa,
                &mut self.cx,
                Vaddr(addr),
                len,
                crate::vma::MapFlags::FIXED
            ),
            Ok(Vaddr(addr))
        );
    }
    fn unmap(&mut self, mm: &mut MmStruct, addr: u64, len: u64) {
        mm.munmap(&mut self.pa, &mut self.cx, Vaddr(addr), len)
            .unwrap();
    }
    /// A cached lookup; returns the VMA's start and whether the cache hit.
    fn find(&mut self, t: &mut TaskStruct, mm: &MmStruct, addr: u64) -> (Option<u64>, bool) {
        let hits = self.vs.get(VmEvent::VMACACHE_FIND_HITS);
        let v = vma_lookup(t, mm, &mut self.vs, &mut self.cx, addr);
        (
            v.map(|v| v.start),
            self.vs.get(VmEvent::VMACACHE_FIND_HITS) > hits,
        )
    }
    fn ev(&self, e: VmEvent) -> u64 {
        self.vs.get(e)
    }
}

fn slots(t: &TaskStruct) -> [Option<u64>; 4] {
    t.vmacache.vmas.map(|s| s.map(|r| r.start))
}

#[test]
fn pfn_hits_and_overwrites() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pfn);
    // AAAA    BB        (one character per page from B)
    w.map(&mut mm, B, 4 * P);
    w.map(&mut mm, B + 8 * P, 2 * P);
    assert_eq!(w.find(&mut t, &mm, B + P), (Some(B), false));
    // pfn of B+P is ≡ 1: A went to slot 1.
    assert_eq!(slots(&t), [None, Some(B), None, None]);
    // The scan starts at slot 0 whatever the address: a hit, not first-slot.
    assert_eq!(w.find(&mut t, &mm, B), (Some(B), true));
    assert_eq!(w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS), 0);
    // B+9P hashes to slot 1 as well and overwrites A.
    assert_eq!(w.find(&mut t, &mm, B + 9 * P), (Some(B + 8 * P), false));
    assert_eq!(slots(&t), [None, Some(B + 8 * P), None, None]);
    assert_eq!(w.find(&mut t, &mm, B + 3 * P), (Some(B), false));
    // A lookup in the gap is a miss that finds nothing containing it.
    assert_eq!(w.find(&mut t, &mm, B + 5 * P), (None, false));
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_CALLS), 5);
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_HITS), 1);
}

#[test]
fn pmd_scan_starts_at_hash_and_wraps() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    // AAAA              (one character per PMD: PMD indices ≡ 0, 1, 2, 3)
    w.map(&mut mm, B, 4 * PMD);
    assert_eq!(w.find(&mut t, &mm, B + 5 * P), (Some(B), false));
    assert_eq!(slots(&t), [Some(B), None, None, None]);
    // Anywhere in the same PMD: the first slot examined is A's.
    let ns = w.cx.compute_ns();
    assert_eq!(w.find(&mut t, &mm, B + 400 * P), (Some(B), true));
    assert_eq!(w.cx.compute_ns() - ns, 1 + 1, "the call and one probe");
    assert_eq!(w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS), 1);
    // The last PMD hashes to slot 3: empty, wrap to slot 0, hit on the second probe.
    let ns = w.cx.compute_ns();
    assert_eq!(w.find(&mut t, &mm, B + 3 * PMD + P), (Some(B), true));
    assert_eq!(w.cx.compute_ns() - ns, 1 + 2, "the call and two probes");
    assert_eq!(w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS), 1);
    // Three calls; four probes of the empty cache on the first miss, then
    // one, then two.
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_NS), 3 + 7);
}

#[test]
fn munmap_invalidates_resize_does_not() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pfn);
    // AAAAAAAA  CC      (pages)
    w.map(&mut mm, B, 8 * P);
    w.map(&mut mm, B + 10 * P, 2 * P);
    w.find(&mut t, &mm, B);
    assert_eq!(w.find(&mut t, &mm, B + 6 * P), (Some(B), true));
    // AAAA****  CC      MADV_HUGEPAGE splits A in place: no VMA left the tree.
    mm.madvise(
        &mut w.pa,
        &mut w.cx,
        Vaddr(B + 4 * P),
        4 * P,
        Advice::HugePage,
    )
    .unwrap();
    assert_eq!(mm.vmacache_seqnum, 0);
    // The slot still points at A, now shorter: the bounds recheck misses.
    assert_eq!(w.find(&mut t, &mm, B + 6 * P), (Some(B + 4 * P), false));
    assert_eq!(w.find(&mut t, &mm, B + P), (Some(B), true));
    // AAAA****          munmap of C detaches a VMA: every slot is stale.
    w.unmap(&mut mm, B + 10 * P, 2 * P);
    assert_eq!(mm.vmacache_seqnum, 1);
    assert_eq!(w.find(&mut t, &mm, B + P), (Some(B), false));
    assert_eq!(t.vmacache.seqnum, 1);
    assert_eq!(w.find(&mut t, &mm, B + P), (Some(B), true));
}

#[test]
fn merges_invalidate_only_when_a_vma_leaves() {
    let mut w = world();
    let mut mm = w.mm();
    // AA    CC          (pages)
    w.map(&mut mm, B, 2 * P);
    w.map(&mut mm, B + 6 * P, 2 * P);
    assert_eq!(mm.vmacache_seqnum, 0);
    // AAAA  CC          a new mapping merging into A never existed for a lookup.
    w.map(&mut mm, B + 2 * P, 2 * P);
    assert_eq!(mm.vmacache_seqnum, 0);
    // AAAAAAAA          filling the hole frees C: one invalidation.
    w.map(&mut mm, B + 4 * P, 2 * P);
    assert_eq!(mm.vmacache_seqnum, 1);
    mm.check_vmas();
    assert_eq!(mm.vmas.len(), 1);
}

#[test]
fn fork_flushes_child_and_foreign_mm_misses() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    // AAAA              (pages)
    w.map(&mut mm, B, 4 * P);
    w.find(&mut t, &mm, B);
    assert_eq!(w.find(&mut t, &mm, B), (Some(B), true));
    let child_mm = crate::memory::fork(&mut w.pa, &mut w.cx, &mut mm).unwrap();
    let mut child = t.fork(&child_mm);
    assert_eq!(slots(&child), [None; 4]);
    assert_eq!(w.find(&mut child, &child_mm, B), (Some(B), false));
    // The parent's task looking into the child's mm (as access_remote_vm()
    // would): a miss that caches nothing.
    let before = slots(&t);
    let calls = w.ev(VmEvent::VMACACHE_FIND_CALLS);
    assert_eq!(w.find(&mut t, &child_mm, B), (Some(B), false));
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_CALLS), calls + 1);
    assert_eq!(slots(&t), before);
    // A kernel thread never uses the cache.
    let mut k = TaskStruct::kthread(VmacachePolicy::Pmd);
    assert_eq!(w.find(&mut k, &mm, B), (Some(B), false));
    assert_eq!(w.find(&mut k, &mm, B), (Some(B), false));
    // exec: a fresh mm, seqnum reset, slots cleared.
    let mut new_mm = w.mm();
    t.exec(&mut new_mm);
    assert_eq!(slots(&t), [None; 4]);
    assert_eq!(w.find(&mut t, &new_mm, B), (None, false));
}

#[test]
fn lru_moves_hits_to_front() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Lru);
    // A B C D E         (pages, each VMA one page with a gap)
    let v: Vec<u64> = (0..5).map(|i| B + 2 * i * P).collect();
    for &a in &v {
        w.map(&mut mm, a, P);
    }
    for &a in &v[..3] {
        w.find(&mut t, &mm, a);
    }
    assert_eq!(slots(&t), [Some(v[2]), Some(v[1]), Some(v[0]), None]);
    assert_eq!(w.find(&mut t, &mm, v[0]), (Some(v[0]), true));
    assert_eq!(slots(&t), [Some(v[0]), Some(v[2]), Some(v[1]), None]);
    assert_eq!(w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS), 0);
    assert_eq!(w.find(&mut t, &mm, v[0]), (Some(v[0]), true));
    assert_eq!(w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS), 1);
    w.find(&mut t, &mm, v[3]);
    w.find(&mut t, &mm, v[4]);
    // B, least recently used, fell out.
    assert_eq!(slots(&t), [Some(v[4]), Some(v[3]), Some(v[0]), Some(v[2])]);
}

#[test]
fn differential_cache_never_returns_a_wrong_vma() {
    for policy in [
        VmacachePolicy::Pfn,
        VmacachePolicy::Pmd,
        VmacachePolicy::Lru,
        VmacachePolicy::None,
    ] {
        let mut w = world();
        let mut mm = w.mm();
        let mut t = TaskStruct::new(&mm, policy);
        let mut rng = crate::rng::SplitMix64(0x006d_6d6c_6162);
        // A 16 MiB window: pages and PMDs both matter.
        let span_pages = 4096;
        for _ in 0..20_000 {
            let a = B + rng.below(span_pages) * P;
            let len = (1 + rng.below(64)) * P;
            match rng.below(10) {
                0 => {
                    let _ = mm.mmap(
                        &mut w.pa,
                        &mut w.cx,
                        Vaddr(a),
                        len,
                        crate::vma::MapFlags::FIXED,
                    );
                }
                1 => w.unmap(&mut mm, a, len),
                2 => {
                    let adv = if rng.below(2) == 0 {
                        Advice::HugePage
                    } else {
                        Advice::NoHugePage
                    };
                    let _ = mm.madvise(&mut w.pa, &mut w.cx, Vaddr(a), len, adv);
                }
                _ => {
                    let cached = find_vma(&mut t, &mm, &mut w.vs, &mut w.cx, a);
                    assert_eq!(cached, mm.find_vma(&mut w.cx, a), "{policy:?} at {a:#x}");
                }
            }
            mm.check_vmas();
        }
        let calls = w.ev(VmEvent::VMACACHE_FIND_CALLS);
        if policy == VmacachePolicy::None {
            assert_eq!(calls, 0);
        } else {
            assert!(w.ev(VmEvent::VMACACHE_FIND_HITS) > 0, "{policy:?}");
        }
    }
}

struct Rates {
    hit: f64,
    first: f64,
    share: f64,
}

/// Runs `addrs` as page faults (one `FaultEntry` each plus the lookup) with
/// the host profile's estimates, and reports the cache's rates and its share
/// of fault time.
fn run_faults(policy: VmacachePolicy, mm: &MmStruct, addrs: &[u64]) -> Rates {
    let mut w = world();
    let mut table = CostTable::uniform(0);
    table.set(Cost::FaultEntry, 700);
    table.set(Cost::VmaLookupLevel, 10);
    table.set(Cost::VmacacheProbe, 2);
    w.cx = Cx::new(VcpuId(0), table);
    let mut t = TaskStruct::new(mm, policy);
    for &a in addrs {
        w.cx.charge(Cost::FaultEntry);
        assert!(vma_lookup(&mut t, mm, &mut w.vs, &mut w.cx, a).is_some());
    }
    let calls = w.ev(VmEvent::VMACACHE_FIND_CALLS) as f64;
    Rates {
        hit: w.ev(VmEvent::VMACACHE_FIND_HITS) as f64 / calls,
        first: w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS) as f64
            / w.ev(VmEvent::VMACACHE_FIND_HITS) as f64,
        share: w.ev(VmEvent::VMACACHE_FIND_NS) as f64 / w.cx.compute_ns() as f64,
    }
}

fn report(name: &str, rows: &[(VmacachePolicy, &Rates)]) {
    for (p, r) in rows {
        println!(
            "{name}: {:<4} hits {:5.1} %  first-slot hits {:5.1} %  vmacache_find share of fault time {:.2} %",
            p.name(),
            100.0 * r.hit,
            100.0 * r.first,
            100.0 * r.share
        );
    }
}

/// The seed's claim: with spatial locality, a cached VMA sits in the first
/// slot examined about a quarter of the time under the pfn hash and most of
/// the time under the pmd hash. Four large VMAs (heap arenas, say) are
/// touched at random pages of one hot PMD each; the hot PMDs move on, and a
/// scratch mapping is unmapped, every 256 touches, as a malloc returning
/// memory would.
#[test]
fn seed_claim_pmd_hash_raises_first_slot_hits() {
    // AAAAAAAA BBBBBBBB CCCCCCCC DDDDDDDD     (PMDs; one PMD gap between VMAs)
    let starts: Vec<u64> = (0..4).map(|i| B + i * 9 * PMD).collect();
    let mut rng = crate::rng::SplitMix64(20_180_710);
    let mut addrs = Vec::new();
    let mut hot = [0u64; 4];
    for step in 0..20_000u64 {
        if step % 256 == 0 {
            hot = [0, 1, 2, 3].map(|_| rng.below(8));
        }
        let v = rng.below(4) as usize;
        addrs.push(starts[v] + hot[v] * PMD + rng.below(512) * P);
    }
    // The invalidations happen between touches: a scratch VMA mapped and
    // unmapped every 256 touches bumps the seqnum.
    let scratch = B + 40 * PMD;
    let mut rates = Vec::new();
    for policy in [
        VmacachePolicy::Pfn,
        VmacachePolicy::Pmd,
        VmacachePolicy::Lru,
    ] {
        let mut w2 = world();
        let mut mm2 = w2.mm();
        for &s in &starts {
            w2.map(&mut mm2, s, 8 * PMD);
        }
        let mut table = CostTable::uniform(0);
        table.set(Cost::FaultEntry, 700);
        table.set(Cost::VmaLookupLevel, 10);
        table.set(Cost::VmacacheProbe, 2);
        w2.cx = Cx::new(VcpuId(0), table);
        let mut t = TaskStruct::new(&mm2, policy);
        for (i, &a) in addrs.iter().enumerate() {
            if i % 256 == 0 {
                w2.map(&mut mm2, scratch, P);
                w2.unmap(&mut mm2, scratch, P);
            }
            w2.cx.charge(Cost::FaultEntry);
            assert!(vma_lookup(&mut t, &mm2, &mut w2.vs, &mut w2.cx, a).is_some());
        }
        let calls = w2.ev(VmEvent::VMACACHE_FIND_CALLS) as f64;
        rates.push((
            policy,
            Rates {
                hit: w2.ev(VmEvent::VMACACHE_FIND_HITS) as f64 / calls,
                first: w2.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS) as f64
                    / w2.ev(VmEvent::VMACACHE_FIND_HITS) as f64,
                share: w2.ev(VmEvent::VMACACHE_FIND_NS) as f64 / w2.cx.compute_ns() as f64,
            },
        ));
    }
    let rows: Vec<_> = rates.iter().map(|(p, r)| (*p, r)).collect();
    report("spatial locality", &rows);
    let (pfn, pmd) = (&rates[0].1, &rates[1].1);
    assert!(
        pmd.first > 2.0 * pfn.first,
        "pmd {} vs pfn {}",
        pmd.first,
        pfn.first
    );
    assert!(pmd.share < pfn.share);
}

/// The reviewer's point: a workload can favour the pfn hash. Four one-page
/// VMAs inside one PMD, visited at random: under pmd they all hash to one
/// slot and evict each other; under pfn (pages ≡ 0, 1, 2, 3) each has its own.
#[test]
fn reviewer_point_small_vmas_favour_pfn() {
    let mut w = world();
    let mut mm = w.mm();
    // A B C D           (pages, each VMA one page, gaps between them)
    let starts: Vec<u64> = (0..4).map(|i| B + i * 5 * P).collect();
    for &s in &starts {
        w.map(&mut mm, s, P);
    }
    let mut rng = crate::rng::SplitMix64(20_180_711);
    let addrs: Vec<u64> = (0..20_000).map(|_| starts[rng.below(4) as usize]).collect();
    let pfn = run_faults(VmacachePolicy::Pfn, &mm, &addrs);
    let pmd = run_faults(VmacachePolicy::Pmd, &mm, &addrs);
    let lru = run_faults(VmacachePolicy::Lru, &mm, &addrs);
    report(
        "small vmas, random",
        &[
            (VmacachePolicy::Pfn, &pfn),
            (VmacachePolicy::Pmd, &pmd),
            (VmacachePolicy::Lru, &lru),
        ],
    );
    assert!(pfn.hit > pmd.hit, "pfn {} vs pmd {}", pfn.hit, pmd.hit);
    assert!(pfn.share <= pmd.share);
}

/// Two threads of one process: each has its own four slots over the shared
/// mm; what one caches the other does not see, and a VMA leaving the tree
/// makes both stale (one seqnum per mm).
#[test]
fn threads_have_separate_caches_over_a_shared_mm() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t1 = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    let mut t2 = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    // AAAA BBBB         (PMDs: A at PMD indices ≡ 0..3, B at ≡ 1..)
    w.map(&mut mm, B, 4 * PMD);
    w.map(&mut mm, B + 5 * PMD, 4 * PMD);
    // t1 looks in A, t2 in B: each misses once and caches only its own.
    assert_eq!(w.find(&mut t1, &mm, B), (Some(B), false));
    assert_eq!(
        w.find(&mut t2, &mm, B + 5 * PMD),
        (Some(B + 5 * PMD), false)
    );
    assert_eq!(slots(&t1), [Some(B), None, None, None]);
    assert_eq!(slots(&t2), [None, Some(B + 5 * PMD), None, None]);
    assert_eq!(w.find(&mut t1, &mm, B + P), (Some(B), true));
    // t2 has never looked in A: a miss for t2 however warm t1 is.
    assert_eq!(w.find(&mut t2, &mm, B + P), (Some(B), false));
    assert_eq!(slots(&t2), [Some(B), Some(B + 5 * PMD), None, None]);
    // AAAA              t1 unmaps B: both caches are stale.
    w.unmap(&mut mm, B + 5 * PMD, 4 * PMD);
    assert_eq!(w.find(&mut t2, &mm, B + P), (Some(B), false));
    assert_eq!(
        slots(&t2),
        [Some(B), None, None, None],
        "flushed, then refilled"
    );
    assert_eq!(t1.vmacache.seqnum, 0, "t1 has not looked since");
    assert_eq!(w.find(&mut t1, &mm, B + P), (Some(B), false));
    assert_eq!(t1.vmacache.seqnum, 1);
}

/// A merge that frees a VMA a task had cached: the next lookup flushes the
/// slots and misses, and finds the merged VMA.
#[test]
fn merge_that_frees_a_cached_vma_flushes_the_next_lookup() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pfn);
    // AA  CC            (pages)
    w.map(&mut mm, B, 2 * P);
    w.map(&mut mm, B + 4 * P, 2 * P);
    w.find(&mut t, &mm, B);
    assert_eq!(slots(&t), [Some(B), None, None, None]);
    // pfn of B+4P ≡ 0 as well: C overwrites A in slot 0.
    w.find(&mut t, &mm, B + 4 * P);
    assert_eq!(slots(&t), [Some(B + 4 * P), None, None, None]);
    assert_eq!(w.find(&mut t, &mm, B + 5 * P), (Some(B + 4 * P), true));
    // AAAAAA            the hole filled: A grows over it and C is freed.
    w.map(&mut mm, B + 2 * P, 2 * P);
    assert_eq!(mm.vmacache_seqnum, 1);
    assert_eq!(w.find(&mut t, &mm, B + 5 * P), (Some(B), false));
    assert_eq!(slots(&t), [None, Some(B), None, None]);
    assert_eq!(w.find(&mut t, &mm, B + 5 * P), (Some(B), true));
}

/// Why a sequential sweep does not favour the pmd hash: the VMA is cached
/// in the slot of the PMD where it missed, and the scan of the next PMD
/// starts one slot later and wraps, so it takes four probes there, then
/// three, then two, and one again four PMDs on.
#[test]
fn pmd_sweep_upward_wraps_the_long_way_round() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    // AAAAAAAA          (PMDs ≡ 0 1 2 3 0 1 2 3)
    w.map(&mut mm, B, 8 * PMD);
    w.find(&mut t, &mm, B);
    let mut probes = Vec::new();
    for pmd in 0..8 {
        let ns = w.cx.compute_ns();
        assert_eq!(w.find(&mut t, &mm, B + pmd * PMD + P), (Some(B), true));
        probes.push(w.cx.compute_ns() - ns - 1);
    }
    assert_eq!(probes, [1, 4, 3, 2, 1, 4, 3, 2]);
    // pfn: the slot of the first fault's page (B ≡ 0), scanned first always.
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pfn);
    w.find(&mut t, &mm, B);
    let ns = w.cx.compute_ns();
    for pmd in 0..8 {
        w.find(&mut t, &mm, B + pmd * PMD + P);
    }
    assert_eq!(w.cx.compute_ns() - ns, 8 * (1 + 1));
}

/// A scan that wraps past the end of the array and misses: all four slots
/// examined, then the walk, and the miss's slot overwritten.
#[test]
fn pmd_miss_after_wrap_overwrites_the_hashed_slot() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    // A B C D E         (one page each, in PMDs ≡ 3, 0, 1, 2, 3)
    let v: Vec<u64> = (0..5).map(|i| B + (3 + i) * PMD).collect();
    for &a in &v {
        w.map(&mut mm, a, P);
    }
    for &a in &v[..4] {
        w.find(&mut t, &mm, a);
    }
    assert_eq!(slots(&t), [Some(v[1]), Some(v[2]), Some(v[3]), Some(v[0])]);
    // E hashes to slot 3 (A's): scan 3, 0, 1, 2, all miss; E replaces A.
    let ns = w.cx.compute_ns();
    assert_eq!(w.find(&mut t, &mm, v[4]), (Some(v[4]), false));
    assert_eq!(
        w.cx.compute_ns() - ns,
        1 + 4 + 1,
        "call, four probes, one level"
    );
    assert_eq!(slots(&t), [Some(v[1]), Some(v[2]), Some(v[3]), Some(v[4])]);
    // A is gone from the cache but not from the tree.
    assert_eq!(w.find(&mut t, &mm, v[0]), (Some(v[0]), false));
}

/// exec: the task's slots and seqnum start again in a new mm whose
/// seqnum is reset, however stale the old one was.
#[test]
fn exec_flushes_and_resets_the_seqnum() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Lru);
    // AA  CC            (pages) then C unmapped twice over: seqnum 2
    w.map(&mut mm, B, 2 * P);
    w.map(&mut mm, B + 4 * P, 2 * P);
    w.unmap(&mut mm, B + 4 * P, P);
    w.unmap(&mut mm, B + 5 * P, P);
    w.find(&mut t, &mm, B);
    assert_eq!((t.vmacache.seqnum, slots(&t)[0]), (2, Some(B)));
    let mut new_mm = w.mm();
    // DDDD              the new image's mapping, at the same address as A
    w.map(&mut new_mm, B, 4 * P);
    t.exec(&mut new_mm);
    assert_eq!((t.vmacache.seqnum, new_mm.vmacache_seqnum), (0, 0));
    assert_eq!(slots(&t), [None; 4]);
    assert_eq!(w.find(&mut t, &new_mm, B + 3 * P), (Some(B), false));
    assert_eq!(w.find(&mut t, &new_mm, B + 3 * P), (Some(B), true));
}

/// The system calls' lookups: madvise() on a page caches its VMA for the
/// faults that follow; munmap()'s lookup counts, then its detach makes the
/// slots stale. Under `none` nothing is counted.
#[test]
fn syscall_lookups_fill_the_cache() {
    let mut w = world();
    let mut mm = w.mm();
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pmd);
    // AAAA              (PMDs)
    w.map(&mut mm, B, 4 * PMD);
    let ns = w.cx.compute_ns();
    find_vma_syscall(&mut t, &mm, &mut w.vs, &mut w.cx, B + 2 * PMD);
    assert_eq!(
        w.cx.compute_ns() - ns,
        1 + 4,
        "probes only; the walk is the syscall's"
    );
    assert_eq!(slots(&t), [None, None, Some(B), None]);
    assert_eq!(w.find(&mut t, &mm, B + 2 * PMD + 7 * P), (Some(B), true));
    assert_eq!(w.ev(VmEvent::VMACACHE_FIRST_SLOT_HITS), 1);
    find_vma_syscall(&mut t, &mm, &mut w.vs, &mut w.cx, B);
    w.unmap(&mut mm, B, PMD);
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_CALLS), 3);
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_HITS), 2);
    let mut none = TaskStruct::new(&mm, VmacachePolicy::None);
    find_vma_syscall(&mut none, &mm, &mut w.vs, &mut w.cx, B + PMD);
    assert_eq!(w.ev(VmEvent::VMACACHE_FIND_CALLS), 3);
}

/// The seed's overhead figure is vmacache_find's share of page-fault time:
/// the fault path counts its own compute (`fault_ns`) and the cache's part
/// of it (`vmacache_find_fault_ns`), from the profile's costs.
#[test]
fn fault_counts_its_time_and_the_caches_share() {
    let mut w = world();
    let mut table = CostTable::uniform(0);
    table.set(Cost::FaultEntry, 1000);
    table.set(Cost::VmacacheFindEntry, 2);
    table.set(Cost::VmacacheProbe, 3);
    table.set(Cost::VmaLookupLevel, 12);
    table.set(Cost::ClearPage, 450);
    w.cx = Cx::new(VcpuId(0), table);
    let mut mm = w.mm();
    // AAAA              (pages: pfn of B ≡ 0)
    w.map(&mut mm, B, 4 * P);
    let mut g = crate::memory::MmGlobal::new(crate::memory::MmConfig {
        thp_enabled: crate::memory::ThpEnabled::Never,
        ..Default::default()
    });
    let mut t = TaskStruct::new(&mm, VmacachePolicy::Pfn);
    let ns_before = w.cx.compute_ns();
    for i in 0..4 {
        crate::memory::do_user_addr_fault(
            &mut w.pa,
            &mut w.cx,
            &mut g,
            &mut mm,
            &mut t,
            Vaddr(B + i * P),
            true,
        )
        .unwrap();
    }
    let v = &w.pa.vmstat;
    // A miss (entry + four probes), then three hits in slot 0.
    assert_eq!(
        v.get(VmEvent::VMACACHE_FIND_FAULT_NS),
        (2 + 4 * 3) + 3 * (2 + 3)
    );
    assert_eq!(v.get(VmEvent::FIND_VMA_NS), (2 + 4 * 3 + 12) + 3 * (2 + 3));
    let fault_ns = v.get(VmEvent::FAULT_NS);
    assert_eq!(
        fault_ns,
        w.cx.compute_ns() - ns_before,
        "every charge since was a fault"
    );
    assert!(fault_ns >= 4 * (1000 + 450));
}
