//! The live-kernel side of a calibration: the micro-benchmarks of
//! `native::calibrate` and fault patterns run with `native::faults`, each
//! repeated in interleaved rounds.

pub use super::reporting::ReportingWindow;
use native::calibrate::hw::{self, CpuPair};
use native::calibrate::isolated;
use native::calibrate::kernel;
use native::calibrate::{run_interleaved, run_interleaved_between, Measurement, Outcome, Probe};
use native::faults::{Access, Advice, FaultPattern, Step};
use native::knobs::{KnobGuard, LiveLock, ThpEnabled, ThpKnobs, PERCPU_PAGELIST_HIGH_FRACTION};
use native::NativeError;
use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Micro-benchmark names the derivation looks up.
pub mod names {
    pub const SYSCALL: &str = "syscall round trip (getppid)";
    pub const CLEAR_COLD: &str = "clear_page cold, 1 thread";
    pub const CLEAR_HOT: &str = "clear_page hot, 1 thread";
    pub const COPY_COLD: &str = "copy_page cold, 1 thread";
    pub const COPY_HOT: &str = "copy_page hot, 1 thread";
    pub const CLEAR_ALL: &str = "clear_page cold, all CPUs at once";
    pub const COPY_ALL: &str = "copy_page cold, all CPUs at once";
    pub const LOCK: &str = "spin lock round, uncontended";
    pub const HANDOFF: &str = "spin lock hand-off";
    pub const WAKER: &str = "wake-up, waker's side";
    pub const WAKE_LATENCY: &str = "wake-up latency";
    pub const DRAM: &str = "DRAM load (pointer chase)";
    pub const TOUCH: &str = "user store per mapped 4 KiB page";
    pub const MINCORE_FEW: &str = "mincore, this process's VMAs";
    pub const MINCORE_MANY: &str = "mincore, with many more VMAs";
    pub const VMA_RANDOM: &str = "mincore at random pages, many VMAs less one VMA";
    pub const MMAP: &str = "mmap+munmap 4 KiB";
    pub const MPROTECT1: &str = "mprotect 1 page, populated";
    pub const MPROTECT1_EMPTY: &str = "mprotect 1 page, not populated, its PTE table present";
    pub const MPROTECT1_IPI: &str =
        "TLB shootdown IPI (mprotect, a thread of the process on another CPU)";
    pub const MUNMAP_PAGES: &str = "munmap per populated page";
    pub const MPROTECT_PAGES: &str = "mprotect per populated page";
    pub const FORK_PAGES: &str = "fork per populated page";
    pub const VMACACHE1: &str = "vmacache_find equivalent, hit in slot 0";
    pub const VMACACHE4: &str = "vmacache_find equivalent, hit in slot 3";
    pub const COPY_ISOLATED: &str = "copy_page cold, one at a time (COW)";
    pub const CONTEXT_SWITCH: &str = "two context switches on one CPU";
    pub const BUDDY_INSN: &str = "buddy free-list operation, instructions only";
    pub const FRESH_PTE: &str = "first access to a 64K folio's other pages after its fault";

    /// The dependent-load chase over a working set of `mib` MiB.
    pub fn chase(mib: usize) -> String {
        format!("dependent load, {mib} MiB working set")
    }
}

/// Working sets of the cache-capacity chases, MiB (those up to the LLC
/// sysfs gives run): where their latency turns from a cache's to DRAM's
/// is the LLC this guest actually gets ([`crate::calibrate`]'s
/// `effective_llc`).
pub const CHASE_MIB: [usize; 5] = [1, 2, 4, 8, 16];

/// Back-to-back repeats of each micro-benchmark per round; the round keeps
/// the fastest (`native::calibrate::run_interleaved` says why).
pub const MICRO_REPEATS: usize = 3;

/// `mincore()` calls per sample of the random-lookup VMA probe.
const RANDOM_LOOKUPS: usize = 20_000;

/// Sizes of the region probes, in 4 KiB pages.
pub const REGION_PAGES: usize = 16 * 1024;
/// The smaller region of the fork slope.
pub const FORK_SMALL_PAGES: usize = 4 * 1024;

/// Every micro-benchmark's outcome, and what the derivation needs besides.
pub struct Micro {
    /// In the order run.
    pub outcomes: Vec<Outcome>,
    /// VMAs of this process in the "few" mincore probe.
    pub few_vmas: usize,
    /// VMAs in the "many" probe.
    pub many_vmas: usize,
    /// The CPU pair of each kind found, and why a kind was not.
    pub pairs: Vec<(CpuPair, Option<(usize, usize)>)>,
}

impl Micro {
    /// The measurement called `name`, if it ran.
    pub fn get(&self, name: &str) -> Option<&Measurement> {
        self.outcomes.iter().find(|o| o.name() == name)?.measured()
    }

    /// Why `name` did not run, if it did not.
    pub fn why_not(&self, name: &str) -> Option<String> {
        match self.outcomes.iter().find(|o| o.name() == name) {
            Some(Outcome::Skipped { why, .. }) => Some(why.clone()),
            Some(Outcome::Measured(_)) => None,
            None => Some("not run on this host".into()),
        }
    }
}

fn skipped(name: &str, why: impl Into<String>) -> Outcome {
    Outcome::Skipped {
        name: name.into(),
        why: why.into(),
    }
}

/// What runs between the micro-benchmarks' rounds: `(round, of rounds,
/// the live-kernel lock held, progress)`.
pub type Between<'b> = dyn FnMut(usize, usize, &LiveLock, &mut dyn FnMut(&str)) + 'b;

/// Runs every micro-benchmark, `rounds` interleaved rounds, pinned to the
/// first allowed CPU, and `between` after each sampled round, unpinned
/// ([`FitAndCheck`] says why), all under one hold of the live-kernel lock.
pub fn run_micro(
    rounds: usize,
    progress: &mut dyn FnMut(&str),
    between: &mut Between<'_>,
) -> Result<Micro, NativeError> {
    let lock = live_lock()?;
    let cpus = native::sys::allowed_cpus()?;
    let _affinity = native::sys::AffinityGuard::save()?;
    let me = cpus[0];
    native::sys::pin_to_cpu(me)?;
    let pairs = hw::pairs_by_kind(&cpus);
    // The fork probe must not leave these write-protected for copy-on-write.
    let page_buf = native::sys::HugeBuf::new(hw::COLD_PAGES * 4096, 1)?;
    page_buf.dont_fork()?;
    let page_buf = RefCell::new(page_buf);
    let chase = hw::Chase::new(256 << 20, 7)?;
    let llc = native::sys::llc_bytes();
    let chases = CHASE_MIB
        .iter()
        .filter(|&&m| llc == 0 || (m << 20) as u64 <= llc)
        .map(|&m| Ok((m, hw::Chase::new(m << 20, 11)?)))
        .collect::<Result<Vec<_>, NativeError>>()?;
    let mut touch_buf = kernel::Region::new(64 << 20, libc_rw(), true)?;
    touch_buf.dont_fork()?;
    let few_vmas = kernel::nr_vmas()?;
    let budget = kernel::vma_budget(60_000)?;
    let mut probes = hw::page_probes(&page_buf, me);
    probes.extend(all_cpu_probes(&page_buf, &cpus));
    probes.extend(isolated_probes(&page_buf, me));
    probes.push(Probe::new(
        names::LOCK,
        "ns",
        "200000 x (lock cmpxchg 0->1, release store 0) on an owned line, thread CPU time",
        || Ok(hw::locked_pair_ns()),
    ));
    probes.push(Probe::new(names::DRAM, "ns", "500000 dependent loads through a random cyclic permutation of the lines of a 256 MiB THP-backed buffer, thread CPU time", || Ok(chase.run(500_000))));
    for (mib, c) in &chases {
        probes.push(Probe::new(names::chase(*mib), "ns", format!("the dependent loads through a random cyclic permutation of the lines of a {mib} MiB THP-backed buffer, walked once, then timed on a second walk, thread CPU time"), move || Ok(c.cycle_ns())));
    }
    probes.push(Probe::new(
        names::TOUCH,
        "ns/page",
        "a store to one byte of each page of 64 MiB of mapped 4 KiB pages, thread CPU time",
        move || Ok(hw::touch_ns(touch_buf.as_mut_slice())),
    ));
    for (name, slot) in [(names::VMACACHE1, 0), (names::VMACACHE4, 3)] {
        probes.push(Probe::new(name, "ns", format!("user-space replica of vmacache_find(): 4 slots loaded, NULL-tested and bounds-compared in order, hit in slot {slot}, L1-resident, 10^6 lookups, thread CPU time"), move || Ok(hw::vmacache_find_ns(slot))));
    }
    for &(kind, pair) in &pairs {
        if let Some((a, b)) = pair {
            probes.push(hw::c2c_probe(kind, a, b));
        }
    }
    if let Some((a, b)) = pairs.iter().find_map(|p| p.1) {
        probes.push(hw::handoff_probe(a, b).renamed(names::HANDOFF));
        probes.push(kernel::mprotect_ipi_probe(a, b).renamed(names::MPROTECT1_IPI));
        probes.push(hw::wake_probe(a, b, hw::WakeSide::Waker));
        probes.push(hw::wake_probe(a, b, hw::WakeSide::Latency));
    }
    probes.extend(kernel_probes(budget));
    let mut affinity: Result<(), NativeError> = Ok(());
    let mut outcomes = run_interleaved_between(
        probes,
        rounds,
        MICRO_REPEATS,
        |n| progress(n),
        |round, progress| {
            // Unpinned between the micro-benchmarks: each repetition pins
            // itself (run_rep_once) after starting the reporting watcher,
            // which must inherit no pin.
            // After a failure here the rest is left to the caller.
            if affinity.is_ok() {
                affinity = native::sys::set_affinity(&cpus)
                    .map(|()| between(round, rounds, &lock, progress))
                    .and_then(|()| native::sys::pin_to_cpu(me));
            }
        },
    );
    affinity?;
    if pairs.iter().all(|p| p.1.is_none()) {
        for n in [
            names::HANDOFF,
            names::MPROTECT1_IPI,
            names::WAKER,
            names::WAKE_LATENCY,
        ] {
            outcomes.push(skipped(n, "this process may run on one CPU only"));
        }
    }
    Ok(Micro {
        outcomes,
        few_vmas,
        many_vmas: few_vmas + budget,
        pairs,
    })
}

/// More rounds of the cross-CPU probes (the cache-line transfer of each
/// CPU pair, the lock hand-off and the TLB shootdown IPI), their samples
/// added to the micro
/// phase's: called between the later phases of a calibration, so that the
/// samples span the run rather than its first minute. The hypervisor moves
/// the two vCPUs between host placements that hold for tens of seconds to
/// minutes (one-way transfer ~20-45 ns or ~190 ns here), and a phase of
/// samples ~40 s long often meets one of them only (`Placements` in the
/// derivation splits the modes; the IPI probe finds no IPI to time in
/// some placements). Holds the live-kernel lock ([`live_lock`] says why).
pub fn resample_cross_cpu(micro: &mut Micro, rounds: usize) -> Result<(), NativeError> {
    let Some((a, b)) = micro.pairs.iter().find_map(|p| p.1) else {
        return Ok(());
    };
    let _lock = live_lock()?;
    let _affinity = native::sys::AffinityGuard::save()?;
    let mut probes: Vec<Probe<'_>> = micro
        .pairs
        .iter()
        .filter_map(|&(kind, pair)| pair.map(|(a, b)| hw::c2c_probe(kind, a, b)))
        .collect();
    probes.push(hw::handoff_probe(a, b).renamed(names::HANDOFF));
    probes.push(kernel::mprotect_ipi_probe(a, b).renamed(names::MPROTECT1_IPI));
    for new in run_interleaved(probes, rounds, MICRO_REPEATS, |_| {}) {
        let Outcome::Measured(new) = new else {
            continue;
        };
        merge_samples(&mut micro.outcomes, new);
    }
    Ok(())
}

/// Adds a later phase's samples of a probe to its outcome: to its samples
/// if it measured before, in place of the reason it did not if it did
/// not (the TLB shootdown IPI needs the other vCPU running, which one
/// placement of the two often denies for a whole phase).
fn merge_samples(outcomes: &mut [Outcome], new: Measurement) {
    let Some(o) = outcomes.iter_mut().find(|o| o.name() == new.name) else {
        return;
    };
    match o {
        Outcome::Measured(old) => {
            old.samples.extend(new.samples);
            if let Some(s) = native::stats::Summary::of(&old.samples) {
                old.summary = s;
            }
        }
        Outcome::Skipped { .. } => *o = Outcome::Measured(new),
    }
}

/// The probes of single operations among other work
/// (`native::calibrate::isolated`).
fn isolated_probes(buf: &RefCell<native::sys::HugeBuf>, me: usize) -> Vec<Probe<'_>> {
    let mut stir = vec![0u8; isolated::STIR_BYTES];
    let mut seed = 0u64;
    vec![
        Probe::new(
            names::COPY_ISOLATED,
            "ns/page",
            format!(
                "rep movsb (copy_mc_enhanced_fast_string, the COW copy) of {} random cold 4 KiB pages of a 256 MiB THP-backed buffer to random others, 16 KiB of L2-resident stores between copies, less those stores alone, thread CPU time",
                isolated::ISOLATED_COPIES
            ),
            move || {
                seed += 1;
                Ok(isolated::copy_isolated_ns(
                    buf.borrow_mut().as_mut_slice(),
                    &mut stir,
                    seed,
                ))
            },
        ),
        Probe::new(
            names::CONTEXT_SWITCH,
            "ns",
            format!("two threads pinned to CPU {me} waking each other (futex wake, futex wait) in turn: per round trip (two wake-ups, two context switches), both threads' CPU time"),
            move || isolated::context_switch_ns(me),
        ),
        Probe::new(
            names::BUDDY_INSN,
            "ns",
            "user-space replica of del_page_from_free_list() + add_to_free_list() (list unlink and link, PG_buddy and order, nr_free) on 8 L1-resident 64-byte nodes, 10^6 operations, thread CPU time",
            || Ok(isolated::buddy_list_insn_ns()),
        ),
    ]
}

fn libc_rw() -> i32 {
    kernel::RW
}

fn all_cpu_probes<'a>(buf: &'a RefCell<native::sys::HugeBuf>, cpus: &'a [usize]) -> Vec<Probe<'a>> {
    let how = |what: &str| {
        format!(
            "{what} of 4 KiB pages of a 256 MiB THP-backed buffer split among {} pinned threads (one per CPU), mean thread CPU time per page",
            cpus.len()
        )
    };
    vec![
        Probe::new(names::CLEAR_ALL, "ns/page", how("rep stosb"), move || {
            hw::all_cpus_pages(&mut buf.borrow_mut(), cpus, false)
        }),
        Probe::new(names::COPY_ALL, "ns/page", how("rep movsq"), move || {
            hw::all_cpus_pages(&mut buf.borrow_mut(), cpus, true)
        }),
    ]
}

fn kernel_probes<'a>(budget: usize) -> Vec<Probe<'a>> {
    let mut v = vec![
        kernel::syscall_probe(),
        kernel::mmap_munmap_probe(),
        kernel::mprotect_page_probe(true),
        kernel::mprotect_page_probe(false),
        kernel::munmap_pages_probe(REGION_PAGES).renamed(names::MUNMAP_PAGES),
        kernel::mprotect_pages_probe(REGION_PAGES).renamed(names::MPROTECT_PAGES),
        kernel::fork_pages_probe(FORK_SMALL_PAGES, REGION_PAGES).renamed(names::FORK_PAGES),
        Probe::new(names::MINCORE_FEW, "ns", "50000 x mincore() of one unpopulated PROT_READ page between PROT_NONE ones, thread CPU time", move || {
            let few = kernel::ManyVmas::new(1)?;
            kernel::mincore_ns(few.probe_addr)
        }),
    ];
    if budget >= 4096 {
        let mut seed = 0u64;
        v.push(Probe::new(
            names::VMA_RANDOM,
            "ns",
            format!("{RANDOM_LOOKUPS} x mincore() of one unpopulated page drawn at random from the odd pages of {budget} alternating PROT_READ/PROT_NONE one-page VMAs, less the same draw over one PROT_READ VMA of the same span, thread CPU time"),
            move || {
                seed += 1;
                let many = kernel::ManyVmas::new(budget)?;
                let (start, pages) = (many.addr(), many.nr_pages());
                let t_many = kernel::mincore_random_ns(start, pages, RANDOM_LOOKUPS, seed)?;
                drop(many);
                let one = kernel::one_vma(pages)?;
                let t_one = kernel::mincore_random_ns(one.addr(), pages, RANDOM_LOOKUPS, seed)?;
                Ok(t_many - t_one)
            },
        ));
        v.push(Probe::new(
            names::MINCORE_MANY,
            "ns",
            format!("the same with {budget} more one-page VMAs (alternating PROT_READ/PROT_NONE) mapped"),
            move || {
                let many = kernel::ManyVmas::new(budget)?;
                kernel::mincore_ns(many.probe_addr)
            },
        ));
    }
    v
}

/// What part of a pattern is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timed {
    /// The touch phase.
    Touch,
    /// Every step (re-touches, or the fork writer).
    Steps,
}

/// A fault pattern with the PCP sizing it runs under.
#[derive(Clone, Debug)]
pub struct LivePattern {
    /// The pattern.
    pub pattern: FaultPattern,
    /// `vm.percpu_pagelist_high_fraction` during the run (0: the host's
    /// default, auto-tuned).
    pub fraction: u32,
    /// The timed phases.
    pub timed: Timed,
}

impl LivePattern {
    /// 4 KiB pages touched in the timed phases.
    pub fn timed_pages(&self) -> u64 {
        let n = self.pattern.nr_pages() as u64;
        match self.timed {
            Timed::Touch => n,
            Timed::Steps => n * self.pattern.steps.len() as u64,
        }
    }
}

/// Sequential writes of `mib` MiB in folios of `size_kb` (4: THP off),
/// with `MADV_HUGEPAGE` and the size's knob at `madvise` so that only this
/// region gets large folios.
pub fn write_pattern(mib: usize, size_kb: u32) -> LivePattern {
    let name = format!("write {mib} MiB, {}", size_name(size_kb));
    let mut p = if size_kb == 4 {
        FaultPattern::new(&name, mib << 20, ThpKnobs::off())
    } else {
        FaultPattern::new(
            &name,
            mib << 20,
            ThpKnobs::only(size_kb, ThpEnabled::Madvise),
        )
    };
    if size_kb != 4 {
        p.advice = Advice::Hugepage;
    }
    LivePattern {
        pattern: p,
        fraction: 0,
        timed: Timed::Touch,
    }
}

/// `4K`, `64K`, `2M`.
pub fn size_name(kb: u32) -> String {
    if kb >= 1024 {
        format!("{}M", kb / 1024)
    } else {
        format!("{kb}K")
    }
}

/// Sequential reads of `mib` MiB with THP off: every fault maps the zero page.
pub fn read_pattern(mib: usize) -> LivePattern {
    let mut p = FaultPattern::new(
        &format!("read {mib} MiB, 4K (zero page)"),
        mib << 20,
        ThpKnobs::off(),
    );
    p.access = Access::Read;
    LivePattern {
        pattern: p,
        fraction: 0,
        timed: Timed::Touch,
    }
}

/// `mib` MiB written in 4 KiB pages, then `rounds` times unmapped, mapped
/// again and re-written; the re-writes are timed. With `fraction` the PCP
/// lists are sized 1/fraction of the zone (a huge fraction: the minimum,
/// four batches), so the freed pages go back to the buddy lists and the
/// re-writes refill from them under the zone lock.
pub fn churn_pattern(mib: usize, rounds: usize, fraction: u32) -> LivePattern {
    let what = if fraction == 0 {
        "auto-tuned PCP high".to_string()
    } else {
        format!("percpu_pagelist_high_fraction {fraction}")
    };
    let mut p = FaultPattern::new(
        &format!("PCP churn {mib} MiB x{rounds}, {what}"),
        mib << 20,
        ThpKnobs::off(),
    );
    p.steps = vec![
        Step::MunmapRetouch {
            offset_bytes: 0,
            len_bytes: mib << 20,
        };
        rounds
    ];
    LivePattern {
        pattern: p,
        fraction,
        timed: Timed::Steps,
    }
}

/// `mib` MiB written in 4 KiB pages, then a forked child writes every page
/// (copy-on-write of each); the child's faults are timed.
pub fn cow_pattern(mib: usize) -> LivePattern {
    let mut p = FaultPattern::new(
        &format!("fork COW {mib} MiB, 4K"),
        mib << 20,
        ThpKnobs::off(),
    );
    p.steps = vec![Step::ForkWriter];
    LivePattern {
        pattern: p,
        fraction: 0,
        timed: Timed::Steps,
    }
}

/// Wall nanoseconds spent waiting for the live-kernel lock (other users of
/// the host's knobs hold it), so that the report can tell the
/// calibration's own time from the wait.
pub static LOCK_WAIT_NS: AtomicU64 = AtomicU64::new(0);

/// The live-kernel lock, the wait for it counted in [`LOCK_WAIT_NS`].
///
/// The micro-benchmarks change no system state, but they time system
/// calls and faults that another user of the lock can slow system-wide:
/// `scripts/corpus.py perf-record` (under the lock) runs `perf record -a`
/// with the `syscalls:sys_enter_mprotect`, page-fault and `kmem`
/// tracepoints, which every task then passes through. A calibration whose
/// micro-benchmarks overlapped one (2026-11-24 23:18 UTC, load 5-8) timed
/// `mprotect` of one page at 1.8-2.8 us of thread CPU time against
/// 0.5-0.7 us in the runs before and after. So they hold it too, one
/// phase at a time.
pub fn live_lock() -> Result<LiveLock, NativeError> {
    let t0 = std::time::Instant::now();
    let lock = LiveLock::acquire()?;
    LOCK_WAIT_NS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    Ok(lock)
}

/// One repetition of a live pattern ([`run_rep`]): a warm-up, then two
/// runs back to back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rep {
    /// CPU ns of each run's timed phases.
    pub ns: [f64; 2],
    /// Faults of the second run's timed phases.
    pub faults: u64,
    /// KiB the guest's free page reporting handed to the host from the end
    /// of the warm-up to the end of the first run, and from there to the
    /// end of the second (`None`: this kernel has no such counter). The
    /// counter is the whole guest's: memory another process freed counts
    /// too.
    pub reported_kib: [Option<u64>; 2],
}

impl Rep {
    /// The faster run: the figure of the repetition, for the fit and the
    /// check alike.
    pub fn faster(&self) -> f64 {
        self.ns[0].min(self.ns[1])
    }

    /// Whether free page reporting handed memory to the host while this
    /// repetition's memory was free or being faulted.
    pub fn overlapped(&self) -> bool {
        self.reported_kib.iter().any(|k| k.is_some_and(|k| k > 0))
    }

    /// KiB reported during the repetition (`None`: no counter).
    pub fn reported_total(&self) -> Option<u64> {
        match self.reported_kib {
            [None, None] => None,
            [a, b] => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        }
    }
}

/// How often free page reporting overlapped the repetitions of the fit or
/// of the check ([`run_rep`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportingTally {
    /// Repetitions kept.
    pub reps: usize,
    /// Repetitions set aside and run again because reporting overlapped
    /// them.
    pub rerun: usize,
    /// Repetitions kept although reporting overlapped them: their re-runs
    /// were spent.
    pub kept_overlapped: usize,
    /// KiB reported during the repetitions set aside.
    pub aside_kib: u64,
    /// Repetitions run without the counter (the kernel has none).
    pub no_counter: usize,
}

impl ReportingTally {
    fn count(&mut self, kept: &Rep, aside: &[Rep]) {
        self.reps += 1;
        self.rerun += aside.len();
        self.kept_overlapped += usize::from(kept.overlapped());
        self.aside_kib += aside.iter().filter_map(Rep::reported_total).sum::<u64>();
        self.no_counter += usize::from(kept.reported_total().is_none());
    }

    /// One line for the report: `what` (the fit, the check) and its
    /// counts.
    pub fn describe(&self, what: &str) -> String {
        if self.no_counter == self.reps && self.reps > 0 {
            return format!(
                "{what}: {} repetitions, no free page reporting counter on this kernel",
                self.reps
            );
        }
        format!(
            "{what}: {} repetitions kept; {} set aside and run again because the guest reported memory to the host during them ({} MiB); {} kept although reported during (their {REPORTING_RERUNS} re-runs spent)",
            self.reps,
            self.rerun,
            self.aside_kib >> 10,
            self.kept_overlapped
        )
    }
}

/// How many times a repetition that free page reporting overlapped is run
/// again before it is kept as it is ([`run_rep`]).
pub const REPORTING_RERUNS: usize = 2;

/// One repetition of a pattern ([`Rep`]) under one hold of the lock: a
/// warm-up, then two live runs back to back, each after the memory the
/// one before it freed a moment earlier (the first's from the warm-up).
///
/// Why a warm-up and two runs: on a guest with free page reporting (a
/// virtio-balloon with `F_REPORTING`, `page_reporting_order` 9 here) free
/// blocks of 2 MiB and more go back to the host within seconds, and a
/// first touch of one faults in the host as well: 256 MiB of 2 MiB THPs
/// took 270-364 ms of CPU after the memory had been free for 6 s against
/// 11-16 ms when it was reused at once. The warm-up makes the host back
/// the memory the runs will get; the reporting counter says whether the
/// worker handed any memory back between the warm-up and a run's end
/// ([`run_rep`] acts on it).
///
/// The caller holds the live-kernel lock (`lock`), for as many patterns
/// as it runs together.
fn run_rep_once(
    p: &LivePattern,
    lock: &LiveLock,
    window: &mut ReportingWindow,
) -> Result<Rep, NativeError> {
    // The warm-up and both runs on one CPU (the runs' processes inherit
    // the pin): the warm-up's freed memory waits on that CPU's PCP lists,
    // and a run on the other CPU faults memory the host may not back.
    // Measured 2026-11-25 08:18 (load 5-6; 1 GiB of 2M THPs warmed on CPU
    // 0, then written twice by a child, reporting_kib still): with the
    // child on CPU 0 the first write took 47-52 ms in 8 of 8; on CPU 1,
    // 47-66 ms in 4 and 323-511 ms in the other 4, the second write ~48 ms.
    // The reporting watcher first, while this thread is not pinned: it
    // inherits the affinity and must not poll on the measuring CPU.
    window.watch();
    let cpus = native::sys::allowed_cpus()?;
    let _affinity = native::sys::AffinityGuard::save()?;
    native::sys::pin_to_cpu(cpus[0])?;
    let mut guard = KnobGuard::new(lock);
    let path = Path::new(PERCPU_PAGELIST_HIGH_FRACTION);
    let want = p.fraction.to_string();
    if native::knobs::read_knob(path)? != want {
        guard.set(path, &want)?;
    }
    // Memory the host has backed, as the kernel's cost is what is measured
    // (kernel::warm_memory says why); twice the region for a fork's copies.
    let copies = 1 + p.pattern.steps.contains(&Step::ForkWriter) as usize;
    let t_warm = Instant::now();
    let r = kernel::warm_region(copies * p.pattern.len_bytes + (4 << 20)).and_then(|warm| {
        window.ready(&p.pattern.name, t_warm.elapsed());
        let t0 = Instant::now();
        drop(warm);
        let mut rep = Rep::default();
        // From the end of the warm-up (or of the run before) to the end
        // of each run: memory reported then may be what the run faults.
        let mut prev = kernel::reported_kib();
        for i in 0..2 {
            let run = native::faults::run_locked(&p.pattern, lock)?;
            let now = kernel::reported_kib();
            rep.reported_kib[i] = prev.zip(now).map(|(a, b)| b.saturating_sub(a));
            prev = now;
            (rep.ns[i], rep.faults) = match p.timed {
                Timed::Touch => (run.touch.cpu_ns as f64, run.touch.nr_minflt),
                Timed::Steps => (
                    run.steps.iter().map(|s| s.cpu_ns as f64).sum(),
                    run.steps.iter().map(|s| s.nr_minflt).sum(),
                ),
            };
        }
        window.ran(&p.pattern.name, t0.elapsed());
        Ok(rep)
    });
    guard.restore()?;
    r
}

/// A repetition of `p` ([`run_rep_once`]) that free page reporting did not
/// overlap, or the last of `1 + REPORTING_RERUNS` tries; and the
/// repetitions set aside before it. Counted in `tally`.
///
/// Why: a run whose memory the guest handed to the host between the
/// warm-up and its end faults in the host too (the hypervisor's cost,
/// which the model does not have): at load ~10 three of a 32K pattern's
/// ten runs were 1.2x its fastest, with 1,680 MiB reported during them,
/// and moved its median by 21 %. Which repetitions are run again is
/// decided by the kernel's counter alone, never by how long they took,
/// and the fit and the check use the same rule: so the figure judged (the
/// median of the repetitions' faster runs) is the same statistic on both
/// sides, of repetitions the host's reporting did not reach.
pub fn run_rep(
    p: &LivePattern,
    lock: &LiveLock,
    reporting: &mut Reporting,
    side: Side,
) -> Result<(Rep, Vec<Rep>), NativeError> {
    let tally = match side {
        Side::Fit => &mut reporting.fit,
        Side::Check => &mut reporting.check,
    };
    rerun_overlapped(|| run_rep_once(p, lock, &mut reporting.window), tally)
}

/// [`run_rep`]'s rule on repetitions made by `try_rep`.
fn rerun_overlapped(
    mut try_rep: impl FnMut() -> Result<Rep, NativeError>,
    tally: &mut ReportingTally,
) -> Result<(Rep, Vec<Rep>), NativeError> {
    let mut aside = Vec::new();
    loop {
        let rep = try_rep()?;
        if !rep.overlapped() || aside.len() >= REPORTING_RERUNS {
            tally.count(&rep, &aside);
            return Ok((rep, aside));
        }
        aside.push(rep);
    }
}

/// A check pattern's live repetitions ([`run_rep`]): each one's first run
/// after the warm-up and immediate re-run, and the faults of the last run.
#[derive(Clone, Debug, Default)]
pub struct CheckLive {
    /// CPU ns of each first run.
    pub first: Vec<f64>,
    /// CPU ns of each immediate re-run.
    pub rerun: Vec<f64>,
    /// Faults of the last run.
    pub faults: u64,
    /// KiB that free page reporting handed to the host during each first
    /// run (from the warm-up's end; `None`: no counter on this kernel).
    pub first_reported_kib: Vec<Option<u64>>,
    /// The same for the re-runs (from the first run's end).
    pub rerun_reported_kib: Vec<Option<u64>>,
    /// Repetitions set aside and run again because free page reporting
    /// overlapped them ([`run_rep`]).
    pub set_aside: Vec<Rep>,
}

impl CheckLive {
    fn push(&mut self, rep: &Rep, aside: Vec<Rep>) {
        self.first.push(rep.ns[0]);
        self.rerun.push(rep.ns[1]);
        self.first_reported_kib.push(rep.reported_kib[0]);
        self.rerun_reported_kib.push(rep.reported_kib[1]);
        self.faults = rep.faults;
        self.set_aside.extend(aside);
    }

    /// The fastest run of any kept repetition.
    pub fn fastest(&self) -> f64 {
        self.first
            .iter()
            .chain(&self.rerun)
            .fold(f64::INFINITY, |a, &b| a.min(b))
    }
}

/// One repetition of every check pattern; a pattern that fails keeps why
/// in place of its runs.
fn run_check_rep(
    pats: &[LivePattern],
    out: &mut [Result<CheckLive, String>],
    first: bool,
    lock: &LiveLock,
    reporting: &mut Reporting,
    progress: &mut dyn FnMut(&str),
) {
    for (p, o) in pats.iter().zip(out.iter_mut()) {
        let Ok(c) = o else { continue };
        if first {
            progress(&p.pattern.name);
        }
        match run_rep(p, lock, reporting, Side::Check) {
            Ok((rep, aside)) => c.push(&rep, aside),
            Err(e) => *o = Err(e.to_string()),
        }
    }
}

/// How free page reporting overlapped the fit's repetitions and the
/// check's ([`run_rep`]).
#[derive(Debug, Default)]
pub struct Reporting {
    /// The fit's fault patterns (the PCP churns included).
    pub fit: ReportingTally,
    /// The closing check's.
    pub check: ReportingTally,
    /// The placing of every repetition's runs between reporting passes.
    pub window: ReportingWindow,
}

/// Which side of the calibration a repetition is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The fit's patterns.
    Fit,
    /// The closing check's.
    Check,
}

/// One unit of [`FitAndCheck`]'s work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// A round of every fit pattern.
    FitRound,
    /// A repetition of every check pattern.
    CheckRep,
}

/// `fit_rounds` fit rounds and `check_reps` check repetitions in the
/// order they run: the fit's rounds spread evenly before, between and
/// after the check's repetitions ([`fit_schedule`]).
fn units(fit_rounds: usize, check_reps: usize) -> Vec<Unit> {
    let mut v = Vec::new();
    for (slot, n) in fit_schedule(fit_rounds, check_reps).into_iter().enumerate() {
        v.extend(std::iter::repeat_n(Unit::FitRound, n));
        if slot < check_reps {
            v.push(Unit::CheckRep);
        }
    }
    v
}

/// Where share `i` of `n` (1-based) of `len` units ends: shares that
/// differ by one unit at most, the last ending at `len`.
fn share_end(i: usize, n: usize, len: usize) -> usize {
    (i * len).div_ceil(n.max(1)).min(len)
}

/// The fit's patterns (`fit_rounds` rounds) and the check's (`check_reps`
/// repetitions) in alternation, each repetition a warm-up and two runs
/// back to back ([`run_rep`]), run a share at a time between the
/// micro-benchmarks' rounds ([`run_micro`]'s `between`). Gives the fit's
/// samples (per pattern, the faster run of each round, and the last run's
/// faults) and the check's runs; for a pattern that could not run, why.
///
/// Why alternate: what a fault costs here moves with what the host's other
/// tenants do over minutes. A probe of 2026-11-25 (04:25 UTC, load rising
/// 5 -> 8 as three builds started) measured the 256 MiB DRAM chase at
/// 185 -> 300 ns and, right beside it, the fork-COW pattern at 123 -> 145
/// ms and 256 MiB of 4K writes at 84 -> 95 ms (the faster of two runs
/// each); at load 1.4-1.8 the fork-COW pattern pinned to CPU 0, to CPU 1
/// or unpinned took 115-129 ms alike, so the placement does not move it.
/// A fit measured in the first minute and a check in the next then
/// compare two hosts; measured side by side, a slow phase meets both. The
/// micro-benchmarks (clear/copy bandwidth, the DRAM chase, the syscalls)
/// give costs the fit builds on, so they are taken in the same
/// alternation: each of their rounds is followed by a share of the fault
/// patterns' rounds and repetitions, all under one hold of the
/// live-kernel lock, so that another user's measurement cannot fall
/// between them.
pub struct FitAndCheck<'a> {
    fit: &'a [LivePattern],
    check: &'a [LivePattern],
    units: Vec<Unit>,
    next: usize,
    fit_done: usize,
    check_done: usize,
    fit_out: FitLive,
    check_out: Vec<Result<CheckLive, String>>,
    reporting: Reporting,
}

impl<'a> FitAndCheck<'a> {
    /// Nothing run yet.
    pub fn new(
        fit: &'a [LivePattern],
        fit_rounds: usize,
        check: &'a [LivePattern],
        check_reps: usize,
    ) -> FitAndCheck<'a> {
        FitAndCheck {
            fit,
            check,
            units: units(fit_rounds, check_reps),
            next: 0,
            fit_done: 0,
            check_done: 0,
            fit_out: vec![Ok((Vec::new(), 0)); fit.len()],
            check_out: vec![Ok(CheckLive::default()); check.len()],
            reporting: Reporting::default(),
        }
    }

    /// Runs share `i` of `n` (1-based) of the work, under `lock`.
    pub fn run_share(
        &mut self,
        i: usize,
        n: usize,
        lock: &LiveLock,
        progress: &mut dyn FnMut(&str),
    ) {
        let end = share_end(i, n, self.units.len());
        while self.next < end {
            self.run_unit(lock, progress);
        }
        // The watching thread must not run beside the micro-benchmarks.
        self.reporting.window.pause();
    }

    fn run_unit(&mut self, lock: &LiveLock, progress: &mut dyn FnMut(&str)) {
        let r = &mut self.reporting;
        match self.units[self.next] {
            Unit::FitRound => {
                let first = self.fit_done == 0;
                run_fit_round(self.fit, &mut self.fit_out, first, lock, r, progress);
                self.fit_done += 1;
            }
            Unit::CheckRep => {
                let first = self.check_done == 0;
                run_check_rep(self.check, &mut self.check_out, first, lock, r, progress);
                self.check_done += 1;
            }
        }
        self.next += 1;
    }

    /// Runs what is left (nothing, when the micro-benchmarks ran every
    /// round) under a hold of the lock of its own, and gives the fit's
    /// samples, the check's runs and how free page reporting met them.
    pub fn finish(
        mut self,
        progress: &mut dyn FnMut(&str),
    ) -> (FitLive, Vec<Result<CheckLive, String>>, Reporting) {
        if self.next < self.units.len() {
            match live_lock() {
                Ok(lock) => {
                    while self.next < self.units.len() {
                        self.run_unit(&lock, progress);
                    }
                }
                Err(e) => {
                    let why = e.to_string();
                    for o in self.fit_out.iter_mut().filter(|o| o.is_ok()) {
                        *o = Err(why.clone());
                    }
                    for o in self.check_out.iter_mut().filter(|o| o.is_ok()) {
                        *o = Err(why.clone());
                    }
                }
            }
        }
        self.reporting.window.pause();
        (self.fit_out, self.check_out, self.reporting)
    }
}

/// How many of `fit_rounds` fit rounds run before each of `check_reps`
/// check repetitions, and (last) after them: shares that differ by one at
/// most.
fn fit_schedule(fit_rounds: usize, check_reps: usize) -> Vec<usize> {
    let slots = check_reps + 1;
    (1..=slots)
        .map(|s| share_end(s, slots, fit_rounds) - share_end(s - 1, slots, fit_rounds))
        .collect()
}

/// Per pattern, the samples of its rounds (CPU ns of the timed phases,
/// the faster of the two runs of each round) and the faults of the last
/// run; or why it could not run.
pub type FitLive = Vec<Result<(Vec<f64>, u64), String>>;

/// One round of every pattern ([`run_rep`]); a pattern that fails keeps
/// why in place of its samples.
fn run_fit_round(
    pats: &[LivePattern],
    out: &mut FitLive,
    first: bool,
    lock: &LiveLock,
    reporting: &mut Reporting,
    progress: &mut dyn FnMut(&str),
) {
    for (p, o) in pats.iter().zip(out.iter_mut()) {
        let Ok((samples, faults)) = o else { continue };
        if first {
            progress(&p.pattern.name);
        }
        match run_rep(p, lock, reporting, Side::Fit) {
            Ok((rep, _)) => {
                samples.push(rep.faster());
                *faults = rep.faults;
            }
            Err(e) => *o = Err(e.to_string()),
        }
    }
}

/// Each pattern `reps` times, interleaved, each time a warm-up and two
/// runs back to back ([`run_rep`]), under one hold of the live-kernel
/// lock: [`FitLive`]; every pattern fails if the lock cannot be taken.
pub fn run_patterns(
    pats: &[LivePattern],
    reps: usize,
    reporting: &mut Reporting,
    progress: &mut dyn FnMut(&str),
) -> FitLive {
    let lock = match live_lock() {
        Ok(l) => l,
        Err(e) => return vec![Err(e.to_string()); pats.len()],
    };
    let mut out: FitLive = vec![Ok((Vec::new(), 0)); pats.len()];
    for r in 0..reps {
        run_fit_round(pats, &mut out, r == 0, &lock, reporting, progress);
    }
    reporting.window.pause();
    out
}

/// Size of the fresh-PTE probe's regions.
const FRESH_PTE_BYTES: usize = 64 << 20;
/// The folio size of the fresh-PTE probe: the middle of the mTHP sizes the
/// fit and the check write (16K-128K all showed ~85-100 ns per page).
const FRESH_PTE_FOLIO_KB: u32 = 64;

/// The fresh-PTE probe (`native::calibrate::kernel::fresh_pte_touch_ns`),
/// `rounds` rounds, under the live-kernel lock with only 64K folios
/// allowed (`madvise`), the knobs put back after.
pub fn run_fresh_pte(rounds: usize) -> Outcome {
    let name = names::FRESH_PTE;
    let how = format!(
        "{} MiB written in {FRESH_PTE_FOLIO_KB}K folios (MADV_HUGEPAGE, hugepages-{FRESH_PTE_FOLIO_KB}kB/enabled = madvise) one byte per folio and one byte per page, alternately, {MICRO_REPEATS} pairs per round, the faster of each; the difference per page that did not fault, thread CPU time",
        FRESH_PTE_BYTES >> 20
    );
    let run = || -> Result<Vec<f64>, NativeError> {
        let lock = live_lock()?;
        let mut guard = KnobGuard::new(&lock);
        guard.set_thp(&ThpKnobs::only(FRESH_PTE_FOLIO_KB, ThpEnabled::Madvise))?;
        let r = (|| {
            kernel::warm_memory(FRESH_PTE_BYTES + (4 << 20))?;
            (0..rounds.max(1))
                .map(|_| {
                    kernel::fresh_pte_touch_ns(
                        FRESH_PTE_BYTES,
                        (FRESH_PTE_FOLIO_KB as usize) << 10,
                        MICRO_REPEATS,
                    )
                })
                .collect()
        })();
        guard.restore()?;
        r
    };
    match run() {
        Ok(samples) => match native::stats::Summary::of(&samples) {
            Some(summary) => Outcome::Measured(Measurement {
                name: name.into(),
                unit: "ns/page",
                how,
                summary,
                samples,
            }),
            None => skipped(name, "no samples"),
        },
        Err(e) => skipped(name, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_rounds_are_spread_evenly_around_the_check_repetitions() {
        // The default run: 14 fit rounds around 5 check repetitions.
        assert_eq!(fit_schedule(14, 5), vec![3, 2, 2, 3, 2, 2]);
        // --quick: 4 around 1.
        assert_eq!(fit_schedule(4, 1), vec![2, 2]);
        for (f, c) in [(7, 5), (14, 3), (3, 8), (10, 1)] {
            let s = fit_schedule(f, c);
            assert_eq!(s.len(), c + 1);
            assert_eq!(s.iter().sum::<usize>(), f, "{f} around {c}: {s:?}");
            let (lo, hi) = (s.iter().min().unwrap(), s.iter().max().unwrap());
            assert!(hi - lo <= 1, "{f} around {c}: {s:?}");
        }
    }

    fn rep(ns: [f64; 2], kib: [Option<u64>; 2]) -> Rep {
        Rep {
            ns,
            faults: 8,
            reported_kib: kib,
        }
    }

    #[test]
    fn a_repetition_is_run_again_only_when_reporting_overlapped_it() {
        // The counter alone decides, not the time: the slow repetition
        // with nothing reported is kept, the fast one reported during is not.
        let slow_clean = rep([500.0, 400.0], [Some(0), Some(0)]);
        let fast_reported = rep([90.0, 80.0], [Some(0), Some(2048)]);
        let mut tally = ReportingTally::default();
        let mut tries = vec![fast_reported.clone(), slow_clean.clone()].into_iter();
        let (kept, aside) = rerun_overlapped(|| Ok(tries.next().unwrap()), &mut tally).unwrap();
        assert_eq!(kept, slow_clean);
        assert_eq!(aside, vec![fast_reported.clone()]);
        assert_eq!(kept.faster(), 400.0);
        // Overlapped every time: the last try is kept once the re-runs are spent.
        let mut n = 0;
        let (kept, aside) = rerun_overlapped(
            || {
                n += 1;
                Ok(rep([n as f64, 1e3], [Some(1024), None]))
            },
            &mut tally,
        )
        .unwrap();
        assert_eq!(n, 1 + REPORTING_RERUNS);
        assert_eq!(aside.len(), REPORTING_RERUNS);
        assert_eq!(kept.ns[0], n as f64);
        // No counter: never overlapped, never run again.
        let (kept, aside) =
            rerun_overlapped(|| Ok(rep([1.0, 2.0], [None, None])), &mut tally).unwrap();
        assert!(!kept.overlapped() && aside.is_empty());
        assert_eq!(
            tally,
            ReportingTally {
                reps: 3,
                rerun: 1 + REPORTING_RERUNS,
                kept_overlapped: 1,
                aside_kib: 2048 + 1024 * REPORTING_RERUNS as u64,
                no_counter: 1,
            }
        );
        assert!(tally
            .describe("fit")
            .starts_with("fit: 3 repetitions kept; 3 set aside"));
    }

    #[test]
    fn the_fault_work_is_shared_out_evenly_between_the_micro_rounds() {
        use Unit::{CheckRep as C, FitRound as F};
        assert_eq!(units(4, 1), vec![F, F, C, F, F]);
        let u = units(14, 5);
        assert_eq!(u.len(), 19);
        assert_eq!(u.iter().filter(|&&x| x == C).count(), 5);
        assert_eq!(&u[..4], &[F, F, F, C]);
        // 19 units after 7 micro rounds: shares of 2 or 3, the last ending
        // at the end; every unit in exactly one share.
        let ends: Vec<usize> = (1..=7).map(|i| share_end(i, 7, 19)).collect();
        assert_eq!(ends, vec![3, 6, 9, 11, 14, 17, 19]);
        let sizes: Vec<usize> = ends
            .iter()
            .scan(0, |a, &e| Some(e - std::mem::replace(a, e)))
            .collect();
        assert!(sizes.iter().all(|&n| n == 2 || n == 3), "{sizes:?}");
        // --quick: 2 micro rounds.
        assert_eq!((share_end(1, 2, 5), share_end(2, 2, 5)), (3, 5));
    }

    #[test]
    fn a_check_keeps_each_repetitions_runs_and_those_set_aside() {
        let mut c = CheckLive::default();
        c.push(&rep([50.0, 200.0], [Some(0), Some(0)]), Vec::new());
        let aside = rep([300.0, 250.0], [Some(4096), Some(0)]);
        c.push(&rep([80.0, 76.0], [None, None]), vec![aside.clone()]);
        assert_eq!(c.first, vec![50.0, 80.0]);
        assert_eq!(c.rerun, vec![200.0, 76.0]);
        assert_eq!(c.first_reported_kib, vec![Some(0), None]);
        assert_eq!(c.set_aside, vec![aside]);
        assert_eq!(c.fastest(), 50.0);
        assert_eq!(c.set_aside[0].reported_total(), Some(4096));
    }
}
