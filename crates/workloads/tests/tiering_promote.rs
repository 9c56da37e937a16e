//! The tiering-promote workload on the engine: an application faulting on
//! the far node while its promoter thread moves the hot pages to the near
//! node with every copy engine. Hot pages end on the near node and cold
//! ones stay far, every page comes back, the run is deterministic, and the
//! multi-threaded copy's work items take CPU time from the application.
//!
//! ```text
//! node 0 (near): CPUs 0-3 app threads, CPU 7 promoter   <--move_pages-- hot
//! node 1 (far):  the app's new pages (MPOL_PREFERRED)        cold stay
//! ```

use mm::copy_page::{CopyEngine, NumaHw};
use mm::cost::{Cost, CostTable};
use mm::knobs::Preset;
use mm::page_alloc::PageAlloc;
use mm::vmstat::{VmEvent, VmStat};
use sim::{Engine, Machine, NodeSpec, RunStats};
use workloads::tiering_promote::{build_logged, TieringLog};
use workloads::{ParamValue, Params};

fn machine() -> Machine {
    Machine {
        name: "test".into(),
        nodes: vec![
            NodeSpec {
                cpus: 8,
                memory_bytes: 256 << 20,
            };
            2
        ],
        llc_bytes: 0,
        dma32_bytes: 0,
    }
}

/// The memory system of profiles/e5-2640v3.toml, scaled to 8 CPUs a node.
fn hw(costs: &CostTable) -> NumaHw {
    NumaHw {
        threads_per_core: 2,
        smt_pair_pct: 110,
        node_mbps: 50_000,
        link_mbps: 23_400,
        dma_channels: 8,
        dma_channel_mbps: 1000,
        line_fill_buffers: 0,
        link_data_flits: 0,
        link_snoop_flits: 0,
        ..NumaHw::from_costs(costs)
    }
}

fn params(page: &str, extra: &[(&str, i64)]) -> Params {
    let mut p = Params::default();
    p.0.insert("page_size".into(), ParamValue::Str(page.into()));
    for (k, v) in [
        ("threads", 4),
        ("chunk_mib", 4),
        ("rounds", 5),
        ("window", 2),
        ("hot_pct", 50),
        ("passes", 2),
        ("compute_us", 100),
    ]
    .iter()
    .chain(extra)
    {
        p.0.insert(k.to_string(), ParamValue::Int(*v));
    }
    p
}

/// Runs the workload under Linux 6.18 with `engine`; checks that every page
/// came back and the invariants hold.
fn run(engine: CopyEngine, p: &Params) -> (RunStats, VmStat, TieringLog) {
    let m = machine();
    let mut cfg = Preset::Linux6_18.config();
    cfg.migrate.copy_engine = engine;
    let mut costs = CostTable::uniform(10);
    costs.set(Cost::CopyPage, 800);
    costs.set(Cost::ClearPage, 450);
    costs.set(Cost::WorkqueueWakeup, 10_000);
    let pa = PageAlloc::new(&m.memory_layout(), cfg.sysctl, cfg.pcp);
    let boot = pa.nr_free_pages() + pa.nr_pcp_pages();
    let mut eng = Engine::new(pa, costs.clone(), 1)
        .with_mm_config(cfg.mm)
        .with_migrate_config(cfg.migrate)
        .with_numa(hw(&costs), &[10, 21, 21, 10]);
    eng.check_invariants_every(211);
    let (tasks, log) = build_logged(p, &m).unwrap();
    for t in tasks {
        eng.spawn(t);
    }
    let stats = eng.run();
    assert_eq!(eng.nr_live_mms(), 0);
    eng.drain_all_pages();
    assert_eq!(eng.pa.nr_free_pages(), boot, "{engine:?}: pages leaked");
    eng.check_invariants();
    let log = log.borrow().clone();
    (stats, eng.vmstat().clone(), log)
}

#[test]
fn hot_pages_end_on_the_near_node_cold_ones_stay_far_with_every_engine() {
    for (page, per_page) in [("2M", 512u64), ("4K", 1)] {
        let p = params(page, &[("drain", 1)]);
        // 4 threads x 2 chunks still mapped x 4 MiB, half of it hot.
        let pages_left = 4 * 2 * (4 << 20) / (per_page * 4096);
        for &engine in CopyEngine::ALL {
            let (s, v, log) = run(engine, &p);
            assert_eq!(s.nr_sigsegv + s.nr_oom_kills + s.nr_sigbus, 0);
            assert_eq!(log.hot_elsewhere, 0, "{page} {engine:?}: {log:?}");
            assert_eq!(log.cold_elsewhere, 0, "{page} {engine:?}: {log:?}");
            assert_eq!(log.hot_near, pages_left / 2, "{page} {engine:?}");
            assert_eq!(log.cold_far, pages_left / 2, "{page} {engine:?}");
            assert_eq!(log.nr_bad_returns, 0);
            // Pages reported hot were promoted unless their chunk was
            // unmapped first (the promoter then forgets them; a call never
            // meets an unmapped page, as a call is one kernel entry).
            assert!(log.promoted >= log.hot_near);
            assert!(log.promoted <= 4 * 5 * (4 << 20) / 2 / (per_page * 4096));
            assert_eq!(log.failed, 0);
            assert_eq!(v.get(VmEvent::PGMIGRATE_SUCCESS), log.promoted * per_page);
            assert_eq!(v.get(VmEvent::PGMIGRATE_FAIL), 0);
            if per_page == 512 {
                assert_eq!(v.get(VmEvent::THP_MIGRATION_SUCCESS), log.promoted);
            }
            assert_eq!(s.nr_move_pages, log.nr_calls + 4, "the calls and 4 queries");
        }
    }
}

#[test]
fn runs_are_deterministic_and_the_polling_promoter_works_too() {
    for extra in [vec![], vec![("interval_us", 200)]] {
        let p = params("2M", &extra);
        let a = run(CopyEngine::Mt, &p);
        let b = run(CopyEngine::Mt, &p);
        assert_eq!(a, b);
        assert!(a.2.promoted > 0);
    }
}

/// The seed's `copy_page_mt()` queues its work on the near node's first
/// CPUs, where the application threads run: their CPU time goes to the
/// copies (`migrate_copy_helper_ns`), so the application is slower than
/// with the adaptive engine, which takes idle CPUs only, or with the
/// single-threaded copy on the promoter's own CPU.
#[test]
fn mt_copy_work_competes_with_the_application_for_its_cpus() {
    let p = params("2M", &[]);
    let (single, sv, _) = run(CopyEngine::Single, &p);
    let (mt, mv, _) = run(CopyEngine::Mt, &p);
    let (adaptive, av, _) = run(CopyEngine::Adaptive, &p);
    assert_eq!(sv.get(VmEvent::MIGRATE_COPY_HELPER_NS), 0);
    assert!(mv.get(VmEvent::MIGRATE_COPY_HELPER_NS) > 0);
    assert!(av.get(VmEvent::MIGRATE_COPY_HELPER_NS) > 0);
    assert!(
        mt.touch_bytes_per_s < adaptive.touch_bytes_per_s,
        "mt {} adaptive {}",
        mt.touch_bytes_per_s,
        adaptive.touch_bytes_per_s
    );
    assert!(mt.touch_bytes_per_s < single.touch_bytes_per_s);
    // The same work was done.
    assert_eq!(mt.touch_bytes, single.touch_bytes);
}

#[test]
fn bad_parameters_are_refused() {
    let m = machine();
    for (k, v) in [
        ("page_size", ParamValue::Str("1G".into())),
        ("far_node", ParamValue::Int(0)),
        ("threads", ParamValue::Int(9)),
        ("hot_pct", ParamValue::Int(101)),
    ] {
        let mut p = params("2M", &[]);
        p.0.insert(k.into(), v);
        let e = workloads::build("tiering-promote", &p, &m).err().unwrap();
        assert!(e.to_string().contains(k), "{e}");
    }
}
