//! Placing a live pattern's runs between two passes of the guest's free
//! page reporting worker (`mm/page_reporting.c`), so that the worker
//! cannot hand the runs' memory to the host while they fault it.
//!
//! # Why
//! On a guest with free page reporting (virtio-balloon `F_REPORTING`,
//! `page_reporting_order` 9 here) the worker takes free blocks of 2 MiB
//! and more off the free lists, reports them to the host, which drops
//! their backing, and puts them back: the guest's next touch of that
//! memory faults in the host as well (the hypervisor's cost, which the
//! model does not have). A calibration frees and re-faults hundreds of
//! MiB a second, so the worker always has a pass pending: in a run of
//! 2026-11-25 (07:18 UTC, load 4-5) it reported memory during 35 of 178
//! repetitions, costing those runs up to 10x.
//!
//! # The worker's cadence
//! Upstream `PAGE_REPORTING_DELAY` is 2 s (5.7-6.18): a request made while
//! the worker is idle schedules a pass 2 s later, and a pass that ends
//! with another request pending schedules the next 2 s after its end. So
//! the 2 s after a pass ends are free of reporting. Seen here too (256 MiB
//! and 1000 MiB of THPs freed: passes ended 2.03 and 2.06 s apart, the
//! first 2.0 s after the first free; ~64 MiB per batch, ~10-20 ms each).
//! This guest's kernel counts the passes
//! (`/sys/module/page_reporting/parameters/passes`, not upstream; the
//! count moves as a pass ends): a thread watches it while fault patterns
//! run, and a repetition holds its warmed memory (which the worker cannot
//! take, as it is not free) until its runs fit before the next pass.
//!
//! Deviation from a plain wait: none is needed without the counter (other
//! kernels), and then the runs start at once.

use native::calibrate::kernel::REPORTING_PASSES;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Upstream `PAGE_REPORTING_DELAY` (`mm/page_reporting.c`): the time from
/// a pass's end (another request pending) or from a request to an idle
/// worker to the next pass.
const PAGE_REPORTING_DELAY: Duration = Duration::from_secs(2);

/// The part of [`PAGE_REPORTING_DELAY`] after a pass that a repetition's
/// runs may use: the rest (0.2 s) is margin for the watching thread seeing
/// the pass end late on a loaded host and for the delayed work's timer. A
/// design choice, not a measured cost.
const REPORTING_WINDOW: Duration = PAGE_REPORTING_DELAY.saturating_sub(Duration::from_millis(200));

/// How long to wait for a pass to end before going on: the delay and a
/// pass of ~1 GiB (~0.1 s here), with margin (0.5 s in all). After that the
/// worker was idle (no pass pending), and the next pass comes 2 s after
/// the next free at the earliest.
const PASS_WAIT: Duration = PAGE_REPORTING_DELAY.saturating_add(Duration::from_millis(500));

/// A pattern's two runs against its warm-up, for a pattern not run before:
/// each run faults as much memory as the warm-up writes (a fork's, half),
/// and the warm-up on memory the host backs is no faster than a run (its
/// THPs take fewer faults, but it also fills what the host had taken
/// back, which only makes it slower); 2.5 allows for the runs' fork and
/// knob writes. An estimate for the first repetition only: after it the
/// pattern's own runs' time is used.
const WARM_TO_RUNS: f64 = 2.5;

/// How often the watching thread reads the pass count.
const POLL: Duration = Duration::from_millis(1);

/// No pass seen yet (in [`Shared::pass_end_ns`]).
const NONE: u64 = u64::MAX;

/// What the watching thread shares.
struct Shared {
    /// The time base of `pass_end_ns`.
    base: Instant,
    /// When the last pass was seen to end, ns after `base` ([`NONE`]: not
    /// since the thread started).
    pass_end_ns: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn since_pass(&self) -> Option<Duration> {
        let ns = self.pass_end_ns.load(Ordering::Acquire);
        (ns != NONE).then(|| self.base.elapsed().saturating_sub(Duration::from_nanos(ns)))
    }

    fn mark_now(&self) {
        let ns = self.base.elapsed().as_nanos() as u64;
        self.pass_end_ns.store(ns, Ordering::Release);
    }
}

/// The pass count in `text` (a sysfs attribute: digits, a newline).
fn parse_count(text: &[u8]) -> Option<u64> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit());
    let mut n: u64 = 0;
    let mut any = false;
    for &b in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        any = true;
    }
    any.then_some(n)
}

/// Reads the pass count from `f` at offset 0, without allocating: the
/// fault patterns fork while this thread runs, and a child must not
/// inherit a lock of the allocator held here.
fn read_count(f: &std::fs::File) -> Option<u64> {
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0).ok()?;
    parse_count(&buf[..n])
}

/// The thread watching the pass count.
struct Watcher {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching, if this kernel has the counter.
    fn start() -> Option<Watcher> {
        let f = std::fs::File::open(REPORTING_PASSES).ok()?;
        let first = read_count(&f)?;
        let shared = Arc::new(Shared {
            base: Instant::now(),
            pass_end_ns: AtomicU64::new(NONE),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("reporting-watch".into())
            .spawn(move || {
                let mut last = first;
                while !s.stop.load(Ordering::Acquire) {
                    std::thread::sleep(POLL);
                    match read_count(&f) {
                        Some(n) if n != last => {
                            last = n;
                            s.mark_now();
                        }
                        _ => {}
                    }
                }
            })
            .ok()?;
        Some(Watcher {
            shared,
            handle: Some(handle),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Whether runs that take `need` still end inside the quiet window when
/// started `since_pass` after a pass ended; unknown either way: no.
fn fits_window(since_pass: Option<Duration>, need: Option<Duration>) -> bool {
    match (since_pass, need) {
        (Some(s), Some(n)) => s + n <= REPORTING_WINDOW,
        _ => false,
    }
}

/// The placing of repetitions between reporting passes
/// ([`ReportingWindow::ready`]), and how long it waited.
#[derive(Default)]
pub struct ReportingWindow {
    /// The watching thread while fault patterns run ([`Self::pause`]).
    watcher: Option<Watcher>,
    /// Whether this kernel has the counter (false until first looked).
    counted: bool,
    /// Wall time of each pattern's two runs, from the warm-up's release
    /// to the second run's end, the last time they ran.
    runs_wall: BTreeMap<String, Duration>,
    /// Waits for a pass to end.
    pub waits: usize,
    /// Total wall time waiting.
    pub waited: Duration,
    /// Waits that ended without a pass (the worker was idle).
    pub idle: usize,
}

impl std::fmt::Debug for ReportingWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl ReportingWindow {
    /// Returns when `pattern`'s runs can start and end before the next
    /// reporting pass: at once if they fit in what is left of the 2 s
    /// after the last pass, else when the next pass ends (or, if none
    /// comes within [`PASS_WAIT`], the worker is idle and the window
    /// starts now). The caller holds its warm-up memory meanwhile, so
    /// that the pass cannot report it. Without the counter, at once.
    ///
    /// `warm` is how long the warm-up took: for a pattern not run before,
    /// its runs are taken to need [`WARM_TO_RUNS`] times that.
    pub fn ready(&mut self, pattern: &str, warm: Duration) {
        self.watch();
        let Some(w) = &self.watcher else { return };
        self.counted = true;
        let need = (self.runs_wall.get(pattern).copied()).or(Some(warm.mul_f64(WARM_TO_RUNS)));
        if fits_window(w.shared.since_pass(), need) {
            return;
        }
        let t0 = Instant::now();
        let before = w.shared.pass_end_ns.load(Ordering::Acquire);
        loop {
            std::thread::sleep(POLL);
            if w.shared.pass_end_ns.load(Ordering::Acquire) != before {
                break;
            }
            if t0.elapsed() >= PASS_WAIT {
                self.idle += 1;
                w.shared.mark_now();
                break;
            }
        }
        self.waits += 1;
        self.waited += t0.elapsed();
    }

    /// Records how long `pattern`'s runs took.
    pub fn ran(&mut self, pattern: &str, wall: Duration) {
        self.runs_wall.insert(pattern.to_string(), wall);
    }

    /// Starts the watching thread if it is not running. Called before the
    /// caller pins itself to the CPU it measures on, so that the thread
    /// (which inherits the caller's affinity) does not poll there.
    pub fn watch(&mut self) {
        if self.watcher.is_none() {
            self.watcher = Watcher::start();
        }
    }

    /// Stops the watching thread (while the micro-benchmarks run); the
    /// next [`Self::watch`] or [`Self::ready`] starts it again, and
    /// [`Self::ready`] waits for a pass then.
    pub fn pause(&mut self) {
        self.watcher = None;
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        if !self.counted {
            return "no reporting pass counter on this kernel: the runs were not placed between passes".into();
        }
        format!(
            "the runs waited {} times for a reporting pass to end ({:.1} s in all; {} found the worker idle)",
            self.waits,
            self.waited.as_secs_f64(),
            self.idle
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_start_at_once_only_when_known_to_end_before_the_next_pass() {
        let ms = Duration::from_millis;
        // 1.8 s of the 2 s after a pass are usable.
        assert!(fits_window(Some(ms(300)), Some(ms(1500))));
        assert!(!fits_window(Some(ms(301)), Some(ms(1500))));
        assert!(fits_window(Some(ms(0)), Some(ms(1800))));
        // Runs longer than the window never fit: they wait for a pass and
        // then start at once (the caller does not wait twice).
        assert!(!fits_window(Some(ms(0)), Some(ms(1801))));
        // No pass seen yet, or the pattern never ran: wait for one.
        assert!(!fits_window(None, Some(ms(10))));
        assert!(!fits_window(Some(ms(10)), None));
    }

    #[test]
    fn the_pass_count_is_read_from_the_attributes_digits() {
        assert_eq!(parse_count(b"4697\n"), Some(4697));
        assert_eq!(parse_count(b"0"), Some(0));
        assert_eq!(parse_count(b"\n"), None);
        assert_eq!(parse_count(b"x1"), None);
        assert_eq!(parse_count(b"99999999999999999999999"), None);
    }
}
