//! `Program::cold_fault_ns`: what a program says each of its user faults
//! costs beyond a back-to-back one, by the pages it used since its last
//! fault, is charged once per fault as kernel time, and nothing else moves.

use mm::cost::CostTable;
use mm::knobs::{KnobValue, Preset};
use mm::page_alloc::PageAlloc;
use mm::vma::MapFlags;
use mm::vmstat::VmEvent;
use mm::VcpuId;
use sim::{Engine, Machine, NodeSpec, Op, OpResult, Program, Rng, RunStats, TaskSpec};

const PAGE: u64 = 4096;

/// Maps `pages` pages, writes the first `pages / 2`, then writes all of
/// them (so the second pass faults only on the last half, each fault the
/// first page after the last one but the first, which comes `pages / 2 + 1`
/// pages after), and exits.
struct TwoPasses {
    pages: u64,
    step: u32,
    addr: u64,
    cold: Option<Vec<u64>>,
}

impl Program for TwoPasses {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        if let OpResult::Mapped(Ok(a)) = last {
            self.addr = a;
        }
        let touch = |len| Op::Touch {
            addr: self.addr,
            len,
            stride: PAGE,
            bytes: 1,
            write: true,
        };
        match self.step {
            1 => Some(Op::Mmap {
                len: self.pages * PAGE,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            }),
            2 => Some(touch(self.pages / 2 * PAGE)),
            3 => Some(touch(self.pages * PAGE)),
            4 => Some(Op::Exit),
            _ => None,
        }
    }

    fn cold_fault_ns(&self) -> Option<&[u64]> {
        self.cold.as_deref()
    }
}

fn run(cold: Option<Vec<u64>>) -> (RunStats, u64) {
    let m = Machine {
        name: "test".into(),
        nodes: vec![NodeSpec {
            cpus: 1,
            memory_bytes: 256 << 20,
        }],
        llc_bytes: 0,
        dma32_bytes: 0,
    };
    let mut cfg = Preset::Linux6_18.config();
    // 4 KiB folios only: one fault per page written first.
    cfg.set_knob(
        "transparent_hugepage/enabled",
        &KnobValue::Str("never".into()),
    )
    .unwrap();
    let pa = PageAlloc::new(&m.memory_layout(), Default::default(), Default::default());
    let mut eng = Engine::new(pa, CostTable::uniform(10), 1).with_mm_config(cfg.mm);
    let program = TwoPasses {
        pages: 64,
        step: 0,
        addr: 0,
        cold,
    };
    eng.spawn(TaskSpec::new(Box::new(program), VcpuId(0)));
    let stats = eng.run();
    (stats, eng.vmstat().get(VmEvent::PGFAULT))
}

#[test]
fn each_fault_pays_the_entry_for_the_pages_since_the_last() {
    let (plain, plain_faults) = run(None);
    // The first fault of a task takes the last entry (7); the next 31 of
    // the first pass come one page after the last (1 each); the second
    // pass's first fault comes 33 pages after the last fault (7), and its
    // other 31 one page after (1 each).
    let (cold, cold_faults) = run(Some(vec![1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(plain_faults, 64);
    assert_eq!(cold_faults, 64);
    assert_eq!(cold.sys_ns, plain.sys_ns + 7 + 31 + 7 + 31);
    assert_eq!(cold.user_ns, plain.user_ns);
}

#[test]
fn an_empty_table_or_none_charges_nothing() {
    let (plain, _) = run(None);
    let (empty, _) = run(Some(Vec::new()));
    assert_eq!(empty.sys_ns, plain.sys_ns);
    assert_eq!(empty.runtime_ns, plain.runtime_ns);
}
