//! Thin, safe wrappers over the few system calls the measurements share: a
//! 2 MiB-aligned huge-page-backed buffer, CPU pinning, cache-line flushes.
//!
//! Every `unsafe` block in the crate outside the fault-pattern child lives here or is
//! equally small, and says why it is sound.

use std::path::Path;

use crate::error::NativeError;

/// The base page size this crate assumes (x86-64 and the default arm64 build).
pub const PAGE_SIZE: usize = 4096;
/// The PMD size: one 2 MiB transparent huge page.
pub const PMD_SIZE: usize = 2 << 20;
/// The cache-line size of every x86-64 and most arm64 parts.
pub const CACHE_LINE: usize = 64;

/// An anonymous private mapping whose start is 2 MiB-aligned, advised with
/// `MADV_HUGEPAGE` and written once so that every page is populated before a
/// measurement starts. Unmapped on drop.
///
/// Invariant: `ptr` is the start of a live read-write mapping of `len` bytes that this
/// value owns exclusively, aligned to [`PMD_SIZE`].
#[derive(Debug)]
pub struct HugeBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: HugeBuf owns its mapping exclusively (like a Box<[u8]>); moving it to
// another thread moves that ownership.
unsafe impl Send for HugeBuf {}
// SAFETY: shared references only give out `&[u8]`, which is Sync.
unsafe impl Sync for HugeBuf {}

impl HugeBuf {
    /// Maps `len` bytes (rounded up to 2 MiB) at a 2 MiB boundary, asks for THP
    /// backing with `madvise(MADV_HUGEPAGE)` and populates it by writing `fill`.
    pub fn new(len: usize, fill: u8) -> Result<HugeBuf, NativeError> {
        if len == 0 {
            return Err(NativeError::InvalidConfig {
                what: "a huge-page buffer of 0 bytes".into(),
            });
        }
        let len = len.div_ceil(PMD_SIZE) * PMD_SIZE;
        let reserve = len + PMD_SIZE;
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches
        // no existing memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(NativeError::last_os(
                "mmap",
                format!("reserve {} KiB for a huge-page buffer", reserve >> 10),
            ));
        }
        let raw_addr = raw as usize;
        let start = raw_addr.next_multiple_of(PMD_SIZE);
        let head = start - raw_addr;
        let tail = reserve - head - len;
        // Trim the reservation to the aligned window; nothing was touched yet, so
        // these munmaps only drop address space.
        // SAFETY: both ranges lie inside the mapping just made and nothing refers
        // to them.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        let buf = HugeBuf {
            ptr: start as *mut u8,
            len,
        };
        // SAFETY: madvise on our own mapping changes only its THP eligibility.
        let rc = unsafe { libc::madvise(buf.ptr.cast(), len, libc::MADV_HUGEPAGE) };
        if rc != 0 {
            return Err(NativeError::last_os(
                "madvise(MADV_HUGEPAGE)",
                format!("huge-page buffer of {} KiB", len >> 10),
            ));
        }
        buf_fill(buf.ptr, len, fill);
        Ok(buf)
    }

    /// `madvise(MADV_DONTFORK)`: a `fork()` elsewhere in the process leaves
    /// this buffer out of the child, so its pages are not write-protected
    /// for copy-on-write (the next write to each would fault).
    pub fn dont_fork(&self) -> Result<(), NativeError> {
        // SAFETY: madvise on our own mapping only changes what fork copies.
        if unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_DONTFORK) } != 0 {
            return Err(NativeError::last_os(
                "madvise(MADV_DONTFORK)",
                "huge-page buffer",
            ));
        }
        Ok(())
    }

    /// The buffer's length in bytes (a multiple of 2 MiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a [`HugeBuf`] has at least 2 MiB.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: by the invariant, ptr..ptr+len is a live mapping we own; the
        // borrow of self keeps it mapped and prevents a concurrent &mut.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// How many bytes of the buffer the kernel backs with PMD-mapped huge pages now,
    /// from the `AnonHugePages` line of its VMA in `/proc/self/smaps`.
    pub fn thp_backed_bytes(&self) -> Result<u64, NativeError> {
        smaps_anon_huge_bytes(self.ptr as usize)
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no borrow of it outlives self.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// Writes `fill` to every byte of `len` bytes at `ptr` (populates the mapping).
fn buf_fill(ptr: *mut u8, len: usize, fill: u8) {
    // SAFETY: called only on a fresh HugeBuf mapping of len bytes that nothing else
    // references yet.
    unsafe { std::ptr::write_bytes(ptr, fill, len) };
}

/// Reads `AnonHugePages` (in bytes) of the VMA of this process that contains `addr`.
pub fn smaps_anon_huge_bytes(addr: usize) -> Result<u64, NativeError> {
    let path = Path::new("/proc/self/smaps");
    let text = std::fs::read_to_string(path).map_err(|e| NativeError::io("read", path, e))?;
    let mut in_vma = false;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                in_vma = lo <= addr && addr < hi;
                continue;
            }
        }
        if in_vma {
            if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                let kb = rest
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| NativeError::Parse {
                        path: path.into(),
                        content: line.to_string(),
                        expected: "AnonHugePages: <n> kB",
                    })?;
                return Ok(kb * 1024);
            }
        }
    }
    Err(NativeError::Parse {
        path: path.into(),
        content: format!("no VMA with AnonHugePages contains {addr:#x}"),
        expected: "a VMA line covering the buffer",
    })
}

/// The CPUs this process may run on, in ascending order.
pub fn allowed_cpus() -> Result<Vec<usize>, NativeError> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`, which outlives the call.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(NativeError::last_os("sched_getaffinity", "this thread"));
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads `set` for indices below its bit size.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<(), NativeError> {
    set_affinity(&[cpu])
}

/// Lets the calling thread run on `cpus` (e.g. [`allowed_cpus`] saved
/// before a pin).
pub fn set_affinity(cpus: &[usize]) -> Result<(), NativeError> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET writes one bit of `set`; it ignores indices beyond the set.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the pointer and size describe `set`, which outlives the call.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(NativeError::last_os(
            "sched_setaffinity",
            format!("run on CPUs {cpus:?}"),
        ));
    }
    Ok(())
}

/// Restores the calling thread's affinity to `cpus` when dropped, so that pinning a
/// test's thread does not leak into the next test that cargo runs on it.
pub struct AffinityGuard {
    cpus: Vec<usize>,
}

impl AffinityGuard {
    /// Remembers the current affinity.
    pub fn save() -> Result<AffinityGuard, NativeError> {
        Ok(AffinityGuard {
            cpus: allowed_cpus()?,
        })
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // A failure leaves the thread pinned, which is harmless; there is
        // nothing better to do in drop.
        let _ = set_affinity(&self.cpus);
    }
}

/// Evicts `bytes` from every cache level, so that the next access comes from DRAM.
/// On x86-64 this is `clflush` per line; elsewhere it is a no-op and the caller's
/// "cold" figures are only as cold as its eviction buffer makes them.
pub fn flush_cache(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        for line in bytes.chunks(CACHE_LINE) {
            // SAFETY: clflush takes any readable address; `line` is a live borrow.
            unsafe { std::arch::x86_64::_mm_clflush(line.as_ptr()) };
        }
        // SAFETY: mfence has no memory-safety preconditions; it orders the flushes
        // before the timed accesses that follow.
        unsafe { std::arch::x86_64::_mm_mfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = bytes;
    }
}

/// Makes the calling (forked) process die with SIGKILL when its parent
/// thread ends, so that a measurement child never outlives an `mmlab` that
/// was killed (`PR_SET_PDEATHSIG`). Async-signal-safe: call it first thing in
/// a child after `fork`.
pub fn die_with_parent() {
    // SAFETY: prctl with integer arguments; it changes only this process's
    // parent-death signal.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
}

/// The time of the CPU-time clock `clock` in nanoseconds. Async-signal-safe.
fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: timespec is plain data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: ts is a valid out-pointer; clock_gettime is async-signal-safe
    // and cannot fail for the CPU-time clocks of the caller.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time this thread has run, user and system, in nanoseconds
/// (`CLOCK_THREAD_CPUTIME_ID`): a rate measured on a busy shared host can be
/// read per CPU-second as well as per wall-clock second.
pub fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time this process has run, user and system, in nanoseconds
/// (`CLOCK_PROCESS_CPUTIME_ID`). Async-signal-safe.
pub fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time, user and system, of this process's children that ended and
/// were waited for, in nanoseconds (`getrusage(RUSAGE_CHILDREN)`): what a
/// supervisor's workers used.
pub fn children_cpu_ns() -> u64 {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer; RUSAGE_CHILDREN cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// This process's minor and major fault counts so far (`getrusage(RUSAGE_SELF)`).
pub fn self_faults() -> (u64, u64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer; RUSAGE_SELF cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_minflt as u64, ru.ru_majflt as u64)
}

/// The size of CPU 0's level-3 cache as sysfs gives it
/// (`/sys/devices/system/cpu/cpu0/cache/index3/size`, e.g. `32768K`), in
/// bytes; 0 if the host does not say.
pub fn llc_bytes() -> u64 {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .unwrap_or_default();
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().unwrap_or(0);
    match unit {
        "K" => n << 10,
        "M" => n << 20,
        "" => n,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_buf_is_aligned_and_populated() {
        let mut b = HugeBuf::new(3 << 20, 0x5a).unwrap();
        assert_eq!(b.len(), 4 << 20);
        assert_eq!(b.as_slice().as_ptr() as usize % PMD_SIZE, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0x5a));
        b.as_mut_slice()[12345] = 1;
        assert_eq!(b.as_slice()[12345], 1);
        // Whether THP backing was obtained depends on the host; the query must work.
        let thp = b.thp_backed_bytes().unwrap();
        assert!(thp <= b.len() as u64);
    }

    #[test]
    fn allowed_cpus_is_not_empty() {
        assert!(!allowed_cpus().unwrap().is_empty());
    }
}
