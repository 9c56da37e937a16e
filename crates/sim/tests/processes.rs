//! The engine driving address spaces: mmap/touch/munmap, fork and
//! copy-on-write, exit, wait, threads sharing an mm, and SIGSEGV. After
//! every run all processes are gone and every page is back in the free
//! areas.

use mm::cost::{CostTable, LockClass};
use mm::knobs::{KnobValue, Preset};
use mm::memory::MmConfig;
use mm::page_alloc::PageAlloc;
use mm::vma::MapFlags;
use mm::vmstat::VmEvent;
use mm::VcpuId;
use sim::{Engine, Machine, NodeSpec, Op, OpResult, Program, Rng, RunStats, TaskSpec};

const MIB: u64 = 1 << 20;

/// A program written as a closure of (step, last result).
struct Script<F: FnMut(u32, OpResult) -> Option<Op>> {
    step: u32,
    f: F,
}

impl<F: FnMut(u32, OpResult) -> Option<Op>> Program for Script<F> {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        (self.f)(self.step, last)
    }
}

fn script(
    f: impl FnMut(u32, OpResult) -> Option<Op> + 'static,
) -> Script<impl FnMut(u32, OpResult) -> Option<Op>> {
    Script { step: 0, f }
}

fn mm_config(preset: Preset, thp: &str) -> MmConfig {
    let mut cfg = preset.config();
    cfg.set_knob("transparent_hugepage/enabled", &KnobValue::Str(thp.into()))
        .unwrap();
    cfg.mm
}

fn engine(cpus: u32, cfg: MmConfig) -> (Engine, u64) {
    let m = Machine {
        name: "test".into(),
        nodes: vec![NodeSpec {
            cpus,
            memory_bytes: 512 * MIB,
        }],
        llc_bytes: 0,
        dma32_bytes: 0,
    };
    let pa = PageAlloc::new(&m.memory_layout(), Default::default(), Default::default());
    let boot = pa.nr_free_pages() + pa.nr_pcp_pages();
    let mut eng = Engine::new(pa, CostTable::uniform(10), 1).with_mm_config(cfg);
    eng.check_invariants_every(97);
    (eng, boot)
}

/// Every process is gone and, with the PCP lists drained, every page is
/// back in the buddy free areas.
fn check_all_back(eng: &mut Engine, boot: u64) {
    assert_eq!(eng.nr_live_mms(), 0, "an address space outlived its tasks");
    assert_eq!(eng.pa.nr_free_pages() + eng.pa.nr_pcp_pages(), boot);
    eng.drain_all_pages();
    assert_eq!(eng.pa.nr_pcp_pages(), 0);
    assert_eq!(eng.pa.nr_free_pages(), boot, "pages leaked");
    eng.check_invariants();
}

/// A child that writes one byte per page of `[addr, addr + len)` and exits.
fn cow_child(addr: u64, len: u64) -> impl Program {
    script(move |step, _| match step {
        1 => Some(Op::Touch {
            addr,
            len,
            stride: 4096,
            bytes: 1,
            write: true,
        }),
        2 => Some(Op::Exit),
        _ => panic!("the child ran past exit()"),
    })
}

/// A parent that maps and populates `len` bytes, forks `n` COW writers and
/// waits for them.
fn cow_parent(len: u64, n: u32) -> impl Program {
    let mut addr = 0;
    script(move |step, last| match step {
        1 => Some(Op::Mmap {
            len,
            hint: None,
            flags: MapFlags::NONE,
            advice: None,
        }),
        2 => {
            let OpResult::Mapped(Ok(a)) = last else {
                panic!("mmap failed: {last:?}")
            };
            addr = a;
            Some(Op::Touch {
                addr,
                len,
                stride: 4096,
                bytes: 1,
                write: true,
            })
        }
        s if s < 3 + n => {
            if s > 3 {
                assert!(matches!(last, OpResult::Forked(Ok(_))), "{last:?}");
            }
            Some(Op::fork(cow_child(addr, len)))
        }
        s if s == 3 + n => Some(Op::Wait),
        _ => None,
    })
}

fn run_cow(preset: Preset, thp: &str) -> (RunStats, Engine, u64) {
    let (mut eng, boot) = engine(4, mm_config(preset, thp));
    eng.spawn(TaskSpec::new(Box::new(cow_parent(8 * MIB, 3)), VcpuId(0)));
    let stats = eng.run();
    (stats, eng, boot)
}

#[test]
fn fork_cow_exit_wait_returns_every_page_thp_never() {
    let (stats, mut eng, boot) = run_cow(Preset::Linux6_18, "never");
    assert_eq!(stats.nr_processes, 4);
    assert_eq!(stats.nr_tasks, 4);
    assert_eq!(stats.nr_sigsegv, 0);
    // 2048 pages populated by the parent, then 2048 COW faults per child.
    assert_eq!(eng.vmstat().get(VmEvent::PGFAULT), 4 * 2048);
    assert!(stats.locks[LockClass::MmapLock as usize].acquisitions >= 1 + 3 + 4);
    check_all_back(&mut eng, boot);
}

#[test]
fn thp_cow_splits_on_6_18_and_copies_2m_on_4_18() {
    // 8 MiB, 2 MiB aligned on 6.18: four THPs populated with four faults.
    let (_, mut eng, boot) = run_cow(Preset::Linux6_18, "always");
    let v = eng.vmstat();
    assert_eq!(v.get(VmEvent::THP_FAULT_ALLOC), 4);
    assert_eq!(v.get(VmEvent::THP_SPLIT_PMD), 3 * 4);
    assert_eq!(v.get(VmEvent::PGFAULT), 4 + 3 * 2048);
    check_all_back(&mut eng, boot);

    // 4.18 places the mapping page aligned, so fewer whole THPs fit, and a
    // child's write to a shared THP copies it whole.
    let (_, mut eng, boot) = run_cow(Preset::Linux4_18, "always");
    let v = eng.vmstat();
    assert_eq!(v.get(VmEvent::THP_SPLIT_PMD), 0);
    let thp = v.get(VmEvent::THP_FAULT_ALLOC);
    assert!(
        thp >= 4 && thp % 4 == 0,
        "parent's THPs and one copy each per child: {thp}"
    );
    assert!(v.get(VmEvent::PGFAULT) < 3 * 2048);
    check_all_back(&mut eng, boot);
}

#[test]
fn runs_are_deterministic() {
    let (a, ea, _) = run_cow(Preset::Linux6_18, "always");
    let (b, eb, _) = run_cow(Preset::Linux6_18, "always");
    assert_eq!(a, b);
    let va: Vec<_> = ea.vmstat().iter().collect();
    let vb: Vec<_> = eb.vmstat().iter().collect();
    assert_eq!(va, vb);
}

#[test]
fn touch_outside_any_vma_is_sigsegv_and_kills_the_process() {
    let (mut eng, boot) = engine(2, mm_config(Preset::Linux6_18, "never"));
    // Maps 1 MiB, touches it, then touches past its end.
    let p = script(|step, last| match step {
        1 => Some(Op::Mmap {
            len: MIB,
            hint: Some(0x4000_0000),
            flags: MapFlags::FIXED,
            advice: None,
        }),
        2 => {
            assert_eq!(last, OpResult::Mapped(Ok(0x4000_0000)));
            Some(Op::Touch {
                addr: 0x4000_0000,
                len: 2 * MIB,
                stride: 4096,
                bytes: 1,
                write: true,
            })
        }
        _ => panic!("a task killed by SIGSEGV ran on"),
    });
    eng.spawn(TaskSpec::new(Box::new(p), VcpuId(0)));
    // A process that touches memory without ever mapping any.
    let q = script(|step, _| match step {
        1 => Some(Op::Touch {
            addr: 0x1000,
            len: 1,
            stride: 1,
            bytes: 1,
            write: false,
        }),
        _ => panic!("a task killed by SIGSEGV ran on"),
    });
    eng.spawn(TaskSpec::new(Box::new(q), VcpuId(1)));
    let stats = eng.run();
    assert_eq!(stats.nr_sigsegv, 2);
    // The faults outside any VMA never reach handle_mm_fault(), which is
    // where the kernel counts pgfault.
    assert_eq!(eng.vmstat().get(VmEvent::PGFAULT), 256);
    check_all_back(&mut eng, boot);
}

#[test]
fn threads_share_the_address_space_and_exit_group_ends_them_all() {
    let (mut eng, boot) = engine(2, mm_config(Preset::Linux6_18, "never"));
    let base = 0x4000_0000;
    // Thread 0 maps and populates 1 MiB at a fixed address, then waits a
    // while and calls exit_group().
    let t0 = script(move |step, _| match step {
        1 => Some(Op::Mmap {
            len: MIB,
            hint: Some(base),
            flags: MapFlags::FIXED,
            advice: None,
        }),
        2 => Some(Op::Touch {
            addr: base,
            len: MIB,
            stride: 4096,
            bytes: 1,
            write: true,
        }),
        3 => Some(Op::Compute { ns: 10_000_000 }),
        4 => Some(Op::Exit),
        _ => panic!("ran past exit_group()"),
    });
    // Thread 1 reads the same range later (no faults: thread 0 mapped it),
    // then would compute forever but is ended by thread 0's exit_group().
    let t1 = script(move |step, _| match step {
        1 => Some(Op::Compute { ns: 5_000_000 }),
        2 => Some(Op::Touch {
            addr: base,
            len: MIB,
            stride: 4096,
            bytes: 1,
            write: true,
        }),
        _ => Some(Op::Compute { ns: 1_000_000 }),
    });
    eng.spawn(TaskSpec {
        program: Box::new(t0),
        cpu: VcpuId(0),
        process: Some(7),
    });
    eng.spawn(TaskSpec {
        program: Box::new(t1),
        cpu: VcpuId(1),
        process: Some(7),
    });
    let stats = eng.run();
    assert_eq!(stats.nr_processes, 1);
    assert_eq!(eng.vmstat().get(VmEvent::PGFAULT), 256);
    assert!(
        stats.runtime_ns >= 10_000_000 && stats.runtime_ns < 12_000_000,
        "runtime {}",
        stats.runtime_ns
    );
    check_all_back(&mut eng, boot);
}

/// `mprotect` and `mremap` as operations: a range moved by `mremap` keeps
/// its pages (no faults on re-touch), a write to a range made read-only is
/// a SIGSEGV that kills the process, and everything comes back.
#[test]
fn mprotect_and_mremap_ops() {
    use mm::mprotect::Prot;
    use mm::mremap::MremapFlags;
    use std::cell::Cell;
    use std::rc::Rc;
    let (mut eng, boot) = engine(2, mm_config(Preset::Linux6_18, "never"));
    let base = Rc::new(Cell::new(0u64));
    let b = base.clone();
    let len = 64 * 4096;
    eng.spawn(TaskSpec::new(
        Box::new(script(move |step, last| match step {
            1 => Some(Op::Mmap {
                len,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            }),
            2 => {
                let OpResult::Mapped(Ok(a)) = last else {
                    panic!("mmap: {last:?}")
                };
                b.set(a);
                Some(Op::Touch {
                    bytes: 1,
                    addr: a,
                    len,
                    stride: 4096,
                    write: true,
                })
            }
            3 => Some(Op::Mremap {
                addr: b.get(),
                old_len: len,
                new_len: 2 * len,
                flags: MremapFlags::MAYMOVE,
                new_addr: 0,
            }),
            4 => {
                let OpResult::Mapped(Ok(a)) = last else {
                    panic!("mremap: {last:?}")
                };
                b.set(a);
                // The moved half needs no fault.
                Some(Op::Touch {
                    bytes: 1,
                    addr: a,
                    len,
                    stride: 4096,
                    write: true,
                })
            }
            5 => Some(Op::Mprotect {
                addr: b.get(),
                len: 2 * len,
                prot: Prot::READ,
            }),
            6 => {
                assert_eq!(last, OpResult::Sys(Ok(())));
                Some(Op::Touch {
                    bytes: 1,
                    addr: b.get(),
                    len: 4096,
                    stride: 4096,
                    write: true,
                })
            }
            _ => panic!("ran past the SIGSEGV"),
        })),
        VcpuId(0),
    ));
    let stats = eng.run();
    assert_eq!(stats.nr_sigsegv, 1);
    assert_eq!(eng.vmstat().get(VmEvent::PGFAULT), 64);
    assert!(base.get() != 0);
    check_all_back(&mut eng, boot);
}

/// `nanosleep()` frees the vCPU: a task sleeping on CPU 0 lets the other
/// task there run, and wakes after its time; `set_mempolicy()` refuses a
/// node the machine does not have and accepts the default policy.
#[test]
fn sleep_blocks_the_task_and_set_mempolicy_checks_its_node() {
    let (mut eng, boot) = engine(1, mm_config(Preset::Linux6_18, "never"));
    eng.spawn(TaskSpec::new(
        Box::new(script(|step, last| match step {
            1 => Some(Op::SetMempolicy { preferred: Some(1) }),
            2 => {
                assert!(matches!(last, OpResult::Sys(Err(mm::vma::Errno::Inval))));
                Some(Op::SetMempolicy { preferred: None })
            }
            3 => {
                assert_eq!(last, OpResult::Sys(Ok(())));
                Some(Op::Sleep { ns: 1_000_000 })
            }
            4 => {
                assert_eq!(last, OpResult::Done);
                None
            }
            _ => unreachable!(),
        })),
        VcpuId(0),
    ));
    eng.spawn(TaskSpec::new(
        Box::new(script(|step, _| {
            (step == 1).then_some(Op::Compute { ns: 1000 })
        })),
        VcpuId(0),
    ));
    let s = eng.run();
    // The sleeper ends after 1 ms; the other task's 1 us ran meanwhile.
    assert!(s.runtime_ns >= 1_000_000 && s.runtime_ns < 1_100_000);
    assert_eq!(s.user_ns, 1000);
    check_all_back(&mut eng, boot);
}
