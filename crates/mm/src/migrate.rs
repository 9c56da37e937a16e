//! Page migration (mm/migrate.c; Linux 6.18, with the 4.x one-folio-at-a-time
//! flow as a preset) and `move_pages(2)`.
//!
//! # How a folio migrates
//!
//! A migrating folio is first *isolated* (taken off the LRU by its caller,
//! here `add_folio_for_migration()`). Then, per folio: a destination folio
//! is allocated on the target node; the source is try-locked; every mapping
//! of it (found by an rmap walk) is replaced by a *migration entry*, a
//! non-present PTE or PMD that remembers the source page, so that a racing
//! access would wait; the TLBs are flushed; the data and the folio's flags
//! are copied; and every migration entry is replaced by a mapping of the
//! destination. The source is freed. If anything fails after the unmap, the
//! migration entries are turned back into mappings of the source (undo).
//!
//! # Two flows
//!
//! - [`MigrateFlow::Batched`] (6.3+, Huang Ying's series): `migrate_pages()`
//!   takes the list in chunks of [`NR_MAX_BATCHED_MIGRATION`] base pages
//!   (a chunk ends with the folio that reaches it, so a chunk of THPs holds
//!   one). `migrate_pages_batch()` unmaps every folio of the chunk with the
//!   TLB flush deferred, flushes once for the chunk (one IPI per CPU that
//!   ran an affected mm), then moves them all, then undoes what is left.
//!   A synchronous caller (`move_pages()`) first tries the chunk
//!   asynchronously ([`NR_MAX_MIGRATE_ASYNC_RETRY`] passes) and retries the
//!   rest one folio at a time synchronously ([`NR_MAX_MIGRATE_SYNC_RETRY`]).
//! - [`MigrateFlow::PerFolio`] (≤ 6.2, the seed's 4.9): `unmap_and_move()`
//!   per folio, its TLB flush at once, up to [`NR_MAX_MIGRATE_PAGES_RETRY`]
//!   passes over the list.
//!
//! A THP whose destination cannot be allocated is split and its base pages
//! migrate instead (`thp_migration_split`), except for NUMA-balancing
//! migrations.
//!
//! # The copy
//!
//! The data copy is costed by [`crate::copy_page`]: single-threaded, the
//! seed's `copy_page_mt()`, adaptive, batched or DMA, when the
//! multi-threaded mode is on (`vm.accel_page_copy` or `MPOL_MF_MOVE_MT`).
//!
//! # The model's references
//!
//! A folio's `refcount` counts its mappings (see `page.rs`); other
//! references (pins) are [`crate::page::MemMap::folio_extra_refs`]. After
//! the unmap a movable folio has neither; one with extra references fails
//! the move with `-EAGAIN` (`folio_migrate_mapping()`'s refcount check) and
//! is retried, then undone.
//!
//! Deviations:
//! - The rmap walk visits every address space given to [`MigrateCtx`] at
//!   the folio's address (anonymous memory never moves in the model, so a
//!   folio sits at the same address in every process sharing it), not an
//!   `anon_vma` chain.
//! - No hugetlb (`migrate_hugetlbs()` finds none), no file pages, no swap
//!   cache, no LRU lists (isolation costs [`Cost::MigrateIsolate`] and
//!   cannot fail except for a folio already isolated).
//! - A locked folio ([`PG_LOCKED`], set only by tests) stays locked: every
//!   mode finds it busy (`-EAGAIN`) where a synchronous one would wait.
//! - Migration runs inside one kernel entry: no access can meet a
//!   migration entry. Its locks are recorded for the engine to play:
//!   the caller's `mmap_lock` for reading around each page's isolation
//!   (`add_folio_for_migration()`) and each chunk of `do_pages_stat()`,
//!   the page-table lock of each table the unmap and the remap walk
//!   (`page_vma_mapped_walk()`), and the allocator's own; the anon_vma
//!   lock and the LRU lock are not modelled.

use crate::copy_page::{CopyCost, CopyEngine, CopyJob, CopyModel, NumaHw};
use crate::cost::{Cost, CostTable, Cx, LockId};
use crate::memory::anon_folio::folio_undo_large_anon;
use crate::page::{PG_HEAD, PG_LOCKED, PG_PARTIALLY_MAPPED};
use crate::page_alloc::{Gfp, PageAlloc};
use crate::pgtable::{
    entry_pfn, is_migration_entry, mk_entry, present, Level, Slot, PAGE_ACCESSED, PAGE_DIRTY,
    PAGE_PSE, PAGE_RW, PAGE_SPECIAL, SWP_MIGRATION,
};
use crate::types::{NodeId, Pfn, HPAGE_PMD_ORDER, PAGE_SIZE};
use crate::vma::MmStruct;
use crate::vmstat::{MthpStat, VmEvent};
use std::collections::BTreeSet;
use std::fmt;

/// Base pages per `migrate_pages_batch()` chunk (`HPAGE_PMD_NR`).
pub const NR_MAX_BATCHED_MIGRATION: u64 = 512;
/// Passes over a list before giving up (`NR_MAX_MIGRATE_PAGES_RETRY`).
pub const NR_MAX_MIGRATE_PAGES_RETRY: u32 = 10;
/// Passes of the asynchronous batch a synchronous migration tries first.
pub const NR_MAX_MIGRATE_ASYNC_RETRY: u32 = 3;
/// Passes per folio of the synchronous one-by-one retry.
pub const NR_MAX_MIGRATE_SYNC_RETRY: u32 = NR_MAX_MIGRATE_PAGES_RETRY - NR_MAX_MIGRATE_ASYNC_RETRY;

/// Pages whose nodes `do_pages_stat()` looks up under one `mmap_lock` hold.
pub const DO_PAGES_STAT_CHUNK_NR: usize = 16;

/// `move_pages()` flag: move pages mapped only by this process.
pub const MPOL_MF_MOVE: i32 = 1 << 1;
/// `move_pages()` flag: move shared pages too (needs `CAP_SYS_NICE`; the
/// model runs as root).
pub const MPOL_MF_MOVE_ALL: i32 = 1 << 2;
/// The seed's `move_pages()` flag: copy huge pages with several threads.
/// Accepted only by a kernel with the seed's series
/// (`mmlab.migrate_copy_engine` other than `single`).
pub const MPOL_MF_MOVE_MT: i32 = 1 << 6;

/// Errno values `move_pages()` returns or stores in its status array.
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// No such page.
    pub const ENOENT: i32 = 2;
    /// Try again.
    pub const EAGAIN: i32 = 11;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Shared page without `MPOL_MF_MOVE_ALL`.
    pub const EACCES: i32 = 13;
    /// Bad address (no VMA, or the zero page).
    pub const EFAULT: i32 = 14;
    /// Busy (already isolated).
    pub const EBUSY: i32 = 16;
    /// No such node.
    pub const ENODEV: i32 = 19;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
}

/// `enum migrate_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateMode {
    /// `MIGRATE_ASYNC`: never block; the only mode that batches.
    Async,
    /// `MIGRATE_SYNC_LIGHT`: may block, but not on writeback.
    SyncLight,
    /// `MIGRATE_SYNC`: may block (`move_pages()`, `migrate_pages(2)`).
    Sync,
}

/// `enum migrate_reason`, the reasons the model uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateReason {
    /// `MR_COMPACTION`.
    Compaction,
    /// `MR_SYSCALL`: `move_pages()`, `migrate_pages()`, `mbind()`.
    Syscall,
    /// `MR_NUMA_MISPLACED`: NUMA balancing and tiering promotion; large
    /// folios are not split to retry.
    NumaMisplaced,
}

/// The migration flow of a kernel (model knob `mmlab.migrate_flow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateFlow {
    /// 6.3+: batches with one TLB flush each.
    Batched,
    /// ≤ 6.2 (the seed's 4.9): `unmap_and_move()` one folio at a time.
    PerFolio,
}

impl MigrateFlow {
    /// The knob value.
    pub fn name(self) -> &'static str {
        match self {
            MigrateFlow::Batched => "batched",
            MigrateFlow::PerFolio => "per-folio",
        }
    }

    /// The flow whose knob value is `s`.
    pub fn parse(s: &str) -> Option<MigrateFlow> {
        [MigrateFlow::Batched, MigrateFlow::PerFolio]
            .into_iter()
            .find(|f| f.name() == s)
    }
}

/// A kernel's migration configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrateConfig {
    /// Batched (6.3+) or per folio (older).
    pub flow: MigrateFlow,
    /// The copy engine of the multi-threaded mode (`single`: mainline,
    /// which has no such mode).
    pub copy_engine: CopyEngine,
    /// `vm.accel_page_copy` (the seed's sysctl, default 1): every huge page
    /// copy uses the multi-threaded mode. Only with a copy engine other
    /// than `single`.
    pub accel_page_copy: bool,
    /// `vm.limit_mt_num` (the 2019 follow-up's sysctl; the seed hard-codes
    /// 4): the most threads a copy uses.
    pub limit_mt_num: u32,
    /// `move_pages()` brackets its work with `lru_cache_disable()` (5.13+),
    /// which drains every online CPU's LRU caches through the workqueue and
    /// waits; older kernels call `migrate_prep()`, which drains only the
    /// CPUs with pending pages (see `lru_add_drain_all()`).
    pub lru_cache_disable: bool,
}

impl Default for MigrateConfig {
    /// Linux 6.18.
    fn default() -> Self {
        MigrateConfig {
            flow: MigrateFlow::Batched,
            copy_engine: CopyEngine::Single,
            accel_page_copy: true,
            limit_mt_num: 4,
            lru_cache_disable: true,
        }
    }
}

/// `struct migrate_pages_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrateStats {
    /// Base pages migrated.
    pub nr_succeeded: u64,
    /// Base pages that failed (untried ones are not counted).
    pub nr_failed_pages: u64,
    /// THPs migrated.
    pub nr_thp_succeeded: u64,
    /// THPs that failed (split ones included).
    pub nr_thp_failed: u64,
    /// THPs split.
    pub nr_thp_split: u64,
}

/// Why one folio did not migrate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateError {
    /// `-ENOMEM`: no destination folio on the target node.
    NoMem,
    /// `-EAGAIN`: locked, or referenced beyond its mappings.
    Again,
}

impl fmt::Display for MigrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MigrateError::NoMem => "ENOMEM",
            MigrateError::Again => "EAGAIN",
        })
    }
}

/// An isolated folio: its head and the user address of its first page
/// (the model's `folio->index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IsolatedFolio {
    /// Head pfn.
    pub head: Pfn,
    /// Address of the folio's first page.
    pub addr: u64,
}

/// One mapping of a folio found by the rmap walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    mm: usize,
    slot: Slot,
    /// Page index within the folio (0 for a PMD).
    idx: u32,
    /// The entry before the unmap.
    entry: u64,
}

impl Mapping {
    fn is_pmd(&self) -> bool {
        self.entry & PAGE_PSE != 0
    }

    fn refs(&self) -> u32 {
        if self.is_pmd() {
            1 << HPAGE_PMD_ORDER
        } else {
            1
        }
    }
}

/// A folio between the unmap and the move phases (`__migrate_folio_record()`).
#[derive(Clone, Debug)]
struct Unmapped {
    src: IsolatedFolio,
    order: u8,
    dst: Pfn,
    maps: Vec<Mapping>,
    copied: bool,
}

/// What a migration needs besides the folios: the allocator, the cost
/// context, every live address space (for the rmap walk) and the CPUs
/// that ran each (for TLB shootdowns), the configuration, the machine's
/// memory system, and which CPUs are idle.
pub struct MigrateCtx<'a> {
    /// The allocator.
    pub pa: &'a mut PageAlloc,
    /// The cost context of the migrating CPU.
    pub cx: &'a mut Cx,
    /// Every live address space.
    pub mms: Vec<&'a mut MmStruct>,
    /// Per address space, the CPUs that have run it (`mm_cpumask()`).
    pub mm_cpus: Vec<Vec<u32>>,
    /// The kernel's configuration.
    pub cfg: MigrateConfig,
    /// The memory system.
    pub hw: &'a NumaHw,
    /// Per CPU, true if idle.
    pub idle: &'a [bool],
    /// Per node, true while its package is in its deep idle state
    /// ([`NumaHw::package_idle_exit_ns`]); cleared when this migration
    /// queues work there (the package is then awake). Empty: none asleep.
    pub asleep: Vec<bool>,
    /// The multi-threaded copy mode is on for this migration
    /// (`MIGRATE_MT`: `vm.accel_page_copy` or `MPOL_MF_MOVE_MT`).
    pub mt: bool,
    costs: CostTable,
    pending_flush: BTreeSet<usize>,
    /// The last migration's statistics.
    pub stats: MigrateStats,
    /// The `mmap_lock` of the caller's address space (`mms[0]`), taken for
    /// reading around each page's lookup and isolation; `None`: not
    /// modelled (tests that drive the context alone).
    pub mmap_lock: Option<LockId>,
    /// The CPUs whose LRU add batch holds folios when the call starts
    /// ([`crate::swap::LruAddBatches::cpus_with_folios`]), which 4.x
    /// `lru_add_drain_all()` must visit; `None`: not known (tests that
    /// drive the context alone), taken to be the caller's CPU alone.
    pub lru_pending: Option<Vec<u32>>,
}

fn folio_order(pa: &PageAlloc, head: Pfn) -> u8 {
    pa.mem.order(head)
}

impl<'a> MigrateCtx<'a> {
    /// A context over `pa`, `cx` and the address spaces `mms` (with the
    /// CPUs that ran each in `mm_cpus`).
    pub fn new(
        pa: &'a mut PageAlloc,
        cx: &'a mut Cx,
        mms: Vec<&'a mut MmStruct>,
        mm_cpus: Vec<Vec<u32>>,
        cfg: MigrateConfig,
        hw: &'a NumaHw,
        idle: &'a [bool],
    ) -> MigrateCtx<'a> {
        let costs = cx.table().clone();
        MigrateCtx {
            pa,
            cx,
            mms,
            mm_cpus,
            cfg,
            hw,
            idle,
            asleep: Vec::new(),
            mt: false,
            costs,
            pending_flush: BTreeSet::new(),
            stats: MigrateStats::default(),
            mmap_lock: None,
            lru_pending: None,
        }
    }

    /// Models the anonymous rmap walk: every mapping of the folio `head` of
    /// `order` at `addr` in every address space.
    fn rmap_walk(&self, head: Pfn, order: u8, addr: u64) -> Vec<Mapping> {
        let mut maps = Vec::new();
        for (i, mm) in self.mms.iter().enumerate() {
            let Some(pmd) = mm.pgt.lookup(addr, Level::Pmd) else {
                continue;
            };
            let e = mm.pgt.get(pmd);
            if present(e) && e & PAGE_PSE != 0 {
                if e & PAGE_SPECIAL == 0 && entry_pfn(e) == head {
                    maps.push(Mapping {
                        mm: i,
                        slot: pmd,
                        idx: 0,
                        entry: e,
                    });
                }
                continue;
            }
            if !present(e) {
                continue;
            }
            for p in 0..1u32 << order {
                let a = addr + p as u64 * PAGE_SIZE;
                let Some(slot) = mm.pgt.lookup(a, Level::Pte) else {
                    continue;
                };
                let e = mm.pgt.get(slot);
                if present(e) && e & PAGE_SPECIAL == 0 && entry_pfn(e) == head.offset(p as u64) {
                    maps.push(Mapping {
                        mm: i,
                        slot,
                        idx: p,
                        entry: e,
                    });
                }
            }
        }
        maps
    }

    /// `page_vma_mapped_walk()`'s page-table lock for mapping `m`: the
    /// lock of the table holding its entry (`pte_lockptr()`, or
    /// `pmd_lockptr()` for a PMD leaf), kept while the walk stays in the
    /// same table of the same address space, as the walk does.
    fn ptl_for(&mut self, held: &mut Option<(usize, LockId)>, m: &Mapping) {
        let want = (m.mm, crate::memory::pte_lockptr(m.slot));
        if *held == Some(want) {
            return;
        }
        self.ptl_release(held);
        self.cx.lock(want.1);
        *held = Some(want);
    }

    fn ptl_release(&mut self, held: &mut Option<(usize, LockId)>) {
        if let Some((_, l)) = held.take() {
            self.cx.unlock(l);
        }
    }

    /// Models `try_to_migrate()`: replaces every mapping of the folio with a
    /// migration entry and drops the mappings' references; the TLB flush is
    /// deferred (`TTU_BATCH_FLUSH`).
    fn try_to_migrate(&mut self, f: IsolatedFolio, order: u8) -> Vec<Mapping> {
        let maps = self.rmap_walk(f.head, order, f.addr);
        let mut refs = 0;
        let mut entire = 0;
        let mut held = None;
        for m in &maps {
            self.ptl_for(&mut held, m);
            self.cx.charge(Cost::MigrateUnmap);
            let keep = m.entry & (PAGE_RW | PAGE_ACCESSED | PAGE_DIRTY | PAGE_PSE);
            let src = f.head.offset(m.idx as u64);
            self.mms[m.mm]
                .pgt
                .set(m.slot, mk_entry(src, SWP_MIGRATION | keep));
            refs += m.refs();
            entire += m.is_pmd() as u32;
            self.pending_flush.insert(m.mm);
        }
        self.ptl_release(&mut held);
        let mem = &mut self.pa.mem;
        let head = mem.idx(f.head);
        mem.set_refcount(head, mem.refcount(head) - refs);
        mem.set_entire_mapcount(head, mem.entire_mapcount(head) - entire);
        maps
    }

    /// Models `remove_migration_ptes(src, to)`: every migration entry of
    /// `maps` becomes a mapping of the folio at `to` again, with the
    /// original bits; `to` gains the references.
    fn remove_migration_ptes(&mut self, maps: &[Mapping], to: Pfn) {
        let mut refs = 0;
        let mut entire = 0;
        let mut held = None;
        for m in maps {
            self.ptl_for(&mut held, m);
            self.cx.charge(Cost::MigrateRemap);
            let e = self.mms[m.mm].pgt.get(m.slot);
            assert!(
                is_migration_entry(e),
                "remove_migration_ptes: no migration entry at {:?}",
                m.slot
            );
            let bits = m.entry & !crate::pgtable::entry_pfn_mask();
            self.mms[m.mm]
                .pgt
                .set(m.slot, mk_entry(to.offset(m.idx as u64), bits));
            refs += m.refs();
            entire += m.is_pmd() as u32;
        }
        self.ptl_release(&mut held);
        let mem = &mut self.pa.mem;
        let to = mem.idx(to);
        mem.set_refcount(to, mem.refcount(to) + refs);
        mem.set_entire_mapcount(to, mem.entire_mapcount(to) + entire);
    }

    /// Models `try_to_unmap_flush()`: one flush of the local TLB and one
    /// IPI to every other CPU that ran an address space with a deferred
    /// flush.
    fn try_to_unmap_flush(&mut self) {
        if self.pending_flush.is_empty() {
            return;
        }
        let me = self.cx.cpu.0;
        let mut cpus: BTreeSet<u32> = BTreeSet::new();
        for &mm in &self.pending_flush {
            cpus.extend(self.mm_cpus.get(mm).into_iter().flatten().copied());
        }
        cpus.remove(&me);
        self.pending_flush.clear();
        self.cx.charge(Cost::TlbFlushLocal);
        self.pa.vmstat.count(VmEvent::NR_TLB_LOCAL_FLUSH_ALL, 1);
        if !cpus.is_empty() {
            self.cx.charge_n(Cost::TlbFlushIpi, cpus.len() as u64);
            self.pa.vmstat.count(VmEvent::NR_TLB_REMOTE_FLUSH, 1);
            self.pa
                .vmstat
                .count(VmEvent::NR_TLB_REMOTE_FLUSH_RECEIVED, cpus.len() as u64);
        }
    }

    /// Models `migrate_folio_unmap()`: allocates the destination on
    /// `target` (`alloc_migration_target()` with `__GFP_THISNODE`),
    /// try-locks the source and unmaps it.
    fn migrate_folio_unmap(
        &mut self,
        f: IsolatedFolio,
        target: NodeId,
    ) -> Result<Unmapped, MigrateError> {
        let order = folio_order(self.pa, f.head);
        let dst = self
            .pa
            .alloc_pages_node(
                self.cx,
                target,
                Gfp::HIGHUSER_MOVABLE.or(Gfp::THISNODE),
                order,
            )
            .map_err(|_| MigrateError::NoMem)?;
        // A new folio: no mapping references it yet.
        self.pa.mem.set_refcount(dst, 0);
        self.pa.mem.set_entire_mapcount(dst, 0);
        self.pa.mem.set_folio_extra_refs(dst, 0);
        let flags = self.pa.mem.flags(f.head);
        if flags & PG_LOCKED != 0 {
            self.pa.free_pages(self.cx, dst, order);
            return Err(MigrateError::Again);
        }
        self.pa.mem.set_flags(f.head, flags | PG_LOCKED);
        let maps = self.try_to_migrate(f, order);
        Ok(Unmapped {
            src: f,
            order,
            dst,
            maps,
            copied: false,
        })
    }

    /// The copy of one folio of `order` from `src` to `dst`, by the engine
    /// the configuration and the mode choose.
    fn copy_folio(&mut self, src: Pfn, dst: Pfn, order: u8) -> CopyCost {
        let job = CopyJob {
            bytes: PAGE_SIZE << order,
            src: self.pa.pfn_to_nid(src),
            dst: self.pa.pfn_to_nid(dst),
        };
        let model = self.copy_model();
        let cpu = self.cx.cpu;
        let huge = order >= HPAGE_PMD_ORDER;
        let engine = if self.mt {
            self.cfg.copy_engine
        } else {
            CopyEngine::Single
        };
        match engine {
            CopyEngine::Mt if huge => model.copy_page_mt(cpu, &job, self.cfg.limit_mt_num),
            CopyEngine::Adaptive if huge => model.copy_adaptive(cpu, &job),
            CopyEngine::Batched => model.copy_batch_mt(cpu, &[job], self.cfg.limit_mt_num),
            CopyEngine::Dma => model.copy_dma(cpu, &[job]),
            _ => model.copy_single(cpu, &job),
        }
    }

    fn charge_copy(&mut self, c: CopyCost) {
        self.cx.charge_ns(c.ns);
        self.wake_packages(&c.helpers);
        self.pa.vmstat.count(VmEvent::MIGRATE_COPY_NS, c.ns);
        for &h in &c.helpers {
            if h != self.cx.cpu.0 {
                self.cx.helper_work(crate::types::VcpuId(h), c.helper_ns);
                self.pa
                    .vmstat
                    .count(VmEvent::MIGRATE_COPY_HELPER_NS, c.helper_ns);
            }
        }
        if c.dma {
            self.pa.vmstat.count(VmEvent::MIGRATE_COPY_DMA, 1);
        } else if c.threads > 1 {
            self.pa.vmstat.count(VmEvent::MIGRATE_COPY_MT, 1);
        }
    }

    /// True if the unmapped folio holds no reference but the isolation
    /// (`folio_ref_count() == folio_expected_ref_count() + 1`).
    fn refs_expected(&self, u: &Unmapped) -> bool {
        self.pa.mem.refcount(u.src.head) == 0 && self.pa.mem.folio_extra_refs(u.src.head) == 0
    }

    /// The 2025 series' batched copy: the data of every movable folio of
    /// the batch at once, before their mappings are restored.
    fn copy_batch(&mut self, unmapped: &mut [Unmapped]) {
        let mut jobs = Vec::new();
        for u in unmapped.iter_mut() {
            if self.refs_expected(u) {
                jobs.push(CopyJob {
                    bytes: PAGE_SIZE << u.order,
                    src: self.pa.pfn_to_nid(u.src.head),
                    dst: self.pa.pfn_to_nid(u.dst),
                });
                u.copied = true;
            }
        }
        if jobs.is_empty() {
            return;
        }
        let model = self.copy_model();
        let c = match self.cfg.copy_engine {
            CopyEngine::Dma => model.copy_dma(self.cx.cpu, &jobs),
            _ => model.copy_batch_mt(self.cx.cpu, &jobs, self.cfg.limit_mt_num),
        };
        self.charge_copy(c);
    }

    /// Models `migrate_folio_move()`: the refcount check, the copy of data
    /// and flags, the mappings restored to the destination, the source
    /// freed. On `-EAGAIN` nothing has changed.
    fn migrate_folio_move(&mut self, u: &Unmapped) -> Result<(), MigrateError> {
        if !self.refs_expected(u) {
            return Err(MigrateError::Again);
        }
        if !u.copied {
            let c = self.copy_folio(u.src.head, u.dst, u.order);
            self.charge_copy(c);
        }
        self.cx.charge(Cost::MigrateFolio);
        // folio_migrate_flags(): the partially-mapped state travels.
        let sflags = self.pa.mem.flags(u.src.head);
        if u.order > 0 {
            self.pa.vmstat.count_mthp(u.order, MthpStat::NrAnon, 1);
            if sflags & PG_PARTIALLY_MAPPED != 0 {
                let d = self.pa.mem.flags(u.dst);
                self.pa.mem.set_flags(u.dst, d | PG_PARTIALLY_MAPPED);
                self.pa
                    .vmstat
                    .count_mthp(u.order, MthpStat::NrAnonPartiallyMapped, 1);
            }
        }
        self.remove_migration_ptes(&u.maps, u.dst);
        self.pa.mem.set_flags(u.src.head, sflags & !PG_LOCKED);
        folio_undo_large_anon(self.pa, u.src.head, u.order);
        self.pa.free_pages(self.cx, u.src.head, u.order);
        Ok(())
    }

    /// Models `migrate_folio_undo_src()` and `migrate_folio_undo_dst()`:
    /// the source mapped again and unlocked, the destination freed.
    fn migrate_folio_undo(&mut self, u: &Unmapped) {
        self.remove_migration_ptes(&u.maps, u.src.head);
        let f = self.pa.mem.flags(u.src.head);
        self.pa.mem.set_flags(u.src.head, f & !PG_LOCKED);
        self.pa.free_pages(self.cx, u.dst, u.order);
    }

    /// Models `try_split_folio()` (`split_folio_to_list()`): splits every
    /// PMD mapping of the large folio, then the folio into base pages, each
    /// keeping its own mappings; base pages nobody maps are freed. Returns
    /// the new folios, or `None` if the folio cannot be split (locked,
    /// pinned, or referenced from outside the walked address spaces).
    fn try_split_folio(&mut self, f: IsolatedFolio) -> Option<Vec<IsolatedFolio>> {
        let order = folio_order(self.pa, f.head);
        let head = f.head;
        if self.pa.mem.flags(head) & PG_LOCKED != 0 || self.pa.mem.folio_extra_refs(head) != 0 {
            return None;
        }
        let maps = self.rmap_walk(head, order, f.addr);
        let total: u32 = maps.iter().map(Mapping::refs).sum();
        if total != self.pa.mem.refcount(head) {
            return None;
        }
        for m in maps.iter().filter(|m| m.is_pmd()) {
            crate::memory::split_huge_pmd(self.pa, self.cx, self.mms[m.mm], m.slot);
        }
        let mut counts = vec![0u32; 1 << order];
        for m in self.rmap_walk(head, order, f.addr) {
            counts[m.idx as usize] += 1;
        }
        folio_undo_large_anon(self.pa, head, order);
        self.pa.split_page(head, order);
        let mut out = Vec::new();
        for (i, &n) in counts.iter().enumerate() {
            let p = head.offset(i as u64);
            self.pa.mem.set_refcount(p, n);
            self.pa.mem.set_entire_mapcount(p, 0);
            if n == 0 {
                self.pa.free_pages(self.cx, p, 0);
            } else {
                out.push(IsolatedFolio {
                    head: p,
                    addr: f.addr + i as u64 * PAGE_SIZE,
                });
            }
        }
        Some(out)
    }

    /// Models `migrate_pages_batch()` (6.3+): unmap every folio of `from`
    /// (up to `nr_pass` passes over those that answer `-EAGAIN`), one TLB
    /// flush, move them (up to `nr_pass` passes), undo the rest. Folios
    /// that fail for good go to `ret`; with `-ENOMEM` a large folio is
    /// split into `split` (if given and the reason allows), else the
    /// batch stops. Returns the number of folios that failed, or
    /// `Err(NoMem)`.
    #[allow(clippy::too_many_arguments)]
    fn migrate_pages_batch(
        &mut self,
        from: &mut Vec<IsolatedFolio>,
        target: NodeId,
        reason: MigrateReason,
        ret: &mut Vec<IsolatedFolio>,
        mut split: Option<&mut Vec<IsolatedFolio>>,
        stats: &mut MigrateStats,
        nr_pass: u32,
    ) -> Result<u64, MigrateError> {
        let nosplit = reason == MigrateReason::NumaMisplaced;
        let mut nr_failed = 0u64;
        let mut unmapped: Vec<Unmapped> = Vec::new();
        let mut rc_saved = None;
        let mut retry = 1u64;
        let (mut thp_retry, mut nr_retry_pages) = (0u64, 0u64);
        let mut pass = 0;
        'unmap: while pass < nr_pass && retry > 0 {
            retry = 0;
            thp_retry = 0;
            nr_retry_pages = 0;
            let list = std::mem::take(from);
            let mut it = list.into_iter();
            while let Some(f) = it.next() {
                let order = folio_order(self.pa, f.head);
                let nr_pages = 1u64 << order;
                let is_thp = (order == HPAGE_PMD_ORDER) as u64;
                match self.migrate_folio_unmap(f, target) {
                    Ok(u) => unmapped.push(u),
                    Err(MigrateError::Again) => {
                        retry += 1;
                        thp_retry += is_thp;
                        nr_retry_pages += nr_pages;
                        from.push(f);
                    }
                    Err(MigrateError::NoMem) => {
                        nr_failed += 1;
                        stats.nr_thp_failed += is_thp;
                        if order > 0 && !nosplit {
                            if let Some(sp) = split.as_deref_mut() {
                                if let Some(pages) = self.try_split_folio(f) {
                                    stats.nr_thp_split += is_thp;
                                    sp.extend(pages);
                                    continue;
                                }
                            }
                        }
                        stats.nr_failed_pages += nr_pages + nr_retry_pages;
                        stats.nr_thp_failed += thp_retry;
                        rc_saved = Some(MigrateError::NoMem);
                        // The folio and the untried ones stay on the list.
                        from.push(f);
                        from.extend(it);
                        break 'unmap;
                    }
                }
            }
            pass += 1;
        }
        if rc_saved.is_none() {
            nr_failed += retry;
            stats.nr_thp_failed += thp_retry;
            stats.nr_failed_pages += nr_retry_pages;
        }
        // move:
        self.try_to_unmap_flush();
        if self.mt && self.cfg.copy_engine.is_batch() {
            self.copy_batch(&mut unmapped);
        }
        let mut retry = 1u64;
        let (mut thp_retry, mut nr_retry_pages) = (0u64, 0u64);
        let mut pass = 0;
        while pass < nr_pass && retry > 0 && !unmapped.is_empty() {
            (retry, thp_retry, nr_retry_pages) = self.migrate_folios_move(&mut unmapped, stats);
            pass += 1;
        }
        nr_failed += retry.min(unmapped.len() as u64);
        if !unmapped.is_empty() {
            stats.nr_thp_failed += thp_retry;
            stats.nr_failed_pages += nr_retry_pages;
        }
        // out: clean up what is left.
        self.migrate_folios_undo(unmapped, ret);
        match rc_saved {
            Some(e) => Err(e),
            None => Ok(nr_failed),
        }
    }

    /// Models `migrate_folios_move()` (split out of `migrate_pages_batch()`
    /// before 6.18): one pass moving every unmapped folio; those that answer
    /// `-EAGAIN` stay in `unmapped`. Returns this pass's (retry, THP retry,
    /// retried pages).
    fn migrate_folios_move(
        &mut self,
        unmapped: &mut Vec<Unmapped>,
        stats: &mut MigrateStats,
    ) -> (u64, u64, u64) {
        let (mut retry, mut thp_retry, mut nr_retry_pages) = (0u64, 0u64, 0u64);
        for u in std::mem::take(unmapped) {
            let nr_pages = 1u64 << u.order;
            let is_thp = (u.order == HPAGE_PMD_ORDER) as u64;
            match self.migrate_folio_move(&u) {
                Ok(()) => {
                    stats.nr_succeeded += nr_pages;
                    stats.nr_thp_succeeded += is_thp;
                }
                Err(_) => {
                    retry += 1;
                    thp_retry += is_thp;
                    nr_retry_pages += nr_pages;
                    unmapped.push(u);
                }
            }
        }
        (retry, thp_retry, nr_retry_pages)
    }

    /// Models `migrate_folios_undo()`: each folio still unmapped is mapped
    /// again at its source (its destination freed) and put on `ret`.
    fn migrate_folios_undo(&mut self, unmapped: Vec<Unmapped>, ret: &mut Vec<IsolatedFolio>) {
        for u in unmapped {
            self.migrate_folio_undo(&u);
            ret.push(u.src);
        }
    }

    /// Models `migrate_pages_sync()`: the batch asynchronously first
    /// ([`NR_MAX_MIGRATE_ASYNC_RETRY`] passes, failures not counted), then
    /// every folio left one at a time ([`NR_MAX_MIGRATE_SYNC_RETRY`]).
    fn migrate_pages_sync(
        &mut self,
        from: &mut Vec<IsolatedFolio>,
        target: NodeId,
        reason: MigrateReason,
        ret: &mut Vec<IsolatedFolio>,
        split: &mut Vec<IsolatedFolio>,
        stats: &mut MigrateStats,
    ) -> Result<u64, MigrateError> {
        let mut astats = MigrateStats::default();
        let mut folios = Vec::new();
        let rc = self.migrate_pages_batch(
            from,
            target,
            reason,
            &mut folios,
            Some(split),
            &mut astats,
            NR_MAX_MIGRATE_ASYNC_RETRY,
        );
        stats.nr_succeeded += astats.nr_succeeded;
        stats.nr_thp_succeeded += astats.nr_thp_succeeded;
        stats.nr_thp_split += astats.nr_thp_split;
        if let Err(e) = rc {
            stats.nr_failed_pages += astats.nr_failed_pages;
            stats.nr_thp_failed += astats.nr_thp_failed;
            ret.append(&mut folios);
            return Err(e);
        }
        stats.nr_thp_failed += astats.nr_thp_split;
        let mut nr_failed = astats.nr_thp_split;
        from.append(&mut folios);
        let all = std::mem::take(from);
        let mut it = all.into_iter();
        while let Some(f) = it.next() {
            let mut one = vec![f];
            let rc = self.migrate_pages_batch(
                &mut one,
                target,
                reason,
                ret,
                Some(split),
                stats,
                NR_MAX_MIGRATE_SYNC_RETRY,
            );
            ret.append(&mut one);
            match rc {
                Err(e) => {
                    from.extend(it);
                    return Err(e);
                }
                Ok(n) => nr_failed += n,
            }
        }
        Ok(nr_failed)
    }

    /// Models `migrate_pages()` of 6.18 for `from` to `target`: no hugetlb
    /// folios exist in the model; the rest in chunks of
    /// [`NR_MAX_BATCHED_MIGRATION`] base pages, asynchronously batched or
    /// through [`MigrateCtx::migrate_pages_sync`]; folios split on the way
    /// get one asynchronous pass. Under [`MigrateFlow::PerFolio`] the older
    /// flow runs instead. Returns the folios not migrated (mapped as
    /// before) and the number of failures (or `Err(NoMem)`); counts
    /// `pgmigrate_*` and `thp_migration_*`.
    pub fn migrate_pages(
        &mut self,
        from: Vec<IsolatedFolio>,
        target: NodeId,
        mode: MigrateMode,
        reason: MigrateReason,
    ) -> (Result<u64, MigrateError>, Vec<IsolatedFolio>) {
        let mut stats = MigrateStats::default();
        let (rc, left) = match self.cfg.flow {
            MigrateFlow::Batched => {
                self.migrate_pages_batched(from, target, mode, reason, &mut stats)
            }
            MigrateFlow::PerFolio => self.migrate_pages_per_folio(from, target, reason, &mut stats),
        };
        let v = &mut self.pa.vmstat;
        v.count(VmEvent::MM_MIGRATE_PAGES, 1);
        v.count(VmEvent::PGMIGRATE_SUCCESS, stats.nr_succeeded);
        v.count(VmEvent::PGMIGRATE_FAIL, stats.nr_failed_pages);
        v.count(VmEvent::THP_MIGRATION_SUCCESS, stats.nr_thp_succeeded);
        v.count(VmEvent::THP_MIGRATION_FAIL, stats.nr_thp_failed);
        v.count(VmEvent::THP_MIGRATION_SPLIT, stats.nr_thp_split);
        self.stats = stats;
        let rc = if left.is_empty() { Ok(0) } else { rc };
        (rc, left)
    }

    fn migrate_pages_batched(
        &mut self,
        from: Vec<IsolatedFolio>,
        target: NodeId,
        mode: MigrateMode,
        reason: MigrateReason,
        stats: &mut MigrateStats,
    ) -> (Result<u64, MigrateError>, Vec<IsolatedFolio>) {
        let mut from = std::collections::VecDeque::from(from);
        let mut ret = Vec::new();
        let mut rc_gather = 0u64;
        while !from.is_empty() {
            let mut nr_pages = 0;
            let mut folios = Vec::new();
            while let Some(f) = from.pop_front() {
                nr_pages += 1u64 << folio_order(self.pa, f.head);
                folios.push(f);
                if nr_pages >= NR_MAX_BATCHED_MIGRATION {
                    break;
                }
            }
            let mut split = Vec::new();
            let rc = if mode == MigrateMode::Async {
                self.migrate_pages_batch(
                    &mut folios,
                    target,
                    reason,
                    &mut ret,
                    Some(&mut split),
                    stats,
                    NR_MAX_MIGRATE_PAGES_RETRY,
                )
            } else {
                self.migrate_pages_sync(&mut folios, target, reason, &mut ret, &mut split, stats)
            };
            ret.append(&mut folios);
            match rc {
                Err(e) => {
                    ret.append(&mut split);
                    ret.extend(from);
                    return (Err(e), ret);
                }
                Ok(n) => rc_gather += n,
            }
            if !split.is_empty() {
                let _ =
                    self.migrate_pages_batch(&mut split, target, reason, &mut ret, None, stats, 1);
                ret.append(&mut split);
            }
        }
        (Ok(rc_gather), ret)
    }

    /// Models `migrate_pages()` of 4.x–6.2 with `unmap_and_move()`: each
    /// folio unmapped (its TLB flushed at once), moved and remapped before
    /// the next; up to [`NR_MAX_MIGRATE_PAGES_RETRY`] passes over the
    /// folios that answer `-EAGAIN`; a THP without a destination is split
    /// and its pages join the list.
    fn migrate_pages_per_folio(
        &mut self,
        from: Vec<IsolatedFolio>,
        target: NodeId,
        reason: MigrateReason,
        stats: &mut MigrateStats,
    ) -> (Result<u64, MigrateError>, Vec<IsolatedFolio>) {
        let mut from = from;
        let mut ret = Vec::new();
        let mut nr_failed = 0u64;
        let mut retry = 1u64;
        let (mut thp_retry, mut nr_retry_pages) = (0u64, 0u64);
        let mut pass = 0;
        while pass < NR_MAX_MIGRATE_PAGES_RETRY && retry > 0 {
            retry = 0;
            thp_retry = 0;
            nr_retry_pages = 0;
            let mut list = std::collections::VecDeque::from(std::mem::take(&mut from));
            while let Some(f) = list.pop_front() {
                let order = folio_order(self.pa, f.head);
                let nr_pages = 1u64 << order;
                let is_thp = (order == HPAGE_PMD_ORDER) as u64;
                let rc = match self.migrate_folio_unmap(f, target) {
                    Ok(u) => {
                        self.try_to_unmap_flush();
                        match self.migrate_folio_move(&u) {
                            Ok(()) => Ok(()),
                            Err(e) => {
                                self.migrate_folio_undo(&u);
                                Err(e)
                            }
                        }
                    }
                    Err(e) => Err(e),
                };
                match rc {
                    Ok(()) => {
                        stats.nr_succeeded += nr_pages;
                        stats.nr_thp_succeeded += is_thp;
                    }
                    Err(MigrateError::Again) => {
                        retry += 1;
                        thp_retry += is_thp;
                        nr_retry_pages += nr_pages;
                        from.push(f);
                    }
                    Err(MigrateError::NoMem) => {
                        if order > 0 && reason != MigrateReason::NumaMisplaced {
                            if let Some(pages) = self.try_split_folio(f) {
                                stats.nr_thp_failed += is_thp;
                                stats.nr_thp_split += is_thp;
                                nr_failed += 1;
                                for p in pages.into_iter().rev() {
                                    list.push_front(p);
                                }
                                continue;
                            }
                        }
                        stats.nr_failed_pages += nr_pages + nr_retry_pages;
                        stats.nr_thp_failed += is_thp + thp_retry;
                        ret.push(f);
                        ret.extend(list);
                        ret.append(&mut from);
                        return (Err(MigrateError::NoMem), ret);
                    }
                }
            }
            pass += 1;
        }
        nr_failed += retry;
        stats.nr_thp_failed += thp_retry;
        stats.nr_failed_pages += nr_retry_pages;
        ret.append(&mut from);
        (Ok(nr_failed), ret)
    }

    /// Models `add_folio_for_migration()` (6.12+): finds the folio mapped at
    /// `addr` in address space `mm` and isolates it onto `list` (returns 1),
    /// or says it is already on `node` (0), or why not (a negative errno).
    fn add_folio_for_migration(
        &mut self,
        mm: usize,
        addr: u64,
        node: NodeId,
        list: &mut Vec<IsolatedFolio>,
        migrate_all: bool,
    ) -> i32 {
        // mmap_read_lock() .. mmap_read_unlock() around each page.
        let lock = if mm == 0 { self.mmap_lock } else { None };
        if let Some(l) = lock {
            self.cx.lock_read(l);
        }
        let r = self.add_folio_for_migration_locked(mm, addr, node, list, migrate_all);
        if let Some(l) = lock {
            self.cx.unlock_read(l);
        }
        r
    }

    fn add_folio_for_migration_locked(
        &mut self,
        mm: usize,
        addr: u64,
        node: NodeId,
        list: &mut Vec<IsolatedFolio>,
        migrate_all: bool,
    ) -> i32 {
        let Some(_vma) = self.mms[mm].vma_lookup(self.cx, addr) else {
            return -errno::EFAULT;
        };
        let pgt = &self.mms[mm].pgt;
        let entry = match pgt.lookup(addr, Level::Pmd).map(|s| pgt.get(s)) {
            Some(e) if present(e) && e & PAGE_PSE != 0 => Some(e),
            Some(e) if present(e) => pgt
                .lookup(addr, Level::Pte)
                .map(|s| pgt.get(s))
                .filter(|&e| present(e)),
            _ => None,
        };
        let Some(e) = entry else {
            return -errno::ENOENT;
        };
        if e & PAGE_SPECIAL != 0 {
            return -errno::EFAULT;
        }
        let pfn = if e & PAGE_PSE != 0 {
            entry_pfn(e).offset((addr >> 12) & 511)
        } else {
            entry_pfn(e)
        };
        let head = self.pa.mem.compound_head(pfn);
        debug_assert!(self.pa.mem.flags(head) & PG_HEAD != 0);
        if self.pa.pfn_to_nid(head) == node {
            return 0;
        }
        // folio_maybe_mapped_shared(): mapped by more than one page table
        // entry per page (the model's refcount counts the mappings).
        let order = folio_order(self.pa, head);
        let shared = if order == HPAGE_PMD_ORDER && e & PAGE_PSE != 0 {
            self.pa.mem.entire_mapcount(head) > 1
        } else {
            self.pa.mem.refcount(head) > 1 << order
        };
        if shared && !migrate_all {
            return -errno::EACCES;
        }
        self.cx.charge(Cost::MigrateIsolate);
        if list.iter().any(|f| f.head == head) {
            // folio_isolate_lru() fails: already isolated.
            return -errno::EBUSY;
        }
        let addr0 = addr - (pfn.0 - head.0) * PAGE_SIZE;
        list.push(IsolatedFolio { head, addr: addr0 });
        1
    }

    /// Models `move_pages_and_store_status()`: migrates `list` to `node`
    /// (`do_move_pages_to_node()`: `MIGRATE_SYNC`, `MR_SYSCALL`) and stores
    /// `node` as the status of `start..i`, or returns the number not
    /// migrated plus those not tried (`nr_pages - i`).
    fn move_pages_and_store_status(
        &mut self,
        node: NodeId,
        list: &mut Vec<IsolatedFolio>,
        status: &mut [i32],
        start: usize,
        i: usize,
    ) -> i64 {
        if list.is_empty() {
            return 0;
        }
        let folios = std::mem::take(list);
        let (rc, _left) =
            self.migrate_pages(folios, node, MigrateMode::Sync, MigrateReason::Syscall);
        // putback_movable_pages(): the folios left are mapped as before.
        match rc {
            Ok(0) => {
                for s in &mut status[start..i] {
                    *s = node.0 as i32;
                }
                0
            }
            Ok(n) => n as i64 + (status.len() - i) as i64,
            Err(_) => -(errno::ENOMEM as i64),
        }
    }

    /// Models `kernel_move_pages()` for the calling process's address space
    /// `mm` (`pid` 0): moves the page at each `pages[i]` to `nodes[i]` and
    /// stores the node (or a negative errno) in `status[i]`; with `nodes`
    /// `None`, only reports where each page is (`do_pages_stat()`).
    /// Returns 0, the number of pages not migrated, or a negative errno
    /// (status entries of a chunk that failed are left as they were, as the
    /// kernel leaves the user's array).
    pub fn move_pages(
        &mut self,
        mm: usize,
        pages: &[u64],
        nodes: Option<&[u16]>,
        status: &mut [i32],
        flags: i32,
    ) -> i64 {
        self.cx.charge(Cost::SyscallEntry);
        let mut allowed = MPOL_MF_MOVE | MPOL_MF_MOVE_ALL;
        if self.cfg.copy_engine != CopyEngine::Single {
            allowed |= MPOL_MF_MOVE_MT;
        }
        if flags & !allowed != 0 || status.len() != pages.len() {
            return -(errno::EINVAL as i64);
        }
        let Some(nodes) = nodes else {
            self.do_pages_stat(mm, pages, status);
            return 0;
        };
        if nodes.len() != pages.len() {
            return -(errno::EINVAL as i64);
        }
        self.mt = self.cfg.copy_engine != CopyEngine::Single
            && (self.cfg.accel_page_copy || flags & MPOL_MF_MOVE_MT != 0);
        self.lru_add_drain_all();
        let r = self.do_pages_move(mm, pages, nodes, status, flags);
        self.mt = false;
        r
    }

    /// The cost of draining the per-CPU LRU caches before isolating pages.
    ///
    /// 5.13+ (`lru_cache_disable()`): a drain work item queued on every
    /// online CPU, which the caller waits for (idle CPUs wake up for it).
    ///
    /// 4.x (`migrate_prep()` → `lru_add_drain_all()`): a work item only on
    /// the CPUs whose batches hold pages ([`Self::lru_pending`]), then
    /// `flush_work()` on each in turn. When only the caller's CPU has one,
    /// the caller sleeps until its own kworker has run: two context
    /// switches. When another CPU has one, the caller waits for that CPU
    /// too: an idle CPU leaves its idle state for the IPI
    /// (`workqueue_wakeup_ns`) while the caller's own item runs, and the
    /// caller, asleep in `flush_work()` meanwhile, is woken when the last
    /// item is done (a second `workqueue_wakeup_ns`, as in the 5.13+ path).
    /// A CPU whose whole package is asleep ([`Self::asleep`]) leaves the
    /// package's idle state instead ([`CopyModel::helpers_wakeup_ns`]); the
    /// package is awake afterwards.
    /// Deviation: the work items on several other CPUs run in parallel and
    /// cost one wake-up between them; a busy CPU's item is charged like an
    /// idle one's.
    fn lru_add_drain_all(&mut self) {
        let me = self.cx.cpu.0;
        let cpus = if self.cfg.lru_cache_disable {
            (0..self.pa.nr_cpus()).collect()
        } else {
            self.lru_pending.clone().unwrap_or_else(|| vec![me])
        };
        if cpus.is_empty() {
            return;
        }
        self.cx.charge_n(Cost::WorkqueueQueue, cpus.len() as u64);
        if cpus.iter().any(|&c| c != me) {
            let others: Vec<u32> = cpus.into_iter().filter(|&c| c != me).collect();
            let ns = self.copy_model().helpers_wakeup_ns(&others);
            self.cx.charge_ns(ns);
            self.cx.charge(Cost::WorkqueueWakeup);
            self.wake_packages(&others);
        } else {
            self.cx.charge(Cost::ContextSwitch);
        }
    }

    /// The copy model over this migration's machine and idle state.
    fn copy_model(&self) -> CopyModel<'_> {
        CopyModel {
            pa: self.pa,
            hw: self.hw,
            costs: &self.costs,
            idle: self.idle,
            asleep: &self.asleep,
        }
    }

    /// Work has been queued on `cpus`: their packages are awake now.
    fn wake_packages(&mut self, cpus: &[u32]) {
        for &c in cpus {
            let node = self.pa.cpu_to_node(crate::types::VcpuId(c)).0 as usize;
            if let Some(a) = self.asleep.get_mut(node) {
                *a = false;
            }
        }
    }

    /// Models `do_pages_move()`: `move_pages(2)` with a target node per
    /// page. Consecutive pages bound for the same node are isolated onto
    /// one list and migrated together, so that one call moving many pages
    /// costs one migration pass (`migrate_pages()`) per run of equal
    /// targets rather than one per page; each page's status is its node or
    /// a negative errno.
    fn do_pages_move(
        &mut self,
        mm: usize,
        pages: &[u64],
        nodes: &[u16],
        status: &mut [i32],
        flags: i32,
    ) -> i64 {
        let mut list = Vec::new();
        let mut current: Option<NodeId> = None;
        let mut start = 0;
        let mut err: i64 = 0;
        let mut i = 0;
        while i < pages.len() {
            let node = nodes[i] as usize;
            if node >= self.pa.nr_nodes() {
                err = -(errno::ENODEV as i64);
                break;
            }
            let node = NodeId(node as u16);
            match current {
                None => {
                    current = Some(node);
                    start = i;
                }
                Some(c) if c != node => {
                    let e = self.move_pages_and_store_status(c, &mut list, status, start, i);
                    if e != 0 {
                        return e;
                    }
                    start = i;
                    current = Some(node);
                }
                Some(_) => {}
            }
            let r = self.add_folio_for_migration(
                mm,
                pages[i],
                node,
                &mut list,
                flags & MPOL_MF_MOVE_ALL != 0,
            );
            if r > 0 {
                i += 1;
                continue;
            }
            status[i] = if r == 0 { node.0 as i32 } else { r };
            let e = self.move_pages_and_store_status(node, &mut list, status, start, i);
            if e != 0 {
                return if e > 0 { e - 1 } else { e };
            }
            current = None;
            i += 1;
        }
        if let Some(c) = current {
            let e1 = self.move_pages_and_store_status(c, &mut list, status, start, i);
            if err >= 0 {
                err = e1;
            }
        }
        err
    }

    /// Models `do_pages_stat()`: the node of each page, `-ENOENT` if
    /// not mapped, `-EFAULT` without a VMA or for the zero page.
    fn do_pages_stat(&mut self, mm: usize, pages: &[u64], status: &mut [i32]) {
        // mmap_read_lock() around each chunk of DO_PAGES_STAT_CHUNK_NR.
        let lock = if mm == 0 { self.mmap_lock } else { None };
        for (c, chunk) in pages.chunks(DO_PAGES_STAT_CHUNK_NR).enumerate() {
            if let Some(l) = lock {
                self.cx.lock_read(l);
            }
            let at = c * DO_PAGES_STAT_CHUNK_NR;
            self.do_pages_stat_array(mm, chunk, &mut status[at..at + chunk.len()]);
            if let Some(l) = lock {
                self.cx.unlock_read(l);
            }
        }
    }

    /// Models `do_pages_stat_array()` for one chunk (under `mmap_lock`).
    fn do_pages_stat_array(&mut self, mm: usize, pages: &[u64], status: &mut [i32]) {
        for (i, &addr) in pages.iter().enumerate() {
            status[i] = match self.mms[mm].vma_lookup(self.cx, addr) {
                None => -errno::EFAULT,
                Some(_) => match self.mapped_pfn(mm, addr) {
                    None => -errno::ENOENT,
                    Some(None) => -errno::EFAULT,
                    Some(Some(p)) => self.pa.pfn_to_nid(p).0 as i32,
                },
            };
        }
    }

    /// The pfn mapped at `addr` in `mm`: `None` if nothing is mapped,
    /// `Some(None)` for the zero pages.
    fn mapped_pfn(&self, mm: usize, addr: u64) -> Option<Option<Pfn>> {
        let pgt = &self.mms[mm].pgt;
        let pmd = pgt.lookup(addr, Level::Pmd)?;
        let e = pgt.get(pmd);
        let (e, off) = if present(e) && e & PAGE_PSE != 0 {
            (e, (addr >> 12) & 511)
        } else {
            let s = pgt.lookup(addr, Level::Pte)?;
            (pgt.get(s), 0)
        };
        if !present(e) {
            return None;
        }
        if e & PAGE_SPECIAL != 0 {
            return Some(None);
        }
        Some(Some(entry_pfn(e).offset(off)))
    }
}

/// The node of the page mapped at `addr` in `mm`, if a page is mapped there
/// (for checks: what `move_pages()` with `nodes = NULL` reports).
pub fn page_node(pa: &PageAlloc, mm: &MmStruct, addr: u64) -> Option<NodeId> {
    let pmd = mm.pgt.lookup(addr, Level::Pmd)?;
    let e = mm.pgt.get(pmd);
    let (e, off) = if present(e) && e & PAGE_PSE != 0 {
        (e, (addr >> 12) & 511)
    } else {
        let s = mm.pgt.lookup(addr, Level::Pte)?;
        (mm.pgt.get(s), 0)
    };
    if !present(e) || e & PAGE_SPECIAL != 0 {
        return None;
    }
    Some(pa.pfn_to_nid(entry_pfn(e).offset(off)))
}

/// True if no page table of `mm` holds a migration entry (checks).
pub fn no_migration_entries(mm: &MmStruct) -> bool {
    mm.pgt
        .table_pfns()
        .all(|t| mm.pgt.table(t).iter().all(|&e| !is_migration_entry(e)))
}
