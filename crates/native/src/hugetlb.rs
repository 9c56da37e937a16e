//! A `MAP_HUGETLB` scenario on the live kernel: faults and `/proc/meminfo`'s
//! `HugePages_*` counters after each step, to compare with the model's hugetlb
//! (`mm::hugetlb`).
//!
//! # The scenario
//!
//! With the 2 MiB pool set to [`HugetlbConfig::nr_hugepages`] pages (and
//! `nr_overcommit_hugepages` 0), a forked runner process maps
//! [`NR_MAPPED`] huge pages `MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB`, reads
//! page 0, writes page 0, writes page 1; forks a child that writes pages 0 and 1
//! (copy-on-write) and page 2 (never faulted by the parent) and exits; then tries
//! to map the whole pool once more (`ENOMEM`: pages are reserved), to unmap at an
//! address inside a huge page (`EINVAL`), and unmaps everything. Each step sends
//! its `getrusage` minor-fault delta and the four `HugePages_*` values through a
//! pipe ([`Step`]).
//!
//! # Isolation
//!
//! As in [`crate::faults`]: the measured process is a fork of the test process, so
//! that the harness's threads do not add faults, and it (and its own child) touch
//! their stack and run each phase's code once before measuring, so that stack
//! copy-on-write and first-execution text faults stay out of the counts. The runner
//! only makes raw system calls and reads `/proc/meminfo` into a stack buffer (no
//! allocation after `fork`).
//!
//! The pool is system-wide: the knobs are set under the [`LiveLock`] with a
//! [`KnobGuard`] and restored afterwards (also on panic), and another process using
//! hugetlb pages meanwhile would disturb the counts.

use crate::error::NativeError;
use crate::knobs::{CannotRun, KnobGuard, LiveLock};
use crate::sys::PAGE_SIZE;
use std::path::Path;

/// `/proc/sys/vm/nr_hugepages`.
pub const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";
/// `/proc/sys/vm/nr_overcommit_hugepages`.
pub const NR_OVERCOMMIT_HUGEPAGES: &str = "/proc/sys/vm/nr_overcommit_hugepages";
/// The huge page size the scenario uses (the x86-64 default hstate).
pub const HPAGE_SIZE: usize = 2 << 20;
/// Huge pages the runner maps.
pub const NR_MAPPED: usize = 4;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct HugetlbConfig {
    /// The persistent pool size for the run (at least [`NR_MAPPED`] + 3 so that
    /// the child's copies fit beside the parent's reservations).
    pub nr_hugepages: u64,
}

impl Default for HugetlbConfig {
    fn default() -> Self {
        HugetlbConfig { nr_hugepages: 8 }
    }
}

/// `/proc/meminfo`'s `HugePages_Total`, `_Free`, `_Rsvd`, `_Surp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Meminfo {
    /// `HugePages_Total`.
    pub total: u64,
    /// `HugePages_Free`.
    pub free: u64,
    /// `HugePages_Rsvd`.
    pub rsvd: u64,
    /// `HugePages_Surp`.
    pub surp: u64,
}

/// The steps of the scenario, in order.
pub const STEPS: [&str; 11] = [
    "mmap 4 huge pages",
    "read page 0",
    "write page 0",
    "write page 1",
    "child: write page 0 (COW)",
    "child: write page 1 (COW)",
    "child: write page 2",
    "child exited",
    "mmap the whole pool (ENOMEM)",
    "munmap inside a huge page (EINVAL)",
    "munmap all",
];

/// One step's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Index into [`STEPS`].
    pub step: usize,
    /// Minor faults the step took (0 for system calls).
    pub nr_minflt: u64,
    /// The errno of the step's system call, 0 if it succeeded.
    pub errno: i32,
    /// The pool's counters after the step.
    pub meminfo: Meminfo,
}

/// What the scenario measured.
#[derive(Clone, Debug)]
pub struct HugetlbReport {
    /// The configuration.
    pub config: HugetlbConfig,
    /// Every step, in [`STEPS`] order.
    pub steps: Vec<Step>,
}

/// Runs the scenario (takes the [`LiveLock`]).
pub fn run(config: &HugetlbConfig) -> Result<HugetlbReport, NativeError> {
    let lock = LiveLock::acquire()?;
    run_locked(config, &lock)
}

/// Runs the scenario while the caller holds `lock`.
pub fn run_locked(config: &HugetlbConfig, lock: &LiveLock) -> Result<HugetlbReport, NativeError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(CannotRun::NotRoot { euid }.into());
    }
    if !Path::new(NR_HUGEPAGES).exists() {
        return Err(CannotRun::Unsupported {
            what: format!("no {NR_HUGEPAGES} (kernel without hugetlb)"),
        }
        .into());
    }
    if read_meminfo()?.total != 0 || read_meminfo()?.surp != 0 {
        return Err(CannotRun::Unsupported {
            what: "the hugetlb pool is in use or configured on this host; the scenario \
                   needs it to itself"
                .into(),
        }
        .into());
    }
    let mut guard = KnobGuard::new(lock);
    let result = (|| {
        guard.set(Path::new(NR_OVERCOMMIT_HUGEPAGES), "0")?;
        guard.set(Path::new(NR_HUGEPAGES), &config.nr_hugepages.to_string())?;
        let m = read_meminfo()?;
        if m.total != config.nr_hugepages {
            return Err(CannotRun::Unsupported {
                what: format!(
                    "the kernel found only {} of {} huge pages (memory fragmented)",
                    m.total, config.nr_hugepages
                ),
            }
            .into());
        }
        fork_and_measure()
    })();
    // The knob guard's set() checks the value read back; the pool may take a moment
    // to shrink only if pages are in use, and the runner has exited by now.
    guard.restore()?;
    Ok(HugetlbReport {
        config: *config,
        steps: result?,
    })
}

impl HugetlbReport {
    /// The steps as a text table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<38} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
            "step", "faults", "errno", "Total", "Free", "Rsvd", "Surp"
        );
        for st in &self.steps {
            let m = st.meminfo;
            s += &format!(
                "{:<38} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
                STEPS[st.step], st.nr_minflt, st.errno, m.total, m.free, m.rsvd, m.surp
            );
        }
        s
    }
}

/// Parses the `HugePages_*` lines of `/proc/meminfo` text.
pub fn parse_meminfo(text: &[u8]) -> Meminfo {
    let mut m = Meminfo::default();
    for line in text.split(|&b| b == b'\n') {
        let value = || -> u64 {
            let mut v = 0u64;
            for &b in line.iter().skip_while(|&&b| b != b':').skip(1) {
                if b.is_ascii_digit() {
                    v = v * 10 + (b - b'0') as u64;
                }
            }
            v
        };
        if line.starts_with(b"HugePages_Total:") {
            m.total = value();
        } else if line.starts_with(b"HugePages_Free:") {
            m.free = value();
        } else if line.starts_with(b"HugePages_Rsvd:") {
            m.rsvd = value();
        } else if line.starts_with(b"HugePages_Surp:") {
            m.surp = value();
        }
    }
    m
}

/// The pool's counters now.
pub fn read_meminfo() -> Result<Meminfo, NativeError> {
    let text =
        std::fs::read("/proc/meminfo").map_err(|e| NativeError::io("read", "/proc/meminfo", e))?;
    Ok(parse_meminfo(&text))
}

/// Reads `/proc/meminfo` with raw system calls into a stack buffer.
/// Async-signal-safe (no allocation).
fn meminfo_raw() -> Meminfo {
    let mut buf = [0u8; 16384];
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(c"/proc/meminfo".as_ptr(), libc::O_RDONLY) };
    if fd < 0 {
        return Meminfo::default();
    }
    let mut len = 0usize;
    while len < buf.len() {
        // SAFETY: the destination is the unused tail of `buf`.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    parse_meminfo(&buf[..len])
}

fn send(fd: libc::c_int, step: usize, nr_minflt: u64, errno: i32) {
    let m = meminfo_raw();
    let rec: [u64; 4] = [
        step as u64 | (errno as u64) << 32,
        nr_minflt,
        m.total << 32 | m.free,
        m.rsvd << 32 | m.surp,
    ];
    // SAFETY: rec is 32 readable bytes; a short write shows as a missing step.
    unsafe { libc::write(fd, rec.as_ptr().cast(), std::mem::size_of_val(&rec)) };
}

fn minflt() -> u64 {
    crate::sys::self_faults().0
}

/// Writes (or reads) one word at `p`, counting the faults. The warm-up call
/// of `minflt()` takes the stack copy-on-write fault of its result first.
#[inline(never)]
fn measured(p: *mut u8, write: bool) -> u64 {
    std::hint::black_box(minflt());
    let f0 = minflt();
    if write {
        // SAFETY: p points into a live mapping of this process.
        unsafe { std::ptr::write_volatile(p, 1) };
    } else {
        // SAFETY: as above.
        std::hint::black_box(unsafe { std::ptr::read_volatile(p) });
    }
    minflt() - f0
}

/// Touches 64 KiB of stack and runs [`measured`] on a scratch page, so that a
/// freshly forked process takes its stack and text faults before measuring.
#[inline(never)]
fn warm_up() {
    let mut scratch = [0u8; 64 * 1024];
    for i in (0..scratch.len()).step_by(PAGE_SIZE) {
        measured(scratch[i..].as_mut_ptr(), true);
        measured(scratch[i..].as_mut_ptr(), false);
    }
    std::hint::black_box(&scratch);
}

fn errno() -> i32 {
    // SAFETY: this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn mmap_hugetlb(len: usize) -> Result<*mut u8, i32> {
    // SAFETY: a fresh mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p.cast())
    }
}

/// The runner process. Returns its exit code.
fn runner(fd: libc::c_int, nr_pool: usize) -> i32 {
    warm_up();
    let len = NR_MAPPED * HPAGE_SIZE;
    let base = match mmap_hugetlb(len) {
        Ok(p) => p,
        Err(e) => {
            send(fd, 0, 0, e);
            return 1;
        }
    };
    send(fd, 0, 0, 0);
    send(fd, 1, measured(base, false), 0);
    send(fd, 2, measured(base, true), 0);
    // SAFETY: inside the mapping.
    send(
        fd,
        3,
        measured(unsafe { base.add(HPAGE_SIZE + 5 * PAGE_SIZE + 8) }, true),
        0,
    );
    // SAFETY: fork; the child keeps to async-signal-safe calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        send(fd, 4, 0, errno());
        return 1;
    }
    if pid == 0 {
        crate::sys::die_with_parent();
        warm_up();
        // SAFETY: inside the mapping, inherited copy-on-write.
        unsafe {
            send(fd, 4, measured(base.add(3 * PAGE_SIZE), true), 0);
            send(
                fd,
                5,
                measured(base.add(HPAGE_SIZE + 300 * PAGE_SIZE), true),
                0,
            );
            send(fd, 6, measured(base.add(2 * HPAGE_SIZE + 7), true), 0);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: our child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
    send(fd, 7, 0, 0);
    let e = match mmap_hugetlb(nr_pool * HPAGE_SIZE) {
        Ok(p) => {
            // SAFETY: the mapping just made.
            unsafe { libc::munmap(p.cast(), nr_pool * HPAGE_SIZE) };
            0
        }
        Err(e) => e,
    };
    send(fd, 8, 0, e);
    // SAFETY: an address inside our mapping; the kernel refuses the split.
    let rc = unsafe { libc::munmap(base.add(PAGE_SIZE).cast(), HPAGE_SIZE) };
    send(fd, 9, 0, if rc == 0 { 0 } else { errno() });
    // SAFETY: the whole mapping.
    let rc = unsafe { libc::munmap(base.cast(), len) };
    send(fd, 10, 0, if rc == 0 { 0 } else { errno() });
    0
}

fn fork_and_measure() -> Result<Vec<Step>, NativeError> {
    let nr_pool = read_meminfo()?.total as usize;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: a valid out-array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(NativeError::last_os("pipe2", "hugetlb result pipe"));
    }
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child keeps to async-signal-safe operations.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(NativeError::last_os("fork", "hugetlb runner"));
    }
    if pid == 0 {
        crate::sys::die_with_parent();
        // SAFETY: closing our copy of the read end.
        unsafe { libc::close(rd) };
        let code = runner(wr, nr_pool);
        // SAFETY: leave without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(wr) };
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: a valid buffer.
        let n = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            break;
        }
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            // SAFETY: ours.
            unsafe { libc::close(rd) };
            return Err(NativeError::last_os("read", "hugetlb result pipe"));
        }
        bytes.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: ours.
    unsafe { libc::close(rd) };
    let mut status = 0;
    // SAFETY: our child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
    let steps: Vec<Step> = bytes
        .chunks_exact(32)
        .map(|c| {
            let w = |i: usize| u64::from_ne_bytes(c[i * 8..i * 8 + 8].try_into().expect("8"));
            Step {
                step: (w(0) & 0xffff_ffff) as usize,
                nr_minflt: w(1),
                errno: (w(0) >> 32) as i32,
                meminfo: Meminfo {
                    total: w(2) >> 32,
                    free: w(2) & 0xffff_ffff,
                    rsvd: w(3) >> 32,
                    surp: w(3) & 0xffff_ffff,
                },
            }
        })
        .collect();
    if steps.len() != STEPS.len() || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        if let Some(s) = steps.iter().find(|s| s.errno != 0 && s.step < 8) {
            return Err(NativeError::ChildFailed {
                stage: STEPS[s.step],
                errno: s.errno,
            });
        }
        return Err(NativeError::ChildDied { status });
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_lines_parse() {
        let t = b"MemTotal: 1 kB\nHugePages_Total:       8\nHugePages_Free:        6\n\
                  HugePages_Rsvd:        2\nHugePages_Surp:        0\nHugepagesize: 2048 kB\n";
        assert_eq!(
            parse_meminfo(t),
            Meminfo {
                total: 8,
                free: 6,
                rsvd: 2,
                surp: 0
            }
        );
    }
}
