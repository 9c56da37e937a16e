//! The narrow interface through which the model reports what each kernel step
//! costs, and which locks it takes.
//!
//! # Why the model does not keep time itself
//!
//! A kernel function in the model changes state at once, when it is called,
//! and records *what it did* as a list of segments: compute for so many
//! nanoseconds, take lock L, hold it while computing, release it. The engine
//! (crate `sim`) plays those segments out on virtual time, one lock
//! acquisition at a time and in global time order, so that a vCPU that finds a
//! lock held waits for its release and the wait is accounted. The model never
//! learns how long it waited: exactly as a kernel function does not know how
//! long its spinlock spun.
//!
//! The costs themselves are named kernel steps ([`Cost`]); their values in
//! nanoseconds come from a cost profile that the engine loads (published
//! hardware figures or a host calibration, each cited in the profile).

use crate::types::{Pfn, SimTime, VcpuId};

macro_rules! costs {
    ($($(#[$doc:meta])* $name:ident = $key:literal,)*) => {
        /// A named step of kernel work whose duration comes from the cost profile.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
        #[repr(u8)]
        pub enum Cost { $($(#[$doc])* $name,)* }

        impl Cost {
            /// Every cost, in declaration order.
            pub const ALL: &'static [Cost] = &[$(Cost::$name,)*];
            /// Number of distinct costs.
            pub const COUNT: usize = Cost::ALL.len();

            /// The key of this cost in a profile file (`snake_case`).
            pub fn key(self) -> &'static str {
                match self { $(Cost::$name => $key,)* }
            }

            /// The cost whose profile key is `key`.
            pub fn from_key(key: &str) -> Option<Cost> {
                match key { $($key => Some(Cost::$name),)* _ => None }
            }
        }
    };
}

costs! {
    /// Entry and exit of `alloc_pages()`: gfp checks, zonelist set-up,
    /// `prep_new_page()` bookkeeping.
    AllocPagesEntry = "alloc_pages_entry_ns",
    /// Entry of `free_pages()`/`free_unref_page_prepare()`: page checks and
    /// the pageblock migratetype lookup.
    FreePagesEntry = "free_pages_entry_ns",
    /// One watermark check of one zone (`zone_watermark_fast()`).
    WatermarkCheck = "watermark_check_ns",
    /// Taking and releasing an uncontended per-CPU pageset lock (`pcp_spin_trylock()`).
    PcpLock = "pcp_lock_ns",
    /// Adding a page to, or taking one from, a per-CPU list; the page's
    /// `struct page` is usually cache-hot here.
    PcpListOp = "pcp_list_op_ns",
    /// Taking an uncontended `zone->lock` (one atomic on a line this CPU may
    /// not own).
    ZoneLockAcquire = "zone_lock_acquire_ns",
    /// Extra latency when `zone->lock` was last held by another CPU: the lock's
    /// cache line and the free-list heads move between cores.
    ZoneLockHandoff = "zone_lock_handoff_ns",
    /// Taking a block off a buddy free list, or putting one on: the
    /// `struct page` is usually cold, so this is roughly one cache miss.
    BuddyListOp = "buddy_list_op_ns",
    /// One step of buddy coalescing in `__free_one_page()`: look up the buddy's
    /// `struct page` (a likely miss), unlink it, combine.
    BuddyMergeStep = "buddy_merge_step_ns",
    /// One step of `expand()`: split a block and put the upper half on a list.
    BuddySplitStep = "buddy_split_step_ns",
    /// Zeroing one 4 KiB page (`clear_page()`), memory-bandwidth bound.
    ClearPage = "clear_page_ns",
    /// Copying one 4 KiB page (`copy_page()`).
    CopyPage = "copy_page_ns",
    /// Entry and exit of a user page fault: the exception, `handle_mm_fault()`
    /// set-up and return to user space, without the VMA lookup, the page-table
    /// walk's misses, the allocation or the clearing.
    FaultEntry = "fault_entry_ns",
    /// One level of a maple-tree walk (`mas_walk()`): one node, usually cached.
    VmaLookupLevel = "vma_lookup_level_ns",
    /// One slot of the per-task VMA cache examined by `vmacache_find()`
    /// (Linux 3.15–6.0): a load from `current->vmacache`, a NULL check and
    /// the bounds compare against the VMA (usually an L1 hit).
    VmacacheProbe = "vmacache_probe_ns",
    /// The fixed part of one `vmacache_find()` call (Linux 3.15–6.0): the
    /// call and return and `vmacache_valid()` (`current->mm == mm`, not a
    /// kernel thread, the seqnum compare), before any slot is examined.
    VmacacheFindEntry = "vmacache_find_entry_ns",
    /// Setting one PTE or PMD entry, with the rmap and counter updates around
    /// it (`set_pte_at()`, `folio_add_new_anon_rmap()`).
    PteSet = "pte_set_ns",
    /// Each page after the first that one `set_ptes()` maps for a new
    /// anonymous large folio (`do_anonymous_page()` of 6.18): its PTE
    /// store, and its part of `folio_add_new_anon_rmap()` for a PTE-mapped
    /// folio (with `CONFIG_PAGE_MAPCOUNT`, the page's `_mapcount` and
    /// `PageAnonExclusive` in its `struct page`). The folio-wide work and
    /// the first PTE are [`Cost::PteSet`].
    SetPtesPage = "set_ptes_page_ns",
    /// What a write fault that allocates a large anonymous folio does once
    /// beyond what an order-0 fault does (6.18): in `alloc_anon_folio()`,
    /// the order selection (`thp_vma_allowable_orders()`,
    /// `pte_offset_map()` and the `pte_range_none()` scan), a compound
    /// allocation (`vma_alloc_folio()`), `mem_cgroup_charge()` of several
    /// pages, which goes to the memcg's page counter where an order-0
    /// charge takes its per-CPU stock, and the drain of
    /// `folio_zero_user()`'s stores, which the page-table lock taken right
    /// after waits for; in `do_anonymous_page()`, the large branch
    /// (`pte_range_none()` again, `folio_ref_add()`, the folio-wide
    /// mapcount of `folio_add_new_anon_rmap()`, the mTHP counters) and
    /// `folio_add_lru()`, which moves a large folio to the LRU at once
    /// under the lruvec lock where order-0 folios wait in a batch. The
    /// per-page work is [`Cost::ClearPage`] and [`Cost::SetPtesPage`].
    /// Also charged once per PMD-mapped THP at its fault
    /// (`vma_alloc_anon_folio_pmd()` does the same charge, zeroing, LRU
    /// add and counters; its order checks are `thp_vma_allowable_order()`
    /// rather than a PTE scan).
    AllocAnonFolio = "alloc_anon_folio_ns",
    /// Copying one PTE or PMD entry at fork (`copy_present_pte()`), with the
    /// reference taken and the write-protect.
    PteCopy = "pte_copy_ns",
    /// Clearing one PTE or PMD entry and dropping its reference at unmap
    /// (`zap_present_ptes()`).
    PteZap = "pte_zap_ns",
    /// A user access that needs no fault (a TLB hit or a page walk by the
    /// hardware), charged per page touched.
    Touch = "touch_ns",
    /// What a user access costs beyond [`Cost::Touch`] when it is the first
    /// to reach a page of a large folio through the PTE that a fault set
    /// for it without that access: the other pages of a folio that
    /// `do_anonymous_page()` mapped all at once with `set_ptes()`. They
    /// need no fault but each needs its own TLB entry, filled right after
    /// the kernel wrote the page-table line and cleared the page; a
    /// PMD-mapped THP's pages share one entry and do not pay it. Charged
    /// on the page's first user access (model-only `PG_UTOUCHED`).
    ///
    /// Deviation: measured right after the fault, as a program that
    /// writes its memory in order meets it; a page first touched long
    /// after its fault costs less (~16 against ~90 ns on an EPYC guest).
    FreshPteTouch = "fresh_pte_touch_ns",
    /// Entry and exit of a system call (`entry_SYSCALL_64` to `sysret`),
    /// with the argument checks of a syscall such as `move_pages()`.
    SyscallEntry = "syscall_entry_ns",
    /// Resolving and isolating one folio for migration
    /// (`add_page_for_migration()`: `follow_page()`, `folio_isolate_lru()`
    /// under the lruvec lock), without the VMA lookup.
    MigrateIsolate = "migrate_isolate_ns",
    /// One mapping replaced by a migration entry (`try_to_migrate_one()`:
    /// the rmap step, clearing the PTE/PMD, the rmap and reference drop),
    /// the TLB flush deferred.
    MigrateUnmap = "migrate_unmap_ns",
    /// One migration entry replaced by a mapping of the destination
    /// (`remove_migration_pte()`: the rmap step, `set_pte_at()`, rmap add).
    MigrateRemap = "migrate_remap_ns",
    /// The per-folio work of a migration other than mappings and data:
    /// try-lock, refcount freeze, `folio_migrate_mapping()`,
    /// `folio_migrate_flags()`, unlock and putback.
    MigrateFolio = "migrate_folio_ns",
    /// Flushing this CPU's TLB for a range or an mm (`flush_tlb_mm_range()`
    /// on the initiating CPU).
    TlbFlushLocal = "tlb_flush_local_ns",
    /// One remote CPU in a TLB shootdown, on the initiator's clock: the IPI,
    /// the remote handler and the wait for its acknowledgement
    /// (`flush_tlb_multi()`).
    TlbFlushIpi = "tlb_flush_ipi_ns",
    /// Queueing one work item on another CPU (`queue_work_on()`, with the
    /// IPI that kicks an idle CPU).
    WorkqueueQueue = "workqueue_queue_ns",
    /// From a wake-up to the woken task running: a kworker on an idle CPU
    /// leaving its idle state, or the waiter of `flush_work()` woken at
    /// the end.
    WorkqueueWakeup = "workqueue_wakeup_ns",
    /// Preparing and submitting one DMA memcpy descriptor
    /// (`dmaengine_prep_dma_memcpy()`, `dmaengine_submit()`).
    DmaSubmit = "dma_submit_ns",
    /// From the last DMA transfer's end to the waiter running again (the
    /// completion interrupt or poll, and the wake-up).
    DmaCompletion = "dma_completion_ns",
    /// One cache line written by one hardware thread and then read by its
    /// SMT sibling on the same core: the one-way transfer latency.
    C2cSmt = "c2c_smt_ns",
    /// One cache line moved between two cores that share the last-level
    /// cache (one CCX on AMD, one ring on Intel).
    C2cSameLlc = "c2c_same_llc_ns",
    /// One cache line moved between two cores of one socket with different
    /// last-level caches (another CCX/CCD; sub-NUMA clusters).
    C2cOtherLlc = "c2c_other_llc_ns",
    /// One cache line moved between cores of different sockets.
    C2cOtherSocket = "c2c_other_socket_ns",
    /// A load that misses every cache and is served by the CPU's own node's
    /// DRAM (dependent loads, no TLB miss).
    DramLocal = "dram_local_ns",
    /// The same, served by another node's DRAM.
    DramRemote = "dram_remote_ns",
    /// The instructions of one buddy free-list operation, without the cache
    /// misses on the lines it touches: used instead of `buddy_list_op_ns`
    /// when the model tracks who last wrote those lines
    /// ([`crate::cacheline`]), which then charges each line's transfer.
    BuddyListInsn = "buddy_list_insn_ns",
    /// Running another task on this CPU and coming back: two context
    /// switches (`schedule()` to a kworker and back), as when a caller
    /// queues a work item on its own CPU and waits for it (`flush_work()`).
    ContextSwitch = "context_switch_ns",
}

/// A table of nanoseconds per [`Cost`], indexed by the cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostTable {
    ns: [u64; Cost::COUNT],
}

impl CostTable {
    /// A table where every step costs `ns` nanoseconds (for tests).
    pub fn uniform(ns: u64) -> CostTable {
        CostTable {
            ns: [ns; Cost::COUNT],
        }
    }

    /// Nanoseconds for one `cost`.
    #[inline]
    pub fn get(&self, cost: Cost) -> u64 {
        self.ns[cost as usize]
    }

    /// Sets the nanoseconds for `cost`.
    pub fn set(&mut self, cost: Cost, ns: u64) {
        self.ns[cost as usize] = ns;
    }
}

/// The class of a lock, for accounting: "zone lock %" sums over all
/// `zone->lock` instances, as perf's contention figure does.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum LockClass {
    /// `zone->lock`, protecting a zone's buddy free lists.
    Zone,
    /// `mm->mmap_lock`, one per process. The engine takes it for writing
    /// around `mmap()`, `munmap()`, `madvise()`, `fork()` and `exit_mmap()`.
    ///
    /// Page faults take the read side ([`Seg::LockRead`]): many faults at
    /// once, none while a writer holds it.
    ///
    /// Deviation: since 6.4 the kernel's fault path first tries the per-VMA
    /// lock (`lock_vma_under_rcu()`) and takes `mmap_lock` only when that
    /// fails, so a fault in one VMA no longer waits for an `mmap()` elsewhere;
    /// the model takes `mmap_lock` for read on every preset. Its uncontended
    /// cost is inside `fault_entry_ns`.
    MmapLock,
    /// The page-table lock (`ptlock_ptr()`): split per page-table page, as
    /// x86-64 has it (`USE_SPLIT_PTE_PTLOCKS`, `CONFIG_SPLIT_PMD_PTLOCKS`).
    /// The index is the table's pfn: `pte_lockptr()` for a PTE table,
    /// `pmd_lockptr()` (the PMD table's) for PMD leaves. Its uncontended cost
    /// is inside the costs of the entries set under it.
    Ptl,
}

impl LockClass {
    /// Every lock class.
    pub const ALL: &'static [LockClass] = &[LockClass::Zone, LockClass::MmapLock, LockClass::Ptl];
    /// Number of lock classes.
    pub const COUNT: usize = LockClass::ALL.len();

    /// The name used in reports (`zone_lock`).
    pub fn name(self) -> &'static str {
        match self {
            LockClass::Zone => "zone_lock",
            LockClass::MmapLock => "mmap_lock",
            LockClass::Ptl => "ptl",
        }
    }
}

/// One lock instance: a class and an index within it (the zone's global index
/// for `zone->lock`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct LockId {
    /// The class, for accounting.
    pub class: LockClass,
    /// Which instance of the class.
    pub index: u32,
}

/// Memory traffic that a step caused, for an engine with a cache model.
///
/// The model reports *which* memory it touched, in the order it touched it;
/// the engine decides what that costs (see [`Cx::set_record_mem`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemAccess {
    /// `clear_page()` of one base page: a write to each of its lines.
    ClearPage(Pfn),
    /// `copy_page(dst, src)` of one base page: each line of `src` read,
    /// then the same line of `dst` written.
    CopyPage {
        /// The destination page.
        dst: Pfn,
        /// The source page.
        src: Pfn,
    },
    /// User-space accesses to the physical bytes `[phys, phys + len)`
    /// (`len` ≥ 1), in ascending order.
    User {
        /// First physical byte.
        phys: u64,
        /// Bytes accessed.
        len: u32,
        /// Stores rather than loads.
        write: bool,
    },
}

/// One piece of what a kernel step did, for the engine to play on virtual time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Seg {
    /// Run for this many nanoseconds.
    Compute(u64),
    /// Take this lock (wait if another vCPU holds it).
    Lock(LockId),
    /// Release this lock.
    Unlock(LockId),
    /// Take this lock for reading (`down_read()`): shared with other
    /// readers; waits while a writer holds it or is queued for it.
    LockRead(LockId),
    /// Release a read hold (`up_read()`).
    UnlockRead(LockId),
    /// Touch memory; its duration is the engine's cache model's to decide.
    /// Produced only when [`Cx::set_record_mem`] is on.
    Mem(MemAccess),
}

/// The context of one kernel entry on one vCPU: who runs it, when it started,
/// and the segments it has produced so far.
///
/// Invariant: every `Lock` segment is followed by the matching `Unlock` before
/// the segments are handed to the engine ([`Cx::take_segs`] checks it in debug
/// builds).
#[derive(Clone, Debug)]
pub struct Cx {
    /// The vCPU executing the kernel code.
    pub cpu: VcpuId,
    /// Virtual time at which this kernel entry started.
    pub now: SimTime,
    table: CostTable,
    /// The segments so far, except the computation charged since the last
    /// non-compute segment: that is `compute_ns - flushed_ns`, pushed (as
    /// one [`Seg::Compute`]) only when another segment follows or the
    /// segments are read. A charge is then one addition, which is most of
    /// the work of the fault path's dozen charges (host speed only: the
    /// segments are the same as if each charge extended the last one).
    segs: Vec<Seg>,
    compute_ns: u64,
    /// `compute_ns` when the computation was last moved into `segs`.
    flushed_ns: u64,
    record_mem: bool,
    helper_work: Vec<(VcpuId, u64)>,
    /// The LLC model's clocks (`None`: lines never leave a cache): machine
    /// state rather than the entry's, kept here because every kernel step
    /// that touches a line has the context at hand.
    llc: Option<Box<crate::cacheline::LlcClocks>>,
}

impl Cx {
    /// A context for `cpu` using the costs of `table`.
    pub fn new(cpu: VcpuId, table: CostTable) -> Cx {
        Cx {
            cpu,
            now: SimTime(0),
            table,
            segs: Vec::with_capacity(16),
            compute_ns: 0,
            flushed_ns: 0,
            record_mem: false,
            helper_work: Vec::new(),
            llc: None,
        }
    }

    /// Turns on the LLC model: lines not touched within an LLC's worth of
    /// traffic come from DRAM ([`crate::cacheline::LlcClocks`]).
    pub fn set_llc(&mut self, clocks: crate::cacheline::LlcClocks) {
        self.llc = Some(Box::new(clocks));
    }

    /// The LLC model's clocks, if on.
    #[inline]
    pub fn llc_mut(&mut self) -> Option<&mut crate::cacheline::LlcClocks> {
        self.llc.as_deref_mut()
    }

    /// The cost table and the LLC model's clocks at once.
    #[inline]
    pub fn table_and_llc(&mut self) -> (&CostTable, Option<&mut crate::cacheline::LlcClocks>) {
        (&self.table, self.llc.as_deref_mut())
    }

    /// With `on`, page clears and copies are recorded as [`Seg::Mem`]
    /// segments whose duration the engine's cache model decides, instead of
    /// being charged [`Cost::ClearPage`] / [`Cost::CopyPage`]; and user
    /// accesses reported with [`Cx::user_access`] are recorded too. Off (the
    /// default), the model's costs are exactly those of the cost table.
    pub fn set_record_mem(&mut self, on: bool) {
        self.record_mem = on;
    }

    /// Whether memory traffic is being recorded.
    #[inline]
    pub fn records_mem(&self) -> bool {
        self.record_mem
    }

    /// `clear_page(pfn)`: records the page's line writes, or charges
    /// [`Cost::ClearPage`] when memory traffic is not recorded.
    #[inline]
    pub fn clear_page(&mut self, pfn: Pfn) {
        if self.record_mem {
            self.push_seg(Seg::Mem(MemAccess::ClearPage(pfn)));
        } else {
            self.charge(Cost::ClearPage);
        }
    }

    /// `copy_page(dst, src)`: records the page's line reads and writes, or
    /// charges [`Cost::CopyPage`] when memory traffic is not recorded.
    #[inline]
    pub fn copy_page(&mut self, dst: Pfn, src: Pfn) {
        if self.record_mem {
            self.push_seg(Seg::Mem(MemAccess::CopyPage { dst, src }));
        } else {
            self.charge(Cost::CopyPage);
        }
    }

    /// User accesses to `[phys, phys + len)`: recorded when memory traffic
    /// is, otherwise nothing (their cost is the caller's [`Cost::Touch`]).
    ///
    /// Reads of the zero page or the huge zero page (marker pfns outside
    /// simulated memory) are not recorded: one page every process shares,
    /// taken to stay in the reader's caches. Deviation: a read sweep of a
    /// huge zero page larger than the L2 would miss there on hardware.
    #[inline]
    pub fn user_access(&mut self, phys: u64, len: u32, write: bool) {
        let zero_page = phys >> crate::types::PAGE_SHIFT >= crate::memory::HUGE_ZERO_PFN.0;
        if self.record_mem && len > 0 && !zero_page {
            self.push_seg(Seg::Mem(MemAccess::User { phys, len, write }));
        }
    }

    /// Starts a new kernel entry on `cpu` at `now`, discarding old segments.
    #[inline]
    pub fn begin(&mut self, cpu: VcpuId, now: SimTime) {
        self.cpu = cpu;
        self.now = now;
        self.segs.clear();
        self.compute_ns = 0;
        self.flushed_ns = 0;
        self.helper_work.clear();
    }

    /// The cost table in use.
    pub fn table(&self) -> &CostTable {
        &self.table
    }

    /// Charges one `cost`.
    #[inline]
    pub fn charge(&mut self, cost: Cost) {
        self.charge_ns(self.table.get(cost));
    }

    /// Charges `n` times `cost`.
    #[inline]
    pub fn charge_n(&mut self, cost: Cost, n: u64) {
        self.charge_ns(self.table.get(cost) * n);
    }

    /// Charges `ns` nanoseconds of computation.
    #[inline]
    pub fn charge_ns(&mut self, ns: u64) {
        self.compute_ns += ns;
    }

    /// Moves the computation charged since the last segment into `segs`:
    /// it extends a [`Seg::Compute`] that ends the list, else becomes one
    /// (nothing when none was charged).
    #[inline]
    fn flush_compute(&mut self) {
        let ns = self.compute_ns - self.flushed_ns;
        if ns == 0 {
            return;
        }
        self.flushed_ns = self.compute_ns;
        if let Some(Seg::Compute(prev)) = self.segs.last_mut() {
            *prev += ns;
        } else {
            self.segs.push(Seg::Compute(ns));
        }
    }

    /// Appends a segment after the computation charged before it.
    #[inline]
    fn push_seg(&mut self, seg: Seg) {
        self.flush_compute();
        self.segs.push(seg);
    }

    /// Records taking `lock`.
    #[inline]
    pub fn lock(&mut self, lock: LockId) {
        self.push_seg(Seg::Lock(lock));
    }

    /// Records releasing `lock`.
    #[inline]
    pub fn unlock(&mut self, lock: LockId) {
        self.push_seg(Seg::Unlock(lock));
    }

    /// Records taking `lock` for reading.
    #[inline]
    pub fn lock_read(&mut self, lock: LockId) {
        self.push_seg(Seg::LockRead(lock));
    }

    /// Records releasing a read hold of `lock`.
    #[inline]
    pub fn unlock_read(&mut self, lock: LockId) {
        self.push_seg(Seg::UnlockRead(lock));
    }

    /// Computation charged since [`Cx::begin`], without any lock waits (and
    /// without the time of [`Seg::Mem`] segments, which only the engine
    /// knows).
    pub fn compute_ns(&self) -> u64 {
        self.compute_ns
    }

    /// Records that this kernel entry made `cpu` (another CPU) busy for
    /// `ns`: the work items a multi-threaded copy queued there (a
    /// workqueue's kworker runs them on that CPU, whatever it was running).
    /// The engine plays them on that CPU ([`Cx::take_helper_work`]); the
    /// entry's own segments only wait for them.
    pub fn helper_work(&mut self, cpu: VcpuId, ns: u64) {
        if ns > 0 && cpu != self.cpu {
            self.helper_work.push((cpu, ns));
        }
    }

    /// The other CPUs' work recorded since [`Cx::begin`], emptied.
    pub fn take_helper_work(&mut self) -> Vec<(VcpuId, u64)> {
        std::mem::take(&mut self.helper_work)
    }

    /// The segments produced since [`Cx::begin`].
    pub fn segs(&mut self) -> &[Seg] {
        self.flush_compute();
        debug_assert!(locks_balanced(&self.segs), "unbalanced lock segments");
        &self.segs
    }
}

fn locks_balanced(segs: &[Seg]) -> bool {
    let mut held: Vec<(LockId, bool)> = Vec::new();
    for s in segs {
        let (l, read, take) = match *s {
            Seg::Lock(l) => (l, false, true),
            Seg::Unlock(l) => (l, false, false),
            Seg::LockRead(l) => (l, true, true),
            Seg::UnlockRead(l) => (l, true, false),
            Seg::Compute(_) | Seg::Mem(_) => continue,
        };
        if take {
            held.push((l, read));
        } else {
            match held.iter().rposition(|&h| h == (l, read)) {
                Some(i) => {
                    held.remove(i);
                }
                None => return false,
            }
        }
    }
    held.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for &c in Cost::ALL {
            assert_eq!(Cost::from_key(c.key()), Some(c));
        }
        assert_eq!(Cost::from_key("no_such_cost"), None);
    }

    #[test]
    fn compute_segments_coalesce() {
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(10));
        cx.charge(Cost::PcpListOp);
        cx.charge_n(Cost::PcpListOp, 2);
        let l = LockId {
            class: LockClass::Zone,
            index: 0,
        };
        cx.lock(l);
        cx.charge(Cost::BuddyListOp);
        cx.unlock(l);
        assert_eq!(
            cx.segs(),
            &[
                Seg::Compute(30),
                Seg::Lock(l),
                Seg::Compute(10),
                Seg::Unlock(l)
            ]
        );
        assert_eq!(cx.compute_ns(), 40);
    }
}
