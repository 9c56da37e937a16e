//! Deterministic anonymous-memory fault patterns run on the live kernel.
//!
//! # What this exercises
//!
//! The anonymous fault path of Linux 6.8+ (`do_anonymous_page()` →
//! `alloc_anon_folio()` in `mm/memory.c`, and `do_huge_pmd_anonymous_page()` in
//! `mm/huge_memory.c`): on the first touch of an unpopulated address the kernel picks
//! the largest folio order that the THP knobs allow, that is naturally aligned inside
//! the VMA and whose PTE range is still empty, so one fault maps a whole folio. The
//! number of faults and the per-size `anon_fault_alloc` counts are therefore exact,
//! deterministic functions of the pattern: 1 GiB written one byte per 4 KiB takes
//! 262,144 faults with THP off, 16,384 with only 64 KiB folios, 512 with 2 MiB THPs.
//! Optional steps exercise partial `munmap` (a large folio left partly mapped) and
//! THP copy-on-write after `fork` (since 5.8 the kernel splits the PMD on a COW
//! write fault and copies one 4 KiB page: `thp_split_pmd` counts one per PMD).
//!
//! # How a run is isolated
//!
//! [`run`] sets the pattern's [`ThpKnobs`] under the [`LiveLock`], snapshots the
//! counters, and forks a child. The child maps the region, touches it and sends the
//! `getrusage(RUSAGE_SELF)` minor-fault counts measured around each phase back through
//! a pipe, so they count this pattern's faults and nothing else (not the fork, not the
//! test harness). Before the first measured phase the child writes 64 KiB of its stack
//! and dry-runs the phase's code on a scratch buffer, because a freshly forked child
//! otherwise takes a few faults of its own inside the phase: copy-on-write of stack
//! pages, and first execution of text pages (`fork` does not copy the page-table
//! entries of file-backed mappings). The parent snapshots the counters after reaping the child and
//! restores the knobs. `/proc/vmstat` and the per-size stats are system-wide: a
//! process that faults large folios meanwhile adds to them. Using a per-size knob of
//! `madvise` with [`Advice::Hugepage`] instead of `always` makes the kernel choose
//! exactly the same orders for this VMA (`thp_vma_allowable_orders()` admits
//! `madvise` sizes for `VM_HUGEPAGE` VMAs) while other processes keep 4 KiB pages,
//! which keeps the counter deltas exact on a busy host.
//!
//! # Address layout
//!
//! The region's start is `offset_bytes` past a 2 MiB boundary regardless of ASLR:
//! the child reserves `len + 4 MiB` of `PROT_NONE` address space, rounds its start up
//! to 2 MiB, and maps the region there with `MAP_FIXED`. The `PROT_NONE` rest stays as
//! a guard on both sides, so the region is its own VMA and never merges with a
//! neighbour.
//!
//! ```text
//!   reservation (PROT_NONE) ......................................................
//!                 | 2 MiB boundary
//!                 |<- offset ->|<------------ len_bytes (rw-, the VMA) ------->|
//! ```
//!
//! # Fork safety
//!
//! The test harness is multi-threaded, so the child may only call async-signal-safe
//! functions: it allocates nothing (the touch order is computed before `fork`), uses
//! raw system calls, reports errors as numbers, and leaves with `_exit`.

use std::time::Instant;

use crate::error::NativeError;
use crate::knobs::{KnobGuard, LiveLock, ThpKnobs};
use crate::rng::SplitMix64;
use crate::sys::{PAGE_SIZE, PMD_SIZE};
use crate::vmstat::{Delta, Snapshot, FAULT_COUNTERS};

/// One GiB, the size of the patterns in the issue tracker.
pub const GIB: usize = 1 << 30;

/// The order in which the pattern touches the region's 4 KiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchOrder {
    /// Page 0, 1, 2, ... in address order.
    Sequential,
    /// A Fisher–Yates permutation of the pages drawn from [`SplitMix64`] seeded with
    /// `seed`.
    Random {
        /// The seed.
        seed: u64,
    },
}

/// What each touch does: one byte at the start of each 4 KiB page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Write the byte (allocates a folio).
    Write,
    /// Read the byte (maps the shared zero page or the huge zero page).
    Read,
}

/// The `madvise(2)` applied to the region before the touch phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// None.
    None,
    /// `MADV_HUGEPAGE`: sets `VM_HUGEPAGE`, which admits sizes whose knob is `madvise`.
    Hugepage,
    /// `MADV_NOHUGEPAGE`: sets `VM_NOHUGEPAGE`, which refuses every large folio.
    NoHugepage,
}

impl Advice {
    fn as_raw(self) -> Option<libc::c_int> {
        match self {
            Advice::None => None,
            Advice::Hugepage => Some(libc::MADV_HUGEPAGE),
            Advice::NoHugepage => Some(libc::MADV_NOHUGEPAGE),
        }
    }
}

/// An extra step after the touch phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `munmap` the bytes `[offset_bytes, offset_bytes + len_bytes)` of the region
    /// (relative to its start), map that range again (fresh anonymous memory with
    /// the same advice), then touch the whole region again in the same order; the
    /// step's faults are those of the re-touch.
    MunmapRetouch {
        /// Start of the range, relative to the region's start; 4 KiB-aligned.
        offset_bytes: usize,
        /// Length of the range; a positive multiple of 4 KiB.
        len_bytes: usize,
    },
    /// `fork` a child that writes one byte per 4 KiB of the whole region in address
    /// order (copy-on-write faults), and wait for it; the step's faults are that
    /// child's.
    ForkWriter,
}

/// A fault pattern: a pure description, with no reference to the host, so that the
/// model can run the same description through the simulator and compare.
///
/// Invariants checked by [`FaultPattern::validate`]: `len_bytes` is a positive
/// multiple of 4 KiB with at most 2^32 pages; `offset_bytes` is a multiple of 4 KiB
/// below 2 MiB; every step's range lies inside the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPattern {
    /// A short name for tables.
    pub name: String,
    /// The region's length.
    pub len_bytes: usize,
    /// How far past a 2 MiB boundary the region starts.
    pub offset_bytes: usize,
    /// The touch order.
    pub order: TouchOrder,
    /// Write or read.
    pub access: Access,
    /// The advice applied before touching.
    pub advice: Advice,
    /// The THP knobs in force during the run.
    pub knobs: ThpKnobs,
    /// Extra steps after the touch phase, in order.
    pub steps: Vec<Step>,
}

impl FaultPattern {
    /// A sequential write pattern of `len_bytes` at a 2 MiB boundary, no advice, no
    /// steps.
    pub fn new(name: &str, len_bytes: usize, knobs: ThpKnobs) -> FaultPattern {
        FaultPattern {
            name: name.to_string(),
            len_bytes,
            offset_bytes: 0,
            order: TouchOrder::Sequential,
            access: Access::Write,
            advice: Advice::None,
            knobs,
            steps: Vec::new(),
        }
    }

    /// The number of 4 KiB pages in the region.
    pub fn nr_pages(&self) -> usize {
        self.len_bytes / PAGE_SIZE
    }

    /// Checks the invariants stated on the type.
    pub fn validate(&self) -> Result<(), NativeError> {
        let bad = |what: String| Err(NativeError::InvalidConfig { what });
        if self.len_bytes == 0 || !self.len_bytes.is_multiple_of(PAGE_SIZE) {
            return bad(format!(
                "{}: len_bytes {} is not a positive multiple of 4096",
                self.name, self.len_bytes
            ));
        }
        if self.nr_pages() > u32::MAX as usize {
            return bad(format!("{}: more than 2^32 pages", self.name));
        }
        if !self.offset_bytes.is_multiple_of(PAGE_SIZE) || self.offset_bytes >= PMD_SIZE {
            return bad(format!(
                "{}: offset_bytes {} is not a multiple of 4096 below 2 MiB",
                self.name, self.offset_bytes
            ));
        }
        for step in &self.steps {
            if let Step::MunmapRetouch {
                offset_bytes,
                len_bytes,
            } = *step
            {
                if offset_bytes % PAGE_SIZE != 0
                    || len_bytes == 0
                    || len_bytes % PAGE_SIZE != 0
                    || offset_bytes
                        .checked_add(len_bytes)
                        .is_none_or(|end| end > self.len_bytes)
                {
                    return bad(format!(
                        "{}: munmap range {offset_bytes}+{len_bytes} is not page-aligned inside the region",
                        self.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The page indices in touch order.
    pub fn touch_order(&self) -> Vec<u32> {
        let mut pages: Vec<u32> = (0..self.nr_pages() as u32).collect();
        if let TouchOrder::Random { seed } = self.order {
            SplitMix64::new(seed).shuffle(&mut pages);
        }
        pages
    }
}

/// Faults and time of one phase, measured by the process that ran it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseFaults {
    /// Minor faults (`ru_minflt` difference around the phase).
    pub nr_minflt: u64,
    /// Major faults (`ru_majflt` difference around the phase).
    pub nr_majflt: u64,
    /// Wall time of the phase.
    pub elapsed_ns: u64,
    /// CPU time the process ran during the phase, user and system
    /// (`CLOCK_PROCESS_CPUTIME_ID`): on a shared host, the phase's time
    /// without the time it waited for a core.
    pub cpu_ns: u64,
}

/// The result of running a [`FaultPattern`] on the live kernel.
#[derive(Clone, Debug)]
pub struct FaultReport {
    /// The pattern that ran.
    pub pattern: FaultPattern,
    /// The touch phase.
    pub touch: PhaseFaults,
    /// One entry per [`Step`], in order.
    pub steps: Vec<PhaseFaults>,
    /// The child's whole-life minor faults from `wait4` (touch, steps, the mapping
    /// calls, its exit, and the faults of children it waited for).
    pub child_total_minflt: u64,
    /// Counter increments from just before the fork to just after the child was
    /// reaped (system-wide; see the module docs).
    pub counters: Delta,
}

impl FaultReport {
    /// A text table: one row per phase, then the counters that moved.
    pub fn table(&self) -> String {
        let mut rows = vec![vec![
            "phase".to_string(),
            "minflt".into(),
            "majflt".into(),
            "ms".into(),
            "CPU ms".into(),
        ]];
        let mut push = |name: String, p: &PhaseFaults| {
            rows.push(vec![
                name,
                p.nr_minflt.to_string(),
                p.nr_majflt.to_string(),
                format!("{:.1}", p.elapsed_ns as f64 / 1e6),
                format!("{:.1}", p.cpu_ns as f64 / 1e6),
            ])
        };
        push("touch".into(), &self.touch);
        for (step, p) in self.pattern.steps.iter().zip(&self.steps) {
            let name = match step {
                Step::MunmapRetouch { .. } => "munmap+retouch",
                Step::ForkWriter => "fork writer (COW)",
            };
            push(name.into(), p);
        }
        let mut out = format!("pattern: {}\n", self.pattern.name);
        out += &crate::table::format(&rows);
        let mut counters = vec![vec!["counter".to_string(), "delta".into()]];
        for name in FAULT_COUNTERS {
            counters.push(vec![name.to_string(), self.counters.vm(name).to_string()]);
        }
        for ((size, name), v) in &self.counters.per_size {
            if *v > 0 {
                counters.push(vec![format!("hugepages-{size}kB/{name}"), v.to_string()]);
            }
        }
        out += &crate::table::format(&counters);
        out
    }
}

/// Runs `pattern` on the live kernel, taking the [`LiveLock`] for the duration.
pub fn run(pattern: &FaultPattern) -> Result<FaultReport, NativeError> {
    let lock = LiveLock::acquire()?;
    run_locked(pattern, &lock)
}

/// Runs `pattern` while the caller holds `lock` (so that it can check the knobs
/// before and after without another run slipping in).
pub fn run_locked(pattern: &FaultPattern, lock: &LiveLock) -> Result<FaultReport, NativeError> {
    pattern.validate()?;
    let live = crate::knobs::LiveKernel::probe();
    let sizes: Vec<u32> = pattern.knobs.sizes.iter().map(|&(s, _)| s).collect();
    live.require_thp_knobs(&sizes)?;

    let order = pattern.touch_order();
    let mut guard = KnobGuard::new(lock);
    guard.set_thp(&pattern.knobs)?;
    let result = fork_and_measure(pattern, &order);
    // Restore before looking at the result, and report a failed restore first: it
    // matters more than the measurement.
    guard.restore()?;
    result
}

/// Record kinds the child writes to the pipe, each as four `u64`s.
const REC_PHASE: u64 = 1;
const REC_ERROR: u64 = 2;
/// Words per record: kind, then minflt, majflt, wall ns, CPU ns for a phase
/// (stage, errno for an error).
const REC_WORDS: usize = 5;

/// Stages of the child, by the index sent in an error record.
const STAGES: [&str; 8] = [
    "mmap PROT_NONE reservation",
    "mmap MAP_FIXED region",
    "madvise",
    "munmap range",
    "mmap MAP_FIXED range again",
    "fork (COW writer)",
    "waitpid (COW writer)",
    "COW writer child",
];

fn fork_and_measure(pattern: &FaultPattern, order: &[u32]) -> Result<FaultReport, NativeError> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid out-array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(NativeError::last_os("pipe2", "fault-pattern result pipe"));
    }
    let (rd, wr) = (fds[0], fds[1]);
    let plan = ChildPlan {
        len: pattern.len_bytes,
        offset: pattern.offset_bytes,
        access: pattern.access,
        advice: pattern.advice,
        sequential: pattern.order == TouchOrder::Sequential,
        out_fd: wr,
    };
    let before = Snapshot::take()?;
    // SAFETY: fork has no memory-safety preconditions; the child below keeps to
    // async-signal-safe operations (see "Fork safety" in the module docs).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = NativeError::last_os("fork", "fault-pattern child");
        close_fd(rd);
        close_fd(wr);
        return Err(e);
    }
    if pid == 0 {
        crate::sys::die_with_parent();
        close_fd(rd);
        let code = child_main(&plan, order, &pattern.steps);
        // SAFETY: _exit ends the child without running the parent's atexit handlers
        // or destructors, which must not run twice.
        unsafe { libc::_exit(code) };
    }
    close_fd(wr);
    let records = read_records(rd);
    close_fd(rd);
    let mut status = 0;
    // SAFETY: rusage is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: status and ru are valid out-pointers; pid is our child.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(NativeError::last_os("wait4", "fault-pattern child"));
        }
    }
    let after = Snapshot::take()?;
    let records = records?;

    let mut phases = Vec::new();
    for r in &records {
        match r[0] {
            REC_PHASE => phases.push(PhaseFaults {
                nr_minflt: r[1],
                nr_majflt: r[2],
                elapsed_ns: r[3],
                cpu_ns: r[4],
            }),
            REC_ERROR => {
                return Err(NativeError::ChildFailed {
                    stage: STAGES.get(r[1] as usize).copied().unwrap_or("unknown"),
                    errno: r[2] as i32,
                })
            }
            _ => return Err(NativeError::ChildDied { status }),
        }
    }
    if !libc::WIFEXITED(status)
        || libc::WEXITSTATUS(status) != 0
        || phases.len() != 1 + pattern.steps.len()
    {
        return Err(NativeError::ChildDied { status });
    }
    let touch = phases.remove(0);
    Ok(FaultReport {
        pattern: pattern.clone(),
        touch,
        steps: phases,
        child_total_minflt: ru.ru_minflt as u64,
        counters: before.delta_to(&after),
    })
}

fn close_fd(fd: libc::c_int) {
    // SAFETY: fd is a descriptor this function's caller owns and no longer uses.
    unsafe { libc::close(fd) };
}

/// Reads 32-byte records until EOF.
fn read_records(fd: libc::c_int) -> Result<Vec<[u64; REC_WORDS]>, NativeError> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: buf is a valid writable buffer of buf.len() bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            break;
        }
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(NativeError::last_os("read", "fault-pattern result pipe"));
        }
        bytes.extend_from_slice(&buf[..n as usize]);
    }
    Ok(bytes
        .chunks_exact(8 * REC_WORDS)
        .map(|c| {
            let mut r = [0u64; REC_WORDS];
            for (i, w) in c.chunks_exact(8).enumerate() {
                r[i] = u64::from_ne_bytes(w.try_into().expect("8-byte chunk"));
            }
            r
        })
        .collect())
}

/// What the child needs, copied out of the pattern before `fork`.
#[derive(Clone, Copy)]
struct ChildPlan {
    len: usize,
    offset: usize,
    access: Access,
    advice: Advice,
    sequential: bool,
    out_fd: libc::c_int,
}

/// An error inside the child: the index into [`STAGES`] and the errno.
struct ChildErr(u64, i32);

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Writes one record to the pipe. Async-signal-safe.
fn send(fd: libc::c_int, rec: [u64; REC_WORDS]) {
    // SAFETY: rec is 40 readable bytes; a short or failed write leaves the parent
    // with a missing record, which it reports as ChildDied.
    unsafe { libc::write(fd, rec.as_ptr().cast(), std::mem::size_of_val(&rec)) };
}

/// `(minflt, majflt)` of this process. Async-signal-safe.
fn rusage_self() -> (u64, u64) {
    crate::sys::self_faults()
}

/// Runs `phase` and sends its faults, wall time and CPU time.
/// Async-signal-safe.
///
/// After `fork` the stack pages are shared copy-on-write, so the kernel's
/// `copy_to_user` of the first `getrusage` result takes a COW fault of its own,
/// counted after the values it returns were read. A warm-up call takes that fault
/// before the measured interval, so the phase's count is exactly its own.
fn measured_phase(fd: libc::c_int, phase: impl FnOnce()) {
    std::hint::black_box(rusage_self());
    let t0 = Instant::now();
    let c0 = crate::sys::process_cpu_ns();
    let f0 = rusage_self();
    phase();
    let f1 = rusage_self();
    let c1 = crate::sys::process_cpu_ns();
    let ns = t0.elapsed().as_nanos() as u64;
    send(fd, [REC_PHASE, f1.0 - f0.0, f1.1 - f0.1, ns, c1 - c0]);
}

/// Writes 64 KiB of stack below the caller's frame.
///
/// After `fork` every stack page is shared copy-on-write, so the first write to each
/// one takes a fault. Deeper frames of the touch phase (the closure, the loop) would
/// otherwise add one such fault to the phase's count; this takes them all up front.
#[inline(never)]
fn prefault_stack() {
    let mut scratch = [0u8; 64 * 1024];
    for b in scratch.iter_mut().step_by(PAGE_SIZE) {
        // Volatile: the writes must happen even though nothing reads them.
        // SAFETY: `b` is a valid, exclusive reference into `scratch`.
        unsafe { std::ptr::write_volatile(b, 1) };
    }
    std::hint::black_box(&scratch);
}

/// Runs one measured touch phase over a small scratch buffer, sending nothing.
///
/// `fork` does not copy the page-table entries of file-backed mappings that have no
/// anonymous pages, so the child faults on the first execution of every page of the
/// binary's text (and of its read-only data) that it runs. A dry run of the exact
/// code path of a phase takes those faults before the measured one.
fn warm_up(plan: &ChildPlan, order: &[u32]) {
    let mut scratch = [0u8; 4 * PAGE_SIZE];
    let dry = ChildPlan {
        len: scratch.len(),
        out_fd: -1,
        ..*plan
    };
    let base = scratch.as_mut_ptr();
    // fd -1: the record's write fails with EBADF, which is the point.
    measured_phase(-1, || touch_all(base, &dry, order));
    std::hint::black_box(&scratch);
}

/// The child: returns its exit code. Allocates nothing.
fn child_main(plan: &ChildPlan, order: &[u32], steps: &[Step]) -> i32 {
    prefault_stack();
    warm_up(plan, order);
    match child_body(plan, order, steps) {
        Ok(()) => 0,
        Err(ChildErr(stage, e)) => {
            send(plan.out_fd, [REC_ERROR, stage, e as u64, 0, 0]);
            1
        }
    }
}

fn child_body(plan: &ChildPlan, order: &[u32], steps: &[Step]) -> Result<(), ChildErr> {
    let reserve = plan.len + 2 * PMD_SIZE;
    // SAFETY: a fresh PROT_NONE reservation at an address of the kernel's choosing.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(ChildErr(0, errno()));
    }
    let start = (raw as usize).next_multiple_of(PMD_SIZE) + plan.offset;
    map_fixed(start, plan.len, plan.advice)?;
    let base = start as *mut u8;

    measured_phase(plan.out_fd, || touch_all(base, plan, order));

    for step in steps {
        match *step {
            Step::MunmapRetouch {
                offset_bytes,
                len_bytes,
            } => {
                // SAFETY: the range lies inside our region (validated in the parent).
                if unsafe { libc::munmap((start + offset_bytes) as *mut _, len_bytes) } != 0 {
                    return Err(ChildErr(3, errno()));
                }
                map_fixed(start + offset_bytes, len_bytes, plan.advice)
                    .map_err(|ChildErr(_, e)| ChildErr(4, e))?;
                measured_phase(plan.out_fd, || touch_all(base, plan, order));
            }
            Step::ForkWriter => {
                // SAFETY: this child is single-threaded, so fork is unrestricted;
                // the grandchild below also only makes system calls and _exits.
                let pid = unsafe { libc::fork() };
                if pid < 0 {
                    return Err(ChildErr(5, errno()));
                }
                if pid == 0 {
                    crate::sys::die_with_parent();
                    prefault_stack();
                    let writer = ChildPlan {
                        access: Access::Write,
                        sequential: true,
                        ..*plan
                    };
                    warm_up(&writer, &[]);
                    measured_phase(plan.out_fd, || touch_all(base, &writer, &[]));
                    // SAFETY: leaves the grandchild without running destructors.
                    unsafe { libc::_exit(0) };
                }
                let mut status = 0;
                loop {
                    // SAFETY: status is a valid out-pointer; pid is our child.
                    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
                    if rc == pid {
                        break;
                    }
                    if errno() != libc::EINTR {
                        return Err(ChildErr(6, errno()));
                    }
                }
                if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
                    return Err(ChildErr(7, 0));
                }
            }
        }
    }
    Ok(())
}

/// Maps `len` read-write anonymous bytes at `addr` with `MAP_FIXED` and applies the
/// advice. Async-signal-safe.
fn map_fixed(addr: usize, len: usize, advice: Advice) -> Result<(), ChildErr> {
    // SAFETY: addr..addr+len lies inside this child's own PROT_NONE reservation (or
    // a hole just unmapped in it), so MAP_FIXED replaces nothing anyone uses.
    let p = unsafe {
        libc::mmap(
            addr as *mut _,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(ChildErr(1, errno()));
    }
    if let Some(adv) = advice.as_raw() {
        // SAFETY: madvise on the mapping just made only changes its THP eligibility.
        if unsafe { libc::madvise(addr as *mut _, len, adv) } != 0 {
            return Err(ChildErr(2, errno()));
        }
    }
    Ok(())
}

/// Touches one byte per 4 KiB page of the region in the plan's order.
fn touch_all(base: *mut u8, plan: &ChildPlan, order: &[u32]) {
    let nr_pages = plan.len / PAGE_SIZE;
    let touch = |page: usize| {
        // SAFETY: page < nr_pages, so the address lies inside the read-write region
        // mapped by map_fixed. Volatile keeps the compiler from merging or dropping
        // the accesses: each one must reach the MMU.
        unsafe {
            let p = base.add(page * PAGE_SIZE);
            match plan.access {
                Access::Write => std::ptr::write_volatile(p, 1),
                Access::Read => {
                    std::ptr::read_volatile(p);
                }
            }
        }
    };
    if plan.sequential {
        (0..nr_pages).for_each(touch);
    } else {
        order
            .iter()
            .map(|&p| p as usize)
            .filter(|&p| p < nr_pages)
            .for_each(touch);
    }
}

/// The 1 GiB patterns of the issue tracker (sequential writes, one byte per
/// 4 KiB), with literal knob settings, each with the live kernel's expected
/// fault count measured on this host kind (LIVE-KERNEL.md).
pub fn reference_patterns() -> Vec<(FaultPattern, u64)> {
    use crate::knobs::{ThpEnabled, ThpKnobs};
    let mut unaligned_64k = FaultPattern::new(
        "64K only, +12K, 1 GiB-20K",
        GIB - (20 << 10),
        ThpKnobs::only(64, ThpEnabled::Always),
    );
    unaligned_64k.offset_bytes = 12 << 10;
    let mut unaligned_2m = FaultPattern::new(
        "2M only, +12K, 1 GiB-20K",
        GIB - (20 << 10),
        ThpKnobs::only(2048, ThpEnabled::Always),
    );
    unaligned_2m.offset_bytes = 12 << 10;
    vec![
        (FaultPattern::new("THP off", GIB, ThpKnobs::off()), 262_144),
        (
            FaultPattern::new("16K only", GIB, ThpKnobs::only(16, ThpEnabled::Always)),
            65_536,
        ),
        (
            FaultPattern::new("64K only", GIB, ThpKnobs::only(64, ThpEnabled::Always)),
            16_384,
        ),
        (
            FaultPattern::new("2M only", GIB, ThpKnobs::only(2048, ThpEnabled::Always)),
            512,
        ),
        (unaligned_64k, 16_409),
        (unaligned_2m, 1_529),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_bad_patterns() {
        let ok = FaultPattern::new("ok", 8 << 20, ThpKnobs::off());
        ok.validate().unwrap();
        let mut p = ok.clone();
        p.len_bytes = 100;
        assert!(p.validate().is_err());
        let mut p = ok.clone();
        p.offset_bytes = PMD_SIZE;
        assert!(p.validate().is_err());
        let mut p = ok.clone();
        p.steps.push(Step::MunmapRetouch {
            offset_bytes: 4 << 20,
            len_bytes: 8 << 20,
        });
        assert!(p.validate().is_err());
    }

    #[test]
    fn random_order_is_a_seeded_permutation() {
        let mut p = FaultPattern::new("r", 4 << 20, ThpKnobs::off());
        p.order = TouchOrder::Random { seed: 42 };
        let a = p.touch_order();
        assert_eq!(a, p.touch_order());
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..1024).collect::<Vec<u32>>());
        assert_ne!(a, s);
    }
}
