//! The engine driving page churn: the allocator's invariants hold during the
//! run, every page comes back, runs are deterministic, and zone-lock traffic
//! responds to the PCP `high` limit the way the kernel's does.

use mm::cost::{CostTable, LockClass};
use mm::page_alloc::{PageAlloc, VmSysctl};
use mm::pcp::PcpPolicy;
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
        dma32_bytes: 128 << 20,
    }
}

fn churn(m: &Machine, fraction: u32, seed: u64, check_every: u64) -> (RunStats, PageAlloc) {
    let pa = PageAlloc::new(
        &m.memory_layout(),
        VmSysctl {
            percpu_pagelist_high_fraction: fraction,
            ..VmSysctl::default()
        },
        PcpPolicy::default(),
    );
    let mut costs = CostTable::uniform(20);
    costs.set(mm::cost::Cost::ZoneLockHandoff, 100);
    let mut eng = Engine::new(pa, costs, seed);
    eng.check_invariants_every(check_every);
    let mut p = Params::default();
    p.0.insert("iterations".into(), ParamValue::Int(10));
    p.0.insert("burst".into(), ParamValue::Int(300));
    p.0.insert("think_ns".into(), ParamValue::Int(500));
    for t in workloads::build("page-churn", &p, m).unwrap() {
        eng.spawn(t);
    }
    let stats = eng.run();
    (stats, eng.pa)
}

#[test]
fn invariants_hold_during_the_run_and_every_page_returns() {
    let m = machine(4);
    let (stats, mut pa) = churn(&m, 0, 1, 50);
    assert!(stats.nr_ops > 10_000);
    assert_eq!(pa.vmstat.get(VmEvent::ALLOC_FAIL), 0);
    let mut cx = mm::cost::Cx::new(mm::VcpuId(0), CostTable::uniform(0));
    for cpu in 0..pa.nr_cpus() {
        pa.drain_pages(&mut cx, mm::VcpuId(cpu));
    }
    pa.check_invariants();
    let total: u64 = pa.zones.iter().map(|z| z.managed_pages).sum();
    assert_eq!(
        pa.nr_free_pages(),
        total,
        "every page is back in the buddy lists"
    );
}

#[test]
fn same_seed_same_result_other_seed_other_result() {
    let m = machine(4);
    let (a, pa) = churn(&m, 0, 7, 0);
    let (b, pb) = churn(&m, 0, 7, 0);
    assert_eq!(a, b);
    assert_eq!(pa.vmstat, pb.vmstat);
    let (c, _) = churn(&m, 0, 8, 0);
    assert_ne!(a, c);
}

#[test]
fn smaller_high_means_more_zone_lock_traffic() {
    let m = machine(8);
    // fraction 0: high from the low watermark (small); 8: an eighth of the zone.
    let (small, ps) = churn(&m, 0, 1, 0);
    let (big, pb) = churn(&m, 8, 1, 0);
    let zl = |p: &PageAlloc| p.vmstat.get(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED);
    let drain = |p: &PageAlloc| p.vmstat.get(VmEvent::MM_PAGE_PCPU_DRAIN);
    assert!(
        zl(&ps) > 2 * zl(&pb),
        "alloc_zone {} vs {}",
        zl(&ps),
        zl(&pb)
    );
    assert!(
        drain(&ps) > drain(&pb),
        "pcpu_drain {} vs {}",
        drain(&ps),
        drain(&pb)
    );
    let l = |s: &RunStats| s.locks[LockClass::Zone as usize];
    assert!(l(&small).hold_ns > l(&big).hold_ns);
    assert!(l(&small).contended > 0, "8 CPUs on one zone lock contend");
    assert!(small.lock_pct(LockClass::Zone) > big.lock_pct(LockClass::Zone));
    assert!(
        big.peak_pcp_pages > small.peak_pcp_pages,
        "a larger high holds more pages"
    );
}

/// One pair streaming 50 messages at 8000 Mbit/s (one byte per
/// nanosecond), with the receiver's copy-out rate if given: the run's
/// stats and the pages the receiver freed.
fn run_stream(recv_copy_mbps: Option<i64>) -> (RunStats, u64) {
    let m = machine(2);
    let pa = PageAlloc::new(
        &m.memory_layout(),
        VmSysctl::default(),
        PcpPolicy::default(),
    );
    let mut eng = Engine::new(pa, CostTable::uniform(0), 5);
    let mut p = Params::default();
    p.0.insert("pairs".into(), ParamValue::Int(1));
    p.0.insert("messages".into(), ParamValue::Int(50));
    p.0.insert("mbps".into(), ParamValue::Int(8000));
    if let Some(rate) = recv_copy_mbps {
        p.0.insert("recv_copy_mbps".into(), ParamValue::Int(rate));
    }
    for t in workloads::build("stream", &p, &m).unwrap() {
        eng.spawn(t);
    }
    let stats = eng.run();
    (stats, eng.pa.vmstat.get(VmEvent::PGFREE))
}

/// `stream` with `mbps`: the sender's user time is its messages' bytes at
/// that rate, and every block it sent is freed by the receiver.
#[test]
fn stream_at_a_throughput_spends_the_bytes_time() {
    let (stats, pages) = run_stream(None);
    assert!(pages > 50, "{pages} pages");
    assert_eq!(stats.user_ns, pages * 4096);
}

/// `stream` with `recv_copy_mbps`: the receiver copies every message's
/// bytes out at that rate before freeing its blocks, so the user time is
/// the sender's and the receiver's bytes' time; without it, the sender's
/// alone (the receiver only frees).
#[test]
fn stream_receiver_copies_the_bytes_out_before_freeing() {
    let run = |rate: i64| run_stream(Some(rate));
    let (without, pages) = run(0);
    assert_eq!(without.user_ns, pages * 4096);
    // 16000 Mbit/s: two bytes per nanosecond.
    let (with, pages2) = run(16_000);
    assert_eq!(pages2, pages, "the same messages are drawn");
    assert_eq!(with.user_ns, pages * 4096 + pages * 4096 / 2);
    assert!(with.busy_ns > without.busy_ns);
}
