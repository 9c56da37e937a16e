//! The buddy allocator and PCP against a trivially correct model: a bitmap of
//! allocated pages, driven by seeded random operation lists.
//!
//! What must hold after every operation: no page handed out twice, every
//! block inside a zone the request allows, the allocator's own invariants
//! (`check_invariants`, like CONFIG_DEBUG_VM) every few operations, and once
//! everything is freed and the PCP lists drained, the free areas equal the
//! boot state: every free coalesced fully.

use mm::cacheline::CpuTopology;
use mm::cost::{CostTable, Cx};
use mm::page_alloc::{Gfp, MemoryLayout, NodeLayout, PageAlloc, VmSysctl, ZoneType};
use mm::pcp::PcpPolicy;
use mm::rng::SplitMix64;
use mm::{Pfn, SimTime, VcpuId};

const SECTION: u64 = mm::page::PAGES_PER_SECTION;

fn layout() -> MemoryLayout {
    MemoryLayout {
        nodes: vec![
            NodeLayout {
                nr_cpus: 2,
                nr_pages: 16 * 1024,
            },
            NodeLayout {
                nr_cpus: 2,
                nr_pages: 8 * 1024,
            },
        ],
        dma32_pages: 4096,
    }
}

/// Zones that start and end inside pageblocks: a one-page ZONE_DMA32 (so
/// node 0's ZONE_NORMAL starts at pfn 1, inside pageblock 0), and a node 0
/// whose end (and so node 1's start) is not a pageblock boundary either.
/// Node 0 is small, so that its allocations soon fall back to small blocks
/// of other migratetypes, near its edges.
fn unaligned_layout() -> MemoryLayout {
    MemoryLayout {
        nodes: vec![
            NodeLayout {
                nr_cpus: 2,
                nr_pages: 2 * 1024 + 300,
            },
            NodeLayout {
                nr_cpus: 2,
                nr_pages: 4 * 1024 + 7,
            },
        ],
        dma32_pages: 1,
    }
}

fn run(seed: u64, nr_ops: usize, policy: PcpPolicy, fraction: u32) {
    run_on(&layout(), seed, nr_ops, policy, fraction, false);
}

/// Sections of 128 MiB cut by every kind of boundary: DMA32 ends a
/// pageblock past a section, node 0 ends half-way into one, node 1 holds
/// two whole sections and a bit; the whole sections start as lazy runs.
fn sparse_layout() -> MemoryLayout {
    MemoryLayout {
        nodes: vec![
            NodeLayout {
                nr_cpus: 2,
                nr_pages: 4 * SECTION + SECTION / 2,
            },
            NodeLayout {
                nr_cpus: 2,
                nr_pages: SECTION / 2 + 2 * SECTION + 512,
            },
        ],
        dma32_pages: SECTION + 512,
    }
}

/// One seeded run on `layout`; `lines`: with the cache-line model of the
/// zone locks on (a machine of 2 CPUs per node, 1 per core).
fn run_on(
    layout: &MemoryLayout,
    seed: u64,
    nr_ops: usize,
    policy: PcpPolicy,
    fraction: u32,
    lines: bool,
) {
    let sysctl = VmSysctl {
        percpu_pagelist_high_fraction: fraction,
        ..VmSysctl::default()
    };
    let mut pa = PageAlloc::new(layout, sysctl, policy);
    pa.check_invariants();
    if lines {
        pa.set_cpu_topology(CpuTopology {
            cpus_per_node: 2,
            threads_per_core: 1,
            cores_per_llc: 2,
        });
    }
    let boot: Vec<_> = pa
        .zones
        .iter()
        .map(|z| (z.nr_free, z.nr_free_pages))
        .collect();
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut rng = SplitMix64(seed);
    let mut used = vec![false; pa.mem.len() as usize];
    let mut held: Vec<(Pfn, u8)> = Vec::new();
    let mut failures = 0u64;
    let orders = [0u8, 0, 0, 0, 1, 2, 3, 4, 9, 10];
    for op in 0..nr_ops {
        let cpu = VcpuId(rng.below(4) as u32);
        cx.begin(cpu, SimTime(op as u64));
        if held.is_empty() || rng.below(100) < 55 {
            let order = orders[rng.below(orders.len() as u64) as usize];
            let gfp = match rng.below(4) {
                0 => Gfp::KERNEL,
                1 => Gfp::RECLAIMABLE,
                2 => Gfp::DMA32.or(Gfp::MOVABLE),
                _ => Gfp::HIGHUSER_MOVABLE,
            };
            match pa.alloc_pages(&mut cx, gfp, order) {
                Ok(pfn) => {
                    assert_eq!(pfn.0 & ((1 << order) - 1), 0, "op {op}: unaligned block");
                    let zi = pa.page_zone(pfn);
                    if gfp.contains(Gfp::DMA32) {
                        assert_eq!(
                            pa.zones[zi].zone_type,
                            ZoneType::Dma32,
                            "op {op}: DMA32 request served from Normal"
                        );
                    }
                    for p in pfn.0..pfn.0 + (1 << order) {
                        assert!(!used[p as usize], "op {op}: pfn {p:#x} handed out twice");
                        used[p as usize] = true;
                    }
                    held.push((pfn, order));
                }
                Err(_) => failures += 1,
            }
        } else {
            let i = rng.below(held.len() as u64) as usize;
            let (pfn, order) = held.swap_remove(i);
            for p in pfn.0..pfn.0 + (1 << order) {
                used[p as usize] = false;
            }
            pa.free_pages(&mut cx, pfn, order);
        }
        if op % 53 == 0 {
            // The vmstat work's decay of `high` (patch 7 on), between
            // operations as on a machine.
            pa.decay_pcp_high(&mut cx, cpu);
        }
        if op % 97 == 0 {
            pa.check_invariants();
        }
    }
    for (pfn, order) in held.drain(..) {
        pa.free_pages(&mut cx, pfn, order);
    }
    pa.check_invariants();
    for cpu in 0..pa.nr_cpus() {
        pa.drain_pages(&mut cx, VcpuId(cpu));
    }
    pa.check_invariants();
    assert_eq!(pa.nr_pcp_pages(), 0);
    let end: Vec<_> = pa
        .zones
        .iter()
        .map(|z| (z.nr_free, z.nr_free_pages))
        .collect();
    assert_eq!(boot, end, "seed {seed}: free areas differ from boot after freeing everything ({failures} failed allocations)");
}

#[test]
fn buddy_and_pcp_match_a_bitmap_6_6() {
    for seed in 1..=6 {
        run(seed, 4000, PcpPolicy::default(), 0);
    }
}

#[test]
fn buddy_and_pcp_match_a_bitmap_small_high() {
    for seed in 10..=13 {
        run(seed, 4000, PcpPolicy::series(1), 8);
    }
}

#[test]
fn buddy_and_pcp_match_a_bitmap_every_patch_of_the_series() {
    for n in 0..=10 {
        run(100 + n as u64, 2500, PcpPolicy::series(n), 0);
    }
    run(200, 2500, PcpPolicy::linux_6_18(), 0);
}

/// Fuzz experiment input 67201 (`dma32 = "4KiB"`): an unmovable allocation
/// that stole a whole pageblock of ZONE_NORMAL walked pageblock 0 from pfn
/// 0, which is ZONE_DMA32's, and moved that zone's free page onto
/// ZONE_NORMAL's lists; the cache-line model then indexed its pages below
/// the zone. `move_freepages_block()` stays inside the zone, as the
/// kernel's does, and the line model (on here) sees only the zone's pages.
#[test]
fn buddy_and_pcp_match_a_bitmap_zones_not_pageblock_aligned() {
    for seed in 300..=303 {
        run_on(
            &unaligned_layout(),
            seed,
            4000,
            PcpPolicy::default(),
            0,
            true,
        );
    }
}

/// A zone that starts inside a pageblock (pfn 1) has a partial first
/// pageblock (pfns 1-511); pfn 512 begins the second one, as in the kernel,
/// whose pageblocks are aligned in the physical address space.
#[test]
fn pageblocks_are_aligned_physically_not_to_the_zone() {
    use mm::page_alloc::{MigrateType, PAGEBLOCK_NR_PAGES};
    let mut pa = PageAlloc::new(
        &unaligned_layout(),
        VmSysctl::default(),
        PcpPolicy::default(),
    );
    use mm::page_alloc::pageblock_migratetype;
    let z = &pa.zones[1];
    assert_eq!((z.zone_type, z.zone_start_pfn), (ZoneType::Normal, 1));
    let last = z.end_pfn() - 1;
    let b = PAGEBLOCK_NR_PAGES;
    let mem = &mut pa.mem;
    let idx = |mem: &mm::page::MemMap, pfn: u64| mem.idx(Pfn(pfn));
    let i = idx(mem, b);
    mem.set_pageblock_mt(i, MigrateType::Unmovable as u8);
    assert_eq!(
        pageblock_migratetype(mem, idx(mem, b - 1)),
        MigrateType::Movable
    );
    assert_eq!(
        pageblock_migratetype(mem, idx(mem, b)),
        MigrateType::Unmovable
    );
    assert_eq!(
        pageblock_migratetype(mem, idx(mem, 2 * b - 1)),
        MigrateType::Unmovable
    );
    // The zone's last page, in a partial last pageblock.
    let i = idx(mem, last);
    mem.set_pageblock_mt(i, MigrateType::Reclaimable as u8);
    assert_eq!(
        pageblock_migratetype(mem, idx(mem, last & !(b - 1))),
        MigrateType::Reclaimable
    );
}

#[test]
fn exhaustion_fails_cleanly_and_recovers() {
    let mut pa = PageAlloc::new(&layout(), VmSysctl::default(), PcpPolicy::default());
    let mut cx = Cx::new(VcpuId(1), CostTable::uniform(1));
    let mut held = Vec::new();
    let mut failed = 0;
    for _ in 0..30_000 {
        match pa.alloc_pages(&mut cx, Gfp::HIGHUSER_MOVABLE, 0) {
            Ok(p) => held.push(p),
            Err(_) => failed += 1,
        }
    }
    assert!(failed > 0, "24576 pages cannot satisfy 30000 allocations");
    assert_eq!(pa.vmstat.get(mm::vmstat::VmEvent::ALLOC_FAIL), failed);
    // Allocations stop at the min watermark, not at zero.
    let min_total: u64 = pa
        .zones
        .iter()
        .map(|z| z.wmark_pages(mm::page_alloc::Wmark::Min))
        .sum();
    assert!(pa.nr_free_pages() + pa.nr_pcp_pages() + 64 >= min_total);
    for p in held {
        pa.free_pages(&mut cx, p, 0);
    }
    pa.check_invariants();
}

/// The sparse layout: allocations of every order and migratetype walk
/// into the lazy runs (materialising sections, stealing max-order blocks
/// for unmovable and reclaimable requests), run out of memory, and give
/// everything back.
#[test]
fn buddy_and_pcp_match_a_bitmap_over_lazy_sections() {
    for seed in 20..=23 {
        run_on(
            &sparse_layout(),
            seed,
            6000,
            PcpPolicy::linux_6_18(),
            0,
            false,
        );
    }
    run_on(&sparse_layout(), 24, 6000, PcpPolicy::default(), 8, false);
}

/// Boot materialises only the sections a boundary cuts, and max-order
/// blocks come off a zone's lazy run highest first, one section at a
/// time, as they would from lists that `memblock_free_all()` filled page
/// block by page block.
#[test]
fn lazy_sections_hand_out_blocks_in_boot_order() {
    let layout = sparse_layout();
    let mut pa = PageAlloc::new(&layout, VmSysctl::default(), PcpPolicy::default());
    let cut: Vec<u64> = layout.boot_sections().into_iter().collect();
    // DMA32's end (section 1), node 0's end (section 4), node 1's end (7).
    assert_eq!(cut, vec![1, 4, 7]);
    assert_eq!(pa.mem.nr_materialised(), 3 * SECTION);
    let normal0 = pa
        .zones
        .iter()
        .position(|z| z.node.0 == 0 && z.zone_type == ZoneType::Normal)
        .unwrap();
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut got = Vec::new();
    for _ in 0..40 {
        let p = pa
            .alloc_pages_node(&mut cx, mm::NodeId(0), Gfp::HIGHUSER_MOVABLE, 10)
            .unwrap();
        assert_eq!(pa.page_zone(p), normal0);
        got.push(p.0);
    }
    // First the materialised blocks of the cut section 4 (node 0's end,
    // freed last at boot: at the head), then sections 3 and 2 of the run.
    let mut want: Vec<u64> = (0..16).rev().map(|b| 4 * SECTION + b * 1024).collect();
    want.extend((0..24).map(|i| 4 * SECTION - 1024 * (i + 1)));
    assert_eq!(got, want);
    assert_eq!(
        pa.mem.nr_materialised(),
        4 * SECTION,
        "section 3 only so far"
    );
    pa.check_invariants();
}
