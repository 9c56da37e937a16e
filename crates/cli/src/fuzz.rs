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
//! - **time**: a watchdog thread ends the process if one input uses more
//!   than [`Budget::timeout`] of CPU time (a loop that makes no operation),
//!   or runs that long without using any (threads waiting on each other),
//!   after printing the input and saving it to the corpus directory. CPU
//!   time, not wall time: a long run at `nice -n 19` on a loaded host may
//!   get a few per cent of a core, and a 4 s input then takes minutes.
//! - **memory**: the simulated machines are small, and "the host's memory"
//!   that `Machine::validate` and replay's recorded machine are checked
//!   against is lowered to [`Budget::host_memory_bytes`]; the binary also
//!   caps its address space, so that memory growth aborts instead of
//!   swapping the shared host.
//!
//! A panic is caught, counted, and its input saved; the run goes on. An
//! error is a pass if it names the input (file, line, record) and says
//! something. An input that ends the process (an abort on the memory cap,
//! a hang) is counted and saved by the supervising process, which goes on
//! with the next input in a new worker ([`supervise`]).

pub mod experiments;
pub mod supervise;
pub mod traces;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mm::rng::SplitMix64;

/// The generators' only source of randomness: one 64-bit seed per input,
/// expanded by the model crates' SplitMix64 (`mm::rng`).
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
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
    /// CPU time an input may use, and time it may spend using none, before
    /// it counts as a hang; watched from another thread.
    pub timeout: Duration,
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
            timeout: Duration::from_secs(120),
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
    /// The process's CPU time (user + system, every thread) during the run.
    pub cpu: Duration,
    /// The signal that stopped the run before its last input (the run
    /// covered `start..start + nr_inputs`).
    pub stopped_by: Option<i32>,
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
    /// Write the supervisor's protocol on stdout ([`supervise`]): this
    /// process is a worker.
    pub worker: bool,
    /// A test hook (`MMLAB_FUZZ_WORKER_ABORT_AT`, workers only): abort the
    /// process at this input, as an allocation beyond the cap does.
    pub abort_at: Option<u64>,
}

/// The input being run, for the watchdog: its index and bytes.
struct Current {
    /// The run is over: the watchdog ends.
    done: std::sync::atomic::AtomicBool,
    index: AtomicU64,
    /// The process's CPU time when the input started, in ns.
    started_cpu_ns: AtomicU64,
    input: Mutex<(Vec<u8>, &'static str)>,
}

/// Runs `opts.count` inputs of `target`.
pub fn run(target: &dyn Target, opts: &Options) -> Report {
    crate::experiment::set_host_memory_override(opts.budget.host_memory_bytes);
    let t0 = Instant::now();
    let cpu0 = native::sys::process_cpu_ns();
    let current = Arc::new(Current {
        done: std::sync::atomic::AtomicBool::new(false),
        index: AtomicU64::new(u64::MAX),
        started_cpu_ns: AtomicU64::new(0),
        input: Mutex::new((Vec::new(), "bin")),
    });
    start_watchdog(current.clone(), opts.clone());
    // SIGINT/SIGTERM end the input running, then the run, with its report.
    let _stop = host::signals::stop_on_signal();
    let mut report = Report::default();
    for i in opts.start..opts.start.saturating_add(opts.count) {
        if let Some(sig) = host::signals::stop_requested() {
            report.stopped_by = Some(sig);
            break;
        }
        let seed = opts.seed.wrapping_add(i);
        if opts.worker {
            supervise::tell(supervise::Line::Start(i));
            if opts.abort_at == Some(i) {
                std::process::abort();
            }
        }
        let (input, ext) = target.make(seed);
        *current.input.lock().unwrap_or_else(|p| p.into_inner()) = (input.clone(), ext);
        current
            .started_cpu_ns
            .store(native::sys::process_cpu_ns(), Ordering::SeqCst);
        current.index.store(i, Ordering::SeqCst);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            target.run(&input, &opts.budget)
        }))
        .unwrap_or_else(|p| Outcome::Failed(format!("panic: {}", panic_text(&p))));
        current.index.store(u64::MAX, Ordering::SeqCst);
        report.nr_inputs += 1;
        let line = match outcome {
            Outcome::Rejected(why) => {
                report.nr_rejected += 1;
                if opts.verbose {
                    eprintln!("mmlab fuzz: input {i} rejected: {why}");
                }
                supervise::Line::Rejected(i)
            }
            Outcome::Ran => {
                report.nr_ran += 1;
                supervise::Line::Ran(i)
            }
            Outcome::Failed(what) => {
                eprintln!("mmlab fuzz: input {i} (seed {seed}) FAILED: {what}");
                if let Some(dir) = &opts.corpus {
                    save(dir, seed, &input, ext);
                }
                report.failures.push((i, what.clone()));
                supervise::Line::Failed(i, what)
            }
        };
        if opts.worker {
            supervise::tell(line);
        }
        if opts.progress_every > 0 && report.nr_inputs.is_multiple_of(opts.progress_every) {
            print_progress(&report, i, t0);
        }
    }
    if let (true, Some(sig)) = (opts.worker, report.stopped_by) {
        supervise::tell(supervise::Line::Stopped(sig));
    }
    current.done.store(true, Ordering::SeqCst);
    report.elapsed = t0.elapsed();
    report.cpu = Duration::from_nanos(native::sys::process_cpu_ns().saturating_sub(cpu0));
    report
}

/// The progress line after input `i`.
fn print_progress(r: &Report, i: u64, t0: Instant) {
    eprintln!(
        "mmlab fuzz: {} inputs, next {} ({} ran, {} rejected, {} failed) in {:.0?}",
        r.nr_inputs,
        i + 1,
        r.nr_ran,
        r.nr_rejected,
        r.failures.len(),
        t0.elapsed()
    );
}

/// Ends the process if one input uses more CPU time than the budget, or
/// runs that long without using any, after printing which and saving it.
fn start_watchdog(current: Arc<Current>, opts: Options) {
    let _ = std::thread::Builder::new()
        .name("mmlab-fuzz-watchdog".into())
        .spawn(move || {
            let mut watch = Watch::new(opts.budget.timeout);
            loop {
                std::thread::sleep(Duration::from_millis(500));
                if current.done.load(Ordering::SeqCst) {
                    return;
                }
                let i = current.index.load(Ordering::SeqCst);
                let process_ns = native::sys::process_cpu_ns();
                let used_ns =
                    process_ns.saturating_sub(current.started_cpu_ns.load(Ordering::SeqCst));
                // The watchdog's own CPU time is no sign of the input's progress.
                let others_ns = process_ns.saturating_sub(native::sys::thread_cpu_ns());
                let Some(what) = watch.check(i, used_ns, others_ns, Instant::now()) else {
                    continue;
                };
                if current.index.load(Ordering::SeqCst) != i {
                    continue;
                }
                let seed = opts.seed.wrapping_add(i);
                eprintln!("mmlab fuzz: input {i} (seed {seed}) FAILED: {what}");
                if let Some(dir) = &opts.corpus {
                    let (input, ext) = &*current.input.lock().unwrap_or_else(|p| p.into_inner());
                    save(dir, seed, input, ext);
                }
                std::process::exit(3);
            }
        });
}

/// The watchdog's judgement of the input running, from CPU times: a hang
/// is an input that used more than the budget of CPU time (a spin), or
/// used none for that long (threads waiting on each other). Not wall
/// time: at `nice -n 19` on a loaded host an input may get a few per cent
/// of a core and still be making progress.
struct Watch {
    budget: Duration,
    /// The input, the other threads' CPU time and the instant at the last
    /// sign of progress.
    last: Option<(u64, u64, Instant)>,
}

impl Watch {
    /// CPU time the other threads used beyond this (ns) is progress: more
    /// than the clocks' jitter, far less than any real work.
    const PROGRESS_NS: u64 = 1_000_000;

    fn new(budget: Duration) -> Watch {
        Watch { budget, last: None }
    }

    /// One look at input `i` (`u64::MAX`: none running): `used_ns` the
    /// process's CPU time since the input started, `others_ns` the CPU time
    /// of every thread but the watchdog's. Returns why it is a hang, if it is.
    fn check(&mut self, i: u64, used_ns: u64, others_ns: u64, now: Instant) -> Option<String> {
        let idle = match self.last {
            Some((li, lc, lt)) if li == i && others_ns < lc + Self::PROGRESS_NS => now - lt,
            _ => {
                self.last = Some((i, others_ns, now));
                Duration::ZERO
            }
        };
        if i == u64::MAX {
            None
        } else if used_ns > self.budget.as_nanos() as u64 {
            Some(format!(
                "still running after {:.0?} of CPU time (a hang)",
                self.budget
            ))
        } else if idle > self.budget {
            Some(format!(
                "no CPU time used for {idle:.0?} (threads waiting forever)"
            ))
        } else {
            None
        }
    }
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
    /// CPU seconds per input (or seconds without using the CPU) before it
    /// counts as a hang (the process ends).
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
    /// Run the inputs in this process and write the supervisor's protocol
    /// on stdout (how `mmlab fuzz` starts its workers; not for users).
    #[arg(long, hide = true)]
    pub worker: bool,
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
    let r = if a.worker {
        run_worker(target, a)?
    } else {
        supervise::supervise(target, a)?
    };
    if a.worker {
        return Ok(if r.failures.is_empty() { 0 } else { 1 });
    }
    println!("{}", summary(a, &r));
    for (i, what) in &r.failures {
        println!("  input {i} (seed {}): {what}", a.seed.wrapping_add(*i));
    }
    if let Some(sig) = r.stopped_by {
        let next = a.start + r.nr_inputs;
        println!(
            "  stopped by {}: continue with --seed {} --start {next} --count {}",
            host::signals::signal_name(sig),
            a.seed,
            a.count - r.nr_inputs
        );
        if r.failures.is_empty() {
            return Ok(128 + sig);
        }
    }
    Ok(if r.failures.is_empty() { 0 } else { 1 })
}

/// `mmlab fuzz --worker`: runs the inputs in this process (the address
/// space capped) and tells the supervisor how each went.
fn run_worker(target: &dyn Target, a: &FuzzArgs) -> anyhow::Result<Report> {
    // A worker never outlives the supervisor, even after a SIGKILL.
    native::sys::die_with_parent();
    if a.memory_mib > 0 {
        host::limits::limit_address_space(a.memory_mib << 20)?;
    }
    let abort_at = std::env::var("MMLAB_FUZZ_WORKER_ABORT_AT")
        .ok()
        .and_then(|v| v.parse().ok());
    let opts = Options {
        seed: a.seed,
        start: a.start,
        count: a.count,
        corpus: a.corpus.clone(),
        budget: Budget {
            events: a.events,
            timeout: std::time::Duration::from_secs(a.timeout_s),
            front_only: a.front_only,
            ..Budget::default()
        },
        progress_every: a.progress,
        verbose: a.verbose,
        worker: true,
        abort_at,
    };
    Ok(run(target, &opts))
}

/// The run's one-line summary: what, which inputs, how they went, how fast
/// (per second of wall time and of the process's CPU time).
fn summary(a: &FuzzArgs, r: &Report) -> String {
    let what = match a.what {
        FuzzWhat::Experiments => "experiments",
        FuzzWhat::Traces => "traces",
    };
    let per = |d: f64| r.nr_inputs as f64 / d.max(1e-9);
    format!(
        "mmlab fuzz {what}: {} inputs (seed {}, inputs {}..{}): {} ran, {} rejected with an error \
         naming the input, {} failed, in {:.1?} ({:.0} inputs/s; {:.1} s of CPU, {:.0} inputs per \
         CPU-second)",
        r.nr_inputs,
        a.seed,
        a.start,
        a.start + r.nr_inputs,
        r.nr_ran,
        r.nr_rejected,
        r.failures.len(),
        r.elapsed,
        per(r.elapsed.as_secs_f64()),
        r.cpu.as_secs_f64(),
        per(r.cpu.as_secs_f64()),
    )
}

#[cfg(test)]
mod watch_tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Looks every 500 ms at input 7 for `secs` seconds, the input using
    /// `cpu_per_look_ns` of CPU time between looks; the first verdict.
    fn watch(budget_s: u64, secs: u64, cpu_per_look_ns: u64) -> Option<String> {
        let mut w = Watch::new(Duration::from_secs(budget_s));
        let t0 = Instant::now();
        (0..=secs * 2).find_map(|k| {
            let cpu = k * cpu_per_look_ns;
            w.check(7, cpu, cpu, t0 + Duration::from_millis(500 * k))
        })
    }

    #[test]
    fn a_starved_input_is_no_hang() {
        // 2 % of a core for ten minutes: 12 s of CPU time, under 120 s.
        assert_eq!(watch(120, 600, S / 100), None);
    }

    #[test]
    fn an_input_spinning_past_its_cpu_budget_is_a_hang() {
        let why = watch(120, 300, S / 2).expect("a hang");
        assert!(why.contains("of CPU time"), "{why}");
    }

    #[test]
    fn an_input_using_no_cpu_for_its_budget_is_a_hang() {
        let why = watch(120, 300, 0).expect("a hang");
        assert!(why.contains("no CPU time used for"), "{why}");
    }

    #[test]
    fn a_new_input_starts_a_new_idle_clock() {
        let mut w = Watch::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(w.check(1, 0, 5, t0), None);
        assert_eq!(w.check(2, 0, 5, t0 + Duration::from_secs(11)), None);
        assert!(w.check(2, 0, 5, t0 + Duration::from_secs(22)).is_some());
        assert_eq!(w.check(u64::MAX, 0, 5, t0 + Duration::from_secs(40)), None);
    }
}
