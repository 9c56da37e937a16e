//! The command line of `mmlab`: every subcommand and flag, defined once
//! with clap. The binary dispatches on it; `mmlab completions` and
//! `mmlab man` generate shell completions and man pages from it; the tests
//! check that every subcommand's help has an example.
//!
//! # The same flags for the same things
//!
//! | flag | meaning wherever it appears |
//! | --- | --- |
//! | `-o, --out FILE` | the command's output file, written atomically. For `run`, `reproduce` and `replay` it is the results document, in the form its extension names (`.json`, `.jsonl`, `.csv`, `.html`; JSON otherwise) while the tables go to stdout; for every other command it takes the place of stdout |
//! | `--format F` | what is printed: `text` everywhere, `json` for anything a program reads, plus the forms a command has (`markdown`, `jsonl`, `csv`, `csv-wide`, `html`) |
//! | `-q, --quiet` | nothing on stderr but errors and warnings |
//! | `--seed N` | the seed of every simulation (default: the experiment's) |
//! | `-j, --jobs N` | simulations at once |
//! | `--warm-pcp[=BOOL]` | start the PCP lists as recorded (`replay`: off by default, `validate`: on) |
//! | `--timeline FILE` | a Perfetto timeline of what each simulated CPU did |

use crate::api::RunOptions;
use crate::replay::{ReplayMode, VmstatWork};
use crate::report::Format;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

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
mmlab run my.toml -o results.json --seeds 1-5\n  mmlab compare old.json new.json --format markdown\n  \
mmlab report results.json -o report.html\n  mmlab list                            knobs, presets, workloads, metrics, profiles"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The flags of the commands that run experiments.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// What to print: tables (text, markdown) or the results document (json: one
    /// document; jsonl: one experiment a line as each finishes; csv: tidy, one row per
    /// metric; csv-wide: one row per run).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write the results document to FILE, atomically, in the form its extension
    /// names: .json (default), .jsonl, .csv (tidy), .html (the report).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Seed of every run (default: the experiment's).
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// Run every (kernel, workload) once per seed: a list such as 1,2,3 or 1-5; the
    /// tables show means, the document every run (for `mmlab compare`'s spread).
    #[arg(long, value_name = "LIST", value_parser = parse_seeds)]
    pub seeds: Option<Seeds>,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Simulations to run at once (default: the host's cores).
    #[arg(long, short, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Also write the HTML report and the results document (report.html, results.json)
    /// into directory DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub timeline: TimelineArgs,
}

/// `--timeline FILE` and its bounds.
#[derive(clap::Args, Clone, Debug)]
pub struct TimelineArgs {
    /// Write a Perfetto trace (open it at ui.perfetto.dev) of what each simulated CPU
    /// did: operations, faults, lock waits and holds, PCP refills and drains, page
    /// clears and copies; PCP count/high and free pages as counters.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Only this span of virtual time, FROM..TO (each with a unit: ns, us, ms, s;
    /// ms if none; either end may be left out: 5ms.., ..1s).
    #[arg(long, value_name = "FROM..TO", value_parser = parse_window, requires = "timeline")]
    pub timeline_window: Option<(u64, u64)>,
    /// At most this many timeline records per experiment, all its runs together
    /// (operations, lock holds, copies, counter changes); recording stops there
    /// and the timeline says so.
    #[arg(long, value_name = "N", default_value_t = 200_000, requires = "timeline",
          value_parser = clap::value_parser!(u64).range(1000..))]
    pub timeline_max: u64,
}

impl TimelineArgs {
    /// The engine's options, if a timeline was asked for.
    pub fn options(&self) -> Option<sim::TimelineOptions> {
        self.timeline.as_ref()?;
        let (from, to) = self.timeline_window.unwrap_or((0, u64::MAX));
        Some(sim::TimelineOptions {
            window: (mm::SimTime(from), mm::SimTime(to)),
            max_records: self.timeline_max as usize,
        })
    }
}

/// A duration of virtual time in ns: `250us`, `1.5ms`, `2s`, `100` (ms).
fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("\"{s}\": expected a number with ns, us, ms or s"))?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "" | "ms" => 1e6,
        "s" => 1e9,
        u => {
            return Err(format!(
                "\"{s}\": unknown unit \"{u}\"; expected ns, us, ms or s"
            ))
        }
    };
    Ok((v * scale).round() as u64)
}

/// Parses `FROM..TO` (see `--timeline-window`).
pub fn parse_window(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("\"{s}\": expected FROM..TO, such as 5ms..10ms"))?;
    let from = if a.trim().is_empty() {
        0
    } else {
        parse_duration(a)?
    };
    let to = if b.trim().is_empty() {
        u64::MAX
    } else {
        parse_duration(b)?
    };
    if to <= from {
        return Err(format!("\"{s}\": the window ends before it starts"));
    }
    Ok((from, to))
}

impl From<&RunArgs> for RunOptions {
    fn from(a: &RunArgs) -> RunOptions {
        RunOptions {
            seeds: a
                .seeds
                .clone()
                .map(|s| s.0)
                .or_else(|| a.seed.map(|s| vec![s]))
                .unwrap_or_default(),
            jobs: a.jobs.map(|j| j as usize),
            progress: !a.quiet,
            timeline: a.timeline.options(),
        }
    }
}

/// The seeds of `--seeds`, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seeds(pub Vec<u64>);

/// Parses `1,2,3`, `1-5` or a mix (`1,4-6`).
pub fn parse_seeds(s: &str) -> Result<Seeds, String> {
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
    Ok(Seeds(out))
}

/// Text for people, JSON for programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InfoFormat {
    Text,
    Json,
}

/// The forms of `mmlab compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    /// Aligned tables.
    Text,
    /// Markdown tables, ready for a mail to linux-mm.
    Markdown,
    /// Every compared row as JSON.
    Json,
    /// Every compared row and document as tidy CSV.
    Csv,
}

/// The forms of `mmlab report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// One self-contained HTML file with charts.
    Html,
    /// The tables as `mmlab run` prints them.
    Text,
    Markdown,
    Json,
    Jsonl,
    Csv,
    CsvWide,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run the built-in experiments (all, or the one named and its companions) and
    /// print their tables.
    #[command(
        after_help = "Examples:\n  mmlab reproduce\n  mmlab reproduce pcp-autotune --format markdown\n  \
mmlab reproduce --quiet -o all.json --report out/"
    )]
    Reproduce {
        /// A built-in experiment's name (`mmlab list` lists them).
        name: Option<String>,
        /// With the seeds' headline figures, each with its band: the range it
        /// takes when the estimated inputs of its profile (costs with a
        /// `band`) move across their ranges, each alone and a
        /// Latin-hypercube sample of all together, and at 3 more seeds
        /// (several minutes on 2 cores).
        #[arg(long)]
        bands: bool,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run an experiment file: machine × kernels × workloads → tables.
    #[command(after_help = "Examples:\n  mmlab run experiments/page-churn.toml\n  \
mmlab run my.toml --seeds 1-5 -o my.json\n  mmlab run my.toml --format csv > my.csv")]
    Run {
        /// The experiment (TOML).
        file: PathBuf,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Compare results documents: each (experiment, workload, kernel, metric) side by
    /// side with the change from the first, flagged where it is beyond the runs' spread.
    #[command(after_help = "Examples:\n  mmlab compare before.json after.json\n  \
mmlab compare base.json a.json b.json --metrics all --changed --format markdown")]
    Compare {
        /// Results documents (JSON or JSON Lines); the first is the base.
        #[arg(required = true, num_args = 2..)]
        files: Vec<PathBuf>,
        /// Which metrics: report (each experiment's table metrics), all (every metric
        /// and counter), or a comma-separated list of names.
        #[arg(long, default_value = "report")]
        metrics: String,
        /// Only the rows where some value changed.
        #[arg(long)]
        changed: bool,
        /// Output form.
        #[arg(long, value_enum, default_value_t = CompareFormat::Text)]
        format: CompareFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Turn a results document into a self-contained HTML report with charts (or
    /// into any other output form).
    #[command(
        after_help = "Examples:\n  mmlab report results.json -o report.html\n  \
mmlab report results.json --format markdown\n  mmlab report results.json --format csv -o results.csv"
    )]
    Report {
        /// A results document (JSON or JSON Lines).
        file: PathBuf,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Output form.
        #[arg(long, value_enum, default_value_t = ReportFormat::Html)]
        format: ReportFormat,
    },
    /// Print the allocator's boot state for each kernel of an experiment, as /proc/zoneinfo.
    #[command(
        after_help = "Examples:\n  mmlab zoneinfo experiments/page-churn.toml | less\n  \
mmlab zoneinfo experiments/page-churn.toml --format json"
    )]
    Zoneinfo {
        /// The experiment (TOML).
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = InfoFormat::Text)]
        format: InfoFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// List knobs, presets, workloads, metrics, profiles and built-in experiments.
    #[command(after_help = "Examples:\n  mmlab list\n  mmlab list --format json")]
    List {
        #[arg(long, value_enum, default_value_t = InfoFormat::Text)]
        format: InfoFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Measure this host: real huge-page copies and the live kernel's fault counts.
    #[command(after_help = "Examples:\n  mmlab native copy-order --trials 50\n  \
mmlab native parallel-copy --format json -o copy.json\n  sudo mmlab native faults")]
    Native {
        #[command(subcommand)]
        what: NativeCmd,
        /// Text tables or JSON.
        #[arg(long, value_enum, default_value_t = InfoFormat::Text, global = true)]
        format: InfoFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE", global = true)]
        out: Option<PathBuf>,
    },
    /// Record a real workload on the live kernel into an mmlab trace (needs root and
    /// tracefs; leaves tracing as it found it, also on Ctrl-C).
    #[command(
        after_help = "Examples:\n  mmlab record -o build.mmtrace -- make -j2\n  \
mmlab record --kmem-system-wide -o all.mmtrace -- ./bench"
    )]
    Record {
        /// The trace file to write (mode 0600, atomically).
        #[arg(
            short = 'o',
            long = "out",
            visible_alias = "output",
            value_name = "FILE"
        )]
        out: PathBuf,
        /// Mount tracefs at /sys/kernel/tracing if it is not mounted (and unmount it after).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        mount_tracefs: bool,
        /// Also record every other process's page allocator events (kmem:*), which go
        /// through the same per-CPU lists: needed to validate zone-locked allocations and
        /// PCP drains on a machine that is not idle. The trace grows with the machine's
        /// allocator traffic.
        #[arg(long)]
        kmem_system_wide: bool,
        /// No summary on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// The command and its arguments.
        #[arg(required = true, last = true)]
        cmd: Vec<String>,
    },
    /// Import a perf.data file recorded with the kmem/exceptions/syscalls/sched tracepoints,
    /// with the machine's /proc/zoneinfo (and /proc/vmstat, THP knobs) beside it.
    #[command(after_help = crate::import::AFTER_HELP)]
    Import(crate::import::ImportArgs),
    /// Measure this host's kernel costs (micro-benchmarks and live fault patterns), fit
    /// the model's costs to them, write a cost profile, and check the calibrated model's
    /// time against the live kernel on patterns the fit did not use. Needs root for the
    /// THP and PCP knobs (restored after every run); says per measurement what it could
    /// not measure and why.
    #[command(after_help = "Examples:\n  mmlab calibrate -o my-host.toml\n  \
mmlab calibrate --name host-epyc-zen3 -o profiles/host-epyc-zen3.toml\n  \
mmlab calibrate --quick                 a smoke run (well under a minute), no file\n  \
mmlab calibrate --compare run1.toml run2.toml   do two calibrations agree?")]
    Calibrate {
        /// Compare two calibrated profiles cost by cost (figures, recorded spreads, whether
        /// they agree) instead of calibrating.
        #[arg(long, num_args = 2, value_names = ["A", "B"])]
        compare: Option<Vec<PathBuf>>,
        /// Write the calibrated profile to FILE (atomically).
        #[arg(
            short = 'o',
            long = "out",
            visible_alias = "output",
            value_name = "FILE"
        )]
        out: Option<PathBuf>,
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
        /// model on a machine just large enough for each pattern (not the host's memory):
        /// it shows that calibrate runs and restores the knobs, not how well the model
        /// predicts the host (its check count moves run to run).
        #[arg(long)]
        quick: bool,
        /// No progress on stderr.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Summarize an mmlab trace: header, events per kind, lost events.
    #[command(after_help = "Examples:\n  mmlab trace-stats build.mmtrace\n  \
mmlab trace-stats build.mmtrace --format json")]
    TraceStats {
        /// The trace.
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = InfoFormat::Text)]
        format: InfoFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Replay a trace on the model under other kernels: (a) its page allocations and
    /// frees per CPU through the PCP and buddy model, (b) its address-space stream
    /// through the fault path; kernels from --experiment or the recorded configuration.
    #[command(after_help = "Examples:\n  mmlab replay build.mmtrace\n  \
mmlab replay build.mmtrace --experiment experiments/page-churn.toml --format markdown\n  \
mmlab replay build.mmtrace --mode aspace -o replay.json")]
    Replay {
        /// The trace.
        file: PathBuf,
        #[command(flatten)]
        args: ReplayArgs,
    },
    /// Replay a trace under the recorded configuration and compare the recorded
    /// counters (zone-locked allocations, PCP drains, allocations, frees, faults) with
    /// the model's.
    #[command(after_help = "Examples:\n  mmlab validate build.mmtrace\n  \
mmlab validate build.mmtrace --warm-pcp=false --format json")]
    Validate {
        /// The trace.
        file: PathBuf,
        /// Seed of the run.
        #[arg(long)]
        seed: Option<u64>,
        /// Start with the PCP lists as recorded: their pages and, under auto-tuning, their
        /// high (the kernel's state when the command started). Default on;
        /// `--warm-pcp=false`: empty lists at their initial high.
        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
              default_value_t = true, default_missing_value = "true",
              action = clap::ArgAction::Set)]
        warm_pcp: bool,
        /// Which replay: alloc (mode a), aspace (mode b), or both (what the trace has events for).
        #[arg(long, value_enum, default_value_t = ReplayMode::Both)]
        mode: ReplayMode,
        /// When mode (a) runs the vmstat work (decay_pcp_high): `recorded`, where the trace
        /// says each CPU's vmstat_update ran (the model's one-second timer when it does
        /// not say), or `timer`, the model's timer regardless (to see what the phase does).
        #[arg(long, value_enum, default_value_t = VmstatWork::Recorded)]
        vmstat_work: VmstatWork,
        #[arg(long, value_enum, default_value_t = InfoFormat::Text)]
        format: InfoFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(short = 'o', long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Measure the model's own speed: the PCP fast path and memory per simulated page,
    /// the cache model's line accesses, and anonymous faults beside the live kernel's;
    /// on request, boot cost against machine size (`scale`) and replay speed (`replay`).
    #[command(
        after_help = "Examples:\n  mmlab bench\n  mmlab bench pcp --ops 5000000\n  \
mmlab bench faults --fault-mib 256 --no-live\n  \
mmlab bench scale --scale-memory 64GiB,16TiB --scale-cpus 8,1024\n  \
mmlab bench replay --trace build.mmtrace --replay-runs 5"
    )]
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
              value_name = "SIZE,..", default_value = "64GiB,1TiB,16TiB,64TiB,1PiB,4PiB")]
        scale_memory: Vec<u64>,
        /// CPU counts of the scale benchmark's tables.
        #[arg(
            long,
            value_delimiter = ',',
            value_name = "N,..",
            default_value = "8,64,256,1024"
        )]
        scale_cpus: Vec<u32>,
        /// Machine size of the scale benchmark's PCP-churn table.
        #[arg(long, value_parser = parse_size_arg, value_name = "SIZE", default_value = "1TiB")]
        churn_memory: u64,
        /// Bursts per task of the scale benchmark's PCP-churn table.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        churn_iterations: u32,
        /// Recordings for the replay benchmark (default: this host's corpus
        /// recordings in scripts/corpus/recordings-noaslr/). Repeat for several.
        #[arg(long = "trace", value_name = "T.mmtrace")]
        traces: Vec<PathBuf>,
        /// Runs of each recording in the replay benchmark (the best is reported).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
        replay_runs: u32,
    },
    /// One machine of `mmlab bench scale`, run in a child process of its own so that
    /// its peak resident memory is its own (for `bench scale`, not for users).
    #[command(
        hide = true,
        after_help = "Example:\n  mmlab bench-point --memory-bytes 68719476736 --cpus 8 --tasks 8 --iterations 20"
    )]
    BenchPoint {
        /// Memory of the machine, in bytes.
        #[arg(long)]
        memory_bytes: u64,
        /// Simulated CPUs.
        #[arg(long)]
        cpus: u32,
        /// Page-churn tasks.
        #[arg(long)]
        tasks: u32,
        /// Bursts per task.
        #[arg(long)]
        iterations: u32,
    },
    /// Print a shell completion script for mmlab.
    #[command(
        after_help = "Examples:\n  mmlab completions bash > /etc/bash_completion.d/mmlab\n  \
mmlab completions zsh > ~/.zfunc/_mmlab"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page, or write one page per subcommand into a directory.
    #[command(
        after_help = "Examples:\n  mmlab man | man -l -\n  mmlab man -o /usr/local/share/man/man1"
    )]
    Man {
        /// Write mmlab.1 and mmlab-SUBCOMMAND.1 into DIR instead of printing mmlab.1.
        #[arg(short = 'o', long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Seeded fuzzing of experiment files, traces and perf.data files (for developers).
    #[command(
        hide = true,
        after_help = "Input i of a run is made from seed + i alone: --start i --count 1 --show prints \
it again.\n\nExamples:\n  mmlab fuzz experiments --count 2000 --corpus crashes/\n  \
mmlab fuzz traces --front-only --count 1000000\n  \
mmlab fuzz experiments --seed 1 --start 1192 --count 1 --show"
    )]
    Fuzz(crate::fuzz::FuzzArgs),
}

/// The benchmarks of `mmlab bench`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchWhat {
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

/// A size argument (`64GiB`, `4PiB`): `mm::types::parse_size`.
fn parse_size_arg(s: &str) -> Result<u64, String> {
    mm::types::parse_size(s)
}

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Kernels (its [[kernel]] list), machine and profile from this experiment; its
    /// workloads are ignored.
    #[arg(long, value_name = "E.toml")]
    pub experiment: Option<PathBuf>,
    /// What to print (as for `mmlab run`).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write the results document to FILE (atomically; .json, .jsonl, .csv or .html).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Seed of every run (default: the experiment's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// No timing line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Start with the PCP lists as recorded: their pages and, under auto-tuning, their
    /// high (clamped to each kernel's bounds). Default off; `--warm-pcp` or
    /// `--warm-pcp=true` turns it on.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    pub warm_pcp: bool,
    /// Which replay: alloc (mode a), aspace (mode b), or both (what the trace has events for).
    #[arg(long, value_enum, default_value_t = ReplayMode::Both)]
    pub mode: ReplayMode,
    /// (Replay mode a only: mode b does not run the engine.)
    #[command(flatten)]
    pub timeline: TimelineArgs,
}

#[derive(Subcommand)]
pub enum NativeCmd {
    /// 2 MiB copies sub-page by sub-page in sequential, target-last (process_huge_page)
    /// and neighbourhood order, then the read latency of the target sub-page,
    /// with and without a second thread streaming through the LLC.
    #[command(after_help = "Example:\n  mmlab native copy-order --trials 50 --method memcpy")]
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
    #[command(after_help = "Example:\n  mmlab native parallel-copy")]
    ParallelCopy,
    /// The live kernel's fault counts for the reference 1 GiB patterns (needs root
    /// and writable THP knobs; restores every knob it changes).
    #[command(after_help = "Example:\n  sudo mmlab native faults")]
    Faults,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every subcommand's help ends with at least one example.
    #[test]
    fn every_help_has_an_example() {
        fn check(c: &clap::Command, path: &str) {
            let name = format!("{path} {}", c.get_name());
            let after = c
                .get_after_help()
                .map(|s| s.to_string())
                .unwrap_or_default();
            assert!(after.contains("Example"), "`{name} --help` has no example");
            assert!(
                after.contains("mmlab "),
                "`{name} --help`'s example runs no mmlab"
            );
            for s in c.get_subcommands().filter(|s| s.get_name() != "help") {
                check(s, &name);
            }
        }
        check(&Cli::command(), "");
    }

    #[test]
    fn timeline_windows() {
        assert_eq!(parse_window("5ms..10ms"), Ok((5_000_000, 10_000_000)));
        assert_eq!(parse_window("..1s"), Ok((0, 1_000_000_000)));
        assert_eq!(parse_window("250us.."), Ok((250_000, u64::MAX)));
        assert_eq!(parse_window("1.5..2"), Ok((1_500_000, 2_000_000)));
        assert!(parse_window("10ms..5ms").is_err());
        assert!(parse_window("5 parsecs..").is_err());
        assert!(parse_window("5ms").is_err());
    }

    #[test]
    fn seed_lists_and_ranges() {
        assert_eq!(parse_seeds("1,2,3"), Ok(Seeds(vec![1, 2, 3])));
        assert_eq!(parse_seeds("1-3,7"), Ok(Seeds(vec![1, 2, 3, 7])));
        assert!(parse_seeds("3-1").is_err());
        assert!(parse_seeds("1,1").is_err());
        assert!(parse_seeds("x").is_err());
    }
}
