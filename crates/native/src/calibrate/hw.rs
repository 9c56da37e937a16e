//! Hardware probes: page clear and copy, locked operations, cache-line
//! transfers between CPUs, DRAM latency, user stores.
//!
//! `clear_page()` on x86-64 CPUs with ERMS (this host's EPYC has it) is
//! `clear_page_erms`, one `rep stosb` of 4 KiB; `copy_page()` with
//! `X86_FEATURE_REP_GOOD` is one `rep movsq` of 512 quadwords
//! (arch/x86/lib/clear_page_64.S, copy_page_64.S in 6.18). The probes run
//! those instructions from user space on THP-backed buffers (the kernel's
//! direct map uses huge pages too), so they time the same instruction on the
//! same kind of memory. "Cold" sweeps a buffer eight times the LLC, so every
//! line comes from DRAM as it does for a freshly allocated page; "hot"
//! repeats 16 pages that stay in L1/L2.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{cpu_ns_of, Probe};
use crate::error::NativeError;
use crate::rng::SplitMix64;
use crate::sys::{pin_to_cpu, HugeBuf, CACHE_LINE, PAGE_SIZE};

/// Pages in a cold sweep: 256 MiB, eight times this host's 32 MiB LLC.
pub const COLD_PAGES: usize = 64 * 1024;
/// Pages of a hot buffer: 64 KiB, inside any L2.
const HOT_PAGES: usize = 16;

/// `clear_page_erms`: `rep stosb` of one 4 KiB page.
fn clear_4k(page: &mut [u8]) {
    debug_assert_eq!(page.len(), PAGE_SIZE);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdi points at a live, exclusively borrowed 4 KiB slice and rcx
    // counts exactly its bytes; the direction flag is clear per the ABI.
    unsafe {
        std::arch::asm!(
            "rep stosb",
            inout("rcx") PAGE_SIZE => _,
            inout("rdi") page.as_mut_ptr() => _,
            in("al") 0u8,
            options(nostack)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    page.fill(0);
}

/// `copy_page`: `rep movsq` of one 4 KiB page.
fn copy_4k(dst: &mut [u8], src: &[u8]) {
    crate::parallel_copy::Method::RepMovsq4K.copy(dst, src);
}

/// ns per 4 KiB page of clearing `pages` pages of `buf` starting at page
/// `first`, `reps` times.
fn clear_pages(buf: &mut [u8], first: usize, pages: usize, reps: usize) -> f64 {
    let ns = cpu_ns_of(|| {
        for _ in 0..reps {
            for p in buf[first * PAGE_SIZE..(first + pages) * PAGE_SIZE].chunks_mut(PAGE_SIZE) {
                clear_4k(p);
            }
        }
    });
    ns as f64 / (pages * reps) as f64
}

/// ns per 4 KiB page of copying the first half of `pages` pages of `buf`
/// into the second half, `reps` times.
fn copy_pages(buf: &mut [u8], first: usize, pages: usize, reps: usize) -> f64 {
    let half = pages / 2;
    let region = &mut buf[first * PAGE_SIZE..(first + pages) * PAGE_SIZE];
    let (src, dst) = region.split_at_mut(half * PAGE_SIZE);
    let ns = cpu_ns_of(|| {
        for _ in 0..reps {
            for (d, s) in dst.chunks_mut(PAGE_SIZE).zip(src.chunks(PAGE_SIZE)) {
                copy_4k(d, s);
            }
        }
    });
    ns as f64 / (half * reps) as f64
}

/// Page clear and copy, hot and cold, on one thread (pinned to `cpu`).
/// The buffer is allocated once and shared by the four probes.
pub fn page_probes<'a>(buf: &'a std::cell::RefCell<HugeBuf>, cpu: usize) -> Vec<Probe<'a>> {
    let pin = move || pin_to_cpu(cpu);
    vec![
        Probe::new(
            "clear_page cold, 1 thread",
            "ns/page",
            "rep stosb of each 4 KiB page of a 256 MiB THP-backed buffer (8x LLC), thread CPU time",
            move || {
                pin()?;
                Ok(clear_pages(
                    buf.borrow_mut().as_mut_slice(),
                    0,
                    COLD_PAGES,
                    1,
                ))
            },
        ),
        Probe::new(
            "clear_page hot, 1 thread",
            "ns/page",
            "rep stosb of the same 16 x 4 KiB pages (L1/L2-resident) 2000 times",
            move || {
                pin()?;
                Ok(clear_pages(
                    buf.borrow_mut().as_mut_slice(),
                    0,
                    HOT_PAGES,
                    2000,
                ))
            },
        ),
        Probe::new(
            "copy_page cold, 1 thread",
            "ns/page",
            "rep movsq of 4 KiB pages, 128 MiB to 128 MiB of a THP-backed buffer, thread CPU time",
            move || {
                pin()?;
                Ok(copy_pages(
                    buf.borrow_mut().as_mut_slice(),
                    0,
                    COLD_PAGES,
                    1,
                ))
            },
        ),
        Probe::new(
            "copy_page hot, 1 thread",
            "ns/page",
            "rep movsq of the same 8 x 4 KiB pages into 8 others (L1/L2-resident) 2000 times",
            move || {
                pin()?;
                Ok(copy_pages(
                    buf.borrow_mut().as_mut_slice(),
                    0,
                    HOT_PAGES,
                    2000,
                ))
            },
        ),
    ]
}

/// Page clear or copy on every CPU of `cpus` at once, each thread pinned
/// and sweeping its own `COLD_PAGES / n` pages: the per-thread time per page
/// (the mean of the threads' CPU time per page).
pub fn all_cpus_pages(buf: &mut HugeBuf, cpus: &[usize], copy: bool) -> Result<f64, NativeError> {
    let n = cpus.len().max(1);
    let per = COLD_PAGES / n;
    let slice = buf.as_mut_slice();
    let chunks: Vec<&mut [u8]> = slice[..per * n * PAGE_SIZE]
        .chunks_mut(per * PAGE_SIZE)
        .collect();
    let times: Vec<Result<f64, NativeError>> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .zip(cpus)
            .map(|(chunk, &cpu)| {
                s.spawn(move || {
                    pin_to_cpu(cpu)?;
                    Ok(if copy {
                        copy_pages(chunk, 0, per, 1)
                    } else {
                        clear_pages(chunk, 0, per, 1)
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(NativeError::ThreadPanicked { what: "page sweep" }))
            })
            .collect()
    });
    let mut sum = 0.0;
    for t in times {
        sum += t?;
    }
    Ok(sum / n as f64)
}

/// A cache line of its own.
#[repr(align(64))]
struct Line<T>(T);

/// ns per uncontended spin-lock round: a locked compare-and-swap that takes
/// the lock word and the release store that frees it, on a line this CPU
/// owns (the x86 `spin_lock()`/`spin_unlock()` pair, less the interrupt
/// flag handling of the `_irqsave` forms, which user space cannot do).
pub fn locked_pair_ns() -> f64 {
    let lock = Line(AtomicU32::new(0));
    const N: u64 = 200_000;
    let ns = cpu_ns_of(|| {
        for _ in 0..N {
            while lock
                .0
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {}
            lock.0.store(0, Ordering::Release);
        }
    });
    ns as f64 / N as f64
}

/// Round trips of one line between two pinned threads, or a spin lock handed
/// back and forth with `extra_lines` written under it: wall ns per one-way
/// hand-off, the 10th percentile of `batches` batches of `n` round trips.
///
/// Why not the median: on a host whose CPUs run other work, a batch during
/// which either thread was descheduled measures the scheduler, not the
/// cache; short batches and a low percentile keep the ones where both ran.
fn ping_pong(
    a: usize,
    b: usize,
    extra_lines: usize,
    batches: usize,
    n: u64,
) -> Result<f64, NativeError> {
    let turn = Arc::new(Line(AtomicU64::new(0)));
    let data: Arc<Vec<Line<AtomicU64>>> =
        Arc::new((0..extra_lines).map(|_| Line(AtomicU64::new(0))).collect());
    let total = batches as u64 * n;
    let (t2, d2) = (turn.clone(), data.clone());
    let other = std::thread::spawn(move || -> Result<(), NativeError> {
        pin_to_cpu(b)?;
        for i in 0..total {
            take_turn(&t2.0, &d2, 2 * i + 1);
        }
        Ok(())
    });
    pin_to_cpu(a)?;
    let mut per = Vec::with_capacity(batches);
    for k in 0..batches as u64 {
        let t0 = Instant::now();
        for i in k * n..(k + 1) * n {
            take_turn(&turn.0, &data, 2 * i);
        }
        per.push(t0.elapsed().as_nanos() as f64 / (2 * n) as f64);
    }
    other
        .join()
        .map_err(|_| NativeError::ThreadPanicked { what: "ping-pong" })??;
    per.sort_by(f64::total_cmp);
    Ok(per[per.len() / 10])
}

/// Waits until `turn` is `mine`, takes it with a locked compare-and-swap
/// (the lock), writes the data lines (the free-list heads a zone lock
/// protects) and hands the turn to the other thread with a release store.
///
/// Without data lines it is a plain cache-line ping-pong: the waiter spins
/// on loads and writes the line only to hand the turn back.
fn take_turn(turn: &AtomicU64, data: &[Line<AtomicU64>], mine: u64) {
    loop {
        // Test before test-and-set, as qspinlock waiters do.
        while turn.load(Ordering::Acquire) != mine {
            std::hint::spin_loop();
        }
        if data.is_empty()
            || turn
                .compare_exchange(mine, u64::MAX, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            break;
        }
    }
    for d in data {
        d.0.store(mine, Ordering::Relaxed);
    }
    turn.store(mine + 1, Ordering::Release);
}

/// How two CPUs are related, from `/sys/devices/system/cpu/cpuN/topology`
/// and `cache/index3/shared_cpu_list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuPair {
    /// Hardware threads of one core.
    Smt,
    /// Different cores sharing the last-level cache.
    SameLlc,
    /// Same package, different LLC (another CCX/CCD).
    OtherLlc,
    /// Different packages.
    OtherSocket,
}

impl CpuPair {
    /// The profile cost this pair measures.
    pub fn cost_key(self) -> &'static str {
        match self {
            CpuPair::Smt => "c2c_smt_ns",
            CpuPair::SameLlc => "c2c_same_llc_ns",
            CpuPair::OtherLlc => "c2c_other_llc_ns",
            CpuPair::OtherSocket => "c2c_other_socket_ns",
        }
    }

    /// Every kind of pair.
    pub const ALL: [CpuPair; 4] = [
        CpuPair::Smt,
        CpuPair::SameLlc,
        CpuPair::OtherLlc,
        CpuPair::OtherSocket,
    ];
}

/// Parses a sysfs CPU list (`0-3,8`).
pub fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

fn sysfs_cpu(cpu: usize, rel: &str) -> String {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/{rel}")).unwrap_or_default()
}

/// The relation of CPUs `a` and `b`.
pub fn classify(a: usize, b: usize) -> CpuPair {
    let pkg = |c| sysfs_cpu(c, "topology/physical_package_id");
    if pkg(a).trim() != pkg(b).trim() {
        return CpuPair::OtherSocket;
    }
    if parse_cpu_list(&sysfs_cpu(a, "topology/thread_siblings_list")).contains(&b) {
        return CpuPair::Smt;
    }
    if parse_cpu_list(&sysfs_cpu(a, "cache/index3/shared_cpu_list")).contains(&b) {
        return CpuPair::SameLlc;
    }
    CpuPair::OtherLlc
}

/// For each kind of pair, the first two CPUs of `cpus` related that way.
pub fn pairs_by_kind(cpus: &[usize]) -> Vec<(CpuPair, Option<(usize, usize)>)> {
    CpuPair::ALL
        .iter()
        .map(|&k| {
            let found = cpus.iter().enumerate().find_map(|(i, &a)| {
                cpus[i + 1..]
                    .iter()
                    .find(|&&b| classify(a, b) == k)
                    .map(|&b| (a, b))
            });
            (k, found)
        })
        .collect()
}

/// One-way cache-line transfer between `a` and `b`: half a round trip of a
/// line two pinned threads hand back and forth (wall ns, see [`ping_pong`]).
pub fn c2c_probe<'a>(kind: CpuPair, a: usize, b: usize) -> Probe<'a> {
    Probe::new(
        format!("cache line {a}<->{b} ({})", kind.cost_key()),
        "ns",
        format!(
            "one line bounced between pinned threads on CPUs {a} and {b}, half the round trip, 10th percentile of 200 batches x 200 (wall)"
        ),
        move || ping_pong(a, b, 0, 200, 200),
    )
}

/// A spin lock handed between `a` and `b` with two more lines written
/// under it: wall ns per hand-off (see [`ping_pong`]).
pub fn handoff_probe<'a>(a: usize, b: usize) -> Probe<'a> {
    Probe::new(
        format!("spin lock hand-off {a}<->{b}"),
        "ns",
        format!(
            "a lock word taken by locked cmpxchg alternately on CPUs {a} and {b}, two more lines written under it (list heads), per hand-off, 10th percentile of 200 batches x 200 (wall)"
        ),
        move || ping_pong(a, b, 2, 200, 200),
    )
}

/// Which side of a cross-CPU wake-up a [`wake_probe`] times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeSide {
    /// The waker's CPU time in the wake call (`futex(FUTEX_WAKE)`:
    /// `try_to_wake_up()` queueing the task on the other CPU and the IPI
    /// that kicks it), as `queue_work_on()` ends in the same
    /// `wake_up_process()`.
    Waker,
    /// Wall time from the wake call to the woken thread running on the
    /// other CPU, after that CPU had been idle for a millisecond.
    Latency,
}

/// Wakes a thread parked on CPU `b` from CPU `a`, 100 times with a
/// millisecond between wake-ups (so the sleeper's CPU can go idle): the
/// 10th percentile of `side`'s ns, as on a shared host the other CPU is
/// often busy with other work, which delays the woken thread.
pub fn wake_probe<'a>(a: usize, b: usize, side: WakeSide) -> Probe<'a> {
    let (name, how) = match side {
        WakeSide::Waker => ("wake-up, waker's side", format!("thread CPU time of unpark() (futex wake) of a thread parked on CPU {b}, from CPU {a}, 10th percentile of 100 with 1 ms between")),
        WakeSide::Latency => ("wake-up latency", format!("wall time from unpark() on CPU {a} to the thread parked on CPU {b} running, 10th percentile of 100 with 1 ms between")),
    };
    Probe::new(name, "ns", how, move || wake_ns(a, b, side))
}

fn wake_ns(a: usize, b: usize, side: WakeSide) -> Result<f64, NativeError> {
    use std::sync::atomic::AtomicBool;
    const N: usize = 100;
    let base = Instant::now();
    let woke = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (w2, s2) = (woke.clone(), stop.clone());
    let sleeper = std::thread::spawn(move || -> Result<(), NativeError> {
        pin_to_cpu(b)?;
        while !s2.load(Ordering::Acquire) {
            std::thread::park();
            w2.store(base.elapsed().as_nanos() as u64, Ordering::Release);
        }
        Ok(())
    });
    pin_to_cpu(a)?;
    let mut per = Vec::with_capacity(N);
    for _ in 0..N {
        std::thread::sleep(std::time::Duration::from_millis(1));
        woke.store(0, Ordering::Release);
        let t0 = base.elapsed().as_nanos() as u64;
        let c0 = crate::sys::thread_cpu_ns();
        sleeper.thread().unpark();
        let c1 = crate::sys::thread_cpu_ns();
        let deadline = Instant::now() + std::time::Duration::from_millis(100);
        let mut at = 0;
        while at == 0 && Instant::now() < deadline {
            at = woke.load(Ordering::Acquire);
            std::hint::spin_loop();
        }
        per.push(match side {
            WakeSide::Waker => (c1 - c0) as f64,
            WakeSide::Latency => at.saturating_sub(t0) as f64,
        });
    }
    stop.store(true, Ordering::Release);
    sleeper.thread().unpark();
    sleeper.join().map_err(|_| NativeError::ThreadPanicked {
        what: "wake-up sleeper",
    })??;
    per.retain(|&x| x > 0.0);
    if per.is_empty() {
        return Err(NativeError::InvalidConfig {
            what: "the sleeper never woke".into(),
        });
    }
    per.sort_by(f64::total_cmp);
    Ok(per[per.len() / 10])
}

/// A dependent load chain through a random cyclic permutation of the cache
/// lines of a THP-backed buffer (no TLB misses to speak of): ns per load.
pub struct Chase {
    buf: HugeBuf,
    /// Lines in the chain.
    lines: usize,
}

impl Chase {
    /// Builds the chain over the first `bytes` of a THP-backed buffer
    /// (the buffer rounded to 2 MiB).
    pub fn new(bytes: usize, seed: u64) -> Result<Chase, NativeError> {
        let mut buf = HugeBuf::new(bytes, 0)?;
        buf.dont_fork()?;
        let lines = bytes.min(buf.len()) / CACHE_LINE;
        let mut order: Vec<u32> = (0..lines as u32).collect();
        SplitMix64::new(seed).shuffle(&mut order);
        let s = buf.as_mut_slice();
        for w in 0..lines {
            let from = order[w] as usize * CACHE_LINE;
            let to = order[(w + 1) % lines] as u64 * CACHE_LINE as u64;
            s[from..from + 8].copy_from_slice(&to.to_ne_bytes());
        }
        Ok(Chase { buf, lines })
    }

    /// ns per load over the whole chain, walked once to bring it into
    /// whatever cache holds it and timed on the second walk: the latency of
    /// a working set of the chain's size.
    pub fn cycle_ns(&self) -> f64 {
        let lines = self.lines as u64;
        self.run(lines);
        self.run(lines)
    }

    /// ns per load over `loads` dependent loads (thread CPU time).
    pub fn run(&self, loads: u64) -> f64 {
        let s = self.buf.as_slice();
        let mut at = 0usize;
        let ns = cpu_ns_of(|| {
            for _ in 0..loads {
                let b: [u8; 8] = s[at..at + 8].try_into().expect("8 bytes");
                at = u64::from_ne_bytes(b) as usize;
            }
        });
        std::hint::black_box(at);
        ns as f64 / loads as f64
    }
}

/// The loads and compares of `vmacache_find()` (Linux 3.15-6.0) in user
/// space: the slots of pointers to `(vm_start, vm_end)` pairs examined in
/// order (a NULL test, then the bounds), the address in slot `hit_slot`
/// (0-3); ns per lookup, everything in L1 as in a fault loop. 6.18 has no
/// VMA cache to time, so this times the same instructions; the difference
/// between hits in slot 3 and slot 0 is three slots' examination.
pub fn vmacache_find_ns(hit_slot: usize) -> f64 {
    let vmas: [Line<[u64; 2]>; 4] = [
        Line([0x1000, 0x2000]),
        Line([0x3000, 0x4000]),
        Line([0x5000, 0x6000]),
        Line([0x7000, 0x9000]),
    ];
    let slots: [Option<&Line<[u64; 2]>>; 4] = [
        Some(&vmas[0]),
        Some(&vmas[1]),
        Some(&vmas[2]),
        Some(&vmas[3]),
    ];
    let base = vmas[hit_slot.min(3)].0[0];
    const N: u64 = 1_000_000;
    let mut hits = 0u64;
    let ns = cpu_ns_of(|| {
        for i in 0..N {
            let addr = std::hint::black_box(base + (i & 0xff));
            let slots = std::hint::black_box(&slots);
            for v in slots.iter().flatten() {
                if v.0[0] <= addr && addr < v.0[1] {
                    hits += 1;
                    break;
                }
            }
        }
    });
    std::hint::black_box(hits);
    ns as f64 / N as f64
}

/// A user store to one byte of each 4 KiB page of `buf` (already mapped):
/// ns per page, thread CPU time.
pub fn touch_ns(buf: &mut [u8]) -> f64 {
    let pages = buf.len() / PAGE_SIZE;
    let ns = cpu_ns_of(|| {
        for p in 0..pages {
            // SAFETY: the index is inside `buf`; volatile keeps every store.
            unsafe { std::ptr::write_volatile(&mut buf[p * PAGE_SIZE], 1) };
        }
    });
    ns as f64 / pages as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8\n"), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("5"), vec![5]);
        assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
    }

    #[test]
    fn clear_and_copy_do_what_they_say() {
        let mut a = vec![7u8; 2 * PAGE_SIZE];
        clear_4k(&mut a[..PAGE_SIZE]);
        assert!(a[..PAGE_SIZE].iter().all(|&b| b == 0));
        assert!(a[PAGE_SIZE..].iter().all(|&b| b == 7));
        let (x, y) = a.split_at_mut(PAGE_SIZE);
        copy_4k(x, y);
        assert!(a.iter().all(|&b| b == 7));
    }

    #[test]
    fn a_wake_up_takes_time_on_both_sides() {
        let cpus = crate::sys::allowed_cpus().unwrap();
        if cpus.len() < 2 {
            eprintln!("SKIPPED (cannot run here): one CPU");
            return;
        }
        let _g = crate::sys::AffinityGuard::save().unwrap();
        let waker = wake_ns(cpus[0], cpus[1], WakeSide::Waker).unwrap();
        let latency = wake_ns(cpus[0], cpus[1], WakeSide::Latency).unwrap();
        eprintln!("wake-up: waker {waker} ns, latency {latency} ns");
        assert!(waker > 0.0 && latency > 0.0);
    }

    #[test]
    fn chase_visits_a_cycle() {
        let c = Chase::new(2 << 20, 1).unwrap();
        assert!(c.run(1000) > 0.0);
    }
}
