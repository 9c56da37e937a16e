//! Seed 001's benchmark on the engine: the helpers of the seed's
//! `copy_page_mt()` run on the destination socket, which has been idle
//! all along, so the copy waits once for that package to leave its deep
//! idle state; the single-threaded copy and 4.x's LRU drain, whose CPUs
//! are on the benchmark's own (awake) socket, do not.
//!
//! ```text
//! node 0: CPU 0 benchmark, CPUs 1-3 make/sh/grep (asleep in wait/read)
//! node 1: CPUs 8-15 idle since boot  <-- the THP moves here, mt helpers
//! ```

use mm::copy_page::{CopyEngine, NumaHw};
use mm::cost::{Cost, CostTable};
use mm::knobs::Preset;
use mm::page_alloc::PageAlloc;
use sim::{Engine, Machine, NodeSpec};
use workloads::{ParamValue, Params};

const EXIT_NS: u64 = 133_000;

fn machine() -> Machine {
    Machine {
        name: "test".into(),
        nodes: vec![
            NodeSpec {
                cpus: 8,
                memory_bytes: 128 << 20,
            };
            2
        ],
        llc_bytes: 0,
        dma32_bytes: 0,
    }
}

/// `move_pages_ns` of one 2 MiB THP moved by 4.x with `engine`, on a
/// machine whose packages have an idle state of `exit_ns` (0: none).
fn move_ns(engine: CopyEngine, exit_ns: u64) -> u64 {
    let m = machine();
    let mut cfg = Preset::Linux4_18.config();
    cfg.migrate.copy_engine = engine;
    cfg.migrate.limit_mt_num = 4;
    let mut costs = CostTable::uniform(10);
    costs.set(Cost::CopyPage, 800);
    costs.set(Cost::WorkqueueWakeup, 10_000);
    let hw = NumaHw {
        threads_per_core: 1,
        package_idle_exit_ns: exit_ns,
        package_idle_residency_ns: 400_000,
        ..NumaHw::from_costs(&costs)
    };
    let pa = PageAlloc::new(&m.memory_layout(), cfg.sysctl, cfg.pcp);
    let mut eng = Engine::new(pa, costs, 1)
        .with_mm_config(cfg.mm)
        .with_migrate_config(cfg.migrate)
        .with_numa(hw, &[10, 21, 21, 10]);
    let mut p = Params::default();
    p.0.insert("nr_pages".into(), ParamValue::Int(1));
    p.0.insert("mt".into(), ParamValue::Int(1));
    for t in workloads::build("thp-migration-bench", &p, &m).unwrap() {
        eng.spawn(t);
    }
    let s = eng.run();
    assert_eq!(s.nr_move_pages, 1);
    s.move_pages_ns
}

#[test]
fn the_mt_copy_waits_once_for_the_idle_destination_package() {
    let mt = move_ns(CopyEngine::Mt, EXIT_NS);
    // The helpers' wake-up was 10 us; the package's exit replaces it.
    assert_eq!(mt, move_ns(CopyEngine::Mt, 0) + EXIT_NS - 10_000);
    // The single-threaded copy queues nothing on node 1, and the drain's
    // CPUs share the benchmark's awake package.
    let single = move_ns(CopyEngine::Single, EXIT_NS);
    assert_eq!(single, move_ns(CopyEngine::Single, 0));
}
