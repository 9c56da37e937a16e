//! `Op::Brk` through the engine (the heap of a process and of its forked
//! child), and the split of the tasks' CPU time into user and system time.

use mm::cost::CostTable;
use mm::memory::MmConfig;
use mm::page_alloc::PageAlloc;
use mm::vma::{MapFlags, DEFAULT_START_BRK};
use mm::VcpuId;
use sim::{Engine, Machine, NodeSpec, Op, OpResult, Program, Rng, TaskSpec};
use std::cell::RefCell;
use std::rc::Rc;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// A program that plays a fixed list of operations and records every result.
struct Playlist {
    ops: std::vec::IntoIter<Op>,
    seen: Rc<RefCell<Vec<OpResult>>>,
}

impl Program for Playlist {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.seen.borrow_mut().push(last);
        self.ops.next()
    }
}

fn playlist(ops: Vec<Op>) -> (Playlist, Rc<RefCell<Vec<OpResult>>>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    (
        Playlist {
            ops: ops.into_iter(),
            seen: seen.clone(),
        },
        seen,
    )
}

fn engine() -> (Engine, u64) {
    let m = Machine {
        name: "test".into(),
        nodes: vec![NodeSpec {
            cpus: 2,
            memory_bytes: 256 * MIB,
        }],
        llc_bytes: 0,
        dma32_bytes: 0,
    };
    let pa = PageAlloc::new(&m.memory_layout(), Default::default(), Default::default());
    let boot = pa.nr_free_pages() + pa.nr_pcp_pages();
    let mut eng = Engine::new(pa, CostTable::uniform(10), 1).with_mm_config(MmConfig::default());
    eng.check_invariants_every(7);
    (eng, boot)
}

fn touch(addr: u64, len: u64) -> Op {
    Op::Touch {
        bytes: 1,
        addr,
        len,
        stride: 4 * KIB,
        write: true,
    }
}

#[test]
fn brk_grows_and_shrinks_the_heap_and_the_child_inherits_it() {
    let s = DEFAULT_START_BRK;
    let (child, child_seen) = playlist(vec![
        // The child's break starts where the parent's was at fork.
        Op::Brk { brk: 0 },
        Op::Brk { brk: s + 2 * MIB },
        touch(s + MIB, MIB),
    ]);
    let (parent, seen) = playlist(vec![
        Op::Brk { brk: 0 },
        Op::Brk { brk: s + MIB + 100 },
        touch(s, MIB),
        Op::Compute { ns: 1000 },
        Op::Brk { brk: s + 256 * KIB },
        Op::fork(child),
        Op::Wait,
        // Below start_brk: refused, the old break comes back.
        Op::Brk { brk: s - 4 * KIB },
        // Touching above the break is a SIGSEGV that kills the process.
        touch(s + 512 * KIB, 4 * KIB),
        Op::Compute { ns: 1 },
    ]);
    let (mut eng, boot) = engine();
    eng.spawn(TaskSpec::new(Box::new(parent), VcpuId(0)));
    let stats = eng.run();
    let seen = seen.borrow();
    assert_eq!(seen[1], OpResult::Brk(s));
    assert_eq!(seen[2], OpResult::Brk(s + MIB + 100));
    assert_eq!(seen[5], OpResult::Brk(s + 256 * KIB));
    assert!(matches!(seen[6], OpResult::Forked(Ok(_))));
    assert_eq!(seen[8], OpResult::Brk(s + 256 * KIB));
    // The touch above the break killed the parent: no result after it.
    assert_eq!(seen.len(), 9, "{seen:?}");
    let child_seen = child_seen.borrow();
    assert_eq!(child_seen[1], OpResult::Brk(s + 256 * KIB));
    assert_eq!(child_seen[2], OpResult::Brk(s + 2 * MIB));
    assert_eq!(stats.nr_sigsegv, 1);
    // 256 pages faulted by the parent, 256 by the child; the access above
    // the break finds no VMA and never reaches handle_mm_fault(), which is
    // where the kernel counts pgfault.
    assert_eq!(eng.vmstat().get(mm::vmstat::VmEvent::PGFAULT), 512);
    assert_eq!(eng.nr_live_mms(), 0);
    eng.drain_all_pages();
    assert_eq!(eng.pa.nr_free_pages(), boot, "pages leaked");
}

#[test]
fn user_time_is_compute_and_accesses_the_rest_is_system_time() {
    let (parent, _) = playlist(vec![
        Op::Mmap {
            len: MIB,
            hint: None,
            flags: MapFlags::NONE,
            advice: None,
        },
        Op::Compute { ns: 5000 },
    ]);
    let (mut eng, _) = engine();
    eng.spawn(TaskSpec::new(Box::new(parent), VcpuId(0)));
    let (toucher, _) = playlist(vec![
        Op::Brk {
            brk: DEFAULT_START_BRK + MIB,
        },
        touch(DEFAULT_START_BRK, MIB),
        // The second pass faults no more: user accesses only.
        touch(DEFAULT_START_BRK, MIB),
        Op::Compute { ns: 7 },
    ]);
    eng.spawn(TaskSpec::new(Box::new(toucher), VcpuId(1)));
    let st = eng.run();
    // Uniform costs of 10 ns: 2 × 256 accesses of touch_ns, and the computes.
    assert_eq!(st.user_ns, 5000 + 7 + 2 * 256 * 10);
    // 256 faults, the brk, the mmap and two exits at least.
    assert!(st.sys_ns > 256 * 10, "sys {}", st.sys_ns);
    assert!(st.user_ns + st.sys_ns <= st.busy_ns);
}

#[test]
fn kernel_work_is_system_time_only() {
    let run = |ops: Vec<Op>| {
        let (p, _) = playlist(ops);
        let (mut eng, _) = engine();
        eng.spawn(TaskSpec::new(Box::new(p), VcpuId(0)));
        eng.run()
    };
    let plain = run(vec![Op::Compute { ns: 5000 }]);
    let with = run(vec![
        Op::Compute { ns: 5000 },
        Op::KernelWork { ns: 70_000 },
    ]);
    assert_eq!(with.user_ns, plain.user_ns);
    assert_eq!(with.sys_ns, plain.sys_ns + 70_000);
    assert_eq!(with.runtime_ns, plain.runtime_ns + 70_000);
}

/// The vmstat timer armed while a task ran fires once more after the last
/// task ended (one PCP sample at 1 s for a task that ended at 0.3 s);
/// `stop_with_last_task` (trace replays: the recording ended there) runs
/// no kernel work after the end.
#[test]
fn stop_with_last_task_runs_no_vmstat_work_after_the_end() {
    let samples_after_end = |stop: bool| {
        let (mut eng, _) = engine();
        if stop {
            eng.stop_with_last_task();
        }
        let (p, _) = playlist(vec![Op::Compute { ns: 300_000_000 }]);
        eng.spawn(TaskSpec {
            program: Box::new(p),
            cpu: VcpuId(0),
            process: None,
        });
        let run = eng.run();
        assert!(run.runtime_ns >= 300_000_000 && run.runtime_ns < 1_000_000_000);
        run.pcp_series
            .iter()
            .filter(|s| s.time_ns > run.runtime_ns)
            .count()
    };
    assert!(
        samples_after_end(false) > 0,
        "the timer fires after the end"
    );
    assert_eq!(samples_after_end(true), 0);
}
