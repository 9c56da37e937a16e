//! Multi-size THP (Linux 6.8+) and the variable-order large anonymous folios
//! of seed 004: the live kernel's fault counts and per-size statistics
//! (LIVE-KERNEL.md, "Anonymous faults, mTHP"), reproduced exactly: 1 GiB of
//! anonymous memory written one byte per 4 KiB, only the named sizes
//! `always`, the others `never`.

mod common;

use common::{World, GIB, KIB, SIZES_KB};
use mm::cost::{CostTable, Cx};
use mm::knobs::{KnobValue, Preset};
use mm::memory::{exit_mmap, fork, handle_mm_fault, MmGlobal};
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc};
use mm::pgtable::PMD_SIZE;
use mm::vma::MmStruct;
use mm::vmstat::VmEvent;
use mm::Vaddr;
use mm::VcpuId;

/// A kernel with the sizes in `on` `always`, every other size `never`
/// (the top-level knob stays `madvise`, as on the host).
fn world_with(preset: Preset, on: &[u64], knobs: &[(&str, &str)]) -> World {
    let mut cfg = preset.config();
    for (k, v) in knobs {
        cfg.set_knob(k, &KnobValue::Str(v.to_string())).unwrap();
    }
    // The per-size knobs exist only under the mthp policy.
    let mthp = cfg.mm.anon_folio == mm::memory::AnonFolioPolicy::Mthp;
    for kb in SIZES_KB.into_iter().filter(|_| mthp) {
        let v = if on.contains(&kb) { "always" } else { "never" };
        cfg.set_knob(
            &format!("transparent_hugepage/hugepages-{kb}kB/enabled"),
            &KnobValue::Str(v.into()),
        )
        .unwrap();
    }
    World::new(cfg)
}

fn world(on: &[u64]) -> World {
    world_with(Preset::Linux6_8, on, &[])
}

/// No allocation failed and nothing was charged to a memcg or split.
fn check_no_fallback(w: &World) {
    for kb in SIZES_KB {
        for s in [
            "anon_fault_fallback",
            "anon_fault_fallback_charge",
            "split",
            "split_failed",
        ] {
            assert_eq!(w.stat(kb, s), 0, "{kb}kB {s}");
        }
    }
}

fn seq(kb: u64) -> World {
    let mut w = world(&[kb]);
    let mut mm = w.mm();
    let a = w.aligned(&mut mm);
    let faults = w.touch(&mut mm, a, GIB);
    assert_eq!(faults, GIB / (kb * KIB));
    assert_eq!(w.stat(kb, "anon_fault_alloc"), GIB / (kb * KIB));
    assert_eq!(w.stat(kb, "nr_anon"), GIB / (kb * KIB));
    for other in SIZES_KB.iter().filter(|&&o| o != kb) {
        assert_eq!(w.stat(*other, "anon_fault_alloc"), 0);
    }
    check_no_fallback(&w);
    w.exit(mm);
    w.check_all_free();
    w
}

#[test]
fn mthp_16k_seq_65536_faults() {
    let w = seq(16);
    assert_eq!(w.pa.vmstat.get(VmEvent::PGFAULT), 65_536);
    assert_eq!(w.stat(16, "anon_fault_alloc"), 65_536);
}

#[test]
fn mthp_64k_seq_16384_faults() {
    let w = seq(64);
    assert_eq!(w.pa.vmstat.get(VmEvent::PGFAULT), 16_384);
    assert_eq!(w.stat(64, "anon_fault_alloc"), 16_384);
}

#[test]
fn mthp_2m_seq_512_faults() {
    let w = seq(2048);
    assert_eq!(w.pa.vmstat.get(VmEvent::PGFAULT), 512);
    assert_eq!(w.stat(2048, "anon_fault_alloc"), 512);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 512);
}

#[test]
fn mthp_64k_random_order_16384_faults() {
    let mut w = world(&[64]);
    let mut mm = w.mm();
    let a = w.aligned(&mut mm);
    let n = (GIB / 4096) as usize;
    let mut perm: Vec<u32> = (0..n as u32).collect();
    let mut rng = mm::rng::SplitMix64(0x5eed_0004);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    for p in perm {
        w.touch_one(&mut mm, a + p as u64 * 4096);
    }
    assert_eq!(mm.nr_faults, 16_384);
    assert_eq!(w.stat(64, "anon_fault_alloc"), 16_384);
    check_no_fallback(&w);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mthp_64k_ragged_16409_faults() {
    let mut w = world(&[64]);
    let mut mm = w.mm();
    let (start, len) = w.ragged(&mut mm);
    // 16,382 blocks of 64 KiB, 13 4 KiB pages before them and 14 after.
    assert_eq!(w.touch(&mut mm, start, len), 16_409);
    assert_eq!(w.stat(64, "anon_fault_alloc"), 16_382);
    // Blocks that did not fit are skipped, not counted as fallbacks.
    check_no_fallback(&w);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mthp_all_sizes_ragged_527_faults() {
    let mut w = world(&SIZES_KB);
    let mut mm = w.mm();
    let (start, len) = w.ragged(&mut mm);
    assert_eq!(w.touch(&mut mm, start, len), 527);
    assert_eq!(w.stat(2048, "anon_fault_alloc"), 510);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 510);
    for kb in [1024, 512, 256, 128, 64, 32, 16] {
        assert_eq!(w.stat(kb, "anon_fault_alloc"), 2, "{kb}kB");
    }
    check_no_fallback(&w);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mthp_2m_only_ragged_1529_faults() {
    let mut w = world(&[2048]);
    let mut mm = w.mm();
    let (start, len) = w.ragged(&mut mm);
    assert_eq!(w.touch(&mut mm, start, len), 1529);
    assert_eq!(w.stat(2048, "anon_fault_alloc"), 510);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn linux_6_6_has_no_large_anon_folios() {
    let mut cfg = Preset::Linux6_6.config();
    assert!(cfg
        .set_knob(
            "transparent_hugepage/hugepages-64kB/enabled",
            &KnobValue::Str("always".into())
        )
        .is_err());
    cfg.set_knob(
        "transparent_hugepage/enabled",
        &KnobValue::Str("never".into()),
    )
    .unwrap();
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: GIB / 4096,
        }],
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut g = MmGlobal::new(cfg.mm);
    let mut mm = MmStruct::new(&mut pa, &mut cx, g.cfg.mmap_layout).unwrap();
    let len = 4 * PMD_SIZE;
    let a = mm
        .mmap(&mut pa, &mut cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .unwrap();
    let mut x = a;
    while x < a + len {
        if !mm::memory::access_ok(&mut mm, x, true) {
            handle_mm_fault(&mut pa, &mut cx, &mut g, &mut mm, x, true).unwrap();
        }
        x += 4096;
    }
    assert_eq!(mm.nr_faults, len / 4096);
    exit_mmap(&mut pa, &mut cx, mm);
}

/// A partial munmap or MADV_DONTNEED of 64 KiB folios puts each once on the
/// deferred split queue; a full unmap frees them; nothing leaks.
#[test]
fn partial_unmap_defers_split() {
    let mut w = world(&[64]);
    let mut mm = w.mm();
    let len = 4 * PMD_SIZE;
    let a = mm
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .unwrap();
    assert_eq!(w.touch(&mut mm, a.0, len), len / (64 * KIB));
    let folios = len / (64 * KIB);
    assert_eq!(w.stat(64, "nr_anon"), folios);
    // Unmap 8 KiB in the middle of the first folio.
    mm.munmap(&mut w.pa, &mut w.cx, a + 16 * KIB, 8 * KIB)
        .unwrap();
    assert_eq!(w.stat(64, "split_deferred"), 1);
    assert_eq!(w.stat(64, "nr_anon_partially_mapped"), 1);
    // More of the same folio: already on the queue, not counted again.
    mm.munmap(&mut w.pa, &mut w.cx, a + 32 * KIB, 4 * KIB)
        .unwrap();
    assert_eq!(w.stat(64, "split_deferred"), 1);
    // MADV_DONTNEED of [96K, 208K): the second folio half, the third whole
    // (freed), the fourth a quarter.
    mm.madvise(
        &mut w.pa,
        &mut w.cx,
        a + 96 * KIB,
        112 * KIB,
        mm::vma::Advice::DontNeed,
    )
    .unwrap();
    assert_eq!(w.stat(64, "split_deferred"), 3);
    assert_eq!(w.stat(64, "nr_anon_partially_mapped"), 3);
    assert_eq!(w.stat(64, "nr_anon"), folios - 1);
    // Unmapping a whole folio frees it and does not defer.
    mm.munmap(&mut w.pa, &mut w.cx, a + 256 * KIB, 64 * KIB)
        .unwrap();
    assert_eq!(w.stat(64, "nr_anon"), folios - 2);
    assert_eq!(w.stat(64, "split_deferred"), 3);
    // The rest of a partially mapped folio: freed, off the queue.
    mm.munmap(&mut w.pa, &mut w.cx, a, 16 * KIB).unwrap();
    mm.munmap(&mut w.pa, &mut w.cx, a + 24 * KIB, 8 * KIB)
        .unwrap();
    mm.munmap(&mut w.pa, &mut w.cx, a + 36 * KIB, 28 * KIB)
        .unwrap();
    assert_eq!(w.stat(64, "nr_anon"), folios - 3);
    assert_eq!(w.stat(64, "nr_anon_partially_mapped"), 2);
    w.exit(mm);
    w.check_all_free();
}

/// COW of a PTE-mapped 64 KiB folio after fork copies only the page written.
#[test]
fn cow_of_large_folio_copies_4k() {
    let mut w = world(&[64]);
    let mut parent = w.mm();
    let len = PMD_SIZE;
    let a = parent
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .unwrap();
    assert_eq!(w.touch(&mut parent, a.0, len), 32);
    let mut child = fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    let allocs_before = w.pa.vmstat.get(VmEvent::PGALLOC_NORMAL);
    let before = child.nr_faults;
    w.touch_one(&mut child, (a + 20 * KIB).0);
    assert_eq!(child.nr_faults - before, 1);
    assert_eq!(
        w.pa.vmstat.get(VmEvent::PGALLOC_NORMAL) - allocs_before,
        1,
        "one 4 KiB page copied"
    );
    // The rest of the folio is still shared, read-only in the child.
    assert!(!mm::memory::access_ok(&mut child, a + 24 * KIB, true));
    assert!(mm::memory::access_ok(&mut child, a + 20 * KIB, true));
    assert_eq!(w.stat(64, "anon_fault_alloc"), 32, "no new large folio");
    // Child writes everything: one fault and one 4 KiB copy per page.
    assert_eq!(w.touch(&mut child, a.0, len), 511);
    w.exit(child);
    w.exit(parent);
    w.check_all_free();
}

/// Many small mappings whose 64 KiB blocks mostly do not fit (seed 004's
/// Speedometer shape): `simple` (64 KiB or 4 KiB) takes more faults than
/// `v2` (64, 32 or 16 KiB, else 4 KiB), which takes no more than `v1`.
#[test]
fn simple_order_faults_more_than_v2() {
    let run = |policy: &str| -> (u64, u64) {
        let mut w = world_with(
            Preset::Linux6_6,
            &[],
            &[("mmlab.anon_folio_policy", policy)],
        );
        let mut mm = w.mm();
        let base = mm
            .mmap(
                &mut w.pa,
                &mut w.cx,
                Vaddr(0),
                64 * PMD_SIZE,
                mm::vma::MapFlags::NONE,
            )
            .unwrap();
        mm.munmap(&mut w.pa, &mut w.cx, base, 64 * PMD_SIZE)
            .unwrap();
        let base = base.next_multiple_of(PMD_SIZE);
        // 60 mappings of 60 KiB, each 12 KiB past a 128 KiB boundary: no 64 KiB
        // block fits in any of them.
        for i in 0..60 {
            let s = base + i * 128 * KIB + 12 * KIB;
            mm.mmap(&mut w.pa, &mut w.cx, s, 60 * KIB, mm::vma::MapFlags::FIXED)
                .unwrap();
            w.touch(&mut mm, s.0, 60 * KIB);
        }
        let faults = mm.nr_faults;
        let allocs16: u64 = w.stat(16, "anon_fault_alloc");
        w.exit(mm);
        w.check_all_free();
        (faults, allocs16)
    };
    let (simple, s16) = run("simple");
    let (v2, v2_16) = run("v2");
    let (v1, _) = run("v1");
    assert_eq!(s16, 0);
    assert!(v2_16 > 0);
    assert!(simple > v2, "simple {simple} faults vs v2 {v2}");
    assert!(v1 <= v2);
    // 12K..72K: 4K at 12K, 16K at 16K, 32K at 32K, 16K at 64K... exactly:
    // [12,16) 4K, [16,32) 16K, [32,64) 32K, [64,72) 2x4K = 5 faults.
    assert_eq!(v2, 60 * 5);
    assert_eq!(simple, 60 * 15);
}

/// Memory where no block above order 0 is free: a fault under `policy` with
/// 64, 32 and 16 KiB allowed. Returns the per-size `anon_fault_fallback` and
/// the order of the folio that was mapped.
fn fault_when_fragmented(policy: &str) -> ([u64; 3], u8) {
    let mut cfg = Preset::Linux6_8.config();
    cfg.set_knob("vm.min_free_kbytes", &KnobValue::Int(0))
        .unwrap();
    cfg.set_knob("mmlab.anon_folio_policy", &KnobValue::Str(policy.into()))
        .unwrap();
    if policy == "mthp" {
        for kb in [16, 32, 64] {
            cfg.set_knob(
                &format!("transparent_hugepage/hugepages-{kb}kB/enabled"),
                &KnobValue::Str("always".into()),
            )
            .unwrap();
        }
    }
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: 16 << 20 >> 12,
        }],
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut g = MmGlobal::new(cfg.mm);
    let mut mm = MmStruct::new(&mut pa, &mut cx, g.cfg.mmap_layout).unwrap();
    let a = mm
        .mmap(
            &mut pa,
            &mut cx,
            Vaddr(0),
            PMD_SIZE,
            mm::vma::MapFlags::NONE,
        )
        .unwrap();
    // Take every page, then give back the even ones: free singletons only.
    let mut taken = Vec::new();
    while let Ok(p) = pa.alloc_pages(&mut cx, mm::page_alloc::Gfp::HIGHUSER_MOVABLE, 0) {
        taken.push(p);
    }
    assert!(pa.nr_free_pages() + pa.nr_pcp_pages() == 0);
    let (even, odd): (Vec<_>, Vec<_>) = taken.into_iter().partition(|p| p.0 % 2 == 0);
    for p in &even {
        pa.free_pages(&mut cx, *p, 0);
    }
    handle_mm_fault(&mut pa, &mut cx, &mut g, &mut mm, a + 80 * KIB, true).unwrap();
    let pte = mm
        .pgt
        .lookup((a + 80 * KIB).0, mm::pgtable::Level::Pte)
        .unwrap();
    let pfn = mm::pgtable::entry_pfn(mm.pgt.get(pte));
    let order = pa.mem.order(pfn);
    let fb = [16, 32, 64].map(|kb| pa.vmstat.mthp_stat(kb, "anon_fault_fallback"));
    exit_mmap(&mut pa, &mut cx, mm);
    for p in odd {
        pa.free_pages(&mut cx, p, 0);
    }
    pa.check_invariants();
    (fb, order)
}

/// Allocation failures: mthp and v1 try each smaller allowed size (one
/// `anon_fault_fallback` per size), v2 goes straight to 4 KiB.
#[test]
fn allocation_failure_fallback_per_policy() {
    assert_eq!(fault_when_fragmented("mthp"), ([1, 1, 1], 0));
    assert_eq!(fault_when_fragmented("v1"), ([1, 1, 1], 0));
    assert_eq!(fault_when_fragmented("v2"), ([0, 0, 1], 0));
    assert_eq!(fault_when_fragmented("simple"), ([0, 0, 1], 0));
}

/// `MADV_NOHUGEPAGE` on part of a PMD-mapped THP splits the PMD before the
/// VMA (`vma_adjust_trans_huge()`): no huge mapping straddles a VMA
/// boundary, and a fork afterwards copies the range once (it used to find
/// the leaf from both VMAs and deposit two tables for it).
#[test]
fn madvise_inside_a_thp_splits_the_pmd_before_the_vma() {
    let mut cfg = Preset::Linux6_18.config();
    cfg.set_knob(
        "transparent_hugepage/enabled",
        &KnobValue::Str("always".into()),
    )
    .unwrap();
    let mut w = World::new(cfg);
    let mut mm = w.mm();
    // TTTTTTTT  one 2 MiB THP
    let a = mm
        .mmap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(0),
            PMD_SIZE,
            mm::vma::MapFlags::NONE,
        )
        .unwrap();
    assert_eq!(a % PMD_SIZE, 0);
    assert_eq!(w.touch(&mut mm, a.0, 4 * KIB), 1);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 1);
    // TT NN TTTT  NOHUGEPAGE in the middle: three VMAs, the leaf split
    mm.madvise(
        &mut w.pa,
        &mut w.cx,
        a + 64 * KIB,
        64 * KIB,
        mm::vma::Advice::NoHugePage,
    )
    .unwrap();
    assert_eq!(mm.vmas.len(), 3);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 1);
    // Every page is still mapped: no fault.
    assert_eq!(w.touch(&mut mm, a.0, PMD_SIZE), 0);
    let child = fork(&mut w.pa, &mut w.cx, &mut mm).unwrap();
    w.exit(child);
    w.exit(mm);
    w.check_all_free();
}

/// A write fault that allocates a large folio, PTE-mapped (mTHP) or a
/// PMD-mapped THP, charges the large folio's own work
/// (`alloc_anon_folio_ns`) once; an order-0 fault does not charge it.
#[test]
fn a_large_folio_fault_charges_alloc_anon_folio_once() {
    use mm::cost::Cost;
    use mm::SimTime;
    for (on, faults_per_4mib) in [(&[64u64][..], 64u64), (&[2048][..], 2), (&[][..], 1024)] {
        let mut w = world(on);
        let mut t = CostTable::uniform(0);
        t.set(Cost::AllocAnonFolio, 1);
        w.cx = Cx::new(VcpuId(0), t);
        let mut mm = w.mm();
        let a = w.aligned(&mut mm);
        w.cx.begin(VcpuId(0), SimTime(0));
        let faults = w.touch(&mut mm, a, 4 << 20);
        assert_eq!(faults, faults_per_4mib, "{on:?}");
        let large = if on.is_empty() { 0 } else { faults };
        assert_eq!(w.cx.compute_ns(), large, "{on:?}");
        w.exit(mm);
    }
}
