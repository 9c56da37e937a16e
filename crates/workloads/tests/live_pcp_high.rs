//! PCP `high` auto-tuning on the live kernel and in the model, side by side.
//!
//! The live kernel (6.7+) raises each CPU's `pcp->high` from `high_min`
//! towards `high_max` while tasks fault memory in and give it back, and its
//! vmstat work lowers it by an eighth a second once the CPU is idle. This test
//! runs such a load natively (threads that map 64 MiB, touch it and unmap it,
//! as glibc does for large allocations), samples `/proc/zoneinfo`, and runs
//! the same pattern through the model on a machine with the live zones'
//! sizes and `vm.min_free_kbytes`, under the `linux-6.18` preset.
//!
//! It changes no knob; it holds the live-kernel lock because it reads
//! system-wide state that other live tests disturb. It needs a kernel whose
//! /proc/zoneinfo shows `high_min` (6.7+), and says SKIPPED otherwise.

use mm::knobs::{KnobValue, Preset};
use mm::page_alloc::PageAlloc;
use sim::{Engine, Machine, NodeSpec};
use std::time::{Duration, Instant};
use trace::event::Zone;
use workloads::{ParamValue, Params};

fn normal_zone() -> Option<Zone> {
    let text = std::fs::read_to_string("/proc/zoneinfo").ok()?;
    trace::sysinfo::parse_zoneinfo(&text)
        .into_iter()
        .find(|z| z.name == "Normal")
}

/// `high` of every CPU in the Normal zone.
fn highs() -> Vec<u64> {
    normal_zone()
        .map(|z| z.pagesets.iter().map(|p| p.high).collect())
        .unwrap_or_default()
}

/// `(count, high)` of every CPU in the Normal zone.
fn pagesets() -> Vec<(u64, u64)> {
    normal_zone()
        .map(|z| z.pagesets.iter().map(|p| (p.count, p.high)).collect())
        .unwrap_or_default()
}

#[test]
fn pcp_high_rises_under_fault_load_and_decays_when_idle_live_and_model() {
    let Some(zone) = normal_zone() else {
        eprintln!("SKIPPED (cannot run here): /proc/zoneinfo has no Normal zone");
        return;
    };
    let Some(high_min) = zone.pagesets.first().and_then(|p| p.high_min) else {
        eprintln!("SKIPPED (cannot run here): this kernel has no PCP high auto-tuning (no high_min in /proc/zoneinfo)");
        return;
    };
    let high_max = zone.pagesets[0].high_max.expect("high_max beside high_min");
    let _lock = match native::knobs::LiveLock::acquire() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("SKIPPED (cannot run here): cannot take the live-kernel lock: {e}");
            return;
        }
    };

    // --- The live kernel.
    let idle_before = highs();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // 64 MiB: glibc maps it, the fill faults every page in,
                    // the drop unmaps it and frees every page.
                    let v = vec![1u8; 64 << 20];
                    std::hint::black_box(&v);
                }
            })
        })
        .collect();
    let mut peak = 0u64;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        peak = peak.max(highs().into_iter().max().unwrap_or(0));
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.join().expect("load thread");
    }
    let mut idle = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_secs(1));
        idle.push(pagesets());
    }
    eprintln!("live: high_min {high_min} high_max {high_max}; high before {idle_before:?}, peak under load {peak}, then each second idle (count, high) per CPU {idle:?}");
    assert!(
        peak > high_min + zone.pagesets[0].batch,
        "live: high never rose above high_min ({peak} vs {high_min})"
    );
    // Idle, the kernel's vmstat work sets high to max(count - (batch << 5),
    // high - high/8, high_min) once a second: high falls, by at most an
    // eighth a second (two runs may fall between samples 1 s apart), and
    // by less while the CPU still holds many pages.
    let mut fell = false;
    for w in idle.windows(2) {
        for (cpu, (a, b)) in w[0].iter().zip(&w[1]).enumerate() {
            let (h0, h1) = (a.1, b.1);
            if h1 < h0 {
                fell = true;
                let most = h0 - (h0 - (h0 >> 3)) * 7 / 8; // two decay steps
                assert!(h0 - h1 <= most + 1, "live: cpu {cpu} high fell {h0} -> {h1} in one idle second, faster than 1/8 a second");
            }
        }
    }
    assert!(fell, "live: high did not decay once idle ({idle:?})");

    // --- The model, on a machine with the live zones' sizes.
    let dma_pages: u64 =
        trace::sysinfo::parse_zoneinfo(&std::fs::read_to_string("/proc/zoneinfo").unwrap())
            .iter()
            .filter(|z| z.name != "Normal" && z.name != "Movable")
            .map(|z| z.managed)
            .sum();
    let pageblock = 512u64;
    let dma32 = dma_pages.div_ceil(pageblock) * pageblock;
    let normal = zone.managed / pageblock * pageblock;
    let nr_cpus = zone.pagesets.len() as u32;
    let machine = Machine {
        name: "this host".into(),
        nodes: vec![NodeSpec {
            cpus: nr_cpus,
            memory_bytes: (dma32 + normal) * 4096,
        }],
        llc_bytes: 32 << 20,
        dma32_bytes: dma32 * 4096,
    };
    let mut cfg = Preset::Linux6_18.config();
    let min_free_kbytes: i64 = std::fs::read_to_string("/proc/sys/vm/min_free_kbytes")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let wsf: i64 = std::fs::read_to_string("/proc/sys/vm/watermark_scale_factor")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    cfg.set_knob("vm.min_free_kbytes", &KnobValue::Int(min_free_kbytes))
        .unwrap();
    cfg.set_knob("vm.watermark_scale_factor", &KnobValue::Int(wsf))
        .unwrap();
    let pa = PageAlloc::new(&machine.memory_layout(), cfg.sysctl, cfg.pcp);
    let zi = pa
        .zones
        .iter()
        .position(|z| z.zone_type == mm::page_alloc::ZoneType::Normal)
        .unwrap();
    let (m_min, m_max) = (pa.pcp[zi].high_min as u64, pa.pcp[zi].high_max as u64);
    eprintln!("model: high_min {m_min} high_max {m_max} (live {high_min} {high_max})");
    let m_wmark = pa.zones[zi].watermark;
    let live_wmark = [zone.min, zone.low, zone.high];
    if normal == zone.managed && m_wmark != live_wmark {
        // The kernel computes watermarks when min_free_kbytes or
        // watermark_scale_factor is written (and at boot), from the managed
        // pages of that moment; pages managed since then leave them stale.
        eprintln!(
            "model: exact high_min/high_max not comparable: the live watermarks {live_wmark:?} \
             were computed from another managed-page count than today's (model {m_wmark:?})"
        );
    }
    if normal == zone.managed && m_wmark == live_wmark {
        // Same managed pages and watermarks: the kernel's sizing exactly.
        assert_eq!(
            (m_min, m_max),
            (high_min, high_max),
            "model sizes PCP high differently from the kernel"
        );
    }
    let mut costs = mm::cost::CostTable::uniform(20);
    costs.set(mm::cost::Cost::ClearPage, 350);
    let mut eng = Engine::new(pa, costs, 1).with_mm_config(cfg.mm);
    eng.set_idle_tail_ns(5_000_000_000);
    let mut p = Params::default();
    p.0.insert("tasks".into(), ParamValue::Int(nr_cpus as i64));
    p.0.insert("iterations".into(), ParamValue::Int(6));
    p.0.insert("size".into(), ParamValue::Str("64MiB".into()));
    for t in workloads::build("page-fault1", &p, &machine).unwrap() {
        eng.spawn(t);
    }
    let stats = eng.run();
    let end = stats.runtime_ns;
    let series: Vec<_> = stats
        .pcp_series
        .iter()
        .filter(|s| s.zone as usize == zi && s.cpu == 0)
        .collect();
    let m_peak = series.iter().map(|s| s.high as u64).max().unwrap_or(0);
    let idle_samples: Vec<_> = series.iter().filter(|s| s.time_ns > end).collect();
    eprintln!(
        "model: run {end} ns, cpu 0 (count, high) each second {:?}",
        series.iter().map(|s| (s.count, s.high)).collect::<Vec<_>>()
    );
    assert!(
        m_peak > m_min + 63,
        "model: high never rose under the fault load"
    );
    // Idle: each vmstat run (decay_pcp_high) sets high to
    // max(count - (batch << CONFIG_PCP_BATCH_SCALE_MAX), high - high/8, high_min).
    let big_batch = 63 << 5;
    for w in idle_samples.windows(2) {
        let (c, h) = (w[0].count as i64, w[0].high as i64);
        if h > m_min as i64 {
            let expected = (c - big_batch).max(h - (h >> 3)).max(m_min as i64);
            assert_eq!(
                w[1].high as i64, expected,
                "model: idle decay from high {h} with count {c}"
            );
        }
    }
    let after: Vec<u64> = idle_samples.iter().map(|s| s.high as u64).collect();
    assert!(
        after.last().copied().unwrap_or(m_peak) < m_peak,
        "model: high did not decay once idle"
    );
}
