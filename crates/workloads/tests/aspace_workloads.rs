//! The address-space workloads on the engine: their fault counts follow
//! from the benchmark's definition, every page comes back, and runs are
//! deterministic.

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
            memory_bytes: 1 << 30,
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

/// Runs `workload` on 4 CPUs under `preset` with THP `thp`; checks that
/// every page returned; gives the stats and `pgfault`, `thp_fault_alloc`,
/// `thp_split_pmd`.
fn run(workload: &str, p: &Params, preset: Preset, thp: &str) -> (RunStats, [u64; 3]) {
    let m = machine(4);
    let mut cfg = preset.config();
    cfg.set_knob("transparent_hugepage/enabled", &KnobValue::Str(thp.into()))
        .unwrap();
    let pa = PageAlloc::new(&m.memory_layout(), cfg.sysctl, cfg.pcp);
    let boot = pa.nr_free_pages() + pa.nr_pcp_pages();
    let mut eng = Engine::new(pa, CostTable::uniform(10), 1).with_mm_config(cfg.mm);
    for t in workloads::build(workload, p, &m).unwrap() {
        eng.spawn(t);
    }
    let stats = eng.run();
    assert_eq!(stats.nr_sigsegv + stats.nr_oom_kills, 0);
    eng.drain_all_pages();
    assert_eq!(eng.pa.nr_free_pages(), boot, "{workload}: pages leaked");
    eng.check_invariants();
    let v = eng.vmstat();
    let c = [
        v.get(VmEvent::PGFAULT),
        v.get(VmEvent::THP_FAULT_ALLOC),
        v.get(VmEvent::THP_SPLIT_PMD),
    ];
    (stats, c)
}

#[test]
fn page_fault1_faults_every_page_of_every_loop() {
    let p = params(&[
        ("tasks", ParamValue::Int(4)),
        ("iterations", ParamValue::Int(3)),
        ("size", ParamValue::Str("8MiB".into())),
    ]);
    let (s, c) = run("page-fault1", &p, Preset::Linux6_18, "never");
    assert_eq!(c, [4 * 3 * 2048, 0, 0]);
    assert_eq!(s.nr_processes, 4);
    // 6.18 aligns the 8 MiB mapping: four THPs per loop.
    let (_, c) = run("page-fault1", &p, Preset::Linux6_18, "always");
    assert_eq!(c, [4 * 3 * 4, 4 * 3 * 4, 0]);
    // Threads of one process: one address space, the same faults.
    let mut pt = p.clone();
    pt.0.insert("threads".into(), ParamValue::Int(1));
    let (s, c) = run("page-fault1", &pt, Preset::Linux6_18, "never");
    assert_eq!(s.nr_processes, 1);
    assert_eq!(c[0], 4 * 3 * 2048);
}

#[test]
fn anon_w_seq_writes_each_region_once() {
    let p = params(&[
        ("tasks", ParamValue::Int(3)),
        ("size", ParamValue::Int(4 << 20)),
    ]);
    let (_, c) = run("anon-w-seq", &p, Preset::Linux6_18, "never");
    assert_eq!(c, [3 * 1024, 0, 0]);
}

#[test]
fn anon_cow_seq_copies_per_page_on_6_18_and_per_thp_on_4_18() {
    let p = params(&[
        ("children", ParamValue::Int(3)),
        ("size", ParamValue::Str("8MiB".into())),
    ]);
    let (s, c) = run("anon-cow-seq", &p, Preset::Linux6_18, "always");
    assert_eq!(s.nr_processes, 4);
    assert_eq!(c, [4 + 3 * 2048, 4, 3 * 4]);
    let (a, _) = run("anon-cow-seq", &p, Preset::Linux6_18, "always");
    assert_eq!(a, s, "not deterministic");
    let (_, c) = run("anon-cow-seq", &p, Preset::Linux4_18, "always");
    // 4.18 places the 8 MiB mapping page aligned: three whole THPs and 2 MiB
    // of 4 KiB pages, 515 faults in each of the four processes; a child's
    // write to a shared THP copies it whole instead of splitting it.
    assert_eq!(c, [4 * 515, 4 * 3, 0]);
}

#[test]
fn bad_sizes_are_rejected() {
    let p = params(&[("size", ParamValue::Str("12 parsecs".into()))]);
    let e = workloads::build("anon-w-seq", &p, &machine(1))
        .err()
        .unwrap();
    assert!(e.to_string().contains("parameter \"size\""), "{e}");
}
