//! Anonymous page faults, copy-on-write, fork and exit (mm/memory.c and the
//! PMD-THP parts of mm/huge_memory.c; Linux 6.18, with the 4.18 THP COW as a
//! preset).
//!
//! # Folios and their references
//!
//! A 4 KiB anonymous page is an order-0 block of the page allocator; a THP
//! is an order-9 block. The head's `refcount` counts the 4 KiB mappings of
//! its pages (a PMD mapping counts 512), its `entire_mapcount` the PMD
//! mappings (see `page.rs`). Fork adds a reference per mapping and
//! write-protects both sides; the first write then copies (or reuses the
//! page if it is the last reference).
//!
//! # THP copy-on-write: two kernels
//!
//! Up to 5.7, `do_huge_pmd_wp_page()` allocated a new THP and copied all
//! 2 MiB ([`ThpCow::CopyHuge`], preset `linux-4.18`). Since 5.8
//! (commit 3917c80280c9, "thp: change CoW semantics for anon-THP") it splits
//! the PMD (`thp_split_pmd`) and lets the PTE path copy the one 4 KiB page
//! that was written ([`ThpCow::SplitPmd`], preset `linux-6.18`).
//!
//! Deviations:
//! - The zero page and the huge zero page live outside the simulated memory
//!   (the kernel's `empty_zero_page` is in .bss; the huge zero page is
//!   allocated once, counted by `thp_zero_page_alloc`, and here never freed).
//! - A PTE-mapped page of a large folio is reused on a write fault only when
//!   it holds the folio's last reference; 6.18 also reuses a folio mapped
//!   exclusively by this process.
//! - A write to the huge zero page allocates a THP on both presets; if that
//!   fails the PMD is split into zero-page PTEs.
//! - No khugepaged, no swap, no rmap walk.
//!
//! # Large folios below the PMD size (mTHP)
//!
//! An anonymous write fault that does not get a PMD-size THP may map a
//! large folio of 16 KiB to 1 MiB by several PTEs at once; which order is
//! chosen depends on [`MmConfig::anon_folio`] (6.8's multi-size THP and the
//! unmerged v1/v2/simple forms of seed 004). See [`anon_folio`]. Per-size
//! statistics (`hugepages-<size>kB/stats/`) are in
//! [`crate::vmstat::VmStat::mthp_stat`].
//!
//! The order in which huge pages are cleared and copied is in [`huge_order`].

pub mod anon_folio;
pub mod huge_order;

use crate::vmstat::{MthpStat, MTHP_NR_ORDERS};
pub use anon_folio::{AnonFolioPolicy, MthpEnabled};

use crate::cost::{Cost, Cx, LockClass, LockId};
use crate::page::PG_UTOUCHED;
use crate::page_alloc::{Gfp, PageAlloc};
use crate::pgtable::{
    entry_pfn, mk_entry, present, Level, Slot, PAGE_ACCESSED, PAGE_ANON_EXCLUSIVE, PAGE_DIRTY,
    PAGE_PRESENT, PAGE_PROTNONE, PAGE_PSE, PAGE_RW, PAGE_SPECIAL, PMD_SIZE, PTRS_PER_TABLE,
};
use crate::types::{Pfn, Vaddr, HPAGE_PMD_ORDER, PAGE_SIZE};
use crate::vma::{MapFlags, MmStruct, MmapLayout, VmFlags, Vma};
use crate::vmstat::VmEvent;

/// Pages in a PMD-size THP.
const HPAGE_PMD_NR: u32 = 1 << HPAGE_PMD_ORDER;
/// Marker pfn of the 4 KiB zero page (outside simulated memory).
pub const ZERO_PFN: Pfn = Pfn(0xff_ffff_fffe);
/// Marker pfn of the huge zero page (outside simulated memory).
pub const HUGE_ZERO_PFN: Pfn = Pfn(0xff_ffff_fe00);

/// `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpEnabled {
    /// THP for every anonymous VMA.
    Always,
    /// THP only for `VM_HUGEPAGE` VMAs (`MADV_HUGEPAGE`); the host's default.
    Madvise,
    /// No THP.
    Never,
}

impl ThpEnabled {
    /// The sysfs word.
    pub fn name(self) -> &'static str {
        match self {
            ThpEnabled::Always => "always",
            ThpEnabled::Madvise => "madvise",
            ThpEnabled::Never => "never",
        }
    }

    /// The value whose sysfs word is `s`.
    pub fn parse(s: &str) -> Option<ThpEnabled> {
        [ThpEnabled::Always, ThpEnabled::Madvise, ThpEnabled::Never]
            .into_iter()
            .find(|v| v.name() == s)
    }
}

/// What a write fault on a shared PMD-mapped THP does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpCow {
    /// Linux ≤ 5.7: allocate a THP and copy all 2 MiB.
    CopyHuge,
    /// Linux ≥ 5.8: split the PMD and copy one 4 KiB page.
    SplitPmd,
}

/// The fault path's configuration: knobs and the preset's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmConfig {
    /// `transparent_hugepage/enabled`.
    pub thp_enabled: ThpEnabled,
    /// THP copy-on-write behaviour.
    pub thp_cow: ThpCow,
    /// Placement of new mappings.
    pub mmap_layout: MmapLayout,
    /// How a PTE-level anonymous fault picks its folio order.
    pub anon_folio: AnonFolioPolicy,
    /// `transparent_hugepage/hugepages-<size>kB/enabled`, indexed by order
    /// (used by [`AnonFolioPolicy::Mthp`]; orders 0 and 1 unused).
    pub mthp_enabled: [MthpEnabled; MTHP_NR_ORDERS],
    /// `arch_wants_pte_order()`: the preferred order of v1/v2/simple.
    pub arch_pte_order: u8,
    /// `vm.nr_hugepages`: the persistent hugetlb pool size the engine sets
    /// up at boot (2 MiB pages).
    pub nr_hugepages: u64,
    /// `vm.nr_overcommit_hugepages`: surplus hugetlb pages allowed.
    pub nr_overcommit_hugepages: u64,
    /// `kernel.randomize_va_space`: 0 places mappings below a fixed
    /// `mmap_base`; any other value (the kernel documents 1 and 2) sets
    /// `PF_RANDOMIZE` and randomizes `mmap_base` per exec (ASLR).
    ///
    /// Deviation: the kernel's default is 2; the model's is 0, so that
    /// existing layouts (and the fault counts checked against the live
    /// kernel, whose tests pin their addresses) do not move.
    pub randomize_va_space: i32,
    /// Sub-page order of `folio_zero_user()` (THP, mTHP and hugetlb first touch):
    /// target-last since 4.14 (c79b57e462b5d).
    pub clear_order: huge_order::HugeOrderPolicy,
    /// Sub-page order of `copy_user_large_folio()` (the 4.18-era THP COW, hugetlb COW):
    /// target-last since 4.18 (seed 000).
    pub copy_order: huge_order::HugeOrderPolicy,
    /// Folios a CPU's LRU add batch holds before it is moved to the LRU
    /// ([`crate::swap`]): `FOLIO_BATCH_SIZE`, 31 in 6.18
    /// (include/linux/pagevec.h); `PAGEVEC_SIZE` was 14 through 4.x (the
    /// same header at 4.14: "14 pointers + two long's") and 15 after the
    /// pagevec header shrank.
    pub lru_batch_size: u8,
    /// `calc_vm_flag_bits()` (include/linux/mman.h) turns `MAP_STACK` into
    /// `VM_NOHUGEPAGE` (6.7+, c4608d1bf7c6 "mm: mmap: map MAP_STACK to
    /// VM_NOHUGEPAGE"; still so in 6.18, under
    /// `CONFIG_TRANSPARENT_HUGEPAGE`): a thread stack that glibc maps with
    /// `MAP_STACK` takes no large folio of any size. Before 6.7 the flag
    /// was a no-op.
    pub map_stack_nohugepage: bool,
}

impl MmConfig {
    /// Models what `calc_vm_flag_bits()` makes of `mmap()`'s flags: before
    /// 6.7 (`map_stack_nohugepage` off) `MAP_STACK` did nothing, so it is
    /// dropped; from 6.7 it stays, and `MmStruct::mmap` makes the VMA
    /// `VM_NOHUGEPAGE`. Every caller of `mmap` that takes a program's flags
    /// passes them through here.
    pub fn calc_vm_flag_bits(&self, flags: MapFlags) -> MapFlags {
        if self.map_stack_nohugepage {
            flags
        } else {
            MapFlags(flags.0 & !MapFlags::STACK.0)
        }
    }
}

impl Default for MmConfig {
    /// Linux 6.18 with the host's THP setting (`madvise`) and the default
    /// per-size knobs (PMD size `inherit`, others `never`).
    fn default() -> Self {
        MmConfig {
            thp_enabled: ThpEnabled::Madvise,
            thp_cow: ThpCow::SplitPmd,
            mmap_layout: MmapLayout::ThpAligned,
            anon_folio: AnonFolioPolicy::Mthp,
            mthp_enabled: anon_folio::MTHP_DEFAULTS,
            arch_pte_order: anon_folio::DEFAULT_PTE_ORDER,
            nr_hugepages: 0,
            nr_overcommit_hugepages: 0,
            randomize_va_space: 0,
            clear_order: huge_order::HugeOrderPolicy::TargetLast,
            copy_order: huge_order::HugeOrderPolicy::TargetLast,
            lru_batch_size: 31,
            map_stack_nohugepage: true,
        }
    }
}

/// State of the fault path shared by all processes.
#[derive(Clone, Debug, Default)]
pub struct MmGlobal {
    /// Configuration.
    pub cfg: MmConfig,
    /// True once the huge zero page exists (`huge_zero_folio`).
    pub huge_zero_page: bool,
    /// Each CPU's LRU add batch (`cpu_fbatches.lru_add`).
    pub lru_add: crate::swap::LruAddBatches,
}

impl MmGlobal {
    /// Global state for `cfg`.
    pub fn new(cfg: MmConfig) -> MmGlobal {
        MmGlobal {
            cfg,
            huge_zero_page: false,
            lru_add: crate::swap::LruAddBatches::new(cfg.lru_batch_size),
        }
    }
}

/// Why a fault could not be handled (`VM_FAULT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmFault {
    /// No VMA, or a write to a read-only one (`VM_FAULT_SIGSEGV`).
    Sigsegv,
    /// No memory even for a 4 KiB page or a page table (`VM_FAULT_OOM`).
    Oom,
    /// No hugetlb page for a hugetlb fault (`VM_FAULT_SIGBUS`).
    Sigbus,
}

/// A page fault being handled: the model's `struct vm_fault`.
///
/// The kernel's fault functions take only `vmf` and reach the rest through
/// `current` and globals; the model has no globals, so the fault context
/// also carries what those would give: the allocator, the faulting CPU's
/// cost context, the fault path's configuration and the address space.
/// Every fault function below `handle_mm_fault()` takes `&mut Vmf` (and the
/// page-table slot it works on) instead of the seven values one by one.
pub struct Vmf<'a> {
    /// The page allocator, with the hugetlb pool and the counters.
    pub pa: &'a mut PageAlloc,
    /// The faulting CPU's cost context.
    pub cx: &'a mut Cx,
    /// The fault path's configuration and shared state.
    pub g: &'a mut MmGlobal,
    /// The faulting address space (`vma->vm_mm`).
    pub mm: &'a mut MmStruct,
    /// `vmf->vma`: the VMA the address is in.
    pub vma: Vma,
    /// `vmf->real_address`: the faulting address.
    pub address: Vaddr,
    /// `FAULT_FLAG_WRITE`: a write access.
    pub write: bool,
}

fn folio_head(pa: &PageAlloc, pfn: Pfn) -> Pfn {
    pa.mem.compound_head(pfn)
}

/// Drops `n` references of the folio `head`, freeing it at zero (`folio_put_refs()`).
fn folio_put_refs(pa: &mut PageAlloc, cx: &mut Cx, head: Pfn, n: u32) {
    let h = pa.mem.idx(head);
    let r = pa.mem.refcount(h);
    assert!(r >= n, "folio {head}: putting {n} references of {r}");
    pa.mem.set_refcount(h, r - n);
    if r == n {
        let order = pa.mem.order(h);
        let nr = 1u32 << order;
        let untouched = (0..nr)
            .filter(|&t| pa.mem.flags(h.offset(t)) & PG_UTOUCHED == 0)
            .count() as u64;
        pa.vmstat
            .count(VmEvent::MMLAB_ANON_PAGES_UNTOUCHED, untouched);
        pa.vmstat.count(VmEvent::MMLAB_ANON_PAGES_FREED, nr as u64);
        anon_folio::folio_undo_large_anon(pa, head, order);
        pa.free_pages(cx, head, order);
    }
}

fn folio_get_refs(pa: &mut PageAlloc, head: Pfn, n: u32) {
    let r = pa.mem.refcount(head);
    pa.mem.set_refcount(head, r + n);
}

/// Models `thp_vma_allowable_order()` for the PMD order plus the range check
/// of `do_huge_pmd_anonymous_page()`: the knob allows THP for this VMA and
/// the 2 MiB-aligned range around `addr` lies inside it. Under
/// [`AnonFolioPolicy::Mthp`] the knob is `hugepages-2048kB/enabled`
/// (`inherit` by default: the top-level knob); otherwise the top-level one.
#[inline]
pub fn thp_vma_allowable(cfg: &MmConfig, vma: &Vma, addr: u64) -> bool {
    if vma.flags.contains(VmFlags::NOHUGEPAGE)
        || vma.flags.contains(VmFlags::STACK_INCOMPLETE_SETUP)
    {
        return false;
    }
    let on = if cfg.anon_folio == AnonFolioPolicy::Mthp {
        anon_folio::thp_vma_allowable_orders(
            cfg.thp_enabled,
            &cfg.mthp_enabled,
            vma,
            1 << HPAGE_PMD_ORDER,
        ) != 0
    } else {
        match cfg.thp_enabled {
            ThpEnabled::Always => true,
            ThpEnabled::Madvise => vma.flags.contains(VmFlags::HUGEPAGE),
            ThpEnabled::Never => false,
        }
    };
    let haddr = addr & !(PMD_SIZE - 1);
    on && haddr >= vma.start && haddr + PMD_SIZE <= vma.end
}

/// True if a user access to `addr` needs no fault: the page is mapped, and
/// writable if `write`. Sets the accessed and dirty bits as the hardware does.
#[inline]
pub fn access_ok(mm: &mut MmStruct, addr: Vaddr, write: bool) -> bool {
    access_entry(mm, addr.0, write).is_some()
}

/// [`access_ok`] for the engine's user accesses: returns the physical
/// address the access reaches (for a cache model), and marks the page
/// accessed in its `struct page` ([`PG_UTOUCHED`], model-only) so that the
/// pages of a large folio that the program never used can be counted when
/// the folio is freed (`mmlab_anon_pages_untouched`).
pub fn user_access(pa: &mut PageAlloc, mm: &mut MmStruct, addr: Vaddr, write: bool) -> Option<u64> {
    user_access_fresh(pa, mm, addr, write).map(|(phys, _)| phys)
}

/// [`user_access`], and whether the access is the first to reach a page of
/// a large folio through its own PTE ([`crate::cost::Cost::FreshPteTouch`]:
/// the folio's other pages after the fault that mapped them all).
#[inline(always)]
pub fn user_access_fresh(
    pa: &mut PageAlloc,
    mm: &mut MmStruct,
    addr: Vaddr,
    write: bool,
) -> Option<(u64, bool)> {
    let (e, phys) = access_entry(mm, addr.0, write)?;
    if e & PAGE_SPECIAL != 0 {
        return Some((phys, false));
    }
    // The flags before the access if it is the page's first.
    let fresh = pa
        .mem
        .test_and_set_flag(Pfn(phys >> crate::types::PAGE_SHIFT), PG_UTOUCHED)
        .is_some_and(|f| {
            // A page of a large folio (a tail, or a head of order > 0)
            // mapped by a PTE, not a PMD leaf.
            let large = f & crate::page::PG_TAIL != 0 || f & crate::page::ORDER_MASK != 0;
            e & PAGE_PSE == 0 && large
        });
    Some((phys, fresh))
}

/// The entry (PTE or PMD leaf) that maps `addr` for this access and the
/// physical address the access reaches (the hardware's page walk), with the
/// accessed and dirty bits set as the hardware sets them; `None` if the
/// access must fault.
#[inline(always)]
fn access_entry(mm: &mut MmStruct, addr: u64, write: bool) -> Option<(u64, u64)> {
    let entry = mm.pgt.leaf_entry_mut(addr)?;
    let e = *entry;
    if !present(e) || e & PAGE_PROTNONE != 0 || (write && e & PAGE_RW == 0) {
        return None;
    }
    let bits = PAGE_ACCESSED | if write { PAGE_DIRTY } else { 0 };
    if e & bits != bits {
        *entry = e | bits;
    }
    let page_mask = if e & PAGE_PSE != 0 {
        PMD_SIZE - 1
    } else {
        PAGE_SIZE - 1
    };
    Some((
        e,
        (entry_pfn(e).0 << crate::types::PAGE_SHIFT) + (addr & page_mask),
    ))
}

/// Models `handle_mm_fault()` of 6.18 for anonymous private memory: finds
/// the VMA, checks the access (`access_error()`), counts the fault
/// (`pgfault`, the task's `ru_minflt`), walks and fills the page tables, and
/// maps or copies a page.
#[inline]
pub fn handle_mm_fault(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    g: &mut MmGlobal,
    mm: &mut MmStruct,
    addr: Vaddr,
    write: bool,
) -> Result<(), VmFault> {
    cx.charge(Cost::FaultEntry);
    let vma = mm.vma_lookup(cx, addr.0).ok_or(VmFault::Sigsegv)?;
    handle_mm_fault_vma(&mut Vmf {
        pa,
        cx,
        g,
        mm,
        vma,
        address: addr,
        write,
    })
}

/// Models x86's `do_user_addr_fault()` (arch/x86/mm/fault.c) for a user
/// task: the VMA is looked up through the task's VMA cache (`find_vma()` of
/// 3.15–6.0, or the plain tree walk of 6.1+ when the policy is `none`), a
/// stack (`VM_GROWSDOWN`) above the address is grown down to it
/// (`lock_mm_and_find_vma()`), then the fault is handled in the VMA.
pub fn do_user_addr_fault(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    g: &mut MmGlobal,
    mm: &mut MmStruct,
    task: &mut crate::vmacache::TaskStruct,
    address: Vaddr,
    write: bool,
) -> Result<(), VmFault> {
    let addr = address.0;
    let ns_before = cx.compute_ns();
    let cache_ns_before = pa.vmstat.get(VmEvent::VMACACHE_FIND_NS);
    cx.charge(Cost::FaultEntry);
    let vma = match crate::vmacache::find_vma(task, mm, &mut pa.vmstat, cx, addr) {
        Some(vma) if vma.start <= addr => Ok(vma),
        // lock_mm_and_find_vma(): below a stack, the stack grows.
        Some(vma) if vma.flags.contains(VmFlags::GROWSDOWN) => {
            mm.expand_downwards(cx, addr).map_err(|_| VmFault::Sigsegv)
        }
        _ => Err(VmFault::Sigsegv),
    };
    let r = vma.and_then(|vma| {
        handle_mm_fault_vma(&mut Vmf {
            pa,
            cx,
            g,
            mm,
            vma,
            address,
            write,
        })
    });
    // The fault's own time and the cache's part of it, for the seed's
    // "vmacache_find share of page-fault time".
    let cache_ns = pa.vmstat.get(VmEvent::VMACACHE_FIND_NS) - cache_ns_before;
    pa.vmstat.count(VmEvent::VMACACHE_FIND_FAULT_NS, cache_ns);
    pa.vmstat
        .count(VmEvent::FAULT_NS, cx.compute_ns() - ns_before);
    r
}

/// The body of `handle_mm_fault()` once the VMA is known.
///
/// x86's `access_error()` comes first: a write needs `VM_WRITE`, any other
/// access one of read, write or exec (`vma_is_accessible()`; x86 cannot
/// map write-only). A refused access is a SIGSEGV that reaches neither
/// `pgfault` nor `ru_minflt` (the kernel counts both inside
/// `handle_mm_fault()`, which `bad_area_access_error()` never calls).
fn handle_mm_fault_vma(vmf: &mut Vmf) -> Result<(), VmFault> {
    let (write, addr) = (vmf.write, vmf.address.0);
    let ok = if write {
        vmf.vma.flags.contains(VmFlags::WRITE)
    } else {
        vmf.vma.flags.0 & VmFlags::ACCESS.0 != 0
    };
    if !ok {
        return Err(VmFault::Sigsegv);
    }
    vmf.pa.vmstat.count(VmEvent::PGFAULT, 1);
    vmf.mm.nr_faults += 1;
    if crate::hugetlb::is_vm_hugetlb_page(&vmf.vma) {
        return crate::hugetlb::hugetlb_fault(vmf);
    }
    let pmd = vmf
        .mm
        .pgt
        .walk_alloc(vmf.pa, vmf.cx, addr, Level::Pmd)
        .map_err(|_| VmFault::Oom)?;
    let e = vmf.mm.pgt.get(pmd);
    if e == 0 && thp_vma_allowable(&vmf.g.cfg, &vmf.vma, addr) {
        if do_huge_pmd_anonymous_page(vmf, pmd) {
            return Ok(());
        }
    } else if present(e) && e & PAGE_PSE != 0 {
        if !(write && e & PAGE_RW == 0) {
            // Spurious: another thread mapped it first; just mark it young.
            vmf.mm
                .pgt
                .set(pmd, e | PAGE_ACCESSED | if write { PAGE_DIRTY } else { 0 });
            return Ok(());
        }
        if do_huge_pmd_wp_page(vmf, pmd) {
            return Ok(());
        }
    }
    let pte = vmf
        .mm
        .pgt
        .pte_alloc(vmf.pa, vmf.cx, pmd, addr)
        .map_err(|_| VmFault::Oom)?;
    let e = vmf.mm.pgt.get(pte);
    if e == 0 {
        do_anonymous_page(vmf, pte)
    } else if write && e & PAGE_RW == 0 {
        do_wp_page(vmf, pte)
    } else {
        vmf.mm
            .pgt
            .set(pte, e | PAGE_ACCESSED | if write { PAGE_DIRTY } else { 0 });
        Ok(())
    }
}

/// Models `do_anonymous_page()` of 6.18: a read maps the shared zero page;
/// a write allocates a folio (`alloc_anon_folio()`: order 0, or a large
/// folio under [`MmConfig::anon_folio`]), clears it and maps all its pages
/// writable. `pte` is the empty entry for the address.
#[inline]
pub fn do_anonymous_page(vmf: &mut Vmf, pte: Slot) -> Result<(), VmFault> {
    let Vmf { cx, mm, write, .. } = vmf;
    if !*write {
        let ptl = pte_lockptr(pte);
        cx.lock(ptl);
        cx.charge(Cost::PteSet);
        mm.pgt.set(
            pte,
            mk_entry(ZERO_PFN, PAGE_PRESENT | PAGE_SPECIAL | PAGE_ACCESSED),
        );
        cx.unlock(ptl);
        return Ok(());
    }
    let (pfn, order) = anon_folio::alloc_anon_folio(vmf, pte)?;
    anon_folio::map_anon_folio(vmf, pte, pfn, order);
    Ok(())
}

/// Models `do_huge_pmd_anonymous_page()` of 6.18. Returns false when the
/// fault must fall back to PTEs (`VM_FAULT_FALLBACK`). The new THP is
/// zeroed by `folio_zero_user()` with the fault address as the hint.
/// `pmd` is the empty entry for the address.
pub fn do_huge_pmd_anonymous_page(vmf: &mut Vmf, pmd: Slot) -> bool {
    let Vmf {
        pa,
        cx,
        g,
        mm,
        address,
        write,
        ..
    } = vmf;
    if !*write {
        // Read fault: the huge zero page, allocated on first use.
        if mm.pgt.deposit(pa, cx, pmd).is_err() {
            return false;
        }
        if !g.huge_zero_page {
            g.huge_zero_page = true;
            pa.vmstat.count(VmEvent::THP_ZERO_PAGE_ALLOC, 1);
        }
        let ptl = pmd_lockptr(pmd);
        cx.lock(ptl);
        cx.charge(Cost::PteSet);
        mm.pgt.set(
            pmd,
            mk_entry(
                HUGE_ZERO_PFN,
                PAGE_PRESENT | PAGE_PSE | PAGE_SPECIAL | PAGE_ACCESSED,
            ),
        );
        cx.unlock(ptl);
        return true;
    }
    match alloc_thp(pa, cx, mm, pmd) {
        Some(pfn) => {
            huge_order::folio_zero_user(cx, g.cfg.clear_order, pfn, HPAGE_PMD_NR, *address);
            pa.llc_stream(cx, pfn, HPAGE_PMD_NR as u64);
            map_anon_folio_pmd(cx, mm, pmd, pfn);
            g.lru_add.folio_add_lru(cx.cpu, true);
            true
        }
        None => false,
    }
}

/// Models `map_anon_folio_pmd()` (6.17+; open-coded in the fault and COW
/// paths before): maps the new THP at `pfn` by a writable, dirty, young and
/// exclusive PMD leaf, under the page-table lock.
fn map_anon_folio_pmd(cx: &mut Cx, mm: &mut MmStruct, pmd: Slot, pfn: Pfn) {
    let ptl = pmd_lockptr(pmd);
    cx.lock(ptl);
    cx.charge(Cost::PteSet);
    mm.pgt.set(
        pmd,
        mk_entry(
            pfn,
            PAGE_PRESENT | PAGE_RW | PAGE_PSE | PAGE_ACCESSED | PAGE_DIRTY | PAGE_ANON_EXCLUSIVE,
        ),
    );
    cx.unlock(ptl);
}

/// Allocates a THP (`vma_alloc_folio(GFP_TRANSHUGE, HPAGE_PMD_ORDER)`) and
/// the page table deposited with it; counts `thp_fault_alloc` or
/// `thp_fault_fallback`. A THP allocated charges
/// [`Cost::AllocAnonFolio`] once (`vma_alloc_anon_folio_pmd()` of 6.18:
/// the memcg charge of its pages, the zeroing's store drain before the
/// PMD lock, the immediate LRU add, the counters).
fn alloc_thp(pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, pmd: Slot) -> Option<Pfn> {
    let Ok(pfn) = pa.alloc_pages(cx, Gfp::HIGHUSER_MOVABLE, HPAGE_PMD_ORDER) else {
        pa.vmstat.count(VmEvent::THP_FAULT_FALLBACK, 1);
        pa.vmstat
            .count_mthp(HPAGE_PMD_ORDER, MthpStat::AnonFaultFallback, 1);
        return None;
    };
    if mm.pgt.deposit(pa, cx, pmd).is_err() {
        pa.free_pages(cx, pfn, HPAGE_PMD_ORDER);
        pa.vmstat.count(VmEvent::THP_FAULT_FALLBACK, 1);
        pa.vmstat
            .count_mthp(HPAGE_PMD_ORDER, MthpStat::AnonFaultFallback, 1);
        return None;
    }
    pa.vmstat.count(VmEvent::THP_FAULT_ALLOC, 1);
    pa.vmstat
        .count_mthp(HPAGE_PMD_ORDER, MthpStat::AnonFaultAlloc, 1);
    pa.vmstat.count_mthp(HPAGE_PMD_ORDER, MthpStat::NrAnon, 1);
    // vma_alloc_anon_folio_pmd() and the LRU add: the large folio's own
    // work, as alloc_anon_folio()'s for a PTE-mapped one.
    cx.charge(Cost::AllocAnonFolio);
    let head = pa.mem.idx(pfn);
    pa.mem.set_refcount(head, HPAGE_PMD_NR);
    pa.mem.set_entire_mapcount(head, 1);
    Some(pfn)
}

/// Models `do_huge_pmd_wp_page()`: a write to a write-protected PMD leaf.
/// Returns false when the PMD was split and the PTE path must finish. In the
/// 4.18 form the copy is `copy_user_huge_page()` with the fault address
/// as the hint. `pmd` is the write-protected leaf; the fault is a write.
pub fn do_huge_pmd_wp_page(vmf: &mut Vmf, pmd: Slot) -> bool {
    let e = vmf.mm.pgt.get(pmd);
    if e & PAGE_SPECIAL != 0 {
        // The huge zero page (do_huge_zero_wp_pmd() in 6.18).
        vmf.mm.pgt.free_deposit(vmf.pa, vmf.cx, pmd);
        vmf.mm.pgt.set(pmd, 0);
        if do_huge_pmd_anonymous_page(vmf, pmd) {
            return true;
        }
        let Vmf { pa, cx, mm, .. } = vmf;
        // Back to zero-page PTEs, as __split_huge_zero_page_pmd() leaves them.
        mm.pgt.set(pmd, e);
        mm.pgt
            .deposit(pa, cx, pmd)
            .expect("the table just freed is on this CPU's PCP list");
        split_huge_pmd(pa, cx, mm, pmd);
        return false;
    }
    let Vmf {
        pa,
        cx,
        g,
        mm,
        address,
        ..
    } = vmf;
    let head = entry_pfn(e);
    // page_folio() of pmd_page(): the first load of the folio's struct page.
    let ns = pa.touch_struct_page(cx, head);
    cx.charge_ns(ns);
    if pa.mem.refcount(head) == HPAGE_PMD_NR && pa.mem.entire_mapcount(head) == 1 {
        // Only this PMD maps the folio: reuse it.
        let ptl = pmd_lockptr(pmd);
        cx.lock(ptl);
        mm.pgt.set(
            pmd,
            e | PAGE_RW | PAGE_DIRTY | PAGE_ACCESSED | PAGE_ANON_EXCLUSIVE,
        );
        cx.unlock(ptl);
        return true;
    }
    match g.cfg.thp_cow {
        ThpCow::SplitPmd => {
            split_huge_pmd(pa, cx, mm, pmd);
            false
        }
        ThpCow::CopyHuge => {
            let Ok(pfn) = pa.alloc_pages(cx, Gfp::HIGHUSER_MOVABLE, HPAGE_PMD_ORDER) else {
                pa.vmstat.count(VmEvent::THP_FAULT_FALLBACK, 1);
                split_huge_pmd(pa, cx, mm, pmd);
                return false;
            };
            pa.vmstat.count(VmEvent::THP_FAULT_ALLOC, 1);
            // 4.18 had no per-size stats; the gauge keeps the model's
            // books balanced (the folio is freed through folio_put_refs()).
            pa.vmstat.count_mthp(HPAGE_PMD_ORDER, MthpStat::NrAnon, 1);
            huge_order::copy_user_large_folio(
                cx,
                g.cfg.copy_order,
                pfn,
                entry_pfn(e),
                HPAGE_PMD_NR,
                *address,
            );
            pa.llc_stream(cx, pfn, HPAGE_PMD_NR as u64);
            pa.llc_stream(cx, entry_pfn(e), HPAGE_PMD_NR as u64);
            let new = pa.mem.idx(pfn);
            pa.mem.set_refcount(new, HPAGE_PMD_NR);
            pa.mem.set_entire_mapcount(new, 1);
            let m = pa.mem.entire_mapcount(head);
            pa.mem.set_entire_mapcount(head, m - 1);
            folio_put_refs(pa, cx, head, HPAGE_PMD_NR);
            // pmdp_huge_clear_flush(): the old PMD leaves this CPU's TLB.
            cx.charge(Cost::TlbFlushLocal);
            map_anon_folio_pmd(cx, mm, pmd, pfn);
            g.lru_add.folio_add_lru(cx.cpu, true);
            true
        }
    }
}

/// Models `__split_huge_pmd()`: replaces the PMD leaf at `pmd` by the
/// deposited PTE table mapping the same pages with the same bits; counts
/// `thp_split_pmd`. The folio keeps its references (one per PTE now).
pub fn split_huge_pmd(pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, pmd: Slot) {
    let e = mm.pgt.get(pmd);
    debug_assert!(
        present(e) && e & PAGE_PSE != 0,
        "split of a PMD that is not a leaf"
    );
    pa.vmstat.count(VmEvent::THP_SPLIT_PMD, 1);
    let ptl = pmd_lockptr(pmd);
    cx.lock(ptl);
    let table = mm.pgt.withdraw(pmd);
    let flags = e
        & (PAGE_PRESENT
            | PAGE_RW
            | PAGE_ACCESSED
            | PAGE_DIRTY
            | PAGE_SPECIAL
            | PAGE_PROTNONE
            | PAGE_ANON_EXCLUSIVE);
    let special = e & PAGE_SPECIAL != 0;
    let pfn = entry_pfn(e);
    let pte = mm.pgt.slot(table, 0);
    for i in 0..PTRS_PER_TABLE {
        let p = if special {
            ZERO_PFN
        } else {
            pfn.offset(i as u64)
        };
        mm.pgt.set(pte.with_index(i), mk_entry(p, flags));
    }
    cx.charge_n(Cost::PteSet, PTRS_PER_TABLE as u64);
    if !special {
        let m = pa.mem.entire_mapcount(pfn);
        pa.mem.set_entire_mapcount(pfn, m - 1);
        // folio_add_anon_rmap_ptes() of all the sub-pages writes each one's
        // _mapcount: the lines become this CPU's (their cost is not
        // charged: the split's per-PTE charge stands for it).
        for i in 0..PTRS_PER_TABLE as u64 {
            pa.touch_struct_page(cx, pfn.offset(i));
        }
    }
    mm.pgt.set(pmd, mk_entry(table, PAGE_PRESENT | PAGE_RW));
    cx.unlock(ptl);
}

/// `pte_lockptr()`: the split page-table lock of the PTE table holding
/// `pte` (it lives in the table's `struct page`, so its index is the table
/// page's memmap index).
#[inline]
pub fn pte_lockptr(pte: Slot) -> LockId {
    LockId {
        class: LockClass::Ptl,
        index: pte.ptl_index(),
    }
}

/// `pmd_lockptr()`: the split lock of the PMD table holding `pmd` (taken for
/// PMD leaves).
#[inline]
pub fn pmd_lockptr(pmd: Slot) -> LockId {
    pte_lockptr(pmd)
}

/// Models `split_huge_pmd_address()`: splits the PMD leaf mapping `addr`,
/// if there is one (a VMA boundary is about to fall inside it).
pub fn split_huge_pmd_address(pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, addr: u64) {
    if let Some(pmd) = mm.pgt.lookup(addr, Level::Pmd) {
        let e = mm.pgt.get(pmd);
        if present(e) && e & PAGE_PSE != 0 {
            split_huge_pmd(pa, cx, mm, pmd);
        }
    }
}

/// Models `do_wp_page()`: a write to a write-protected PTE. Reuses the page
/// if it is `PageAnonExclusive()` or this mapping holds its last reference
/// (`wp_can_reuse_anon_folio()`), else copies it (`wp_page_copy()`; from the zero page: a cleared page).
pub fn do_wp_page(vmf: &mut Vmf, pte: Slot) -> Result<(), VmFault> {
    let Vmf { pa, cx, g, mm, .. } = vmf;
    let e = mm.pgt.get(pte);
    let special = e & PAGE_SPECIAL != 0;
    let old_head = (!special).then(|| folio_head(pa, entry_pfn(e)));
    if let Some(h) = old_head {
        wp_page_first_loads(pa, cx, entry_pfn(e), h);
        if e & PAGE_ANON_EXCLUSIVE != 0 || pa.mem.refcount(h) == 1 {
            let ptl = pte_lockptr(pte);
            cx.lock(ptl);
            mm.pgt.set(
                pte,
                e | PAGE_RW | PAGE_DIRTY | PAGE_ACCESSED | PAGE_ANON_EXCLUSIVE,
            );
            cx.unlock(ptl);
            return Ok(());
        }
    }
    // wp_page_copy(): folio_prealloc() allocates and charges the new page
    // to the memcg (mem_cgroup_charge() is inside the allocator's fitted
    // per-page cost, as for every anonymous fault), then
    // __wp_page_copy_user() copies the old page, or the zero page's
    // replacement is cleared.
    let pfn = pa
        .alloc_pages(cx, Gfp::HIGHUSER_MOVABLE, 0)
        .map_err(|_| VmFault::Oom)?;
    if special {
        cx.clear_page(pfn);
    } else {
        cx.copy_page(pfn, entry_pfn(e));
        pa.llc_stream(cx, entry_pfn(e), 1);
    }
    pa.llc_stream(cx, pfn, 1);
    pa.mem.set_refcount(pfn, 1);
    mmu_notifier_invalidate_range_start(mm);
    let ptl = pte_lockptr(pte);
    cx.lock(ptl);
    // ptep_clear_flush(): the old entry leaves this CPU's TLB before the
    // new one is set. Deviation: other CPUs of the mm get no shootdown IPI.
    cx.charge(Cost::TlbFlushLocal);
    cx.charge(Cost::PteSet);
    mm.pgt.set(
        pte,
        mk_entry(
            pfn,
            PAGE_PRESENT | PAGE_RW | PAGE_ACCESSED | PAGE_DIRTY | PAGE_ANON_EXCLUSIVE,
        ),
    );
    if old_head.is_some() {
        folio_remove_rmap_pte(cx);
    }
    cx.unlock(ptl);
    mmu_notifier_invalidate_range_end(mm);
    // The reference the old PTE held goes after the unlock, as in
    // wp_page_copy() (a page another mm still maps is not freed here).
    if let Some(h) = old_head {
        folio_put_refs(pa, cx, h, 1);
    }
    g.lru_add.folio_add_lru(cx.cpu, false);
    Ok(())
}

/// The loads `do_wp_page()` makes of the old page's `struct page` before it
/// decides between reuse and copy: `page_folio()` of `vm_normal_page()`'s
/// page (the page's own line: its `compound_head`), then the folio's flags
/// and counts (`folio_test_anon()`, `folio_ref_count()`; the head's line,
/// the same one for a base page). Each waits for the line from its last
/// writer, or from DRAM when nobody wrote it or its LLC has pushed it out
/// since (fork wrote it; a region's worth of copies later it is gone: on
/// this host `perf` puts 71 % of `do_wp_page()`'s own samples on the
/// instruction after the first load). Charged: nothing else holds it
/// (`pte_zap_ns`, the rmap removal's cost, is measured by `munmap`, whose
/// loads of consecutive pages' `struct page`s overlap).
fn wp_page_first_loads(pa: &mut PageAlloc, cx: &mut Cx, page: Pfn, head: Pfn) {
    let mut ns = pa.touch_struct_page(cx, page);
    if head != page {
        ns += pa.touch_struct_page(cx, head);
    }
    cx.charge_ns(ns);
}

/// Models `folio_remove_rmap_pte()` of the old page in `wp_page_copy()`,
/// under the PTE lock, with the `folio_put()` of its PTE's reference after
/// the unlock (the caller's): the page leaves this mm as a zap takes it
/// (its mapcount and `NR_ANON_MAPPED` updated, its reference dropped, its
/// `struct page` usually cold since the fork), so it charges what
/// `zap_present_ptes()` charges per page, `pte_zap_ns`. Deviation: the
/// kernel also drops the extra reference `do_wp_page()` took with
/// `folio_get()` across the copy (the model takes none), and the PTE's own
/// clearing is in `ptep_clear_flush()`; both are inside what
/// `pte_zap_ns` measures (munmap per page).
fn folio_remove_rmap_pte(cx: &mut Cx) {
    cx.charge(Cost::PteZap);
}

/// Models `mmu_notifier_invalidate_range_start()`: tells secondary MMUs
/// (KVM, an IOMMU with SVA, a GPU driver) that a range of the mm is about
/// to change. The model's processes have none registered, as a plain
/// process on this host has none: `mm_has_notifiers()` is false and the
/// kernel's inline wrapper returns at once, so nothing is charged.
fn mmu_notifier_invalidate_range_start(mm: &MmStruct) {
    let _ = mm;
}

/// Models `mmu_notifier_invalidate_range_end()`: as
/// [`mmu_notifier_invalidate_range_start`], nothing to do without
/// subscribers.
fn mmu_notifier_invalidate_range_end(mm: &MmStruct) {
    let _ = mm;
}

/// Models `zap_page_range_single()`/`unmap_page_range()`: unmaps
/// `[start, end)`, dropping the references of the pages; a PMD leaf only
/// partly inside the range is split first. Page tables stay (see
/// [`crate::pgtable::PageTables::free_pgd_range`]).
pub fn zap_page_range(pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, start: u64, end: u64) {
    let mut addr = start;
    while addr < end {
        // No PMD table here: nothing is mapped up to `skip`.
        if let Err(skip) = mm.pgt.lookup_or_skip(addr, Level::Pmd) {
            addr = skip.min(end);
            continue;
        }
        let next = ((addr | (PMD_SIZE - 1)) + 1).min(end);
        if let Some(pmd) = mm.pgt.lookup(addr, Level::Pmd) {
            let e = mm.pgt.get(pmd);
            if present(e) && e & PAGE_PSE != 0 {
                if addr.is_multiple_of(PMD_SIZE) && next - addr == PMD_SIZE {
                    let ptl = pmd_lockptr(pmd);
                    cx.lock(ptl);
                    cx.charge(Cost::PteZap);
                    mm.pgt.set(pmd, 0);
                    cx.unlock(ptl);
                    mm.pgt.free_deposit(pa, cx, pmd);
                    if e & PAGE_SPECIAL == 0 {
                        let head = entry_pfn(e);
                        let m = pa.mem.entire_mapcount(head);
                        pa.mem.set_entire_mapcount(head, m - 1);
                        folio_put_refs(pa, cx, head, HPAGE_PMD_NR);
                    }
                    addr = next;
                    continue;
                }
                split_huge_pmd(pa, cx, mm, pmd);
            }
            if let Some(pte) = mm.pgt.pte_table(pmd) {
                // Large folios that lost a mapping here and survived: checked
                // for partial mapping once this table's range is done (a
                // naturally aligned folio never spans two PTE tables).
                let mut touched: Vec<Pfn> = Vec::new();
                let ptl = pte_lockptr(pte);
                cx.lock(ptl);
                let mut a = addr;
                while a < next {
                    let slot = pte.with_index(Level::Pte.index(a));
                    let e = mm.pgt.get(slot);
                    if present(e) {
                        cx.charge(Cost::PteZap);
                        mm.pgt.set(slot, 0);
                        if e & PAGE_SPECIAL == 0 {
                            let h = folio_head(pa, entry_pfn(e));
                            folio_put_refs(pa, cx, h, 1);
                            if pa.mem.flags(h) & crate::page::PG_HEAD != 0
                                && pa.mem.order(h) >= 2
                                && touched.last() != Some(&h)
                            {
                                touched.push(h);
                            }
                        }
                    }
                    a += PAGE_SIZE;
                }
                cx.unlock(ptl);
                for h in touched {
                    // Still allocated (zap allocates nothing, so a freed head
                    // cannot have been reused)?
                    if pa.mem.flags(h) & crate::page::PG_HEAD != 0 {
                        anon_folio::check_partially_mapped(pa, h);
                    }
                }
            }
        }
        addr = next;
    }
}

/// Models `dup_mmap()` + `copy_page_range()` for anonymous private memory:
/// the child gets the parent's VMAs and page tables, both sides
/// write-protected, each mapped folio one more reference (a PMD leaf: 512
/// and one more entire mapping, with a page table deposited for the child).
pub fn fork(pa: &mut PageAlloc, cx: &mut Cx, parent: &mut MmStruct) -> Result<MmStruct, VmFault> {
    let mut child = MmStruct::new(pa, cx, parent.layout).map_err(|_| VmFault::Oom)?;
    child.mmap_base = parent.mmap_base;
    child.vmas = parent.vmas.clone();
    child.start_brk = parent.start_brk;
    child.brk = parent.brk;
    let vmas: Vec<Vma> = parent.vmas.values().copied().collect();
    let res = (|| {
        for v in vmas {
            if crate::hugetlb::is_vm_hugetlb_page(&v) {
                crate::hugetlb::copy_hugetlb_page_range(pa, cx, parent, &mut child, &v)?;
                let cv = child.vmas.get_mut(&v.start).expect("copied vma");
                cv.flags = crate::hugetlb::hugetlb_dup_vma_private(cv.flags);
                continue;
            }
            let mut addr = v.start;
            while addr < v.end {
                // copy_p4d_range()/copy_pud_range(): an empty upper entry
                // is skipped whole.
                if let Err(skip) = parent.pgt.lookup_or_skip(addr, Level::Pmd) {
                    addr = skip.min(v.end);
                    continue;
                }
                let next = ((addr | (PMD_SIZE - 1)) + 1).min(v.end);
                copy_pmd_range(pa, cx, parent, &mut child, addr, next)?;
                addr = next;
            }
        }
        Ok(())
    })();
    if let Err(e) = res {
        exit_mmap(pa, cx, child);
        return Err(e);
    }
    Ok(child)
}

/// The leaf entries of `mm` that [`fork`] would write-protect: every
/// present, writable PTE and PMD leaf of its VMAs (hugetlb's aside), with
/// its address, level and value. Not a kernel function: a replay that
/// forks before it knows whether the new task is a thread
/// (`trace::aspace`) takes this list first, and if the task turns out to
/// be a thread (`clone(CLONE_VM)`, which write-protects nothing) undoes
/// the fork's write protection with [`restore_fork_wrprotect`].
pub fn fork_wrprotect_list(mm: &MmStruct) -> Vec<(u64, Level, u64)> {
    let mut out = Vec::new();
    for v in mm.vmas.values() {
        if crate::hugetlb::is_vm_hugetlb_page(v) {
            continue;
        }
        let mut addr = v.start;
        while addr < v.end {
            let next = ((addr | (PMD_SIZE - 1)) + 1).min(v.end);
            writable_leaves(mm, addr, next, &mut out);
            addr = next;
        }
    }
    out
}

/// [`fork_wrprotect_list`]'s walk of one PMD's range `[addr, next)`.
fn writable_leaves(mm: &MmStruct, addr: u64, next: u64, out: &mut Vec<(u64, Level, u64)>) {
    let Some(pmd) = mm.pgt.lookup(addr, Level::Pmd) else {
        return;
    };
    let e = mm.pgt.get(pmd);
    if !present(e) {
        return;
    }
    if e & PAGE_PSE != 0 {
        if e & PAGE_RW != 0 {
            out.push((addr & !(PMD_SIZE - 1), Level::Pmd, e));
        }
        return;
    }
    let Some(table) = mm.pgt.pte_table(pmd) else {
        return;
    };
    let entries = mm.pgt.entries(table);
    let mut a = addr;
    while a < next {
        let pe = entries[Level::Pte.index(a)];
        if present(pe) && pe & PAGE_RW != 0 {
            out.push((a, Level::Pte, pe));
        }
        a += PAGE_SIZE;
    }
}

/// Puts back the entries of `saved` ([`fork_wrprotect_list`] before a
/// [`fork`] whose child has been torn down again) that are still the
/// write-protected form the fork left (untouched since): writable and
/// exclusive as before, the child's references being gone.
pub fn restore_fork_wrprotect(mm: &mut MmStruct, saved: &[(u64, Level, u64)]) {
    for &(addr, level, e) in saved {
        if let Some(slot) = mm.pgt.lookup(addr, level) {
            if mm.pgt.get(slot) == e & !(PAGE_RW | PAGE_ANON_EXCLUSIVE) {
                mm.pgt.set(slot, e);
            }
        }
    }
}

fn copy_pmd_range(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    parent: &mut MmStruct,
    child: &mut MmStruct,
    addr: u64,
    next: u64,
) -> Result<(), VmFault> {
    let Some(ppmd) = parent.pgt.lookup(addr, Level::Pmd) else {
        return Ok(());
    };
    let e = parent.pgt.get(ppmd);
    if !present(e) {
        return Ok(());
    }
    let oom = |_| VmFault::Oom;
    if e & PAGE_PSE != 0 {
        // copy_huge_pmd()
        let cpmd = child
            .pgt
            .walk_alloc(pa, cx, addr, Level::Pmd)
            .map_err(oom)?;
        child.pgt.deposit(pa, cx, cpmd).map_err(oom)?;
        let wp = e & !(PAGE_RW | PAGE_ANON_EXCLUSIVE);
        if e & PAGE_SPECIAL == 0 {
            let head = entry_pfn(e);
            // The folio's counts are written: its line becomes the forking
            // CPU's (the cost is inside pte_copy_ns, fitted on fork).
            pa.touch_struct_page(cx, head);
            folio_get_refs(pa, head, HPAGE_PMD_NR);
            let m = pa.mem.entire_mapcount(head);
            pa.mem.set_entire_mapcount(head, m + 1);
        }
        let (lp, lc) = (pmd_lockptr(ppmd), pmd_lockptr(cpmd));
        cx.lock(lc);
        cx.lock(lp);
        cx.charge(Cost::PteCopy);
        parent.pgt.set(ppmd, wp);
        child.pgt.set(cpmd, wp);
        cx.unlock(lp);
        cx.unlock(lc);
        return Ok(());
    }
    let ptable = parent
        .pgt
        .pte_table(ppmd)
        .expect("a present, non-leaf PMD points to a PTE table");
    // copy_pte_range(): the child's table is allocated before either lock
    // is taken; the parent's lock nests inside the child's.
    let Some(first) = (addr..next)
        .step_by(PAGE_SIZE as usize)
        .find(|&a| present(parent.pgt.get(ptable.with_index(Level::Pte.index(a)))))
    else {
        return Ok(());
    };
    let ct = child
        .pgt
        .walk_alloc(pa, cx, first, Level::Pte)
        .map_err(oom)?;
    let (lp, lc) = (pte_lockptr(ptable), pte_lockptr(ct));
    cx.lock(lc);
    cx.lock(lp);
    let mut a = first;
    while a < next {
        let ps = ptable.with_index(Level::Pte.index(a));
        let pe = parent.pgt.get(ps);
        if present(pe) {
            let wp = pe & !(PAGE_RW | PAGE_ANON_EXCLUSIVE);
            if pe & PAGE_SPECIAL == 0 {
                let h = folio_head(pa, entry_pfn(pe));
                // folio_try_dup_anon_rmap_pte() writes the page's mapcount
                // and the folio's refcount: their lines become the forking
                // CPU's (the cost is inside pte_copy_ns, fitted on fork).
                pa.touch_struct_page(cx, entry_pfn(pe));
                if h != entry_pfn(pe) {
                    pa.touch_struct_page(cx, h);
                }
                folio_get_refs(pa, h, 1);
            }
            cx.charge(Cost::PteCopy);
            parent.pgt.set(ps, wp);
            child.pgt.set(ct.with_index(ps.index), wp);
        }
        a += PAGE_SIZE;
    }
    cx.unlock(lp);
    cx.unlock(lc);
    Ok(())
}

/// Models `exit_mmap()`: unmaps every VMA, frees every page table and the PGD.
pub fn exit_mmap(pa: &mut PageAlloc, cx: &mut Cx, mut mm: MmStruct) {
    let vmas: Vec<Vma> = mm.vmas.values().copied().collect();
    for v in vmas {
        if crate::hugetlb::is_vm_hugetlb_page(&v) {
            crate::hugetlb::hugetlb_unmap_vma(pa, cx, &mut mm, &v);
        } else {
            zap_page_range(pa, cx, &mut mm, v.start, v.end);
        }
    }
    mm.vmas.clear();
    mm.pgt.free_pgd_range(pa, cx, 0, u64::MAX);
    mm.pgt.free_pgd(pa, cx);
}

/// For [`check_mm_invariants`]: the leaf entry of `level` at `addr` in mm
/// `i` lies wholly inside a VMA that agrees with it on `PROT_NONE` and on
/// write permission.
fn check_leaf_vma(mm: &MmStruct, i: usize, addr: u64, level: Level, e: u64) {
    let size = if level == Level::Pmd {
        PMD_SIZE
    } else {
        PAGE_SIZE
    };
    let vma = mm
        .vma_at(addr)
        .filter(|v| v.end >= addr + size)
        .unwrap_or_else(|| panic!("mm {i}: {level:?} entry at {addr:#x} outside any VMA"));
    let accessible = vma.flags.0 & VmFlags::ACCESS.0 != 0;
    assert_eq!(
        e & PAGE_PROTNONE == 0,
        accessible,
        "mm {i}: entry at {addr:#x} ({e:#x}) and VMA {vma:?} disagree on PROT_NONE"
    );
    assert!(
        e & PAGE_RW == 0 || vma.flags.contains(VmFlags::WRITE),
        "mm {i}: writable entry at {addr:#x} in a read-only VMA {vma:?}"
    );
}

/// Checks the address spaces `mms` against each other and the allocator
/// (the model's CONFIG_DEBUG_VM): every VMA tree is consistent; every page
/// table (deposited ones included) is an allocated order-0 block; every
/// present leaf lies inside a VMA, is `PROT_NONE` exactly when its VMA is,
/// and is writable only in a writable VMA; every PMD leaf has a deposited
/// table and every deposit a PMD leaf; every mapped page belongs to an
/// allocated folio (none is both free and mapped), and each folio's
/// refcount and entire mapcount equal the mappings found (one per PTE, 512
/// and one entire mapping per PMD leaf) over all the address spaces; a page
/// marked exclusive is mapped once.
///
/// Panics with a message naming the address and what is wrong.
pub fn check_mm_invariants(pa: &PageAlloc, mms: &[&MmStruct]) {
    use crate::page::{PG_BUDDY, PG_HEAD, PG_PCP};
    use std::collections::BTreeMap;
    let allocated_table = |t: Pfn, what: &str| {
        let f = pa.mem.flags(t);
        assert!(
            f & PG_HEAD != 0 && f & (PG_BUDDY | PG_PCP) == 0 && pa.mem.order(t) == 0,
            "{what} table {t} is not an allocated order-0 block (flags {f:#x})"
        );
    };
    // head -> (references, entire mappings, exclusive mappings of order-0)
    let mut seen: BTreeMap<Pfn, (u32, u32, u32)> = BTreeMap::new();
    for (i, mm) in mms.iter().enumerate() {
        mm.check_vmas();
        mm.pgt.check_invariants();
        for t in mm.pgt.table_pfns() {
            allocated_table(t, "page");
        }
        let mut pmd_leaves = Vec::new();
        mm.pgt.for_each_leaf(|addr, level, slot, e| {
            check_leaf_vma(mm, i, addr, level, e);
            if level == Level::Pmd {
                pmd_leaves.push(slot);
            }
            if e & PAGE_SPECIAL != 0 {
                return;
            }
            let pfn = entry_pfn(e);
            let head = folio_head(pa, pfn);
            let f = pa.mem.flags(head);
            assert!(
                f & PG_HEAD != 0 && f & (PG_BUDDY | PG_PCP) == 0,
                "mm {i}: {addr:#x} maps {pfn}, which is not in an allocated folio (head flags {f:#x})"
            );
            let s = seen.entry(head).or_default();
            if level == Level::Pmd {
                assert_eq!(
                    pa.mem.order(head),
                    HPAGE_PMD_ORDER,
                    "mm {i}: PMD at {addr:#x} maps a folio of another order"
                );
                s.0 += HPAGE_PMD_NR;
                s.1 += 1;
            } else {
                s.0 += 1;
            }
            if e & PAGE_ANON_EXCLUSIVE != 0 && pa.mem.order(head) == 0 {
                s.2 += 1;
            }
        });
        let deposits: Vec<Slot> = mm
            .pgt
            .deposited()
            .map(|(slot, t)| {
                allocated_table(t, "deposited");
                slot
            })
            .collect();
        pmd_leaves.sort();
        assert_eq!(
            pmd_leaves, deposits,
            "mm {i}: PMD leaves and deposited tables differ"
        );
    }
    for (head, (refs, entire, excl)) in seen {
        assert_eq!(
            pa.mem.refcount(head),
            refs,
            "folio {head}: refcount {} but {refs} mappings",
            pa.mem.refcount(head)
        );
        // Only a PMD-size folio keeps an entire mapcount (page.rs).
        let pmd_order = pa.mem.order(head) == HPAGE_PMD_ORDER;
        assert_eq!(
            if pmd_order {
                pa.mem.entire_mapcount(head)
            } else {
                0
            },
            entire,
            "folio {head}: entire mapcount {} but {entire} PMD mappings",
            pa.mem.entire_mapcount(head)
        );
        assert!(
            excl == 0 || refs == 1,
            "folio {head}: exclusive but mapped {refs} times"
        );
    }
}
