//! The fault counts of the live kernel (LIVE-KERNEL.md; checked on the host by
//! the `native` crate's tests), reproduced exactly by the model: 1 GiB of
//! anonymous memory written one byte per 4 KiB, and THP copy-on-write after
//! fork.

mod common;

use common::{World, GIB};
use mm::knobs::{KnobValue, Preset};
use mm::memory::{fork, handle_mm_fault};
use mm::pgtable::PMD_SIZE;
use mm::vmstat::VmEvent;
use mm::Vaddr;

fn world(preset: Preset, thp: &str) -> World {
    let mut cfg = preset.config();
    cfg.set_knob("transparent_hugepage/enabled", &KnobValue::Str(thp.into()))
        .unwrap();
    World::new(cfg)
}

#[test]
fn thp_off_4k_faults() {
    let mut w = world(Preset::Linux6_18, "never");
    let mut mm = w.mm();
    let a = mm
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), GIB, mm::vma::MapFlags::NONE)
        .unwrap();
    assert_eq!(w.touch(&mut mm, a.0, GIB), 262_144);
    assert_eq!(w.pa.vmstat.get(VmEvent::PGFAULT), 262_144);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn thp_always_aligned_512_faults() {
    let mut w = world(Preset::Linux6_18, "always");
    let mut mm = w.mm();
    let a = mm
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), GIB, mm::vma::MapFlags::NONE)
        .unwrap();
    assert_eq!(
        a % PMD_SIZE,
        0,
        "6.18 aligns a 1 GiB anonymous mapping to 2 MiB"
    );
    assert_eq!(w.touch(&mut mm, a.0, GIB), 512);
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
        .mmap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(0),
            GIB + 2 * PMD_SIZE,
            mm::vma::MapFlags::NONE,
        )
        .unwrap();
    mm.munmap(&mut w.pa, &mut w.cx, base, GIB + 2 * PMD_SIZE)
        .unwrap();
    let start = base.next_multiple_of(PMD_SIZE) + 12 * 1024;
    let len = GIB - 20 * 1024;
    assert_eq!(
        mm.mmap(&mut w.pa, &mut w.cx, start, len, mm::vma::MapFlags::FIXED)
            .unwrap(),
        start
    );
    assert_eq!(w.touch(&mut mm, start.0, len), 1529);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 510);
    w.exit(mm);
    w.check_all_free();
}

/// Parent populates 512 MiB of THP, forks; the child writes one byte per 4 KiB.
fn cow(preset: Preset) -> World {
    let mut w = world(preset, "always");
    let mut parent = w.mm();
    let len = GIB / 2;
    let a = parent
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .unwrap();
    let a = if a.is_multiple_of(PMD_SIZE) {
        a
    } else {
        // 4.18 does not align: place it by hand as the live test does.
        parent.munmap(&mut w.pa, &mut w.cx, a, len).unwrap();
        let s = (a - PMD_SIZE).next_multiple_of(PMD_SIZE);
        parent
            .mmap(&mut w.pa, &mut w.cx, s, len, mm::vma::MapFlags::FIXED)
            .unwrap()
    };
    assert_eq!(w.touch(&mut parent, a.0, len), 256);
    let mut child = fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    let faults = w.touch(&mut child, a.0, len);
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
        .mmap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(0),
            4 * PMD_SIZE,
            mm::vma::MapFlags::NONE,
        )
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
    assert_eq!(w.touch(&mut mm, a.0, PMD_SIZE), 1);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 1);
    w.exit(mm);
    w.check_all_free();
}
