//! `mmlab bench`: the model's own speed, in wall time. Benchmarks, not
//! tests: they print rates and assert nothing.

pub mod replay;
pub mod scale;

use mm::VcpuId;
use native::sys::thread_cpu_ns;
use sim::cache::{AccessKind, CacheConfig, CacheModel, CacheStats};
use std::hint::black_box;
use std::time::Instant;

/// The PCP fast path of the model on one host core: order-0 allocate and free
/// on one CPU, refills and drains included; and the memory a simulated page
/// costs.
pub fn pcp(ops: u64) {
    use mm::cost::{CostTable, Cx};
    use mm::page_alloc::{Gfp, MemoryLayout, NodeLayout, PageAlloc, VmSysctl};
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 4,
            nr_pages: 1 << 20,
        }],
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, VmSysctl::default(), mm::pcp::PcpPolicy::default());
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut held = Vec::with_capacity(64);
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let mut done = 0u64;
    while done < ops {
        // Bursts of 32 keep the list moving through refills and drains.
        for _ in 0..32 {
            cx.begin(VcpuId(0), mm::SimTime(done));
            held.push(
                pa.alloc_pages(&mut cx, Gfp::HIGHUSER_MOVABLE, 0)
                    .expect("4 GiB is plenty"),
            );
        }
        for p in held.drain(..) {
            cx.begin(VcpuId(0), mm::SimTime(done));
            pa.free_pages(&mut cx, p, 0);
        }
        done += 32;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = (thread_cpu_ns() - cpu_start).max(1) as f64 / 1e9;
    println!(
        "PCP fast path (order-0 alloc+free pairs, 1 host core): {:.1} M pairs/s, {:.1} M pairs/CPU-s ({done} pairs in {secs:.2} s, {cpu_secs:.2} CPU-s)",
        done as f64 / secs / 1e6,
        done as f64 / cpu_secs / 1e6
    );
    let bpp = mm::page::MemMap::BYTES_PER_PAGE;
    let tib = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 64,
            nr_pages: (1u64 << 40) / mm::PAGE_SIZE,
        }],
        dma32_pages: (4u64 << 30) / mm::PAGE_SIZE,
    };
    println!(
        "Page metadata: {bpp} bytes per simulated 4 KiB page of each 128 MiB section the workload touches; \
         a 1 TiB, 64-CPU machine boots with {} (section table, cut sections, pagesets)",
        sim::machine::human_bytes(tib.boot_host_bytes())
    );
}

/// The cache model's throughput in line accesses per second (goal: 100 M
/// for the LLC-only configuration, since a simulated 2 MiB copy is 65,536
/// line accesses).
pub fn cache(lines: u64) {
    copy_stream(
        small_llc(),
        "cache: 1 MiB LLC only, 2 MiB copies (state in host cache)",
        lines,
    );
    copy_stream(
        CacheConfig::haswell_e5_2699_v3_llc_only(),
        "cache: LLC only, 2 MiB copies (miss-dominated)",
        lines,
    );
    hit_sweep(
        CacheConfig::haswell_e5_2699_v3_llc_only(),
        "cache: LLC only, 16 MiB sweeps (hit-dominated)",
        lines,
    );
    copy_stream(
        CacheConfig::haswell_e5_2699_v3(),
        "cache: L2 + inclusive LLC, 2 MiB copies",
        lines,
    );
    hit_sweep(
        CacheConfig::haswell_e5_2699_v3(),
        "cache: L2 + inclusive LLC, 16 MiB sweeps",
        lines,
    );
}

const HUGE: u64 = 2 << 20;

/// Runs `f` (which returns the line accesses it made) until at least
/// `min_lines` lines have been accessed, and prints the rate.
fn bench(name: &str, min_lines: u64, mut f: impl FnMut() -> u64) {
    // Warm up: fills the caches so that the steady state is measured.
    let mut warm = 0;
    while warm < min_lines / 4 {
        warm += f();
    }
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let mut lines = 0;
    while lines < min_lines {
        lines += f();
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu_ns = thread_cpu_ns() - cpu_start;
    let cpu = format!(
        ", {:.1} M/s of CPU time",
        lines as f64 / (cpu_ns.max(1) as f64 / 1e9) / 1e6
    );
    println!(
        "{name:<52} {:>7.1} M line accesses/s  ({lines} lines in {secs:.3} s{cpu})",
        lines as f64 / secs / 1e6
    );
}

/// COW-like copies of 2 MiB pages through a 45 MiB LLC: 36 CPUs of one
/// socket each copy from a shared source region to its own destinations,
/// so nearly every access misses (the streaming case).
fn copy_stream(cfg: CacheConfig, name: &str, lines: u64) {
    let mut cache = CacheModel::new(cfg).unwrap();
    let mut stats = CacheStats::default();
    let mut i = 0u64;
    bench(name, lines, || {
        let cpu = VcpuId((i % 36) as u32);
        let src = (i % 64) * HUGE;
        let dst = (1 << 30) + (i % 2048) * HUGE;
        cache.copy_range(cpu, dst, src, HUGE, &mut stats);
        i += 1;
        2 * HUGE / 64
    });
    black_box(&stats);
}

/// Repeated sweeps over a 16 MiB working set that fits in the LLC (every
/// access hits after the warm-up).
fn hit_sweep(cfg: CacheConfig, name: &str, lines: u64) {
    let mut cache = CacheModel::new(cfg).unwrap();
    let mut stats = CacheStats::default();
    bench(name, lines, || {
        cache.access_range(VcpuId(0), 0, 16 << 20, AccessKind::Write, &mut stats);
        (16 << 20) / 64
    });
    black_box(&stats);
}

/// A 1 MiB, 16-way LLC whose model state (16 K lines) fits in the host's
/// caches: the compute-bound rate of the model, without the host cache
/// misses on the model's own state that a 45 MiB LLC's 4 MiB of state incurs.
fn small_llc() -> CacheConfig {
    CacheConfig {
        llc_size_bytes: 1 << 20,
        llc_ways: 16,
        ..CacheConfig::haswell_e5_2699_v3_llc_only()
    }
}

/// The model's anonymous fault path against the live kernel's, on the same
/// patterns in one run: `mib` MiB written one byte per 4 KiB, sequentially,
/// with THP off (4 KiB faults) and with only 64 KiB mTHP (one fault maps 16
/// pages). The model's rate is faults of `handle_mm_fault()` (crate `mm`,
/// without the engine: no event queue, no virtual time) per host second;
/// the live rate is the kernel's faults per second of the child's touch
/// phase (`getrusage()` and the wall clock around it). Both are also given
/// per second of CPU time (the model's thread, the live child process), which
/// the other tenants of a shared host disturb less than the wall clock.
///
/// Each side runs each pattern `runs` times, the model's runs first and then
/// the live kernel's (see `measure_faults` for why not alternated); the
/// table gives each side's best rate (the run least disturbed by other
/// work), and a line per pattern lists every run's rate per CPU-second.
/// The live half needs root and writable THP knobs (restored afterwards);
/// without them the line says why it was not measured.
pub fn faults(mib: u64, live: bool, runs: u32) -> anyhow::Result<()> {
    use native::faults::{Advice, FaultPattern};
    use native::knobs::{ThpEnabled, ThpKnobs};
    let runs = runs.max(1);
    let len = (mib.max(2) << 20) as usize;
    let mut m64 = FaultPattern::new(
        &format!("{mib} MiB, 64K mTHP"),
        len,
        ThpKnobs::only(64, ThpEnabled::Madvise),
    );
    m64.advice = Advice::Hugepage;
    let patterns = [
        FaultPattern::new(&format!("{mib} MiB, 4K (THP off)"), len, ThpKnobs::off()),
        m64,
    ];
    println!(
        "anonymous write faults, one byte per 4 KiB, sequential; model: mm::memory::handle_mm_fault \
         (linux-6.18 preset, no engine); live: this host's kernel; best of {runs} run(s) each"
    );
    let mut rows = vec![vec![
        "pattern".to_string(),
        "model faults".into(),
        "model faults/s".into(),
        "model faults/CPU-s".into(),
        "live faults".into(),
        "live faults/s".into(),
        "live faults/CPU-s".into(),
        "model/live".into(),
        "model/live (CPU)".into(),
    ]];
    let mut per_run = Vec::new();
    for p in &patterns {
        let (model, kernel) = measure_faults(p, runs, live)?;
        let (row, line) = fault_row(p, &model, &kernel);
        rows.push(row);
        per_run.push(line);
    }
    print!("{}", native::table::format(&rows));
    if runs > 1 {
        for line in per_run {
            println!("{line}");
        }
    }
    Ok(())
}

/// One run of a fault pattern: its faults, and their rate per wall-clock
/// second and per CPU-second.
type FaultRun = (u64, f64, f64);

/// The live kernel's runs, or why it was not measured.
type LiveRuns = Result<Vec<FaultRun>, String>;

fn fault_rate(n: u64, ns: u64) -> f64 {
    n as f64 / (ns.max(1) as f64 / 1e9)
}

/// `runs` runs of pattern `p` on the model, then `runs` on the live kernel;
/// the live side is the reason it was not measured when it could not be.
///
/// Not alternated: each live run `fork`s its child from this process, which
/// leaves every page of this process's heap copy-on-write, so a model run
/// after it took a host write fault on each heap page it reused (the memmap
/// and page tables of the run before): with alternation the model measured
/// 17-18 M 4 KiB faults and 3.1-3.6 M 64 KiB faults per CPU-second against
/// 17-20 M and 6.7-7.0 M back to back (same binary, same hour). That is
/// the benchmark's fork, not the model's work; both sides are timed in CPU
/// time of their own thread or child, which the host's load moves less than
/// wall time.
fn measure_faults(
    p: &native::faults::FaultPattern,
    runs: u32,
    live: bool,
) -> anyhow::Result<(Vec<FaultRun>, LiveRuns)> {
    let sizes: Vec<u32> = p.knobs.sizes.iter().map(|&(s, _)| s).collect();
    let mut why_not: Option<String> =
        match native::knobs::LiveKernel::probe().require_thp_knobs(&sizes) {
            _ if !live => Some("--no-live".to_string()),
            Err(why) => Some(why.to_string()),
            Ok(()) => None,
        };
    let mut model = Vec::new();
    let mut kernel = Vec::new();
    for _ in 0..runs {
        let m = crate::fault_model::run_model(p, mm::knobs::Preset::Linux6_18)
            .map_err(anyhow::Error::msg)?;
        model.push((
            m.touch,
            fault_rate(m.touch, m.touch_host_ns),
            fault_rate(m.touch, m.touch_cpu_ns),
        ));
    }
    for _ in 0..runs {
        if why_not.is_some() {
            break;
        }
        match native::faults::run(p) {
            Ok(r) => kernel.push((
                r.touch.nr_minflt,
                fault_rate(r.touch.nr_minflt, r.touch.elapsed_ns),
                fault_rate(r.touch.nr_minflt, r.touch.cpu_ns),
            )),
            Err(e) => why_not = Some(e.to_string()),
        }
    }
    Ok((model, why_not.map_or(Ok(kernel), Err)))
}

/// The table row of pattern `p` (each side's best rates, the run least
/// disturbed by other work) and the line listing every run's rate per
/// CPU-second; says why when the live kernel was not measured.
fn fault_row(
    p: &native::faults::FaultPattern,
    model: &[FaultRun],
    kernel: &LiveRuns,
) -> (Vec<String>, String) {
    let ratio = |a: f64, b: f64| format!("{:.1}x", a / b);
    let mega = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{:.2}", r / 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let best = |v: &[FaultRun]| {
        (
            v.iter().map(|r| r.1).fold(0.0, f64::max),
            v.iter().map(|r| r.2).fold(0.0, f64::max),
        )
    };
    let (m_rate, m_cpu_rate) = best(model);
    let mut row = vec![
        p.name.clone(),
        model[0].0.to_string(),
        format!("{m_rate:.0}"),
        format!("{m_cpu_rate:.0}"),
    ];
    let m_cpu: Vec<f64> = model.iter().map(|r| r.2).collect();
    match kernel {
        Ok(kernel) => {
            let (l_rate, l_cpu_rate) = best(kernel);
            row.extend([
                kernel[0].0.to_string(),
                format!("{l_rate:.0}"),
                format!("{l_cpu_rate:.0}"),
                ratio(m_rate, l_rate),
                ratio(m_cpu_rate, l_cpu_rate),
            ]);
            let l_cpu: Vec<f64> = kernel.iter().map(|r| r.2).collect();
            let line = format!(
                "{}: M faults/CPU-s per run: model {}; live {}",
                p.name,
                mega(&m_cpu),
                mega(&l_cpu)
            );
            (row, line)
        }
        Err(why) => {
            row.extend([
                "-".into(),
                "not measured".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            println!("live kernel: {}: could not be measured: {why}", p.name);
            let line = format!("{}: M faults/CPU-s per run: model {}", p.name, mega(&m_cpu));
            (row, line)
        }
    }
}
