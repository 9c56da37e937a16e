//! The LLC model on the copy-on-write fault (`mm::cacheline::LlcClocks`):
//! `do_wp_page()`'s first load of the old page's `struct page` is a DRAM
//! access when the line has left the last-level cache since fork wrote it,
//! and free when it has not.

mod common;

use common::World;
use mm::cacheline::LlcClocks;
use mm::cost::{Cost, CostTable};
use mm::knobs::{KnobValue, Preset};
use mm::memory::{fork, handle_mm_fault};
use mm::Vaddr;
use mm::{SimTime, VcpuId};

const DRAM_NS: u64 = 1000;
/// A 1 MiB LLC: 16,384 lines, the data of 256 pages.
const LLC_BYTES: u64 = 1 << 20;

/// Every cost 0 but a local DRAM access, so that a fault's charge counts
/// its DRAM loads.
fn world(llc: bool) -> World {
    let mut cfg = Preset::Linux6_18.config();
    cfg.set_knob(
        "transparent_hugepage/enabled",
        &KnobValue::Str("never".into()),
    )
    .unwrap();
    let mut w = World::new(cfg);
    let mut t = CostTable::uniform(0);
    t.set(Cost::DramLocal, DRAM_NS);
    w.cx = mm::cost::Cx::new(VcpuId(0), t);
    if llc {
        w.pa.set_llc_lines();
        w.cx.set_llc(LlcClocks::new(LLC_BYTES, None, 2));
    }
    w
}

/// The parent writes `pages` pages and forks; the child writes each page
/// once (a copy each). Returns the DRAM loads of each child fault.
fn cow_dram_loads(llc: bool, pages: u64) -> Vec<u64> {
    let mut w = world(llc);
    let mut parent = w.mm();
    let len = pages * 4096;
    let a = parent
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .unwrap()
        .0;
    assert_eq!(w.touch(&mut parent, a, len), pages);
    w.cx.begin(VcpuId(0), SimTime(0));
    let mut child = fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    let mut loads = Vec::new();
    for p in 0..pages {
        w.cx.begin(VcpuId(0), SimTime(0));
        handle_mm_fault(
            &mut w.pa,
            &mut w.cx,
            &mut w.g,
            &mut child,
            Vaddr(a + p * 4096),
            true,
        )
        .unwrap();
        let ns = w.cx.compute_ns();
        assert_eq!(ns % DRAM_NS, 0, "only DRAM loads cost anything here");
        loads.push(ns / DRAM_NS);
    }
    w.exit(child);
    w.exit(parent);
    w.check_all_free();
    loads
}

#[test]
fn a_small_region_keeps_its_struct_pages_cached() {
    // 64 pages: 4,096 lines of data written, 64 struct pages: all fit.
    let loads = cow_dram_loads(true, 64);
    assert!(loads.iter().all(|&n| n == 0), "{loads:?}");
}

#[test]
fn a_region_past_the_llc_loads_each_struct_page_from_dram() {
    // 4,096 pages (16 MiB of data through a 1 MiB LLC): page i's struct
    // page was written by fork; by the child's fault on it the LLC has
    // taken in the rest of the fork's lines and i copies (128 lines each),
    // so all but the first ~128 faults find it gone.
    let pages = 4096;
    let loads = cow_dram_loads(true, pages);
    assert!(
        loads.iter().all(|&n| n <= 1),
        "one struct page line per fault"
    );
    let dram = loads.iter().sum::<u64>();
    assert!(dram > pages * 9 / 10, "{dram} DRAM loads of {pages}");
    assert!(dram < pages - 64, "the first faults still hit: {dram}");
    assert!(loads[..64].iter().all(|&n| n == 0), "{:?}", &loads[..64]);
}

#[test]
fn without_the_llc_model_no_fault_loads_from_dram() {
    let loads = cow_dram_loads(false, 4096);
    assert!(loads.iter().all(|&n| n == 0));
}
