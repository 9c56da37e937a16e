//! Live-kernel probes: system calls and the per-page work of `munmap`,
//! `mprotect` and `fork` on populated anonymous memory, and the cost of one
//! level of the VMA tree.
//!
//! Every region is `MADV_NOHUGEPAGE`, so it is mapped by 4 KiB pages
//! whatever THP knobs another process has set meanwhile, and populated by
//! writing one byte per page before the timed call. Times are this thread's
//! CPU time around the call.

use super::{cpu_ns_of, Probe};
use crate::error::NativeError;
use crate::sys::PAGE_SIZE;

/// An anonymous private mapping, unmapped on drop unless already unmapped.
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    /// Maps `len` bytes with `prot`, `MADV_NOHUGEPAGE`; populated (one write
    /// per page) if `populate`.
    pub fn new(len: usize, prot: libc::c_int, populate: bool) -> Result<Region, NativeError> {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(NativeError::last_os(
                "mmap",
                format!("{} KiB region", len >> 10),
            ));
        }
        let r = Region { ptr: p.cast(), len };
        // SAFETY: madvise on our own mapping only changes its THP eligibility.
        if unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) } != 0 {
            return Err(NativeError::last_os("madvise(MADV_NOHUGEPAGE)", "region"));
        }
        if populate {
            for off in (0..len).step_by(PAGE_SIZE) {
                // SAFETY: off < len, inside our read-write mapping.
                unsafe { std::ptr::write_volatile(r.ptr.add(off), 1) };
            }
        }
        Ok(r)
    }

    /// The start address.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// The bytes (the mapping must be readable and writable).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr..ptr+len is our live mapping; &mut self makes the
        // borrow exclusive. The caller mapped it read-write.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// `madvise(MADV_DONTFORK)`: see [`crate::sys::HugeBuf::dont_fork`].
    pub fn dont_fork(&self) -> Result<(), NativeError> {
        // SAFETY: madvise on our own mapping only changes what fork copies.
        if unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_DONTFORK) } != 0 {
            return Err(NativeError::last_os("madvise(MADV_DONTFORK)", "region"));
        }
        Ok(())
    }

    /// Unmaps now and returns the thread CPU ns the `munmap` took.
    pub fn unmap_timed(mut self) -> Result<u64, NativeError> {
        let mut rc = 0;
        // SAFETY: our own mapping; nothing refers to it after this.
        let ns = cpu_ns_of(|| rc = unsafe { libc::munmap(self.ptr.cast(), self.len) });
        self.len = 0;
        if rc != 0 {
            return Err(NativeError::last_os("munmap", "region"));
        }
        Ok(ns)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: our own mapping, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

fn mprotect(addr: usize, len: usize, prot: libc::c_int) -> Result<(), NativeError> {
    // SAFETY: the range is one of our own mappings.
    if unsafe { libc::mprotect(addr as *mut _, len, prot) } != 0 {
        return Err(NativeError::last_os("mprotect", format!("{addr:#x}+{len}")));
    }
    Ok(())
}

/// `PROT_READ | PROT_WRITE`.
pub const RW: libc::c_int = libc::PROT_READ | libc::PROT_WRITE;

/// `getppid()` round trips: ns per call.
pub fn syscall_probe<'a>() -> Probe<'a> {
    Probe::new(
        "syscall round trip (getppid)",
        "ns",
        "20000 x syscall(SYS_getppid), thread CPU time",
        || {
            const N: u64 = 20_000;
            let ns = cpu_ns_of(|| {
                for _ in 0..N {
                    // SAFETY: getppid has no arguments and cannot fail.
                    std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
                }
            });
            Ok(ns as f64 / N as f64)
        },
    )
}

/// `mmap` + `munmap` of one untouched anonymous page: ns per pair.
pub fn mmap_munmap_probe<'a>() -> Probe<'a> {
    Probe::new(
        "mmap+munmap 4 KiB",
        "ns",
        "2000 x (mmap 4 KiB anonymous, munmap it), untouched, thread CPU time",
        || {
            const N: u64 = 2000;
            let mut err = None;
            let ns = cpu_ns_of(|| {
                for _ in 0..N {
                    match Region::new(PAGE_SIZE, RW, false) {
                        Ok(r) => drop(r),
                        Err(e) => err = Some(e),
                    }
                }
            });
            err.map_or(Ok(ns as f64 / N as f64), Err)
        },
    )
}

/// `mprotect` of one page between read-write and read-only, between
/// `PROT_NONE` guards (so its VMA never merges): ns per call. The page sits
/// in a 2 MiB range whose PTE table exists (a page two further on, in a VMA
/// of its own, is written), so both variants walk to the PTE: with
/// `populated` the page is written first and every call rewrites its PTE
/// and flushes it from the TLB; without, its PTE is none, and
/// `change_pte_range()` skips it and nothing is flushed. The difference is
/// one PTE rewrite and one local flush.
pub fn mprotect_page_probe<'a>(populated: bool) -> Probe<'a> {
    let what = if populated {
        "populated"
    } else {
        "not populated, its PTE table present"
    };
    Probe::new(
        format!("mprotect 1 page, {what}"),
        "ns",
        format!("2000 x mprotect of one page, {what} (RW <-> R, PROT_NONE guards both sides, a written page of another VMA in the same PTE table), thread CPU time"),
        move || {
            let (_reservation, page) = page_beside_populated(populated)?;
            const N: u64 = 2000;
            let mut r = Ok(());
            let ns = cpu_ns_of(|| {
                for i in 0..N {
                    let prot = if i % 2 == 0 { libc::PROT_READ } else { RW };
                    if let Err(e) = mprotect(page, PAGE_SIZE, prot) {
                        r = Err(e);
                        break;
                    }
                }
            });
            r.map(|()| ns as f64 / N as f64)
        },
    )
}

/// A `PROT_NONE` reservation with, in its first 2 MiB-aligned range, a
/// read-write page (written if `populated`) at index 1 and another
/// read-write, written page at index 3, each a VMA of its own: the page's
/// PTE table exists either way. Returns the reservation and the page.
fn page_beside_populated(populated: bool) -> Result<(Region, usize), NativeError> {
    const PMD: usize = 2 << 20;
    let res = Region::new(2 * PMD, libc::PROT_NONE, false)?;
    let base = (res.addr() + PMD - 1) & !(PMD - 1);
    let (page, other) = (base + PAGE_SIZE, base + 3 * PAGE_SIZE);
    mprotect(page, PAGE_SIZE, RW)?;
    mprotect(other, PAGE_SIZE, RW)?;
    // SAFETY: both pages were just made writable inside our reservation.
    unsafe {
        std::ptr::write_volatile(other as *mut u8, 1);
        if populated {
            std::ptr::write_volatile(page as *mut u8, 1);
        }
    }
    Ok((res, page))
}

/// The "TLB shootdowns" count of CPU `cpu` in `/proc/interrupts` (IPIs that
/// ran `flush_tlb_func()` there).
pub fn tlb_shootdowns(cpu: usize) -> Result<u64, NativeError> {
    let p = "/proc/interrupts";
    let text = std::fs::read_to_string(p).map_err(|e| NativeError::io("read", p, e))?;
    let bad = || NativeError::Parse {
        path: p.into(),
        content: "TLB: line".into(),
        expected: "a \"TLB:\" line with one count per CPU",
    };
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("TLB:"))
        .ok_or_else(bad)?;
    line.split_whitespace()
        .nth(1 + cpu)
        .and_then(|v| v.parse().ok())
        .ok_or_else(bad)
}

/// Flushing calls (read-write to read-only) of [`tlb_ipi_ns`] per batch.
const IPI_CALLS: usize = 250;

/// Batches a sample of [`tlb_ipi_ns`] may take to find [`IPI_MIN_CALLS`]
/// calls of each kind (~0.15 s each here).
const IPI_MAX_BATCHES: usize = 8;

/// Fewest calls of each kind (with an IPI, without) a sample needs.
const IPI_MIN_CALLS: usize = 10;

/// The initiator's wait for one TLB-shootdown IPI: `mprotect` of one
/// populated page from read-write to read-only on CPU `a` while another
/// thread of this process spins in user space on CPU `b`, so the flush
/// must reach that CPU's TLB too (`flush_tlb_mm_range()` sends an IPI and
/// waits for its acknowledgement). Not every such call sends one: a KVM
/// guest's `kvm_flush_tlb_multi()` skips a vCPU the host has preempted
/// (the host flushes it on its next entry), and on a shared host the
/// spinner is not always on its CPU. So each call is timed by itself
/// (wall clock) and classed by the "TLB shootdowns" count of CPU `b` in
/// `/proc/interrupts` read before and after it: the figure is the median
/// call with one IPI less the median call with none (the same rewrite and
/// local flush). A call that met two shootdowns (another process's too) is
/// left out. ns per IPI.
pub fn tlb_ipi_ns(a: usize, b: usize) -> Result<f64, NativeError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    crate::sys::pin_to_cpu(a)?;
    let guard = Region::new(3 * PAGE_SIZE, libc::PROT_NONE, false)?;
    let page = guard.addr() + PAGE_SIZE;
    mprotect(page, PAGE_SIZE, RW)?;
    // SAFETY: the page was just made writable.
    unsafe { std::ptr::write_volatile(page as *mut u8, 1) };
    let stop = AtomicBool::new(false);
    let calls = std::thread::scope(|s| {
        let spinner = s.spawn(|| -> Result<(), NativeError> {
            crate::sys::pin_to_cpu(b)?;
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            Ok(())
        });
        // Let the spinner reach its CPU before timing.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut r: Result<Vec<(f64, u64)>, NativeError> = Ok(Vec::new());
        for _ in 0..IPI_MAX_BATCHES {
            r = r.and_then(|mut v| {
                v.extend(timed_flushes(page, b)?);
                Ok(v)
            });
            match &r {
                Ok(v) if enough_of_each(v) => break,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        stop.store(true, Ordering::Relaxed);
        spinner.join().map_err(|_| NativeError::ThreadPanicked {
            what: "TLB spinner",
        })??;
        r
    })?;
    ipi_difference(calls, b)
}

/// [`IPI_CALLS`] read-write to read-only `mprotect` calls of `page` (each
/// followed by an untimed one back): each call's wall ns and how many TLB
/// shootdowns CPU `b` took meanwhile.
fn timed_flushes(page: usize, b: usize) -> Result<Vec<(f64, u64)>, NativeError> {
    let mut calls = Vec::with_capacity(IPI_CALLS);
    for _ in 0..IPI_CALLS {
        let n0 = tlb_shootdowns(b)?;
        let t0 = std::time::Instant::now();
        mprotect(page, PAGE_SIZE, libc::PROT_READ)?;
        let ns = t0.elapsed().as_nanos() as f64;
        calls.push((ns, tlb_shootdowns(b)? - n0));
        mprotect(page, PAGE_SIZE, RW)?;
    }
    Ok(calls)
}

/// Whether `calls` has [`IPI_MIN_CALLS`] with one IPI and as many with none.
fn enough_of_each(calls: &[(f64, u64)]) -> bool {
    let n = |k: u64| calls.iter().filter(|c| c.1 == k).count();
    n(1) >= IPI_MIN_CALLS && n(0) >= IPI_MIN_CALLS
}

/// The median call with one IPI less the median call with none.
fn ipi_difference(calls: Vec<(f64, u64)>, b: usize) -> Result<f64, NativeError> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let of = |n: u64| -> Vec<f64> { calls.iter().filter(|c| c.1 == n).map(|c| c.0).collect() };
    let (with, without) = (of(1), of(0));
    if with.len() < IPI_MIN_CALLS || without.len() < IPI_MIN_CALLS {
        return Err(NativeError::InvalidConfig {
            what: format!(
                "only {} of {} flushes sent CPU {b} one IPI and {} none (/proc/interrupts): too few of either to time one (a KVM guest's paravirtual TLB flush skips preempted vCPUs; the spinner may be off its CPU)",
                with.len(),
                calls.len(),
                without.len()
            ),
        });
    }
    Ok((median(with) - median(without)).max(0.0))
}

/// [`tlb_ipi_ns`] as a probe.
pub fn mprotect_ipi_probe<'a>(a: usize, b: usize) -> Probe<'a> {
    Probe::new(
        "TLB shootdown IPI",
        "ns",
        format!("batches of {IPI_CALLS} x mprotect of one populated page RW -> R on CPU {a} while a thread of the process spins on CPU {b} (up to {IPI_MAX_BATCHES} batches, until {IPI_MIN_CALLS} calls of each kind), each call timed (wall) and classed by the TLB shootdowns CPU {b} took meanwhile (/proc/interrupts): median with one IPI less median with none"),
        move || tlb_ipi_ns(a, b),
    )
}

/// `munmap` of a populated 4 KiB-mapped region: ns per page.
pub fn munmap_pages_probe<'a>(pages: usize) -> Probe<'a> {
    Probe::new(
        format!("munmap populated, {} MiB", (pages * PAGE_SIZE) >> 20),
        "ns/page",
        format!(
            "munmap of {} MiB of written 4 KiB pages (MADV_NOHUGEPAGE), thread CPU time per page",
            (pages * PAGE_SIZE) >> 20
        ),
        move || {
            let r = Region::new(pages * PAGE_SIZE, RW, true)?;
            Ok(r.unmap_timed()? as f64 / pages as f64)
        },
    )
}

/// `mprotect` rewriting every PTE of a populated region (read-write to
/// read-only and back): ns per page and call.
pub fn mprotect_pages_probe<'a>(pages: usize) -> Probe<'a> {
    Probe::new(
        format!("mprotect populated, {} MiB", (pages * PAGE_SIZE) >> 20),
        "ns/page",
        format!(
            "mprotect RW->R and R->RW of {} MiB of written 4 KiB pages, thread CPU time per page and call",
            (pages * PAGE_SIZE) >> 20
        ),
        move || {
            let r = Region::new(pages * PAGE_SIZE, RW, true)?;
            let mut res = Ok(());
            let ns = cpu_ns_of(|| {
                res = mprotect(r.addr(), pages * PAGE_SIZE, libc::PROT_READ)
                    .and_then(|()| mprotect(r.addr(), pages * PAGE_SIZE, RW));
            });
            res.map(|()| ns as f64 / (2 * pages) as f64)
        },
    )
}

/// CPU ns of `fork()` in this process (the parent's side: `dup_mmap()`
/// copying every mapping's page tables); the child `_exit`s at once.
pub fn fork_ns() -> Result<u64, NativeError> {
    let mut pid = 0;
    // SAFETY: the child only calls _exit, which is async-signal-safe.
    let ns = cpu_ns_of(|| pid = unsafe { libc::fork() });
    if pid < 0 {
        return Err(NativeError::last_os("fork", "calibration fork"));
    }
    if pid == 0 {
        // SAFETY: leaves the child without running anything of the parent's.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: pid is our child; status a valid out-pointer.
    while unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(NativeError::last_os("waitpid", "calibration fork"));
        }
    }
    Ok(ns)
}

/// `fork()` with `big` against `small` populated pages mapped: the
/// difference per page (the page-table copy of one PTE and its share of
/// the table), which cancels the fork's fixed cost.
pub fn fork_pages_probe<'a>(small: usize, big: usize) -> Probe<'a> {
    Probe::new(
        "fork per populated page",
        "ns/page",
        format!(
            "fork() CPU time (parent) with {} MiB minus with {} MiB of written 4 KiB pages, per page",
            (big * PAGE_SIZE) >> 20,
            (small * PAGE_SIZE) >> 20
        ),
        move || {
            let a = Region::new(small * PAGE_SIZE, RW, true)?;
            let t_small = fork_ns()?;
            drop(a);
            let b = Region::new(big * PAGE_SIZE, RW, true)?;
            let t_big = fork_ns()?;
            drop(b);
            Ok((t_big as f64 - t_small as f64) / (big - small) as f64)
        },
    )
}

/// Maps `bytes` with `MADV_HUGEPAGE`, writes one byte per 4 KiB and unmaps
/// it again: the memory the next allocations get is then memory this
/// guest's host has backed.
///
/// Why: a virtual machine with free page reporting (virtio-balloon
/// `F_REPORTING`, `page_reporting_order` 9 here) hands free blocks of 2 MiB
/// and more back to the host a few seconds after they are freed; the first
/// touch of such a page then faults in the host too, which costs several
/// times the guest's own fault (a 2 MiB THP fault took ~5 ms instead of
/// ~0.1 ms). That is the hypervisor's cost, not the guest kernel's, and the
/// model has no host: a measurement of the kernel's fault path warms the
/// memory first.
pub fn warm_memory(bytes: usize) -> Result<(), NativeError> {
    warm_region(bytes).map(drop)
}

/// [`warm_memory`]'s region, still mapped: the memory stays this process's
/// (and host-backed) until the region is dropped, so that the guest cannot
/// report it to the host meanwhile.
pub fn warm_region(bytes: usize) -> Result<Region, NativeError> {
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            RW,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(NativeError::last_os("mmap", "memory warm-up"));
    }
    let r = Region {
        ptr: p.cast(),
        len: bytes,
    };
    // SAFETY: madvise on our own mapping only changes its THP eligibility;
    // failure (no THP) leaves 4 KiB pages, which warm the memory as well.
    unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
    for off in (0..bytes).step_by(PAGE_SIZE) {
        // SAFETY: off < bytes, inside our read-write mapping.
        unsafe { std::ptr::write_volatile(r.ptr.add(off), 1) };
    }
    Ok(r)
}

/// How many VMAs this process has (lines of `/proc/self/maps`).
pub fn nr_vmas() -> Result<usize, NativeError> {
    let p = "/proc/self/maps";
    let text = std::fs::read_to_string(p).map_err(|e| NativeError::io("read", p, e))?;
    Ok(text.lines().count())
}

/// `nr` one-page VMAs made by alternating protections in one reservation,
/// unmapped on drop.
pub struct ManyVmas {
    region: Region,
    /// An address inside one of them.
    pub probe_addr: usize,
}

impl ManyVmas {
    /// Makes about `nr` VMAs (at least 3): `PROT_READ` pages at odd
    /// indices of a `PROT_NONE` reservation of `nr + 2` pages, so that the
    /// first and the last are `PROT_NONE` guards.
    pub fn new(nr: usize) -> Result<ManyVmas, NativeError> {
        let region = Region::new((nr + 2) * PAGE_SIZE, libc::PROT_NONE, false)?;
        for i in (1..=nr).step_by(2) {
            mprotect(region.addr() + i * PAGE_SIZE, PAGE_SIZE, libc::PROT_READ)?;
        }
        let probe_addr = region.addr() + ((nr / 2) | 1) * PAGE_SIZE;
        Ok(ManyVmas { region, probe_addr })
    }

    /// The reservation's start.
    pub fn addr(&self) -> usize {
        self.region.addr()
    }

    /// Pages of the reservation (the VMAs and the guards between them).
    pub fn nr_pages(&self) -> usize {
        self.region.len / PAGE_SIZE
    }
}

/// ns per `mincore()` of one page at each of `nr` addresses drawn at
/// random (seeded) from the odd pages of `pages` pages from `start`, in
/// that order: `vma_lookup()` from the root of the maple tree to a leaf
/// that the previous lookup, far away, did not leave in L1 or L2, then a
/// page-table walk that ends at an empty PMD (nothing is populated).
///
/// Why random: the same lookup repeated in a loop keeps its whole path in
/// L1, so more levels cost next to nothing; a fault meets the tree after
/// other work. Over a reservation of tens of thousands of one-page VMAs
/// the leaves (about 1.5 MiB of nodes) do not fit in L2, so each level
/// below the first few costs what a level of a real fault's walk costs
/// when the tree is large. The same draw over one VMA of the same span
/// walks the same page tables and a tree of the process's few VMAs; the
/// difference is the levels the many VMAs add.
pub fn mincore_random_ns(
    start: usize,
    pages: usize,
    nr: usize,
    seed: u64,
) -> Result<f64, NativeError> {
    let mut rng = crate::rng::SplitMix64::new(seed);
    let odd = (pages / 2).max(1) as u64;
    let addrs: Vec<usize> = (0..nr)
        .map(|_| start + (2 * rng.below(odd) as usize + 1) * PAGE_SIZE)
        .collect();
    let mut vec = [0u8; 1];
    let mut rc = 0;
    let ns = cpu_ns_of(|| {
        for &a in &addrs {
            // SAFETY: one page inside our reservation, one result byte in vec.
            rc |= unsafe { libc::mincore(a as *mut _, PAGE_SIZE, vec.as_mut_ptr()) };
        }
    });
    if rc != 0 {
        return Err(NativeError::last_os(
            "mincore",
            format!("{start:#x}+{pages} pages"),
        ));
    }
    Ok(ns as f64 / nr as f64)
}

/// One `PROT_READ` VMA over `pages` pages, none populated: the baseline
/// of [`mincore_random_ns`] with the same span as a [`ManyVmas`].
pub fn one_vma(pages: usize) -> Result<Region, NativeError> {
    Region::new(pages * PAGE_SIZE, libc::PROT_READ, false)
}

/// ns per `mincore()` of one page at `addr` (`vma_lookup()` in the maple
/// tree, then the page-table walk of one page).
pub fn mincore_ns(addr: usize) -> Result<f64, NativeError> {
    const N: u64 = 50_000;
    let mut vec = [0u8; 1];
    let mut rc = 0;
    let ns = cpu_ns_of(|| {
        for _ in 0..N {
            // SAFETY: one page at addr, one result byte in vec.
            rc |= unsafe { libc::mincore(addr as *mut _, PAGE_SIZE, vec.as_mut_ptr()) };
        }
    });
    if rc != 0 {
        return Err(NativeError::last_os("mincore", format!("{addr:#x}")));
    }
    Ok(ns as f64 / N as f64)
}

/// The largest number of extra VMAs this process may make, leaving room for
/// the rest of the program: `vm.max_map_count` less the VMAs it has, less
/// 2000, at most `cap`.
pub fn vma_budget(cap: usize) -> Result<usize, NativeError> {
    let p = "/proc/sys/vm/max_map_count";
    let max: usize = std::fs::read_to_string(p)
        .map_err(|e| NativeError::io("read", p, e))?
        .trim()
        .parse()
        .map_err(|_| NativeError::Parse {
            path: p.into(),
            content: "?".into(),
            expected: "an integer",
        })?;
    Ok(max.saturating_sub(nr_vmas()? + 2000).min(cap))
}

/// The first user access to each page of a large folio that a write fault
/// has just mapped by PTEs, besides the page that faulted: the time per
/// such page, beyond the faults themselves.
///
/// Why: `do_anonymous_page()` maps a large folio's pages all at once with
/// `set_ptes()`, young and dirty, so the program's later accesses to the
/// other pages need no fault, but each still needs its own TLB entry. On
/// this host (an EPYC guest, 6.18) such an access costs ~90 ns right after
/// the fault, against ~9 ns for a page mapped long before (`touch_ns`)
/// and ~5 ns in a PMD-mapped THP, whose pages share one TLB entry. This
/// was found by timing the same regions with and without those accesses
/// (loads cost the same as stores; a second access to the page costs
/// ~10 ns; a system call between the fault and the accesses halves it;
/// accessed after all the faults they cost ~16 ns). Which hardware step
/// costs it (the page walk on the page-table line the kernel just wrote,
/// the nested walk of a guest, the data line the clear just wrote) is not
/// identified.
///
/// The probe writes `len` bytes (2 MiB aligned, `MADV_HUGEPAGE`) in folios
/// of `folio_bytes` twice: once one byte per folio (every access a fault),
/// once one byte per page (a fault, then the folio's other pages). The
/// caller sets the THP knobs so that the folios have that size and warms
/// the memory ([`warm_memory`]). Returns the difference per extra page, in
/// thread CPU ns, the faster of `repeats` pairs.
pub fn fresh_pte_touch_ns(
    len: usize,
    folio_bytes: usize,
    repeats: usize,
) -> Result<f64, NativeError> {
    let pages_per_folio = folio_bytes / PAGE_SIZE;
    if pages_per_folio < 2 || !len.is_multiple_of(folio_bytes) {
        return Err(NativeError::InvalidConfig {
            what: format!("fresh PTE probe: folios of {folio_bytes} bytes in {len} bytes"),
        });
    }
    let (mut faults_only, mut all) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..repeats.max(1) {
        faults_only = faults_only.min(write_folios(len, folio_bytes)?);
        all = all.min(write_folios(len, PAGE_SIZE)?);
    }
    let extra = (len / PAGE_SIZE - len / folio_bytes) as f64;
    Ok((all - faults_only) / extra)
}

/// Maps `len` bytes at a 2 MiB boundary with `MADV_HUGEPAGE`, writes one
/// byte every `stride` bytes, and returns the thread CPU ns of the writes.
fn write_folios(len: usize, stride: usize) -> Result<f64, NativeError> {
    const PMD: usize = 2 << 20;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + PMD,
            RW,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(NativeError::last_os("mmap", "fresh PTE probe"));
    }
    let r = Region {
        ptr: p.cast(),
        len: len + PMD,
    };
    let start = (r.addr() + PMD - 1) & !(PMD - 1);
    // SAFETY: madvise on our own mapping only changes its THP eligibility.
    if unsafe { libc::madvise(start as *mut _, len, libc::MADV_HUGEPAGE) } != 0 {
        return Err(NativeError::last_os(
            "madvise(MADV_HUGEPAGE)",
            "fresh PTE probe",
        ));
    }
    let base = r.ptr.wrapping_add(start - r.addr());
    let ns = cpu_ns_of(|| {
        for off in (0..len).step_by(stride) {
            // SAFETY: start + off lies inside our read-write mapping (start
            // is at most PMD - 1 past its beginning and off < len).
            unsafe { std::ptr::write_volatile(base.add(off), 1) };
        }
    });
    drop(r);
    Ok(ns as f64)
}

/// Where this guest kernel counts the memory its free page reporting
/// (virtio-balloon `F_REPORTING`) has handed back to the host, in KiB. Not
/// an upstream parameter: the Firecracker guest kernel of this project's
/// host has it beside `page_reporting_order`.
pub const REPORTED_KIB: &str = "/sys/module/page_reporting/parameters/reported_kib";

/// Where the same kernel counts the free page reporting worker's passes
/// (`page_reporting_process()` runs); not upstream either. The count moves
/// when a pass ends.
pub const REPORTING_PASSES: &str = "/sys/module/page_reporting/parameters/passes";

/// The free page reporting counter ([`REPORTED_KIB`]), if this kernel has it.
pub fn reported_kib() -> Option<u64> {
    std::fs::read_to_string(REPORTED_KIB)
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipi_is_the_median_call_with_one_less_the_median_call_with_none() {
        let mut calls: Vec<(f64, u64)> = (0..30).map(|i| (1500.0 + i as f64, 0)).collect();
        calls.extend((0..12).map(|i| (13_000.0 + i as f64, 1)));
        // A call that met another process's shootdown too is left out.
        calls.push((90_000.0, 2));
        assert!(enough_of_each(&calls));
        let ns = ipi_difference(calls, 1).unwrap();
        assert_eq!(ns, 13_006.0 - 1_515.0);
    }

    #[test]
    fn too_few_calls_with_an_ipi_say_why() {
        let mut calls: Vec<(f64, u64)> = (0..249).map(|_| (1500.0, 0)).collect();
        calls.push((13_000.0, 1));
        assert!(!enough_of_each(&calls));
        let e = ipi_difference(calls, 1).unwrap_err().to_string();
        assert!(
            e.contains("only 1 of 250 flushes sent CPU 1 one IPI"),
            "{e}"
        );
        assert!(e.contains("paravirtual"), "{e}");
    }
}
