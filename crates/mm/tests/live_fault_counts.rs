//! The fault counts of the live kernel (LIVE-KERNEL.md; checked on the host by
//! the `native` crate's tests), reproduced exactly by the model: 1 GiB of
//! anonymous memory written one byte per 4 KiB, and THP copy-on-write after
//! fork.

use mm::cost::{CostTable, Cx};
use mm::knobs::{KnobValue, Preset};
use mm::memory::{exit_mmap, fork, handle_mm_fault, MmGlobal};
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc};
use mm::pgtable::PMD_SIZE;
use mm::vma::MmStruct;
use mm::vmstat::VmEvent;
use mm::VcpuId;

const GIB: u64 = 1 << 30;

struct World {
    pa: PageAlloc,
    cx: Cx,
    g: MmGlobal,
    free_at_boot: u64,
}

fn world(preset: Preset, thp: &str) -> World {
    let mut cfg = preset.config();
    cfg.set_knob("transparent_hugepage/enabled", &KnobValue::Str(thp.into()))
        .unwrap();
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: 3 * GIB / 4096,
        }],
        dma32_pages: 0,
    };
    let pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    let free_at_boot = pa.nr_free_pages() + pa.nr_pcp_pages();
    World {
        pa,
        cx: Cx::new(VcpuId(0), CostTable::uniform(1)),
        g: MmGlobal::new(cfg.mm),
        free_at_boot,
    }
}

impl World {
    fn mm(&mut self) -> MmStruct {
        MmStruct::new(&mut self.pa, &mut self.cx, self.g.cfg.mmap_layout).unwrap()
    }

    /// Writes one byte per 4 KiB of `[start, start + len)`, faulting where
    /// the page is not mapped writable; returns the faults taken.
    fn touch(&mut self, mm: &mut MmStruct, start: u64, len: u64) -> u64 {
        let before = mm.nr_faults;
        let mut a = start;
        while a < start + len {
            if !mm::memory::access_ok(mm, a, true) {
                handle_mm_fault(&mut self.pa, &mut self.cx, &mut self.g, mm, a, true).unwrap();
                assert!(
                    mm::memory::access_ok(mm, a, true),
                    "fault at {a:#x} left it unmapped"
                );
            }
            a += 4096;
        }
        mm.nr_faults - before
    }

    fn exit(&mut self, mm: MmStruct) {
        exit_mmap(&mut self.pa, &mut self.cx, mm);
    }

    /// Every page is back in the free areas (buddy + PCP).
    fn check_all_free(&self) {
        self.pa.check_invariants();
        assert_eq!(
            self.pa.nr_free_pages() + self.pa.nr_pcp_pages(),
            self.free_at_boot,
            "pages leaked"
        );
    }
}

#[test]
fn thp_off_4k_faults() {
    let mut w = world(Preset::Linux6_18, "never");
    let mut mm = w.mm();
    let a = mm.mmap(&mut w.pa, &mut w.cx, 0, GIB, false).unwrap();
    assert_eq!(w.touch(&mut mm, a, GIB), 262_144);
    assert_eq!(w.pa.vmstat.get(VmEvent::PGFAULT), 262_144);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn thp_always_aligned_512_faults() {
    let mut w = world(Preset::Linux6_18, "always");
    let mut mm = w.mm();
    let a = mm.mmap(&mut w.pa, &mut w.cx, 0, GIB, false).unwrap();
    assert_eq!(
        a % PMD_SIZE,
        0,
        "6.18 aligns a 1 GiB anonymous mapping to 2 MiB"
    );
    assert_eq!(w.touch(&mut mm, a, GIB), 512);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 512);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn thp_always_ragged_1529_faults() {
    let mut w = world(Preset::Linux6_18, "always");
    let mut mm = w.mm();
    // Reserve room, then map 12 KiB past a 2 MiB boundary, 20 KiB short of 1 GiB.
    let base = mm
        .mmap(&mut w.pa, &mut w.cx, 0, GIB + 2 * PMD_SIZE, false)
        .unwrap();
    mm.munmap(&mut w.pa, &mut w.cx, base, GIB + 2 * PMD_SIZE)
        .unwrap();
    let start = base.next_multiple_of(PMD_SIZE) + 12 * 1024;
    let len = GIB - 20 * 1024;
    assert_eq!(
        mm.mmap(&mut w.pa, &mut w.cx, start, len, true).unwrap(),
        start
    );
    assert_eq!(w.touch(&mut mm, start, len), 1529);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 510);
    w.exit(mm);
    w.check_all_free();
}

/// Parent populates 512 MiB of THP, forks; the child writes one byte per 4 KiB.
fn cow(preset: Preset) -> World {
    let mut w = world(preset, "always");
    let mut parent = w.mm();
    let len = GIB / 2;
    let a = parent.mmap(&mut w.pa, &mut w.cx, 0, len, false).unwrap();
    let a = if a.is_multiple_of(PMD_SIZE) {
        a
    } else {
        // 4.18 does not align: place it by hand as the live test does.
        parent.munmap(&mut w.pa, &mut w.cx, a, len).unwrap();
        let s = (a - PMD_SIZE).next_multiple_of(PMD_SIZE);
        parent.mmap(&mut w.pa, &mut w.cx, s, len, true).unwrap()
    };
    assert_eq!(w.touch(&mut parent, a, len), 256);
    let mut child = fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    let faults = w.touch(&mut child, a, len);
    match preset {
        Preset::Linux4_18 => assert_eq!(faults, 256, "one 2 MiB copy per THP"),
        _ => assert_eq!(faults, 131_072, "split, then one 4 KiB copy per page"),
    }
    w.exit(child);
    w.exit(parent);
    w.check_all_free();
    w
}

#[test]
fn thp_cow_splits_pmd_on_6_18() {
    let w = cow(Preset::Linux6_18);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 256);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 256);
}

#[test]
fn thp_cow_copies_2m_on_4_18() {
    let w = cow(Preset::Linux4_18);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 0);
    assert_eq!(
        w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC),
        512,
        "256 at populate + 256 copies"
    );
}

#[test]
fn read_fault_maps_huge_zero_page_once() {
    let mut w = world(Preset::Linux6_18, "always");
    let mut mm = w.mm();
    let a = mm
        .mmap(&mut w.pa, &mut w.cx, 0, 4 * PMD_SIZE, false)
        .unwrap();
    for i in 0..4 {
        handle_mm_fault(
            &mut w.pa,
            &mut w.cx,
            &mut w.g,
            &mut mm,
            a + i * PMD_SIZE,
            false,
        )
        .unwrap();
    }
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_ZERO_PAGE_ALLOC), 1);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 0);
    // A write replaces the huge zero page by a THP.
    assert_eq!(w.touch(&mut mm, a, PMD_SIZE), 1);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 1);
    w.exit(mm);
    w.check_all_free();
}
