//! The per-task VMA lookup cache (mm/vmacache.c and include/linux/vmacache.h,
//! Linux 3.15–6.0; removed in 6.1 by the maple tree series).
//!
//! # What it caches and when it is stale
//!
//! Every task carries four pointers to VMAs of its mm that recent lookups
//! returned, and the value of `mm->vmacache_seqnum` at which they were valid.
//! `find_vma()` asks the cache first: a slot whose VMA contains the address is
//! a hit and the tree walk is skipped. A slot is a *pointer*, so a VMA that was
//! resized in place (split, extended) is still the same object: the lookup
//! rechecks `vm_start <= addr < vm_end` every time and never needs an
//! invalidation for it. Only a VMA leaving the tree (munmap, a merge that frees
//! one) could leave a dangling pointer, and that bumps the mm's seqnum: the
//! next lookup of every task sees a different seqnum, takes it, clears its
//! slots and misses.
//!
//! # Which slot
//!
//! A successful tree lookup writes its VMA to slot `VMACACHE_HASH(addr)`.
//! Until 4.18 the hash was the page number (`(addr >> PAGE_SHIFT) & 3`) and a
//! lookup scanned slots 0..3, so a cached VMA sat in the first slot examined
//! about a quarter of the time. The PMD-hash patch (seed 002, merged for
//! 4.19) hashes by `addr >> PMD_SHIFT` and starts the scan at the hashed slot,
//! wrapping round, so that lookups near a previous miss examine its slot
//! first. [`VmacachePolicy::Lru`] models Andrew Morton's review proposal
//! instead (keep the array LRU-ordered in place, as `bh_lru_install()` does);
//! it was never merged.
//!
//! # The seed's figure of merit, and what moves it
//!
//! The seed counts hits in the *first slot examined*, as a share of hits
//! ("~25 % ... *if* the vma is cached"). Only a miss writes a slot, so where
//! a VMA sits is decided by the address of the miss that cached it:
//!
//! - pfn: the slot is the missing page's number mod 4 and the scan always
//!   starts at 0, so a VMA is found first with probability 1/4 over miss
//!   addresses. One process sweeping one VMA keeps it in one slot for the
//!   whole sweep: 100 % or 0 % for that process. The kernel's ASLR draws a
//!   random page offset per exec (`kernel.randomize_va_space`), which is
//!   what makes it 25 % over processes.
//! - pmd: lookups in the PMD of the miss find it first. The next PMD up
//!   hashes one slot later and the scan wraps, so a sequential sweep takes
//!   4, 3, 2 probes in the three PMDs after the miss's: without frequent
//!   invalidations (which make the next miss land where the lookups are)
//!   a sweep gains nothing over pfn.
//! - lru: a hit moves to slot 0, so repeated hits on one VMA are first-slot.
//!
//! System calls look up through the cache too ([`find_vma_syscall`]):
//! `madvise(MADV_DONTNEED)` of the seed's malloc example caches the arena's
//! VMA in the slot of the arena's PMD right before the faults that refill
//! it.
//!
//! Deviation: a [`VmaRef`] is the VMA's start address, the key of the model's
//! VMA tree, not an object identity. The part of a split that keeps the start
//! keeps the identity (in the kernel it depends on `new_below`), and a new
//! mapping that merges with the VMA above it gives that VMA a new start, so
//! the model invalidates there where 4.19's `vma_merge()` adjusted `next` in
//! place. Both only change which lookups hit, never what a lookup returns.
//!
//! Deviation: the seqnum is a `u64` as since 4.19, so it never wraps and the
//! `vmacache_flush_all()` of 3.15–4.18 (run when the 32-bit seqnum wrapped)
//! is not modelled.
//!
//! Deviation: the kernel counts `vmacache_find_calls`/`_hits` only with
//! CONFIG_DEBUG_VM_VMACACHE; the model always counts them, and also counts
//! first-slot hits and the nanoseconds spent in `vmacache_find()`.
//!
//! Deviation: `vmacache_find_exact()` (used by nommu only) is not modelled.

use crate::cost::{Cost, Cx};
use crate::types::{PAGE_SHIFT, PMD_SHIFT};
use crate::vma::{MmStruct, Vma};
use crate::vmstat::{VmEvent, VmStat};

/// `VMACACHE_BITS`: the cache has `1 << 2` slots.
pub const VMACACHE_BITS: u32 = 2;
/// `VMACACHE_SIZE`: four slots, small enough to scan in a few cycles.
pub const VMACACHE_SIZE: usize = 1 << VMACACHE_BITS;
/// `VMACACHE_MASK`.
pub const VMACACHE_MASK: u64 = VMACACHE_SIZE as u64 - 1;

/// How the per-task VMA cache places and finds entries (the model-only knob
/// `mmlab.vmacache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum VmacachePolicy {
    /// Linux 3.15–4.18: slot by page number, scan slots 0..3.
    Pfn,
    /// Linux 4.19–6.0: slot by PMD, scan from the hashed slot and wrap.
    Pmd,
    /// Andrew Morton's review proposal: the slots kept most recently used
    /// first; a hit moves to slot 0, an update inserts at slot 0.
    Lru,
    /// Linux 6.1+: no cache; every lookup walks the maple tree.
    #[default]
    None,
}

impl VmacachePolicy {
    /// The knob value naming this policy.
    pub fn name(self) -> &'static str {
        match self {
            VmacachePolicy::Pfn => "pfn",
            VmacachePolicy::Pmd => "pmd",
            VmacachePolicy::Lru => "lru",
            VmacachePolicy::None => "none",
        }
    }

    /// The policy named `s`.
    pub fn parse(s: &str) -> Option<VmacachePolicy> {
        [
            VmacachePolicy::Pfn,
            VmacachePolicy::Pmd,
            VmacachePolicy::Lru,
            VmacachePolicy::None,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    /// `VMACACHE_HASH(addr)`: the slot an update for `addr` writes, and the
    /// slot a lookup of `addr` examines first.
    pub fn hash(self, addr: u64) -> usize {
        match self {
            VmacachePolicy::Pfn => ((addr >> PAGE_SHIFT) & VMACACHE_MASK) as usize,
            VmacachePolicy::Pmd => ((addr >> PMD_SHIFT) & VMACACHE_MASK) as usize,
            // The LRU array is ordered by recency, not by address.
            VmacachePolicy::Lru | VmacachePolicy::None => 0,
        }
    }

    /// The slot at which a lookup of `addr` starts scanning. Before the seed
    /// the scan always began at slot 0 whatever the hash.
    fn scan_start(self, addr: u64) -> usize {
        match self {
            VmacachePolicy::Pmd => self.hash(addr),
            VmacachePolicy::Pfn | VmacachePolicy::Lru | VmacachePolicy::None => 0,
        }
    }
}

/// A cached "pointer" to a VMA: its start address, the key of the VMA tree.
///
/// Invariant: while the owning task's seqnum equals its mm's, the tree has a
/// VMA at `start` (every removal from the tree bumps the seqnum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaRef {
    /// `vm_start` of the VMA when it was cached, its key in the tree.
    pub start: u64,
}

/// `struct vmacache` in `task_struct`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Vmacache {
    /// The mm's `vmacache_seqnum` at which the slots were valid.
    pub seqnum: u64,
    /// The slots.
    pub vmas: [Option<VmaRef>; VMACACHE_SIZE],
}

/// Identity of an mm for `current->mm == mm`: the pfn of its PGD, unique
/// among the live mms of one page allocator as the kernel's pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MmId(pub crate::types::Pfn);

impl MmId {
    /// The identity of `mm`.
    pub fn of(mm: &MmStruct) -> MmId {
        MmId(mm.pgt.pgd)
    }
}

/// The parts of `task_struct` that the VMA cache uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskStruct {
    /// `current->mm`; `None` for a kernel thread.
    pub mm: Option<MmId>,
    /// The kernel's compile-time choice of hash (a preset or the knob).
    pub policy: VmacachePolicy,
    /// The per-task cache.
    pub vmacache: Vmacache,
}

impl TaskStruct {
    /// A user task running in `mm` with an empty cache.
    pub fn new(mm: &MmStruct, policy: VmacachePolicy) -> TaskStruct {
        TaskStruct {
            mm: Some(MmId::of(mm)),
            policy,
            vmacache: Vmacache::default(),
        }
    }

    /// A kernel thread (`PF_KTHREAD`), which never uses the cache.
    pub fn kthread(policy: VmacachePolicy) -> TaskStruct {
        TaskStruct {
            mm: None,
            policy,
            vmacache: Vmacache::default(),
        }
    }

    /// `vmacache_valid_mm()`: the cache is only for lookups in the task's
    /// own mm, and never for kernel threads (which borrow an mm).
    fn valid_mm(&self, mm: &MmStruct) -> bool {
        self.mm == Some(MmId::of(mm))
    }

    /// Models `copy_mm()`'s `vmacache_flush()` for a forked child: the
    /// child runs in `child_mm` and starts with empty slots.
    pub fn fork(&self, child_mm: &MmStruct) -> TaskStruct {
        let mut t = TaskStruct::new(child_mm, self.policy);
        vmacache_flush(&mut t);
        t
    }

    /// Models `exec_mmap()`: the task switches to `new_mm`, whose seqnum is
    /// reset, and its slots are cleared.
    pub fn exec(&mut self, new_mm: &mut MmStruct) {
        self.mm = Some(MmId::of(new_mm));
        new_mm.vmacache_seqnum = 0;
        self.vmacache.seqnum = 0;
        vmacache_flush(self);
    }
}

/// `vmacache_flush()`: clears the task's slots.
pub fn vmacache_flush(task: &mut TaskStruct) {
    task.vmacache.vmas = [None; VMACACHE_SIZE];
}

/// `vmacache_invalidate()`: makes every task's cache of `mm` stale. Called
/// whenever a VMA leaves the tree.
pub fn vmacache_invalidate(mm: &mut MmStruct) {
    mm.vmacache_seqnum += 1;
}

/// `vmacache_update()`: after a tree lookup of `addr` found `vma`, caches it.
pub fn vmacache_update(task: &mut TaskStruct, mm: &MmStruct, addr: u64, vma: &Vma) {
    if !task.valid_mm(mm) {
        return;
    }
    let r = Some(VmaRef { start: vma.start });
    let vmas = &mut task.vmacache.vmas;
    match task.policy {
        VmacachePolicy::Pfn | VmacachePolicy::Pmd => vmas[task.policy.hash(addr)] = r,
        // Insert in front, dropping the least recently used entry.
        VmacachePolicy::Lru => {
            vmas.rotate_right(1);
            vmas[0] = r;
        }
        VmacachePolicy::None => {}
    }
}

/// `vmacache_find()`: the VMA containing `addr` if one of the task's slots
/// holds it. Charges [`Cost::VmacacheProbe`] per slot examined and counts the
/// calls, hits, first-slot hits and its nanoseconds in `vmstat`.
pub fn vmacache_find(
    task: &mut TaskStruct,
    mm: &MmStruct,
    vmstat: &mut VmStat,
    cx: &mut Cx,
    addr: u64,
) -> Option<Vma> {
    let ns_before = cx.compute_ns();
    let found = vmacache_find_inner(task, mm, vmstat, cx, addr);
    vmstat.count(VmEvent::VMACACHE_FIND_NS, cx.compute_ns() - ns_before);
    found
}

fn vmacache_find_inner(
    task: &mut TaskStruct,
    mm: &MmStruct,
    vmstat: &mut VmStat,
    cx: &mut Cx,
    addr: u64,
) -> Option<Vma> {
    vmstat.count(VmEvent::VMACACHE_FIND_CALLS, 1);
    cx.charge(Cost::VmacacheFindEntry);
    // vmacache_valid(): the mm check, then the seqnum check. The first
    // lookup after an invalidation takes the new seqnum and clears the slots.
    if !task.valid_mm(mm) {
        return None;
    }
    if task.vmacache.seqnum != mm.vmacache_seqnum {
        task.vmacache.seqnum = mm.vmacache_seqnum;
        vmacache_flush(task);
        return None;
    }
    let mut idx = task.policy.scan_start(addr);
    for i in 0..VMACACHE_SIZE {
        cx.charge(Cost::VmacacheProbe);
        if let Some(r) = task.vmacache.vmas[idx] {
            let vma = *mm.vmas.get(&r.start).unwrap_or_else(|| {
                panic!(
                    "vmacache slot {idx} points at {:#x}, which left the tree without \
                     vmacache_invalidate()",
                    r.start
                )
            });
            if vma.start <= addr && addr < vma.end {
                vmstat.count(VmEvent::VMACACHE_FIND_HITS, 1);
                if i == 0 {
                    vmstat.count(VmEvent::VMACACHE_FIRST_SLOT_HITS, 1);
                }
                if task.policy == VmacachePolicy::Lru {
                    // Move the hit to the front, keeping the others' order.
                    task.vmacache.vmas[..=idx].rotate_right(1);
                }
                return Some(vma);
            }
        }
        idx = (idx + 1) % VMACACHE_SIZE;
    }
    None
}

/// Models `find_vma()` of Linux 3.15–6.0 (mm/mmap.c) for `current == task`:
/// the cache first, then the tree walk ([`MmStruct::find_vma`], which charges
/// the tree's depth), then `vmacache_update()` with what the walk found.
/// Under [`VmacachePolicy::None`] it is the tree walk alone, as in 6.1+.
pub fn find_vma(
    task: &mut TaskStruct,
    mm: &MmStruct,
    vmstat: &mut VmStat,
    cx: &mut Cx,
    addr: u64,
) -> Option<Vma> {
    let ns_before = cx.compute_ns();
    let found = if task.policy == VmacachePolicy::None {
        mm.find_vma(cx, addr)
    } else if let Some(v) = vmacache_find(task, mm, vmstat, cx, addr) {
        Some(v)
    } else {
        let found = mm.find_vma(cx, addr);
        if let Some(v) = &found {
            vmacache_update(task, mm, addr, v);
        }
        found
    };
    vmstat.count(VmEvent::FIND_VMA_NS, cx.compute_ns() - ns_before);
    found
}

/// The cached `find_vma()` with which `munmap()` (`do_munmap()`),
/// `madvise()` (`find_vma_prev()`) and `mmap()` with an address hint
/// (`arch_get_unmapped_area_topdown()`) begin in Linux 3.15–6.0: it counts
/// as a `vmacache_find()` call and a miss caches what the walk found, so a
/// system call changes which slots later faults hit.
///
/// Deviation: only the cache's probes are charged here; the tree walk is
/// charged by the system call's own lookup ([`MmStruct::munmap`],
/// [`MmStruct::madvise`], [`MmStruct::get_unmapped_area`]) whether or not the
/// cache hit, so a hit does not save the walk's few nanoseconds.
pub fn find_vma_syscall(
    task: &mut TaskStruct,
    mm: &MmStruct,
    vmstat: &mut VmStat,
    cx: &mut Cx,
    addr: u64,
) {
    if task.policy == VmacachePolicy::None {
        return;
    }
    if vmacache_find(task, mm, vmstat, cx, addr).is_some() {
        return;
    }
    if let Some(v) = mm.find_vma_uncharged(addr) {
        vmacache_update(task, mm, addr, &v);
    }
}

/// The VMA containing `addr` through the cache (`vma_lookup()` over
/// [`find_vma`]).
pub fn vma_lookup(
    task: &mut TaskStruct,
    mm: &MmStruct,
    vmstat: &mut VmStat,
    cx: &mut Cx,
    addr: u64,
) -> Option<Vma> {
    find_vma(task, mm, vmstat, cx, addr).filter(|v| v.start <= addr)
}

#[cfg(test)]
mod tests;
