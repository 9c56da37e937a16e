//! `mmlab`: a laboratory for Linux memory-management policies.
//!
//! The only crate that reads files, parses arguments, prints or writes
//! reports.

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use mmlab::api::{self, RunOptions, Source};
use mmlab::experiment::{self, Experiment};
use mmlab::report::Format;
use mmlab::{bench, import, metrics, output, replay};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "mmlab",
    version,
    about = "A laboratory for Linux memory-management policies",
    long_about = "mmlab runs a faithful, deterministic model of the Linux kernel's memory-management \
hot paths on virtual time, so that you can ask what a policy would do to a workload and get the \
answer as the table you would post to linux-mm.",
    after_help = "Examples:\n  mmlab reproduce                       run every built-in experiment\n  \
mmlab reproduce page-churn            run one\n  mmlab run experiments/page-churn.toml --format markdown\n  \
mmlab run my.toml --out results.json --seed 7\n  mmlab list                            knobs, presets, workloads, metrics, profiles"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct OutputArgs {
    /// What to print: tables (text, markdown) or the results document (json: one
    /// document; jsonl: one experiment a line as each finishes; csv: tidy, one row
    /// per metric; csv-wide: one row per run).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also write the results document (JSON) to FILE, atomically.
    #[arg(short = 'o', long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Seed of every run (default: the experiment's).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run every (kernel, workload) once per seed: a list such as 1,2,3 or 1-5; the
    /// tables show means, the document every run.
    #[arg(long, value_name = "LIST", value_parser = parse_seeds)]
    seeds: Option<Vec<u64>>,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Simulations to run at once (default: the host's cores).
    #[arg(long, short)]
    jobs: Option<usize>,
}

/// Parses `1,2,3`, `1-5` or a mix (`1,4-6`).
fn parse_seeds(s: &str) -> std::result::Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("\"{t}\" is not a seed; expected a list such as 1,2,3 or 1-5"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a || b - a >= 1000 {
                    return Err(format!(
                        "\"{part}\": expected a range low-high of at most 1000 seeds"
                    ));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(d) = out.iter().find(|s| !seen.insert(**s)) {
        return Err(format!("seed {d} is listed twice"));
    }
    Ok(out)
}

impl OutputArgs {
    fn run_options(&self) -> RunOptions {
        RunOptions {
            seeds: self
                .seeds
                .clone()
                .or_else(|| self.seed.map(|s| vec![s]))
                .unwrap_or_default(),
            jobs: self.jobs,
            progress: !self.quiet,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the built-in experiments (all, or the one named) and print their tables.
    Reproduce {
        /// A built-in experiment's name.
        name: Option<String>,
        /// With the seeds' headline figures, each with its band: the range it
        /// takes when the estimated inputs of its profile (costs with a
        /// `band`) move across their ranges, each alone and a
        /// Latin-hypercube sample of all together (several minutes on 2
        /// cores).
        #[arg(long)]
        bands: bool,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Run an experiment file: machine × kernels × workloads → tables.
    Run {
        /// The experiment (TOML).
        file: PathBuf,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Print the allocator's boot state for each kernel of an experiment, as /proc/zoneinfo.
    Zoneinfo {
        /// The experiment (TOML).
        file: PathBuf,
    },
    /// List knobs, presets, workloads, metrics, profiles and built-in experiments.
    List,
    /// Measure this host: real huge-page copies and the live kernel's fault counts.
    Native {
        #[command(subcommand)]
        what: NativeCmd,
    },
    /// Record a real workload on the live kernel into an mmlab trace (needs root and
    /// tracefs; leaves tracing as it found it, also on Ctrl-C).
    #[command(
        after_help = "The workload runs in a process group of its own (it cannot read from the \
terminal). The first Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT) is passed on to it and the trace is \
completed; a second one kills it; a third ends mmlab. Every change to the system is undone on \
every way out, and after a SIGKILL by the next mmlab command.\n\n\
Exit status: the workload's (its exit code, or 128 + the signal that killed it), or 1 if the \
recording failed.\n\n\
Example:\n  mmlab record -o build.mmtrace -- make -j2"
    )]
    Record {
        /// The trace file to write (mode 0600).
        #[arg(short, long)]
        output: PathBuf,
        /// Mount tracefs at /sys/kernel/tracing if it is not mounted (and unmount it after).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        mount_tracefs: bool,
        /// Also record every other process's page allocator events (kmem:*), which go
        /// through the same per-CPU lists: needed to validate zone-locked allocations and
        /// PCP drains on a machine that is not idle. The trace grows with the machine's
        /// allocator traffic.
        #[arg(long)]
        kmem_system_wide: bool,
        /// The command and its arguments.
        #[arg(required = true, last = true)]
        cmd: Vec<String>,
    },
    /// Import a perf.data file recorded with the kmem/exceptions/syscalls/sched tracepoints,
    /// with the machine's /proc/zoneinfo (and /proc/vmstat, THP knobs) beside it.
    #[command(after_help = import::AFTER_HELP)]
    Import(import::ImportArgs),
    /// Summarize an mmlab trace: header, events per kind, lost events.
    TraceStats {
        /// The trace.
        file: PathBuf,
    },
    /// Replay a trace's page-allocator stream (replay mode a) on the model: one task per
    /// recorded CPU; kernels from --experiment or the recorded configuration.
    #[command(
        after_help = "Example:\n  mmlab replay build.mmtrace --experiment experiments/page-churn.toml"
    )]
    Replay {
        /// The trace.
        file: PathBuf,
        #[command(flatten)]
        args: ReplayArgs,
    },
    /// Replay a trace under the recorded configuration and compare the recorded
    /// counters (zone-locked allocations, PCP drains, allocations, frees) with the model's.
    Validate {
        /// The trace.
        file: PathBuf,
        /// Seed of the run.
        #[arg(long)]
        seed: Option<u64>,
        /// Start with the PCP lists as recorded: their pages and, under auto-tuning, their
        /// high (the kernel's state when the command started). `--warm-pcp false`: empty
        /// lists at their initial high.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        warm_pcp: bool,
        /// Which replay: alloc (mode a), aspace (mode b), or both (what the trace has events for).
        #[arg(long, value_enum, default_value_t = replay::ReplayMode::Both)]
        mode: replay::ReplayMode,
    },
    /// Measure this host's kernel costs (micro-benchmarks and live fault patterns), fit
    /// the model's costs to them, write a cost profile, and check the calibrated model's
    /// time against the live kernel on patterns the fit did not use. Needs root for the
    /// THP and PCP knobs (restored after every run); says per measurement what it could
    /// not measure and why.
    #[command(after_help = "Examples:\n  mmlab calibrate -o my-host.toml\n  \
mmlab calibrate --name host-epyc-zen3 -o profiles/host-epyc-zen3.toml\n  \
mmlab calibrate --quick                 a smoke run (well under a minute), no file")]
    Calibrate {
        /// Write the calibrated profile to FILE (atomically).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The profile's name.
        #[arg(long, default_value = "calibrated")]
        name: String,
        /// The built-in profile whose figures stand where nothing can be measured.
        #[arg(long, default_value = "host-epyc-zen3")]
        base: String,
        /// Interleaved rounds of every measurement (medians and spreads over them).
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(2..))]
        rounds: u32,
        /// Size of the fit's fault patterns, in MiB.
        #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(8..))]
        fit_mib: u32,
        /// Size of the closing check's fault patterns, in MiB.
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(8..))]
        check_mib: u32,
        /// Runs of each check pattern (the median counts).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
        check_runs: u32,
        /// A short run for CI: 2 rounds, 16 MiB fits, 64 MiB checks, one run each, and the
        /// model on a machine just large enough for each pattern (not the host's memory).
        #[arg(long)]
        quick: bool,
        /// No progress on stderr.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Measure the model's speed: PCP fast path, cache model, faults beside the
    /// live kernel's; `scale` (machine size) and `replay` (mode b) on request.
    ///
    /// Examples:
    ///   mmlab bench pcp
    ///   mmlab bench faults --fault-runs 5
    ///   mmlab bench scale --scale-memory 64GiB,16TiB --scale-cpus 8,1024
    ///   mmlab bench replay --trace my.mmtrace
    #[command(verbatim_doc_comment)]
    Bench {
        /// Only this benchmark (default: all of them).
        #[arg(value_enum)]
        what: Option<BenchWhat>,
        /// Allocation+free pairs to time.
        #[arg(long, default_value_t = 20_000_000)]
        ops: u64,
        /// Cache-model line accesses to time per configuration.
        #[arg(long, default_value_t = 20_000_000)]
        cache_lines: u64,
        /// Size of the fault patterns, in MiB.
        #[arg(long, default_value_t = 1024)]
        fault_mib: u64,
        /// Time only the model's fault path, not the live kernel's.
        #[arg(long)]
        no_live: bool,
        /// Runs of each fault pattern on each side (the best is reported).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
        fault_runs: u32,
        /// Machine sizes of the scale benchmark's boot table.
        #[arg(long, value_delimiter = ',', value_parser = parse_size_arg,
              default_value = "64GiB,1TiB,16TiB,64TiB,1PiB,4PiB")]
        scale_memory: Vec<u64>,
        /// CPU counts of the scale benchmark's tables.
        #[arg(long, value_delimiter = ',', default_value = "8,64,256,1024")]
        scale_cpus: Vec<u32>,
        /// Machine size of the scale benchmark's PCP-churn table.
        #[arg(long, value_parser = parse_size_arg, default_value = "1TiB")]
        churn_memory: u64,
        /// Bursts per task of the scale benchmark's PCP-churn table.
        #[arg(long, default_value_t = 20)]
        churn_iterations: u32,
        /// Recordings for the replay benchmark (default: the corpus recordings
        /// in scripts/corpus/recordings/). Repeat for several.
        #[arg(long = "trace", value_name = "T.mmtrace")]
        traces: Vec<PathBuf>,
        /// Runs of each recording in the replay benchmark (the best is reported).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
        replay_runs: u32,
    },
    /// One point of `bench scale`, run in a child process of its own.
    #[command(hide = true)]
    BenchPoint {
        #[arg(long)]
        memory_bytes: u64,
        #[arg(long)]
        cpus: u32,
        #[arg(long)]
        tasks: u32,
        #[arg(long)]
        iterations: u32,
    },
}

/// The benchmarks of `mmlab bench`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BenchWhat {
    /// The PCP fast path and the memory per simulated page.
    Pcp,
    /// The cache model's line accesses per second.
    Cache,
    /// The model's anonymous faults per host second beside the live kernel's.
    Faults,
    /// Boot time and resident memory of machines of 64 GiB to 4 PiB and 8 to
    /// 1,024 CPUs, and PCP churn against the CPU count (not run by default).
    Scale,
    /// Replay mode (b) events per second on recordings (not run by default).
    Replay,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Kernels (its [[kernel]] list), machine and profile from this experiment; its
    /// workloads are ignored.
    #[arg(long, value_name = "E.toml")]
    experiment: Option<PathBuf>,
    /// Output format of the table.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also write the JSON results document to FILE (atomically).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Seed of every run (default: the experiment's).
    #[arg(long)]
    seed: Option<u64>,
    /// No timing line on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Start with the PCP lists as recorded: their pages and, under auto-tuning, their
    /// high (clamped to each kernel's bounds). Default: empty lists.
    #[arg(long)]
    warm_pcp: bool,
    /// Which replay: alloc (mode a), aspace (mode b), or both (what the trace has events for).
    #[arg(long, value_enum, default_value_t = replay::ReplayMode::Both)]
    mode: replay::ReplayMode,
}

#[derive(Subcommand)]
enum NativeCmd {
    /// 2 MiB copies sub-page by sub-page in sequential, target-last (process_huge_page)
    /// and neighbourhood order, then the read latency of the target sub-page,
    /// with and without a second thread streaming through the LLC.
    CopyOrder {
        /// Trials per (order, pressure) cell.
        #[arg(long, default_value_t = 200)]
        trials: usize,
        /// Seed of the random targets.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How a 4 KiB sub-page is copied: rep-movsq (the kernel's copy_page) or memcpy.
        #[arg(long, default_value = "rep-movsq")]
        method: String,
        /// Copies of each order per trial, from cold caches; the fastest counts.
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
    /// Copies of 2 MiB chunks and of a 256 MiB buffer with 1..nproc pinned threads and
    /// five copy methods; names the host's best copy bandwidth, the best configuration
    /// for huge-page copies and whether it reaches 90 % of the best.
    ParallelCopy,
    /// The live kernel's fault counts for the reference 1 GiB patterns (needs root
    /// and writable THP knobs; restores every knob it changes).
    Faults,
}

fn main() {
    // Before anything can change the system: SIGINT, SIGTERM, SIGHUP and
    // SIGQUIT undo every journalled change and end mmlab by the same signal.
    if let Err(e) = host::signals::install() {
        eprintln!("mmlab: warning: cannot handle termination signals: {e}");
    }
    recover_stale_state();
    match real_main() {
        Ok(code) => std::process::exit(code),
        Err(e) if output::is_broken_pipe(&e) => {
            // The reader went away (`mmlab ... | head`): not an error.
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("mmlab: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Restores what an mmlab process that was killed (SIGKILL, a crash) left
/// changed: knobs, hugetlb pools, tracefs instances and mounts, a workload's
/// process group, temporary files (`host::journal`). Cheap when there is
/// nothing: two directory listings; the live-kernel lock is taken only when
/// something is found, and taking it does the restoring and reports it.
fn recover_stale_state() {
    let Some(dir) = host::journal::default_dir() else {
        return;
    };
    let (journals, instances) = host::journal::find_stale(&dir);
    if journals.is_empty() && instances.is_empty() {
        return;
    }
    if let Err(e) = host::lock::LiveLock::acquire() {
        eprintln!("mmlab: warning: cannot take the live-kernel lock to restore state left by a killed mmlab: {e}");
    }
}

/// What `run_cmd` adds after the experiments.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Headlines {
    /// Nothing (`mmlab run`).
    None,
    /// The seeds' headline figures of the experiments that ran, beside the
    /// model's (`mmlab reproduce`).
    Central,
    /// The same with their bands (`mmlab reproduce --bands`).
    Bands,
}

/// Runs the experiments of `source`, printing each one's tables (or its JSON
/// Lines record) as it finishes, then the headlines, then the whole document
/// for the other data formats, and writes `--out`.
fn run_cmd(source: Source, out: &OutputArgs, headlines: Headlines) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    if out.format == Format::Jsonl {
        let head = mmlab::results::ResultsDoc::new(Vec::new()).header_json();
        writeln!(stdout, "{head}")?;
    }
    let exps = api::load(source)?;
    check_out(out.out.as_deref())?;
    let mut heads = Vec::new();
    let mut doc = api::run_loaded(exps, &out.run_options(), |run| {
        if headlines != Headlines::None {
            heads.extend(mmlab::bands::central(&run.experiment.name, &run.results));
        }
        match out.format {
            Format::Text | Format::Markdown => {
                stdout.write_all(run.tables(out.format).as_bytes())?
            }
            Format::Jsonl => writeln!(
                stdout,
                "{}",
                mmlab::results::ResultsDoc::experiment_record(&run.to_results())
            )?,
            _ => {}
        }
        stdout.flush()?;
        Ok(())
    })?;
    if headlines == Headlines::Bands {
        let opts = out.run_options();
        let jobs = opts
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        mmlab::bands::fill_bands(&mut heads, jobs, !opts.progress)?;
    }
    doc.headlines = heads;
    if !doc.headlines.is_empty() {
        match out.format {
            Format::Text | Format::Markdown => {
                writeln!(stdout, "{}", mmlab::bands::table(&doc.headlines))?
            }
            Format::Jsonl => writeln!(stdout, "{}", doc.headlines_record())?,
            _ => {}
        }
    }
    if matches!(out.format, Format::Json | Format::Csv | Format::CsvWide) {
        output::write_document(&doc, out.format, &mut stdout)?;
    }
    stdout.flush()?;
    if let Some(path) = &out.out {
        output::write_results(path, &doc)?;
    }
    Ok(())
}

/// Runs the command; `Ok` holds the exit status (0, or `mmlab record`'s
/// workload's status).
fn real_main() -> Result<i32> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Reproduce { name, bands, out } => {
            let source = match &name {
                Some(n) => Source::Builtin(n),
                None => Source::AllBuiltin,
            };
            let h = if bands {
                Headlines::Bands
            } else {
                Headlines::Central
            };
            run_cmd(source, &out, h)?;
        }
        Cmd::Run { file, out } => run_cmd(Source::Path(&file), &out, Headlines::None)?,
        Cmd::Zoneinfo { file } => {
            let exp = Experiment::load(&file)?;
            for k in &exp.kernels {
                let pa = mm::page_alloc::PageAlloc::new(
                    &exp.machine.memory_layout(),
                    k.config.sysctl,
                    k.config.pcp,
                );
                println!("# kernel {} ({})", k.name, k.config.preset.name());
                print!("{}", mm::vmstat::zoneinfo(&pa));
            }
        }
        Cmd::List => print!("{}", list_text()),
        Cmd::Bench {
            what,
            ops,
            cache_lines,
            fault_mib,
            no_live,
            fault_runs,
            scale_memory,
            scale_cpus,
            churn_memory,
            churn_iterations,
            traces,
            replay_runs,
        } => {
            if what.is_none_or(|w| w == BenchWhat::Pcp) {
                bench::pcp(ops);
            }
            if what.is_none_or(|w| w == BenchWhat::Cache) {
                bench::cache(cache_lines);
            }
            if what.is_none_or(|w| w == BenchWhat::Faults) {
                bench::faults(fault_mib, !no_live, fault_runs)?;
            }
            if what == Some(BenchWhat::Scale) {
                let o = bench::scale::ScaleOptions {
                    memory: scale_memory,
                    cpus: scale_cpus,
                    churn_memory,
                    churn_iterations,
                };
                bench::scale::scale(&o, false)?;
            }
            if what == Some(BenchWhat::Replay) {
                bench::replay::replay(&traces, replay_runs)?;
            }
        }
        Cmd::BenchPoint {
            memory_bytes,
            cpus,
            tasks,
            iterations,
        } => {
            let p = bench::scale::Point {
                memory_bytes,
                cpus,
                tasks,
                iterations,
            };
            println!("{}", bench::scale::run_point(&p)?.to_line());
        }
        Cmd::Native { what } => native_cmd(what)?,
        Cmd::Calibrate {
            output,
            name,
            base,
            rounds,
            fit_mib,
            check_mib,
            check_runs,
            quick,
            quiet,
        } => {
            let base = experiment::BUILTIN_PROFILES
                .iter()
                .find(|(n, _)| *n == base)
                .ok_or_else(|| anyhow::anyhow!("no built-in profile \"{base}\""))?;
            let (rounds, fit_mib, check_mib, check_reps) = if quick {
                (2, 16, 64, 1)
            } else {
                (rounds, fit_mib, check_mib, check_runs)
            };
            mmlab::calibrate::run(&mmlab::calibrate::Opts {
                rounds: rounds as usize,
                fit_mib: fit_mib as usize,
                check_mib: check_mib as usize,
                check_reps: check_reps as usize,
                base: experiment::parse_profile(base.1, base.0)?,
                name,
                out: output,
                quiet,
                host_sized_model: !quick,
            })?;
        }
        Cmd::Record {
            output,
            mount_tracefs,
            kmem_system_wide,
            cmd,
        } => {
            let opts = trace::record::RecordOptions {
                mount_tracefs,
                kmem_system_wide,
                ..Default::default()
            };
            // A tracefs instance is system-wide state: one user at a time.
            let _lock = host::lock::LiveLock::acquire()?;
            let sum = trace::record::record(&output, &cmd[0], &cmd[1..], &opts)?;
            eprintln!(
                "mmlab record: {} events ({} lost, {} unpaired syscalls) in {} bytes; command {} after {:.2}s",
                sum.nr_events,
                sum.nr_lost_events,
                sum.nr_unpaired_syscalls,
                sum.nr_trace_bytes,
                sum.exit_status,
                sum.command_wall.as_secs_f64()
            );
            for (k, n) in &sum.nr_events_by_kind {
                eprintln!("  {k:<28} {n}");
            }
            return Ok(sum.shell_status());
        }
        Cmd::Import(args) => import::import_cmd(&args)?,
        Cmd::TraceStats { file } => trace_stats(&file)?,
        Cmd::Replay { file, args } => replay_cmd(&file, &args)?,
        Cmd::Validate {
            file,
            seed,
            warm_pcp,
            mode,
        } => replay::validate_cmd(&file, seed, warm_pcp, mode)?,
    }
    Ok(0)
}

/// Fails now, before any work, if `--out` could not be written at the end.
fn check_out(path: Option<&Path>) -> Result<()> {
    if let Some(p) = path {
        host::output::check_writable(p, host::Mode::Shared)?;
    }
    Ok(())
}

fn trace_stats(path: &Path) -> Result<()> {
    let mut r = trace::TraceReader::open(path)?;
    let h = r.header().clone();
    println!(
        "trace {}: kernel {}, {} CPUs, {} zones",
        path.display(),
        h.kernel_release.as_deref().unwrap_or("unknown"),
        h.machine.nr_cpus,
        h.machine.zones.len()
    );
    let mut by_kind: std::collections::BTreeMap<&'static str, u64> =
        std::collections::BTreeMap::new();
    let mut err = None;
    for ev in r.by_ref() {
        match ev {
            Ok(e) => *by_kind.entry(e.kind.name()).or_default() += 1,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    for (k, n) in &by_kind {
        println!("  {k:<28} {n}");
    }
    if let Some(t) = r.trailer() {
        println!(
            "  lost events: {}, unpaired syscalls: {}",
            t.nr_lost_events, t.nr_unpaired_syscalls
        );
    }
    if let Some(e) = err {
        bail!(
            "{}: the trace is damaged after {} events: {e}",
            path.display(),
            r.nr_events_read()
        );
    }
    Ok(())
}

fn replay_cmd(file: &Path, a: &ReplayArgs) -> Result<()> {
    check_out(a.out.as_deref())?;
    replay::replay_cmd(
        file,
        a.experiment.as_deref(),
        a.format,
        a.out.as_deref(),
        a.seed,
        a.quiet,
        a.warm_pcp,
        a.mode,
    )
}

/// A size argument (`64GiB`, `4PiB`).
fn parse_size_arg(s: &str) -> std::result::Result<u64, String> {
    experiment::parse_size(s)
}

fn native_cmd(what: NativeCmd) -> Result<()> {
    let table = match what {
        NativeCmd::CopyOrder {
            trials,
            seed,
            method,
            repeats,
        } => {
            let method = native::copy_order::CopyMethod::from_name(&method).ok_or_else(|| {
                anyhow::anyhow!("unknown copy method \"{method}\"; valid: rep-movsq, memcpy")
            })?;
            let cfg = native::copy_order::Config {
                nr_trials: trials,
                seed,
                method,
                repeats,
                ..Default::default()
            };
            native::copy_order::run(&cfg)?.table()
        }
        NativeCmd::ParallelCopy => {
            native::parallel_copy::run(&native::parallel_copy::Config::default())?.table()
        }
        NativeCmd::Faults => {
            let mut out = String::new();
            for (p, expected) in native::faults::reference_patterns() {
                eprintln!("running {} ...", p.name);
                let r = native::faults::run(&p)?;
                out += &r.table();
                out += &format!(
                    "expected (LIVE-KERNEL.md): {expected} faults; measured {}\n\n",
                    r.touch.nr_minflt
                );
            }
            out
        }
    };
    print!("{table}");
    Ok(())
}

fn list_text() -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "Kernel presets:");
    for p in mm::knobs::Preset::ALL {
        let _ = writeln!(s, "  {}", p.name());
    }
    let _ = writeln!(s, "\nKnobs (set in [kernel.knobs] by their kernel names):");
    for k in mm::knobs::all_knobs() {
        let _ = writeln!(
            s,
            "  {:<36} {}\n  {:<36} accepts {}",
            k.name, k.help, "", k.accepts
        );
    }
    let _ = writeln!(s, "\nWorkloads:");
    for w in workloads::WORKLOADS {
        let _ = writeln!(s, "  {:<14} {}", w.name, w.summary);
        for p in w.params {
            let _ = writeln!(
                s,
                "      {:<18} (default {}; {}) {}",
                p.name,
                p.default_text(),
                p.accepts_text(),
                p.help
            );
        }
    }
    let _ = writeln!(
        s,
        "\nMetrics (report.metrics; any /proc/vmstat-named counter below also works):"
    );
    for m in metrics::METRICS {
        let _ = writeln!(s, "  {:<24} [{}] {}", m.name, m.unit, m.help);
    }
    let names: Vec<_> = mm::vmstat::VmEvent::ALL.iter().map(|e| e.name()).collect();
    let _ = writeln!(s, "  counters: {}", names.join(", "));
    let _ = writeln!(s, "\nCost profiles:");
    for (n, _) in experiment::BUILTIN_PROFILES {
        let _ = writeln!(s, "  {n}");
    }
    let _ = writeln!(s, "\nBuilt-in experiments (mmlab reproduce NAME):");
    for n in api::builtin_names() {
        let _ = writeln!(s, "  {n}");
    }
    s
}
