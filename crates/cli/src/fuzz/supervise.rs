//! A long fuzz run survives an input that kills its process.
//!
//! Most failures are caught in-process ([`super::run`] catches panics and
//! counts errors), but two end the process that runs the input: an
//! allocation beyond the address-space cap aborts (Rust's allocation-failure
//! handler calls `abort()`: SIGABRT, no unwinding), and the watchdog ends
//! the process after a hang. Before this module either one ended the whole
//! run, and an abort lost which input it was (finding it took a bisection).
//!
//! So `mmlab fuzz` (the supervisor) runs the inputs in a worker: the same
//! binary with the hidden `--worker` flag, in a process group of its own,
//! which runs them in-process as before and writes one line per step on its
//! standard output (the protocol below). When the worker ends in the middle
//! of an input, the supervisor counts that input as failed, saves it to the
//! corpus, and starts a new worker at the next input, so that one run
//! covers its whole range and names every input that killed it.
//!
//! Signals: the supervisor forwards the first termination signal to the
//! worker's group ([`host::signals::forward_to_group`]), which ends its
//! current input and stops ([`host::signals::stop_on_signal`]); a second
//! kills the group, a third ends the supervisor. The worker dies with its
//! supervisor (`PR_SET_PDEATHSIG`), so a SIGKILL leaves no worker behind.
//!
//! Protocol (one line each; the worker's stderr is the supervisor's):
//! `start I` before input I, `rejected I`, `ran I`, `failed I WHAT` after
//! it, and `stopped SIG` when a signal stopped it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::{save, FuzzArgs, FuzzWhat, Report, Target};

/// One line of the worker's protocol.
#[derive(Debug, PartialEq)]
pub enum Line {
    Start(u64),
    Rejected(u64),
    Ran(u64),
    Failed(u64, String),
    Stopped(i32),
}

impl Line {
    /// The line as the worker writes it (no newline; `what` on one line).
    pub fn render(&self) -> String {
        match self {
            Line::Start(i) => format!("start {i}"),
            Line::Rejected(i) => format!("rejected {i}"),
            Line::Ran(i) => format!("ran {i}"),
            Line::Failed(i, what) => format!("failed {i} {}", what.replace('\n', " / ")),
            Line::Stopped(sig) => format!("stopped {sig}"),
        }
    }

    /// Reads a line the worker wrote; `None` for anything else.
    pub fn parse(s: &str) -> Option<Line> {
        let (word, rest) = s.split_once(' ')?;
        let (num, what) = rest.split_once(' ').unwrap_or((rest, ""));
        match word {
            "start" => num.parse().ok().map(Line::Start),
            "rejected" => num.parse().ok().map(Line::Rejected),
            "ran" => num.parse().ok().map(Line::Ran),
            "failed" => num.parse().ok().map(|i| Line::Failed(i, what.to_string())),
            "stopped" => num.parse().ok().map(Line::Stopped),
            _ => None,
        }
    }
}

/// Writes one protocol line on stdout (line-buffered: it is out before the
/// input runs, so an abort cannot lose it).
pub fn tell(line: Line) {
    println!("{}", line.render());
}

/// Runs `a`'s inputs in workers, one after another, until the range is
/// covered or a signal stops it.
pub fn supervise(target: &dyn Target, a: &FuzzArgs) -> anyhow::Result<Report> {
    let t0 = Instant::now();
    let cpu0 = native::sys::process_cpu_ns() + native::sys::children_cpu_ns();
    let end = a.start.saturating_add(a.count);
    let mut report = Report::default();
    let mut next = a.start;
    while next < end && report.stopped_by.is_none() {
        let first = next;
        let (running, status) = run_worker(a, &mut next, end, &mut report, t0)?;
        if report.stopped_by.is_some() {
            break;
        }
        match running {
            Some(i) => {
                let seed = a.seed.wrapping_add(i);
                let what =
                    format!("the process running it ended ({status}); its messages are above");
                eprintln!("mmlab fuzz: input {i} (seed {seed}) FAILED: {what}");
                if let Some(dir) = &a.corpus {
                    let (input, ext) = target.make(seed);
                    save(dir, seed, &input, ext);
                }
                report.nr_inputs += 1;
                report.failures.push((i, what));
                progress(a, &report, i, t0);
                next = i + 1;
            }
            None if next < end => {
                bail!(
                    "the fuzz worker ended ({status}) before input {next}, with no input running \
                     (it had started at input {first})"
                )
            }
            None => {}
        }
    }
    report.elapsed = t0.elapsed();
    let cpu = native::sys::process_cpu_ns() + native::sys::children_cpu_ns();
    report.cpu = Duration::from_nanos(cpu.saturating_sub(cpu0));
    Ok(report)
}

/// Runs one worker from `*next` to `end`, adding what it reports to
/// `report` and moving `*next` past each input it finishes. Returns the
/// input it was running when it ended (if any) and how it ended.
fn run_worker(
    a: &FuzzArgs,
    next: &mut u64,
    end: u64,
    report: &mut Report,
    t0: Instant,
) -> anyhow::Result<(Option<u64>, std::process::ExitStatus)> {
    let exe = std::env::current_exe().context("cannot find this program to start a fuzz worker")?;
    let mut child = worker_command(&exe, a, *next, end - *next)
        .spawn()
        .with_context(|| format!("cannot start a fuzz worker ({})", exe.display()))?;
    let forward = host::signals::forward_to_group(child.id() as i32);
    let stdout = child
        .stdout
        .take()
        .context("the fuzz worker has no stdout")?;
    let mut running = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the fuzz worker's output")?;
        let Some(line) = Line::parse(&line) else {
            continue;
        };
        let done = match line {
            Line::Start(i) => {
                running = Some(i);
                continue;
            }
            Line::Stopped(sig) => {
                report.stopped_by = Some(sig);
                continue;
            }
            Line::Rejected(i) => {
                report.nr_rejected += 1;
                i
            }
            Line::Ran(i) => {
                report.nr_ran += 1;
                i
            }
            Line::Failed(i, what) => {
                report.failures.push((i, what));
                i
            }
        };
        running = None;
        report.nr_inputs += 1;
        *next = done + 1;
        progress(a, report, done, t0);
    }
    let status = child.wait().context("waiting for the fuzz worker")?;
    if let Some(sig) = forward.interrupted_by() {
        report.stopped_by.get_or_insert(sig);
    }
    Ok((running, status))
}

/// The worker's command line: `a`'s options for `count` inputs from `start`.
fn worker_command(exe: &std::path::Path, a: &FuzzArgs, start: u64, count: u64) -> Command {
    let mut c = Command::new(exe);
    let what = match a.what {
        FuzzWhat::Experiments => "experiments",
        FuzzWhat::Traces => "traces",
    };
    c.args(["fuzz", what, "--worker", "--progress", "0"]);
    for (flag, v) in [
        ("--seed", a.seed),
        ("--start", start),
        ("--count", count),
        ("--events", a.events),
        ("--timeout-s", a.timeout_s),
        ("--memory-mib", a.memory_mib),
    ] {
        c.arg(flag).arg(v.to_string());
    }
    if let Some(dir) = &a.corpus {
        c.arg("--corpus").arg(dir);
    }
    if a.verbose {
        c.arg("--verbose");
    }
    if a.front_only {
        c.arg("--front-only");
    }
    c.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    c
}

/// The progress line every `a.progress` inputs, as the in-process loop
/// prints it.
fn progress(a: &FuzzArgs, r: &Report, i: u64, t0: Instant) {
    if a.progress > 0 && r.nr_inputs.is_multiple_of(a.progress) {
        super::print_progress(r, i, t0);
    }
}

#[cfg(test)]
mod tests {
    use super::Line;

    #[test]
    fn protocol_lines_read_back_as_written() {
        for l in [
            Line::Start(7),
            Line::Rejected(8),
            Line::Ran(u64::MAX - 1),
            Line::Failed(9, "panic: min > max".into()),
            Line::Stopped(15),
        ] {
            assert_eq!(Line::parse(&l.render()), Some(l));
        }
        let multi = Line::Failed(3, "a\nb".into()).render();
        assert_eq!(Line::parse(&multi), Some(Line::Failed(3, "a / b".into())));
        assert_eq!(Line::parse("mmlab fuzz: 10 inputs"), None);
        assert_eq!(Line::parse("ran x"), None);
    }
}
