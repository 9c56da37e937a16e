//! `mmlab bench scale`: what a machine's size costs the model on this host.
//!
//! Each point runs in a child process of its own (this same binary, the
//! hidden `bench-point` command), so that its peak resident memory
//! (`VmHWM`) is its own and not the high-water mark of the points before it.
//! A point boots the page allocator of the machine alone (timed, with the
//! resident memory it adds), then runs a small page-churn experiment on the
//! machine through the whole engine (timed in wall-clock and CPU seconds).

use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::Instant;

/// One machine and workload to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Bytes of memory of the whole machine.
    pub memory_bytes: u64,
    /// Logical CPUs of the whole machine.
    pub cpus: u32,
    /// Page-churn tasks (bound round-robin to the CPUs).
    pub tasks: u32,
    /// Bursts per task.
    pub iterations: u32,
}

/// What one point measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PointResult {
    /// Wall-clock nanoseconds of `PageAlloc::new` for the machine.
    pub boot_ns: u64,
    /// Resident bytes the booted allocator added (`VmRSS` after − before).
    pub boot_rss_bytes: u64,
    /// Host bytes the allocator's boot state takes by the model's own count
    /// (`MemoryLayout::boot_host_bytes`: zeroed tables the host has not made
    /// resident yet included).
    pub boot_host_bytes: u64,
    /// Wall-clock nanoseconds of the experiment (boot, workload, report).
    pub run_ns: u64,
    /// CPU nanoseconds of the experiment (this process).
    pub run_cpu_ns: u64,
    /// Pages the workload allocated (`pgalloc_normal` + `pgalloc_dma32`).
    pub allocs: u64,
    /// Peak resident bytes of the whole process (`VmHWM`).
    pub peak_rss_bytes: u64,
}

/// CPUs per simulated node: machines of more CPUs get more nodes (a 1,024-CPU
/// machine is eight nodes of 128), memory split evenly between them.
const CPUS_PER_NODE: u32 = 128;

impl Point {
    fn nodes(&self) -> u32 {
        self.cpus.div_ceil(CPUS_PER_NODE).max(1)
    }

    /// The experiment of this point, as TOML: one kernel (linux-6.6 preset),
    /// one page-churn workload of `tasks` tasks.
    pub fn experiment_toml(&self) -> String {
        let nodes = self.nodes();
        format!(
            r#"name = "scale"
description = "bench scale point"
seed = 1
profile = "host-epyc-zen3"
[machine]
name = "scale"
nodes = {nodes}
cpus_per_node = {cpus}
memory_per_node = "{mib}MiB"
dma32 = "2GiB"
[[kernel]]
name = "base"
preset = "linux-6.6"
[[workload]]
name = "churn"
type = "page-churn"
params = {{ tasks = {tasks}, iterations = {iters}, burst = 200, think_ns = 1000 }}
[report]
metrics = ["runtime_ns", "pgalloc_normal"]
"#,
            cpus = self.cpus / nodes,
            mib = (self.memory_bytes / nodes as u64) >> 20,
            tasks = self.tasks,
            iters = self.iterations,
        )
    }

    /// Checks that the point makes a machine the model accepts.
    pub fn check(&self) -> Result<()> {
        let nodes = self.nodes() as u64;
        if self.cpus == 0 || !self.cpus.is_multiple_of(nodes as u32) {
            bail!(
                "{} CPUs: expected a positive multiple of {} nodes",
                self.cpus,
                nodes
            );
        }
        if !self.memory_bytes.is_multiple_of(nodes << 30) || self.memory_bytes < 4 << 30 {
            bail!(
                "{}: expected at least 4 GiB, a whole number of GiB per node ({nodes} nodes)",
                sim::machine::human_bytes(self.memory_bytes)
            );
        }
        Ok(())
    }
}

/// Reads a `kB` field of `/proc/self/status`, in bytes.
fn status_kib(field: &str) -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status").context("/proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|k| k << 10)
        .with_context(|| format!("/proc/self/status has no {field} line in kB"))
}

/// Runs one point in this process (the hidden `bench-point` command).
pub fn run_point(p: &Point) -> Result<PointResult> {
    use crate::api::{self, RunOptions};
    use mm::page_alloc::{PageAlloc, VmSysctl};
    p.check()?;
    let origin = std::path::Path::new("bench-scale.toml");
    let exp = crate::experiment::Experiment::parse(&p.experiment_toml(), origin)?;
    let layout = exp.machine.memory_layout();
    let rss0 = status_kib("VmRSS")?;
    let t = Instant::now();
    let pa = PageAlloc::new(&layout, VmSysctl::default(), mm::pcp::PcpPolicy::default());
    let boot_ns = t.elapsed().as_nanos() as u64;
    let boot_rss_bytes = status_kib("VmRSS")?.saturating_sub(rss0);
    drop(pa);
    let boot_host_bytes = layout.boot_host_bytes();
    let opts = RunOptions {
        jobs: Some(1),
        ..RunOptions::default()
    };
    let cpu0 = native::sys::process_cpu_ns();
    let t = Instant::now();
    let run = api::run_experiment(exp, &opts)?;
    let run_ns = t.elapsed().as_nanos() as u64;
    let run_cpu_ns = native::sys::process_cpu_ns() - cpu0;
    let allocs = run
        .results
        .iter()
        .map(|r| {
            use mm::vmstat::VmEvent;
            r.vmstat.get(VmEvent::PGALLOC_NORMAL) + r.vmstat.get(VmEvent::PGALLOC_DMA32)
        })
        .sum();
    Ok(PointResult {
        boot_ns,
        boot_rss_bytes,
        boot_host_bytes,
        run_ns,
        run_cpu_ns,
        allocs,
        peak_rss_bytes: status_kib("VmHWM")?,
    })
}

impl PointResult {
    /// The one line `bench-point` prints and the parent parses.
    pub fn to_line(&self) -> String {
        format!(
            "boot_ns={} boot_rss_bytes={} boot_host_bytes={} run_ns={} run_cpu_ns={} allocs={} peak_rss_bytes={}",
            self.boot_ns,
            self.boot_rss_bytes,
            self.boot_host_bytes,
            self.run_ns,
            self.run_cpu_ns,
            self.allocs,
            self.peak_rss_bytes
        )
    }

    fn from_line(line: &str) -> Result<PointResult> {
        let mut r = PointResult::default();
        for kv in line.split_whitespace() {
            let (k, v) = kv.split_once('=').context("expected key=value")?;
            let v: u64 = v.parse().with_context(|| format!("{k}: not a number"))?;
            match k {
                "boot_ns" => r.boot_ns = v,
                "boot_rss_bytes" => r.boot_rss_bytes = v,
                "boot_host_bytes" => r.boot_host_bytes = v,
                "run_ns" => r.run_ns = v,
                "run_cpu_ns" => r.run_cpu_ns = v,
                "allocs" => r.allocs = v,
                "peak_rss_bytes" => r.peak_rss_bytes = v,
                _ => bail!("unknown field {k}"),
            }
        }
        Ok(r)
    }
}

/// Runs `p` in a child process of this binary and reads its result.
fn measure(p: &Point) -> Result<PointResult> {
    let exe = std::env::current_exe().context("the path of this program")?;
    let out = Command::new(exe)
        .args(["bench-point", "--memory-bytes"])
        .arg(p.memory_bytes.to_string())
        .arg("--cpus")
        .arg(p.cpus.to_string())
        .arg("--tasks")
        .arg(p.tasks.to_string())
        .arg("--iterations")
        .arg(p.iterations.to_string())
        .output()
        .context("starting the bench-point child")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} with {} CPUs: the child failed ({}): {}",
            sim::machine::human_bytes(p.memory_bytes),
            p.cpus,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    PointResult::from_line(text.trim()).with_context(|| format!("the child printed {text:?}"))
}

/// The options of `mmlab bench scale`.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// Machine sizes of the boot table.
    pub memory: Vec<u64>,
    /// CPU counts of both tables.
    pub cpus: Vec<u32>,
    /// Machine size of the churn table.
    pub churn_memory: u64,
    /// Bursts per task of the churn table.
    pub churn_iterations: u32,
}

fn secs(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

fn millis(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// The boot table: every (memory, CPUs) pair with a fixed workload of 8
/// tasks × 20 bursts.
fn boot_table(o: &ScaleOptions, quiet: bool) -> Result<Vec<Vec<String>>> {
    let mut rows = vec![[
        "memory",
        "CPUs",
        "boot ms",
        "boot state",
        "boot RSS",
        "run s",
        "run CPU-s",
        "peak RSS",
    ]
    .map(String::from)
    .to_vec()];
    for &memory_bytes in &o.memory {
        for &cpus in &o.cpus {
            let p = Point {
                memory_bytes,
                cpus,
                tasks: 8,
                iterations: 20,
            };
            let h = sim::machine::human_bytes;
            if !quiet {
                eprintln!("bench scale: {} × {cpus} CPUs", h(memory_bytes));
            }
            let r = measure(&p)?;
            rows.push(vec![
                h(memory_bytes),
                cpus.to_string(),
                millis(r.boot_ns),
                h(r.boot_host_bytes),
                h(r.boot_rss_bytes),
                secs(r.run_ns),
                secs(r.run_cpu_ns),
                h(r.peak_rss_bytes),
            ]);
        }
    }
    Ok(rows)
}

/// The churn table: one task per simulated CPU, so the work grows with the
/// CPUs; its cost per allocation shows what the CPU count itself costs.
fn churn_table(o: &ScaleOptions, quiet: bool) -> Result<Vec<Vec<String>>> {
    let mut rows = vec![[
        "CPUs",
        "tasks",
        "allocations",
        "run s",
        "run CPU-s",
        "ns/alloc (CPU)",
        "peak RSS",
    ]
    .map(String::from)
    .to_vec()];
    for &cpus in &o.cpus {
        let p = Point {
            memory_bytes: o.churn_memory,
            cpus,
            tasks: cpus,
            iterations: o.churn_iterations,
        };
        if !quiet {
            eprintln!("bench scale: churn on {cpus} CPUs");
        }
        let r = measure(&p)?;
        rows.push(vec![
            cpus.to_string(),
            cpus.to_string(),
            r.allocs.to_string(),
            secs(r.run_ns),
            secs(r.run_cpu_ns),
            format!("{:.0}", r.run_cpu_ns as f64 / r.allocs.max(1) as f64),
            sim::machine::human_bytes(r.peak_rss_bytes),
        ]);
    }
    Ok(rows)
}

/// `mmlab bench scale`: the boot table and the churn table.
pub fn scale(o: &ScaleOptions, quiet: bool) -> Result<()> {
    for &m in &o.memory {
        for &c in &o.cpus {
            Point {
                memory_bytes: m,
                cpus: c,
                tasks: 8,
                iterations: 1,
            }
            .check()?;
        }
    }
    println!(
        "boot and a fixed small workload (page-churn: 8 tasks × 20 bursts of 200 blocks, linux-6.6 preset), \
         one child process per machine; boot = PageAlloc::new alone (boot state: the model's count of its \
         host bytes; boot RSS: what became resident), run = the whole experiment; peak RSS: the child's VmHWM"
    );
    print!("{}", native::table::format(&boot_table(o, quiet)?));
    println!(
        "\nPCP churn on {} (one page-churn task per CPU × {} bursts of 200 blocks)",
        sim::machine::human_bytes(o.churn_memory),
        o.churn_iterations
    );
    print!("{}", native::table::format(&churn_table(o, quiet)?));
    println!(
        "\nlargest machine the model accepts: {} of memory (52-bit physical addresses), {} CPUs",
        sim::machine::human_bytes(mm::page::MAX_PFN * mm::PAGE_SIZE),
        sim::machine::MAX_CPUS
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_line_round_trips() {
        let r = PointResult {
            boot_ns: 1,
            boot_rss_bytes: 2,
            boot_host_bytes: 7,
            run_ns: 3,
            run_cpu_ns: 4,
            allocs: 5,
            peak_rss_bytes: 6,
        };
        assert_eq!(PointResult::from_line(&r.to_line()).unwrap(), r);
        assert!(PointResult::from_line("boot_ns=x").is_err());
    }

    #[test]
    fn a_point_runs_in_this_process() {
        let p = Point {
            memory_bytes: 64 << 30,
            cpus: 8,
            tasks: 8,
            iterations: 2,
        };
        let r = run_point(&p).expect("runs");
        assert!(r.allocs >= 8 * 2 * 200, "{r:?}");
        assert!(r.peak_rss_bytes > 0 && r.boot_ns > 0);
    }

    #[test]
    fn nodes_split_cpus_and_memory() {
        let p = Point {
            memory_bytes: 16 << 40,
            cpus: 1024,
            tasks: 8,
            iterations: 1,
        };
        assert!(p.check().is_ok());
        let t = p.experiment_toml();
        assert!(
            t.contains("nodes = 8") && t.contains("cpus_per_node = 128"),
            "{t}"
        );
        assert!(t.contains("memory_per_node = \"2097152MiB\""), "{t}");
        let bad = Point { cpus: 1001, ..p };
        assert!(bad.check().is_err());
    }
}
