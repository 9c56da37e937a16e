//! The hugetlb-cow workload (vm-scalability anon-cow-seq-hugetlb) on the
//! engine: one fault and one 2 MiB copy per child per huge page, every
//! surplus page back to the buddy allocator, and the pool errors.

use mm::cost::CostTable;
use mm::knobs::{KnobValue, Preset};
use mm::page_alloc::PageAlloc;
use mm::vmstat::VmEvent;
use sim::{Engine, Machine, NodeSpec, RunStats};
use workloads::{ParamValue, Params};

fn machine(cpus: u32) -> Machine {
    Machine {
        name: "test".into(),
        nodes: vec![NodeSpec {
            cpus,
            memory_bytes: 512 << 20,
        }],
        llc_bytes: 0,
        dma32_bytes: 0,
    }
}

fn params(kv: &[(&str, ParamValue)]) -> Params {
    let mut p = Params::default();
    for (k, v) in kv {
        p.0.insert(k.to_string(), v.clone());
    }
    p
}

/// Runs hugetlb-cow on 4 CPUs with `knobs`; checks that every page came
/// back to the buddy allocator or the persistent pool.
fn run(p: &Params, knobs: &[(&str, i64)], order: &str) -> (RunStats, Engine) {
    let m = machine(4);
    let mut cfg = Preset::Linux6_18.config();
    for (k, v) in knobs {
        cfg.set_knob(k, &KnobValue::Int(*v)).unwrap();
    }
    cfg.set_knob("mmlab.huge_copy_order", &KnobValue::Str(order.into()))
        .unwrap();
    let pa = PageAlloc::new(&m.memory_layout(), cfg.sysctl, cfg.pcp);
    let boot = pa.nr_free_pages() + pa.nr_pcp_pages();
    let mut eng = Engine::new(pa, CostTable::uniform(10), 1).with_mm_config(cfg.mm);
    eng.check_invariants_every(97);
    let pool = eng.pa.hugetlb.nr_huge_pages;
    for t in workloads::build("hugetlb-cow", p, &m).unwrap() {
        eng.spawn(t);
    }
    let stats = eng.run();
    let mi = eng.pa.hugetlb.meminfo();
    assert_eq!((mi.total, mi.free, mi.rsvd, mi.surp), (pool, pool, 0, 0));
    assert_eq!(eng.vmstat().get(VmEvent::NR_HUGETLB), 0);
    eng.drain_all_pages();
    assert_eq!(eng.pa.nr_free_pages(), boot - pool * 512, "pages leaked");
    eng.check_invariants();
    (stats, eng)
}

#[test]
fn each_child_copies_each_huge_page_once() {
    let p = params(&[
        ("size", ParamValue::Str("8MiB".into())),
        ("children", ParamValue::Int(3)),
    ]);
    let (s, eng) = run(&p, &[], "target-last");
    assert_eq!(s.nr_sigbus + s.nr_sigsegv + s.nr_oom_kills, 0);
    assert_eq!(s.nr_processes, 4);
    let v = eng.vmstat();
    // The parent: 4 first-touch faults; each child: 4 COW faults, the
    // other 511 writes per huge page need none.
    assert_eq!(v.get(VmEvent::PGFAULT), 4 + 3 * 4);
    // setup_hugetlb's overcommit: every page is a surplus page from the
    // buddy allocator: 4 for the parent (at mmap), 4 per child (at COW).
    assert_eq!(v.get(VmEvent::HTLB_BUDDY_PGALLOC), 4 * 4);
    assert_eq!(eng.pa.hugetlb.nr_overcommit_huge_pages, 4 * 4 + 3 + 1);
}

#[test]
fn a_persistent_pool_works_too_and_runs_are_deterministic() {
    let p = params(&[
        ("size", ParamValue::Str("4MiB".into())),
        ("children", ParamValue::Int(2)),
        ("setup", ParamValue::Str("none".into())),
    ]);
    let (a, eng) = run(&p, &[("vm.nr_hugepages", 6)], "sequential");
    assert_eq!(a.nr_sigbus, 0);
    assert_eq!(eng.vmstat().get(VmEvent::HTLB_BUDDY_PGALLOC), 6);
    let (b, _) = run(&p, &[("vm.nr_hugepages", 6)], "sequential");
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn a_pool_too_small_for_the_children_sends_them_sigbus() {
    let p = params(&[
        ("size", ParamValue::Str("4MiB".into())),
        ("children", ParamValue::Int(2)),
        ("setup", ParamValue::Str("none".into())),
    ]);
    // The parent's two pages and one more: the first child copies one page
    // and dies on the second; the second child dies on its first.
    let (s, _) = run(&p, &[("vm.nr_hugepages", 3)], "target-last");
    assert_eq!(s.nr_sigbus, 2);
    // No pool at all: mmap fails with ENOMEM and the parent gives up.
    let (s, eng) = run(&p, &[], "target-last");
    assert_eq!(s.nr_processes, 1);
    assert_eq!(eng.vmstat().get(VmEvent::PGFAULT), 0);
}

#[test]
fn bad_setup_is_named() {
    let p = params(&[("setup", ParamValue::Str("boot".into()))]);
    let e = workloads::build("hugetlb-cow", &p, &machine(2))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("setup") && e.contains("overcommit, none"), "{e}");
}

/// `fork_gap_ns` is the parent's user time before each fork after the
/// first, as in anon-cow-seq; nothing else changes.
#[test]
fn fork_gap_is_user_time_before_each_later_fork() {
    let base = [
        ("size", ParamValue::Str("4MiB".into())),
        ("children", ParamValue::Int(3)),
    ];
    let (a, ea) = run(&params(&base), &[], "target-last");
    let mut gap = base.to_vec();
    gap.push(("fork_gap_ns", ParamValue::Int(100_000)));
    let (b, eb) = run(&params(&gap), &[], "target-last");
    assert_eq!(b.user_ns, a.user_ns + 2 * 100_000);
    assert_eq!(
        ea.vmstat().get(VmEvent::PGFAULT),
        eb.vmstat().get(VmEvent::PGFAULT)
    );
}
