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
use mm::migrate::{MPOL_MF_MOVE, MPOL_MF_MOVE_MT};
use mm::page_alloc::PageAlloc;
use mm::vma::{Advice, MapFlags};
use sim::{Engine, Machine, NodeSpec, Op, OpResult, Program, Rng, TaskSpec};
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

/// An engine for 4.x with `engine` on [`machine`], whose packages have an
/// idle state of `exit_ns` (0: none) and a target residency of 400 us.
fn engine(engine: CopyEngine, exit_ns: u64) -> Engine {
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
    Engine::new(pa, costs, 1)
        .with_mm_config(cfg.mm)
        .with_migrate_config(cfg.migrate)
        .with_numa(hw, &[10, 21, 21, 10])
}

/// `move_pages_ns` of one 2 MiB THP moved by the benchmark under 4.x with
/// `engine` and a package exit latency of `exit_ns`.
fn move_ns(engine_kind: CopyEngine, exit_ns: u64) -> u64 {
    let m = machine();
    let mut eng = engine(engine_kind, exit_ns);
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

/// Two THPs on node 0, moved to node 1 one `move_pages()` at a time, the
/// second call after `gap_ns` of sleep.
struct TwoMoves {
    step: u8,
    addr: u64,
    gap_ns: u64,
}

impl Program for TwoMoves {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        const THP: u64 = 2 << 20;
        self.step += 1;
        let mv = |addr| Op::MovePages {
            pages: vec![addr],
            nodes: Some(vec![1]),
            flags: MPOL_MF_MOVE | MPOL_MF_MOVE_MT,
        };
        match (self.step, last) {
            (1, _) => Some(Op::Mmap {
                len: 3 * THP,
                hint: None,
                flags: MapFlags::NONE,
                advice: Some(Advice::HugePage),
            }),
            (2, OpResult::Mapped(Ok(a))) => {
                self.addr = a.next_multiple_of(THP);
                Some(Op::Touch {
                    bytes: 1,
                    addr: self.addr,
                    len: 2 * THP,
                    stride: 4096,
                    write: true,
                })
            }
            (3, _) => Some(mv(self.addr)),
            (4, _) if self.gap_ns > 0 => Some(Op::Sleep { ns: self.gap_ns }),
            (4, _) | (5, _) => {
                self.step = 5;
                Some(mv(self.addr + THP))
            }
            _ => None,
        }
    }
}

/// `move_pages_ns` of both calls together.
fn two_moves_ns(exit_ns: u64, gap_ns: u64) -> u64 {
    let mut eng = engine(CopyEngine::Mt, exit_ns);
    eng.spawn(TaskSpec::new(
        Box::new(TwoMoves {
            step: 0,
            addr: 0,
            gap_ns,
        }),
        mm::VcpuId(0),
    ));
    let s = eng.run();
    assert_eq!(s.nr_move_pages, 2);
    s.move_pages_ns
}

/// Right after the first call's helpers ran, node 1's package is awake:
/// the second call waits only the ordinary wake-up. After 1 ms asleep
/// (past the 400 us target residency) it is back in its deep state.
#[test]
fn a_package_woken_by_a_migration_stays_awake_for_its_target_residency() {
    let extra = EXIT_NS - 10_000;
    let base = two_moves_ns(0, 0);
    assert_eq!(two_moves_ns(EXIT_NS, 0), base + extra);
    let base = two_moves_ns(0, 1_000_000);
    assert_eq!(two_moves_ns(EXIT_NS, 1_000_000), base + 2 * extra);
}
