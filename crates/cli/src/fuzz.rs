//! Seeded fuzzing of everything mmlab accepts: experiment files through the
//! engine, and damaged traces and perf.data files through the importer and
//! both replays (issue 15).
//!
//! # How (TigerBeetle's VOPR, on a small scale)
//!
//! Input `i` of a run with seed `S` is made from the seed `S + i` alone, so
//! a failure is reproduced by its two numbers (`mmlab fuzz experiments
//! --seed S --start i --count 1 --show`). Each input runs with three
//! budgets:
//!
//! - **events**: the engine stops after [`Budget::events`] events. The
//!   generators size machines and workloads so that every run ends far
//!   within it; a run that does not is a liveness failure (a loop that
//!   makes operations forever, like `kbuild` with `slab_pct = 100` did).
//! - **time**: a watchdog thread ends the process if one input takes more
//!   than [`Budget::wall`] (a loop that makes no operation), after printing
//!   the input and saving it to the corpus directory.
//! - **memory**: the simulated machines are small, and "the host's memory"
//!   that `Machine::validate` and replay's recorded machine are checked
//!   against is lowered to [`Budget::host_memory_bytes`]; the binary also
//!   caps its address space, so that memory growth aborts instead of
//!   swapping the shared host.
//!
//! A panic is caught, counted, and its input saved; the run goes on. An
//! error is a pass if it names the input (file, line, record) and says
//! something.

pub mod experiments;
pub mod traces;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// SplitMix64 (Steele, Lea and Flood 2014), the generators' only source of
/// randomness: one 64-bit seed per input.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `pct` %.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    /// One element of `xs`.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

/// What one input may cost.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Engine events per run.
    pub events: u64,
    /// Wall time per input, watched from another thread.
    pub wall: Duration,
    /// The host memory validation assumes (half of it per run).
    pub host_memory_bytes: u64,
    /// Only the front end: parse and validate an experiment (no run),
    /// import and read a trace (no replay). Many times faster, for runs of
    /// millions of inputs; the full path is the default.
    pub front_only: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            events: 20_000_000,
            wall: Duration::from_secs(120),
            host_memory_bytes: 1 << 30,
            front_only: false,
        }
    }
}

/// How a fuzz run went.
#[derive(Debug, Default)]
pub struct Report {
    /// Inputs run.
    pub nr_inputs: u64,
    /// Inputs refused with an error that names them.
    pub nr_rejected: u64,
    /// Inputs that ran (every run of an experiment; every replay of a trace).
    pub nr_ran: u64,
    /// Failures: `(input index, what)`.
    pub failures: Vec<(u64, String)>,
    /// Wall time.
    pub elapsed: Duration,
}

/// What one input did.
pub enum Outcome {
    /// Refused with an error that names the input (the message).
    Rejected(String),
    /// Ran to the end.
    Ran,
    /// A bug: the message says what.
    Failed(String),
}

/// A fuzz target: makes input `i` from its seed and runs it.
pub trait Target: Sync {
    /// The input of seed `seed` (bytes as a file would hold them) and a
    /// file extension for the corpus.
    fn make(&self, seed: u64) -> (Vec<u8>, &'static str);
    /// Runs one input within `budget`.
    fn run(&self, input: &[u8], budget: &Budget) -> Outcome;
}

/// Options of a fuzz run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The run's seed; input `i` uses `seed + i`.
    pub seed: u64,
    /// The first input.
    pub start: u64,
    /// How many inputs.
    pub count: u64,
    /// Where failing inputs are saved (`crash-<seed>.<ext>`).
    pub corpus: Option<PathBuf>,
    /// Budgets per input.
    pub budget: Budget,
    /// Progress every this many inputs on stderr (0: none).
    pub progress_every: u64,
    /// Print why each rejected input was rejected.
    pub verbose: bool,
}

/// The input being run, for the watchdog: its index and bytes.
struct Current {
    /// The run is over: the watchdog ends.
    done: std::sync::atomic::AtomicBool,
    index: AtomicU64,
    started_ms: AtomicU64,
    input: Mutex<(Vec<u8>, &'static str)>,
}

/// Runs `opts.count` inputs of `target`.
pub fn run(target: &dyn Target, opts: &Options) -> Report {
    crate::experiment::set_host_memory_override(opts.budget.host_memory_bytes);
    let t0 = Instant::now();
    let current = Arc::new(Current {
        done: std::sync::atomic::AtomicBool::new(false),
        index: AtomicU64::new(u64::MAX),
        started_ms: AtomicU64::new(0),
        input: Mutex::new((Vec::new(), "bin")),
    });
    start_watchdog(current.clone(), opts.clone(), t0);
    let mut report = Report::default();
    for i in opts.start..opts.start.saturating_add(opts.count) {
        let seed = opts.seed.wrapping_add(i);
        let (input, ext) = target.make(seed);
        *current.input.lock().unwrap_or_else(|p| p.into_inner()) = (input.clone(), ext);
        current
            .started_ms
            .store(t0.elapsed().as_millis() as u64, Ordering::SeqCst);
        current.index.store(i, Ordering::SeqCst);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            target.run(&input, &opts.budget)
        }))
        .unwrap_or_else(|p| Outcome::Failed(format!("panic: {}", panic_text(&p))));
        current.index.store(u64::MAX, Ordering::SeqCst);
        report.nr_inputs += 1;
        match outcome {
            Outcome::Rejected(why) => {
                report.nr_rejected += 1;
                if opts.verbose {
                    eprintln!("mmlab fuzz: input {i} rejected: {why}");
                }
            }
            Outcome::Ran => report.nr_ran += 1,
            Outcome::Failed(what) => {
                eprintln!("mmlab fuzz: input {i} (seed {seed}) FAILED: {what}");
                if let Some(dir) = &opts.corpus {
                    save(dir, seed, &input, ext);
                }
                report.failures.push((i, what));
            }
        }
        if opts.progress_every > 0 && report.nr_inputs.is_multiple_of(opts.progress_every) {
            eprintln!(
                "mmlab fuzz: {} inputs ({} ran, {} rejected, {} failed) in {:.0?}",
                report.nr_inputs,
                report.nr_ran,
                report.nr_rejected,
                report.failures.len(),
                t0.elapsed()
            );
        }
    }
    current.done.store(true, Ordering::SeqCst);
    report.elapsed = t0.elapsed();
    report
}

/// Ends the process if one input runs longer than the budget, after
/// printing which and saving it.
fn start_watchdog(current: Arc<Current>, opts: Options, t0: Instant) {
    let _ = std::thread::Builder::new()
        .name("mmlab-fuzz-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            if current.done.load(Ordering::SeqCst) {
                return;
            }
            let i = current.index.load(Ordering::SeqCst);
            if i == u64::MAX {
                continue;
            }
            let since = current.started_ms.load(Ordering::SeqCst);
            let ran_ms = (t0.elapsed().as_millis() as u64).saturating_sub(since);
            if ran_ms <= opts.budget.wall.as_millis() as u64
                || current.index.load(Ordering::SeqCst) != i
            {
                continue;
            }
            let seed = opts.seed.wrapping_add(i);
            eprintln!(
                "mmlab fuzz: input {i} (seed {seed}) FAILED: still running after {:?} (a hang)",
                opts.budget.wall
            );
            if let Some(dir) = &opts.corpus {
                let (input, ext) = &*current.input.lock().unwrap_or_else(|p| p.into_inner());
                save(dir, seed, input, ext);
            }
            std::process::exit(3);
        });
}

fn save(dir: &Path, seed: u64, input: &[u8], ext: &str) {
    let path = dir.join(format!("crash-{seed}.{ext}"));
    match host::output::write_atomic(&path, input, host::Mode::Shared) {
        Ok(()) => eprintln!("mmlab fuzz: input saved to {}", path.display()),
        Err(e) => eprintln!("mmlab fuzz: could not save the input: {e}"),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Checks an error message for a refused input: not empty, and naming the
/// input by `origin` (its file name).
pub fn check_error(e: &anyhow::Error, origin: &str) -> Outcome {
    let msg = format!("{e:#}");
    if msg.trim().is_empty() {
        return Outcome::Failed("an empty error message".into());
    }
    if !msg.contains(origin) {
        return Outcome::Failed(format!("an error that does not name {origin}: {msg}"));
    }
    Outcome::Rejected(msg)
}

/// `mmlab fuzz`: what to fuzz and the budgets.
#[derive(clap::Args)]
pub struct FuzzArgs {
    /// experiments (TOML through the engine) or traces (mmlab traces and
    /// perf.data files through the importer and both replays).
    #[arg(value_enum)]
    pub what: FuzzWhat,
    /// The run's seed: input i is made from seed + i alone.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The first input.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// How many inputs.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Save failing inputs here (crash-<seed>.<ext>).
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Engine events per run before a run counts as never ending.
    #[arg(long, default_value_t = 20_000_000)]
    pub events: u64,
    /// Seconds per input before it counts as a hang (the process ends).
    #[arg(long, default_value_t = 120)]
    pub timeout_s: u64,
    /// Cap on this process's address space, in MiB (0: none).
    #[arg(long, default_value_t = 4096)]
    pub memory_mib: u64,
    /// Write the inputs to stdout instead of running them.
    #[arg(long)]
    pub show: bool,
    /// Progress line every this many inputs (0: none).
    #[arg(long, default_value_t = 10_000)]
    pub progress: u64,
    /// Say why each rejected input was rejected.
    #[arg(long, short)]
    pub verbose: bool,
    /// Only the front end: parse and validate experiments without running
    /// them; import and read traces without replaying them (for runs of
    /// millions of inputs).
    #[arg(long)]
    pub front_only: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FuzzWhat {
    Experiments,
    Traces,
}

/// Runs `mmlab fuzz`; exits 0 only if no input failed.
pub fn cmd(a: &FuzzArgs) -> anyhow::Result<i32> {
    use std::io::Write;
    let target: &dyn Target = match a.what {
        FuzzWhat::Experiments => &experiments::Experiments,
        FuzzWhat::Traces => &traces::Traces,
    };
    if a.show {
        let mut out = std::io::stdout().lock();
        for i in a.start..a.start.saturating_add(a.count) {
            let (bytes, ext) = target.make(a.seed.wrapping_add(i));
            writeln!(
                out,
                "# input {i} (seed {}, .{ext}, {} bytes)",
                a.seed.wrapping_add(i),
                bytes.len()
            )?;
            out.write_all(&bytes)?;
            writeln!(out)?;
        }
        return Ok(0);
    }
    if a.memory_mib > 0 {
        host::limits::limit_address_space(a.memory_mib << 20)?;
    }
    let opts = Options {
        seed: a.seed,
        start: a.start,
        count: a.count,
        corpus: a.corpus.clone(),
        budget: Budget {
            events: a.events,
            wall: std::time::Duration::from_secs(a.timeout_s),
            front_only: a.front_only,
            ..Budget::default()
        },
        progress_every: a.progress,
        verbose: a.verbose,
    };
    let r = run(target, &opts);
    println!(
        "mmlab fuzz {}: {} inputs (seed {}, from {}): {} ran, {} rejected with an error naming the input, {} failed, in {:.1?} ({:.0} inputs/s)",
        match a.what {
            FuzzWhat::Experiments => "experiments",
            FuzzWhat::Traces => "traces",
        },
        r.nr_inputs,
        a.seed,
        a.start,
        r.nr_ran,
        r.nr_rejected,
        r.failures.len(),
        r.elapsed,
        r.nr_inputs as f64 / r.elapsed.as_secs_f64().max(1e-9)
    );
    for (i, what) in &r.failures {
        println!("  input {i} (seed {}): {what}", a.seed.wrapping_add(*i));
    }
    Ok(if r.failures.is_empty() { 0 } else { 1 })
}
