//! Event counters, named as in `/proc/vmstat` (models mm/vmstat.c's
//! `vm_event_item` and the zone/node stat items that mmlab reports).
//!
//! Tracepoints that mmlab counts (`mm_page_alloc_zone_locked`,
//! `mm_page_pcpu_drain`) are counters here too, under the tracepoint's name,
//! so that a replayed trace and the model can be compared event for event.
//!
//! Deviation: the kernel keeps per-CPU differentials folded in periodically;
//! the model keeps one exact global count.

macro_rules! vm_events {
    ($($(#[$doc:meta])* $name:ident = $key:literal,)*) => {
        /// One counter.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
        #[repr(u16)]
        #[allow(non_camel_case_types)]
        pub enum VmEvent { $($(#[$doc])* $name,)* }

        impl VmEvent {
            /// Every counter, in declaration order.
            pub const ALL: &'static [VmEvent] = &[$(VmEvent::$name,)*];
            /// Number of counters.
            pub const COUNT: usize = VmEvent::ALL.len();

            /// The counter's name as in `/proc/vmstat` or the tracepoint's name.
            pub fn name(self) -> &'static str {
                match self { $(VmEvent::$name => $key,)* }
            }
        }
    };
}

vm_events! {
    /// Pages allocated from ZONE_DMA32 (`pgalloc_dma32`).
    PGALLOC_DMA32 = "pgalloc_dma32",
    /// Pages allocated from ZONE_NORMAL (`pgalloc_normal`).
    PGALLOC_NORMAL = "pgalloc_normal",
    /// Pages freed (`pgfree`).
    PGFREE = "pgfree",
    /// Allocations that failed even at the min watermark; the kernel would
    /// enter reclaim and possibly the OOM killer here (`mmlab` name).
    ALLOC_FAIL = "alloc_fail",
    /// Tracepoint kmem:mm_page_alloc_zone_locked: a block taken from the buddy
    /// lists under `zone->lock` (for a PCP refill or a direct allocation).
    MM_PAGE_ALLOC_ZONE_LOCKED = "mm_page_alloc_zone_locked",
    /// Tracepoint kmem:mm_page_pcpu_drain: a block moved from a PCP list to the
    /// buddy lists by `free_pcppages_bulk()`.
    MM_PAGE_PCPU_DRAIN = "mm_page_pcpu_drain",
    /// Calls of `free_pcppages_bulk()`.
    PCP_BULK_FREE = "pcp_bulk_free",
    /// Calls of `rmqueue_bulk()` (PCP refills from the zone).
    PCP_BULK_ALLOC = "pcp_bulk_alloc",
    /// PCP frees that drained because of consecutive high-order frees
    /// (`free_high` in `free_unref_page_commit()`); the seed's `free_high`.
    PCP_FREE_HIGH = "pcp_free_high",
    /// Page faults handled (`pgfault`), as `handle_mm_fault()` counts them.
    PGFAULT = "pgfault",
    /// PMD-size THPs allocated by a fault (`thp_fault_alloc`).
    THP_FAULT_ALLOC = "thp_fault_alloc",
    /// THP faults that fell back to 4 KiB pages because the allocation
    /// failed (`thp_fault_fallback`).
    THP_FAULT_FALLBACK = "thp_fault_fallback",
    /// PMD mappings of THPs split into PTE mappings (`thp_split_pmd`).
    THP_SPLIT_PMD = "thp_split_pmd",
    /// Allocations of the huge zero page (`thp_zero_page_alloc`).
    THP_ZERO_PAGE_ALLOC = "thp_zero_page_alloc",
    /// Huge pages the hugetlb pool got from the page allocator, for the
    /// persistent pool or as surplus pages (`htlb_buddy_alloc_success`).
    HTLB_BUDDY_PGALLOC = "htlb_buddy_alloc_success",
    /// Failed attempts of the same (`htlb_buddy_alloc_fail`).
    HTLB_BUDDY_PGALLOC_FAIL = "htlb_buddy_alloc_fail",
    /// A gauge, not an event: base pages of hugetlb folios in use (handed out
    /// by `alloc_hugetlb_folio()` and not yet freed back; the node stat
    /// `nr_hugetlb` of Linux 6.12+). Pool pages that are free do not count.
    NR_HUGETLB = "nr_hugetlb",
    /// Fallback allocations that took a block of another migratetype
    /// (tracepoint kmem:mm_page_alloc_extfrag).
    MM_PAGE_ALLOC_EXTFRAG = "mm_page_alloc_extfrag",
    /// Calls of `vmacache_find()` (Linux 3.15–6.0, `vmacache_find_calls`;
    /// the kernel counts it only with CONFIG_DEBUG_VM_VMACACHE).
    VMACACHE_FIND_CALLS = "vmacache_find_calls",
    /// `vmacache_find()` calls that returned a VMA (`vmacache_find_hits`).
    VMACACHE_FIND_HITS = "vmacache_find_hits",
    /// Hits in the first slot that `vmacache_find()` examined: the figure of
    /// merit of the PMD-hash patch (seed 002; `mmlab` name).
    VMACACHE_FIRST_SLOT_HITS = "vmacache_first_slot_hits",
    /// Nanoseconds charged inside `vmacache_find()`, so that its share of
    /// fault time can be reported as the seed's perf profile did (`mmlab`
    /// name).
    VMACACHE_FIND_NS = "vmacache_find_ns",
    /// Model-only: pages of anonymous folios that were freed without a user
    /// access ever reaching them (memory bloat of large folios; see
    /// `memory::user_access`).
    MMLAB_ANON_PAGES_UNTOUCHED = "mmlab_anon_pages_untouched",
    /// Model-only: pages of anonymous folios freed (with the untouched ones).
    MMLAB_ANON_PAGES_FREED = "mmlab_anon_pages_freed",
    /// The part of `vmacache_find_ns` spent in page faults (the rest is in
    /// the `munmap()`/`madvise()`/`mmap()` lookups; `mmlab` name).
    VMACACHE_FIND_FAULT_NS = "vmacache_find_fault_ns",
    /// Nanoseconds of the whole cached `find_vma()` (cache probes and, on a
    /// miss, the tree walk) of page faults; under the `none` policy the
    /// tree walk alone (`mmlab` name).
    FIND_VMA_NS = "find_vma_ns",
    /// Nanoseconds of compute charged inside `do_user_addr_fault()`, from
    /// the exception entry to the return (lock waits excluded), the
    /// denominator of the seed's "share of page-fault time" (`mmlab` name).
    FAULT_NS = "fault_ns",
    /// Base pages migrated (`pgmigrate_success`, counted by `migrate_pages()`).
    PGMIGRATE_SUCCESS = "pgmigrate_success",
    /// Base pages that failed to migrate (`pgmigrate_fail`).
    PGMIGRATE_FAIL = "pgmigrate_fail",
    /// PMD-size THPs migrated whole (`thp_migration_success`).
    THP_MIGRATION_SUCCESS = "thp_migration_success",
    /// PMD-size THPs that failed to migrate whole (`thp_migration_fail`;
    /// a split THP counts here too, as in the kernel).
    THP_MIGRATION_FAIL = "thp_migration_fail",
    /// PMD-size THPs split so that their pages could migrate
    /// (`thp_migration_split`).
    THP_MIGRATION_SPLIT = "thp_migration_split",
    /// Calls of `migrate_pages()` (tracepoint migrate:mm_migrate_pages).
    MM_MIGRATE_PAGES = "mm_migrate_pages",
    /// TLB shootdowns sent to other CPUs (`nr_tlb_remote_flush`).
    NR_TLB_REMOTE_FLUSH = "nr_tlb_remote_flush",
    /// Shootdown IPIs received by other CPUs (`nr_tlb_remote_flush_received`).
    NR_TLB_REMOTE_FLUSH_RECEIVED = "nr_tlb_remote_flush_received",
    /// Full or ranged flushes of the local TLB (`nr_tlb_local_flush_all`).
    NR_TLB_LOCAL_FLUSH_ALL = "nr_tlb_local_flush_all",
    /// Nanoseconds spent copying page data in migration, on the migrating
    /// CPU's clock, dispatch and waits included (`mmlab` name).
    MIGRATE_COPY_NS = "migrate_copy_ns",
    /// Folio copies done by several threads (`copy_page_mt()` and the
    /// adaptive and batched engines; `mmlab` name).
    MIGRATE_COPY_MT = "migrate_copy_mt",
    /// Folio copies done by the DMA engine (`mmlab` name).
    MIGRATE_COPY_DMA = "migrate_copy_dma",
    /// Nanoseconds that CPUs other than the migrating one spent running a
    /// multi-threaded copy's work items (`mmlab` name).
    MIGRATE_COPY_HELPER_NS = "migrate_copy_helper_ns",
}

/// One per-size THP statistic, as in
/// `/sys/kernel/mm/transparent_hugepage/hugepages-<size>kB/stats/<name>`
/// (Linux 6.8+, `enum mthp_stat_item`). The first six are event counts; the
/// `nr_*` ones are gauges (folios that exist now).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum MthpStat {
    /// Folios of this size allocated by an anonymous fault.
    AnonFaultAlloc,
    /// Allocations of this size that failed in an anonymous fault (the fault
    /// tried the next smaller allowed size). Sizes skipped because they did
    /// not fit the VMA or covered populated PTEs are not counted.
    AnonFaultFallback,
    /// Allocations that succeeded but failed the memcg charge (no memcg in
    /// the model: always 0).
    AnonFaultFallbackCharge,
    /// Folios of this size split (the model never splits: 0).
    Split,
    /// Splits that failed (0).
    SplitFailed,
    /// Folios put on the deferred split queue (partially unmapped).
    SplitDeferred,
    /// Anonymous folios of this size that exist now.
    NrAnon,
    /// Of those, the ones partially unmapped (on the deferred split queue).
    NrAnonPartiallyMapped,
}

impl MthpStat {
    /// Every statistic, in the kernel's order.
    pub const ALL: &'static [MthpStat] = &[
        MthpStat::AnonFaultAlloc,
        MthpStat::AnonFaultFallback,
        MthpStat::AnonFaultFallbackCharge,
        MthpStat::Split,
        MthpStat::SplitFailed,
        MthpStat::SplitDeferred,
        MthpStat::NrAnon,
        MthpStat::NrAnonPartiallyMapped,
    ];
    /// Number of statistics.
    pub const COUNT: usize = MthpStat::ALL.len();

    /// The file name under `stats/`.
    pub fn name(self) -> &'static str {
        match self {
            MthpStat::AnonFaultAlloc => "anon_fault_alloc",
            MthpStat::AnonFaultFallback => "anon_fault_fallback",
            MthpStat::AnonFaultFallbackCharge => "anon_fault_fallback_charge",
            MthpStat::Split => "split",
            MthpStat::SplitFailed => "split_failed",
            MthpStat::SplitDeferred => "split_deferred",
            MthpStat::NrAnon => "nr_anon",
            MthpStat::NrAnonPartiallyMapped => "nr_anon_partially_mapped",
        }
    }

    /// The statistic whose file name is `name`.
    pub fn from_name(name: &str) -> Option<MthpStat> {
        MthpStat::ALL.iter().copied().find(|s| s.name() == name)
    }
}

/// Orders with a `hugepages-<size>kB` directory: 2 (16 KiB) to the PMD
/// order (2 MiB). The arrays below are indexed by order; order 1 is unused,
/// and order 0's `anon_fault_alloc` (no sysfs file) counts the 4 KiB folios
/// that anonymous faults allocate, for the model's order mix.
pub const MTHP_NR_ORDERS: usize = crate::types::HPAGE_PMD_ORDER as usize + 1;

/// A set of counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmStat {
    v: [u64; VmEvent::COUNT],
    /// Per-size THP statistics, indexed by order then by [`MthpStat`]. A
    /// fixed array: the fault path bumps these on every large-folio fault.
    mthp: [[u64; MthpStat::COUNT]; MTHP_NR_ORDERS],
}

impl Default for VmStat {
    fn default() -> Self {
        VmStat {
            v: [0; VmEvent::COUNT],
            mthp: [[0; MthpStat::COUNT]; MTHP_NR_ORDERS],
        }
    }
}

impl VmStat {
    /// Adds `n` to `ev` (`count_vm_events()`).
    #[inline]
    pub fn count(&mut self, ev: VmEvent, n: u64) {
        self.v[ev as usize] += n;
    }

    /// Subtracts `n` from the gauge `ev` (`mod_node_page_state(.., -n)`).
    #[inline]
    pub fn sub(&mut self, ev: VmEvent, n: u64) {
        let v = &mut self.v[ev as usize];
        assert!(*v >= n, "counter {} below zero", ev.name());
        *v -= n;
    }

    /// The value of `ev`.
    #[inline]
    pub fn get(&self, ev: VmEvent) -> u64 {
        self.v[ev as usize]
    }

    /// Adds `n` to the per-size statistic `stat` of `order`
    /// (`count_mthp_stat()`; for the `nr_*` gauges `mod_mthp_stat()`).
    #[inline]
    pub fn count_mthp(&mut self, order: u8, stat: MthpStat, n: u64) {
        self.mthp[order as usize][stat as usize] += n;
    }

    /// Subtracts `n` from the gauge `stat` of `order` (`mod_mthp_stat(.., -n)`).
    #[inline]
    pub fn sub_mthp(&mut self, order: u8, stat: MthpStat, n: u64) {
        let v = &mut self.mthp[order as usize][stat as usize];
        assert!(
            *v >= n,
            "mthp stat {} of order {order} below zero",
            stat.name()
        );
        *v -= n;
    }

    /// The per-size statistic `stat` of `order`.
    #[inline]
    pub fn mthp(&self, order: u8, stat: MthpStat) -> u64 {
        self.mthp[order as usize][stat as usize]
    }

    /// The value of `hugepages-<size_kb>kB/stats/<name>`, or `None` if the
    /// kernel has no such file.
    pub fn try_mthp_stat(&self, size_kb: u64, name: &str) -> Option<u64> {
        let stat = MthpStat::from_name(name)?;
        let order = mthp_order_of_kb(size_kb)?;
        Some(self.mthp(order, stat))
    }

    /// The value of `hugepages-<size_kb>kB/stats/<name>`. Panics, listing the
    /// valid sizes and names, if there is no such file.
    pub fn mthp_stat(&self, size_kb: u64, name: &str) -> u64 {
        self.try_mthp_stat(size_kb, name).unwrap_or_else(|| {
            let names: Vec<_> = MthpStat::ALL.iter().map(|s| s.name()).collect();
            panic!(
                "no hugepages-{size_kb}kB/stats/{name}: sizes are 16..=2048 kB in powers of two, \
                 stats are {}",
                names.join(", ")
            )
        })
    }

    /// `(size_kb, name, value)` for every per-size statistic, sizes ascending.
    pub fn mthp_iter(&self) -> impl Iterator<Item = (u64, &'static str, u64)> + '_ {
        (2..MTHP_NR_ORDERS as u8).flat_map(move |o| {
            MthpStat::ALL
                .iter()
                .map(move |&s| (4u64 << o, s.name(), self.mthp(o, s)))
        })
    }

    /// `(name, value)` for every counter, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        VmEvent::ALL.iter().map(|&e| (e.name(), self.get(e)))
    }
}

/// The order of the `hugepages-<size_kb>kB` directory, if there is one
/// (orders 2 to the PMD order).
pub fn mthp_order_of_kb(size_kb: u64) -> Option<u8> {
    if !size_kb.is_power_of_two() || size_kb < 16 {
        return None;
    }
    let order = (size_kb / 4).trailing_zeros() as u8;
    ((order as usize) < MTHP_NR_ORDERS).then_some(order)
}

/// Models `zoneinfo_show()` (mm/vmstat.c): the allocator's state in the
/// layout of `/proc/zoneinfo`, reduced to what the model has, plus free
/// blocks per order as in `/proc/buddyinfo`.
pub fn zoneinfo(pa: &crate::page_alloc::PageAlloc) -> String {
    use crate::page_alloc::Wmark;
    use std::fmt::Write;
    let mut s = String::new();
    for (zi, z) in pa.zones.iter().enumerate() {
        let _ = writeln!(s, "Node {}, zone {:>8}", z.node.0, z.zone_type.name());
        let _ = writeln!(s, "  pages free     {}", z.nr_free_pages);
        let _ = writeln!(s, "        min      {}", z.wmark_pages(Wmark::Min));
        let _ = writeln!(s, "        low      {}", z.wmark_pages(Wmark::Low));
        let _ = writeln!(s, "        high     {}", z.wmark_pages(Wmark::High));
        let _ = writeln!(s, "        spanned  {}", z.spanned_pages);
        let _ = writeln!(s, "        present  {}", z.spanned_pages);
        let _ = writeln!(s, "        managed  {}", z.managed_pages);
        let _ = writeln!(
            s,
            "        protection: ({}, {})",
            z.lowmem_reserve[0], z.lowmem_reserve[1]
        );
        let _ = write!(s, "  free blocks per order:");
        for n in z.nr_free {
            let _ = write!(s, " {n}");
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "  pagesets");
        for cpu in 0..pa.nr_cpus() {
            let p = &pa.pcp[pa.pcp_index(crate::types::VcpuId(cpu), zi)];
            let _ = writeln!(s, "    cpu: {cpu}");
            let _ = writeln!(s, "              count: {}", p.count);
            let _ = writeln!(s, "              high:  {}", p.high);
            let _ = writeln!(s, "              batch: {}", p.batch);
        }
        let _ = writeln!(s, "  start_pfn:           {}", z.zone_start_pfn);
    }
    s
}
