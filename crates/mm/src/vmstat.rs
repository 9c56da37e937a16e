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
}

/// A set of counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmStat {
    v: [u64; VmEvent::COUNT],
}

impl Default for VmStat {
    fn default() -> Self {
        VmStat {
            v: [0; VmEvent::COUNT],
        }
    }
}

impl VmStat {
    /// Adds `n` to `ev` (`count_vm_events()`).
    #[inline]
    pub fn count(&mut self, ev: VmEvent, n: u64) {
        self.v[ev as usize] += n;
    }

    /// The value of `ev`.
    #[inline]
    pub fn get(&self, ev: VmEvent) -> u64 {
        self.v[ev as usize]
    }

    /// `(name, value)` for every counter, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        VmEvent::ALL.iter().map(|&e| (e.name(), self.get(e)))
    }
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
