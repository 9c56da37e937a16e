//! Semantics of page migration and `move_pages()`: after a migration every
//! mapping points at the destination on the target node, the source is
//! freed, references and mapcounts are what they were, and failures
//! (no destination memory, a pinned or locked folio) leave everything as it
//! was.
//!
//! The machine: two nodes of 2 CPUs and 256 MiB each; the process runs on
//! CPU 0 (node 0), so its pages start on node 0.
//!
//! ```text
//! node 0: CPUs 0-1  [ THP THP | 4K 4K 4K ... ]   --move_pages-->   node 1: CPUs 2-3
//! ```

use mm::copy_page::{CopyEngine, NumaHw};
use mm::cost::{CostTable, Cx};
use mm::knobs::{KernelConfig, Preset};
use mm::memory::{exit_mmap, handle_mm_fault, MmGlobal, ThpEnabled};
use mm::migrate::{
    errno, no_migration_entries, page_node, MigrateConfig, MigrateCtx, MigrateFlow, MPOL_MF_MOVE,
    MPOL_MF_MOVE_ALL, MPOL_MF_MOVE_MT,
};
use mm::page_alloc::{Gfp, MemoryLayout, NodeLayout, PageAlloc};
use mm::pgtable::{entry_pfn, Level, PAGE_PSE, PMD_SIZE};
use mm::vma::{Advice, MmStruct};
use mm::vmstat::VmEvent;
use mm::Vaddr;
use mm::{NodeId, Pfn, VcpuId};

const MIB: u64 = 1 << 20;

struct World {
    pa: PageAlloc,
    cx: Cx,
    g: MmGlobal,
    cfg: KernelConfig,
    hw: NumaHw,
    free_at_boot: u64,
}

impl World {
    fn new(cfg: KernelConfig) -> World {
        let layout = MemoryLayout {
            nodes: vec![
                NodeLayout {
                    nr_cpus: 2,
                    nr_pages: 256 * MIB / 4096,
                };
                2
            ],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
        pa.set_node_distance(&[10, 21, 21, 10]);
        let free_at_boot = pa.nr_free_pages() + pa.nr_pcp_pages();
        let costs = CostTable::uniform(1);
        World {
            pa,
            hw: NumaHw::from_costs(&costs),
            cx: Cx::new(VcpuId(0), costs),
            g: MmGlobal::new(cfg.mm),
            cfg,
            free_at_boot,
        }
    }

    fn thp(mut self, on: bool) -> World {
        self.g.cfg.thp_enabled = if on {
            ThpEnabled::Always
        } else {
            ThpEnabled::Never
        };
        self
    }

    fn mm(&mut self) -> MmStruct {
        MmStruct::new(&mut self.pa, &mut self.cx, self.g.cfg.mmap_layout).unwrap()
    }

    /// Maps `len` bytes (MADV_HUGEPAGE) and writes every 4 KiB of it.
    fn populate(&mut self, mm: &mut MmStruct, len: u64) -> u64 {
        let a = mm
            .mmap(
                &mut self.pa,
                &mut self.cx,
                Vaddr(0),
                len,
                mm::vma::MapFlags::NONE,
            )
            .unwrap();
        mm.madvise(
            &mut self.pa,
            &mut self.cx,
            Vaddr(a.0),
            len,
            Advice::HugePage,
        )
        .unwrap();
        let mut p = a;
        while p < a + len {
            if !mm::memory::access_ok(mm, p, true) {
                handle_mm_fault(&mut self.pa, &mut self.cx, &mut self.g, mm, p, true).unwrap();
            }
            p += 4096;
        }
        a.0
    }

    /// `move_pages(0, pages, nodes, status, flags)` in `mms[0]`, with every
    /// address space of `mms` visible to the rmap walk.
    fn move_pages(
        &mut self,
        mms: Vec<&mut MmStruct>,
        pages: &[u64],
        node: u16,
        flags: i32,
    ) -> (i64, Vec<i32>) {
        let cpus = (0..mms.len()).map(|_| vec![0]).collect();
        let idle = vec![true; 4];
        let mut ctx = MigrateCtx::new(
            &mut self.pa,
            &mut self.cx,
            mms,
            cpus,
            self.cfg.migrate,
            &self.hw,
            &idle,
        );
        let mut status = vec![i32::MIN; pages.len()];
        let nodes = vec![node; pages.len()];
        let r = ctx.move_pages(0, pages, Some(&nodes), &mut status, flags);
        (r, status)
    }

    fn ev(&self, e: VmEvent) -> u64 {
        self.pa.vmstat.get(e)
    }

    /// Everything freed comes back once the PCP lists are drained.
    fn teardown(&mut self, mms: Vec<MmStruct>) {
        for mm in mms {
            assert!(no_migration_entries(&mm));
            exit_mmap(&mut self.pa, &mut self.cx, mm);
        }
        for c in 0..4 {
            self.pa.drain_pages(&mut self.cx, VcpuId(c));
        }
        self.pa.check_invariants();
        assert_eq!(self.pa.nr_free_pages(), self.free_at_boot, "pages leaked");
    }
}

/// Linux 6.18's fault path and address-space layout (2 MiB-aligned
/// mappings, so THPs) with `preset`'s migration.
fn with_flow_of(preset: Preset) -> KernelConfig {
    let mut cfg = Preset::Linux6_18.config();
    cfg.migrate = preset.config().migrate;
    cfg
}

fn head_of(mm: &MmStruct, addr: u64) -> Pfn {
    let pmd = mm.pgt.lookup(addr, Level::Pmd).unwrap();
    let e = mm.pgt.get(pmd);
    if e & PAGE_PSE != 0 {
        return entry_pfn(e);
    }
    let s = mm.pgt.lookup(addr, Level::Pte).unwrap();
    entry_pfn(mm.pgt.get(s))
}

fn pmd_mapped(mm: &MmStruct, addr: u64) -> bool {
    let pmd = mm.pgt.lookup(addr, Level::Pmd).unwrap();
    mm.pgt.get(pmd) & PAGE_PSE != 0
}

#[test]
fn thps_move_whole_and_keep_their_pmd_mappings() {
    let mut w = World::new(Preset::Linux6_18.config()).thp(true);
    let mut mm = w.mm();
    let a = w.populate(&mut mm, 4 * MIB);
    let old = [head_of(&mm, a), head_of(&mm, a + PMD_SIZE)];
    for (i, h) in old.iter().enumerate() {
        assert_eq!(w.pa.pfn_to_nid(*h), NodeId(0));
        assert!(pmd_mapped(&mm, a + i as u64 * PMD_SIZE));
    }
    let (r, status) = w.move_pages(vec![&mut mm], &[a, a + PMD_SIZE], 1, MPOL_MF_MOVE);
    assert_eq!(r, 0);
    assert_eq!(status, vec![1, 1]);
    for i in 0..2u64 {
        let base = a + i * PMD_SIZE;
        assert!(pmd_mapped(&mm, base), "the PMD mapping survives");
        let h = head_of(&mm, base);
        assert_ne!(h, old[i as usize]);
        assert_eq!(w.pa.mem.refcount(h), 512);
        assert_eq!(w.pa.mem.entire_mapcount(h), 1);
        for p in (base..base + PMD_SIZE).step_by(4096) {
            assert_eq!(page_node(&w.pa, &mm, p), Some(NodeId(1)));
        }
        // The source is free again: no longer an allocated head.
        assert_eq!(w.pa.mem.flags(old[i as usize]) & mm::page::PG_HEAD, 0);
    }
    assert_eq!(w.ev(VmEvent::THP_MIGRATION_SUCCESS), 2);
    assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 1024);
    assert_eq!(w.ev(VmEvent::PGMIGRATE_FAIL), 0);
    // One chunk per THP (a chunk ends at 512 base pages): one flush each.
    assert_eq!(w.ev(VmEvent::NR_TLB_LOCAL_FLUSH_ALL), 2);
    assert_eq!(w.pa.vmstat.mthp(9, mm::vmstat::MthpStat::NrAnon), 2);
    w.pa.check_invariants();
    // Moving again to where they are: nothing to do, status says node 1.
    let (r, status) = w.move_pages(vec![&mut mm], &[a, a + PMD_SIZE], 1, MPOL_MF_MOVE);
    assert_eq!((r, status), (0, vec![1, 1]));
    assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 1024);
    w.teardown(vec![mm]);
}

/// 512 base pages: one batch and one TLB flush on 6.18; one flush per page
/// with the 4.x flow.
#[test]
fn base_pages_batch_their_tlb_flush_on_6_18_not_on_4_18() {
    for (preset, flushes) in [(Preset::Linux6_18, 1), (Preset::Linux4_18, 512)] {
        let mut w = World::new(with_flow_of(preset)).thp(false);
        let mut mm = w.mm();
        let a = w.populate(&mut mm, 2 * MIB);
        let pages: Vec<u64> = (0..512).map(|i| a + i * 4096).collect();
        let (r, status) = w.move_pages(vec![&mut mm], &pages, 1, MPOL_MF_MOVE);
        assert_eq!(r, 0, "{preset:?}");
        assert!(status.iter().all(|&s| s == 1));
        for &p in &pages {
            assert_eq!(page_node(&w.pa, &mm, p), Some(NodeId(1)));
            assert_eq!(w.pa.mem.refcount(head_of(&mm, p)), 1);
        }
        assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 512);
        assert_eq!(w.ev(VmEvent::NR_TLB_LOCAL_FLUSH_ALL), flushes, "{preset:?}");
        w.teardown(vec![mm]);
    }
}

/// A page shared with a forked child: `MPOL_MF_MOVE` refuses it
/// (`-EACCES`), `MPOL_MF_MOVE_ALL` moves it in both address spaces.
#[test]
fn shared_pages_need_move_all_and_then_move_in_every_mm() {
    let mut w = World::new(Preset::Linux6_18.config()).thp(false);
    let mut parent = w.mm();
    let a = w.populate(&mut parent, 64 * 1024);
    let mut child = mm::memory::fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    let h = head_of(&parent, a);
    assert_eq!(w.pa.mem.refcount(h), 2);
    let (r, status) = w.move_pages(vec![&mut parent, &mut child], &[a], 1, MPOL_MF_MOVE);
    assert_eq!((r, status), (0, vec![-errno::EACCES]));
    assert_eq!(head_of(&parent, a), h);
    let (r, status) = w.move_pages(vec![&mut parent, &mut child], &[a], 1, MPOL_MF_MOVE_ALL);
    assert_eq!((r, status), (0, vec![1]));
    let n = head_of(&parent, a);
    assert_eq!(head_of(&child, a), n, "the child maps the destination too");
    assert_eq!(w.pa.pfn_to_nid(n), NodeId(1));
    assert_eq!(w.pa.mem.refcount(n), 2);
    // Both stay write-protected (copy-on-write after fork).
    assert!(!mm::memory::access_ok(&mut parent, Vaddr(a), true));
    w.teardown(vec![parent, child]);
}

/// Takes every free block of `order` and above from `node`.
fn exhaust(w: &mut World, node: u16, order: u8) -> Vec<(Pfn, u8)> {
    let mut held = Vec::new();
    for o in (order..=10).rev() {
        while let Ok(p) = w.pa.alloc_pages_node(
            &mut w.cx,
            NodeId(node),
            Gfp::HIGHUSER_MOVABLE.or(Gfp::THISNODE),
            o,
        ) {
            held.push((p, o));
        }
    }
    held
}

#[test]
fn no_destination_memory_leaves_the_page_mapped_where_it_was() {
    let mut w = World::new(Preset::Linux6_18.config()).thp(false);
    let mut mm = w.mm();
    let a = w.populate(&mut mm, 16 * 1024);
    let held = exhaust(&mut w, 1, 0);
    let h = head_of(&mm, a);
    let free_before = w.pa.nr_free_pages() + w.pa.nr_pcp_pages();
    let (r, status) = w.move_pages(vec![&mut mm], &[a, a + 4096], 1, MPOL_MF_MOVE);
    // -ENOMEM from migrate_pages(): the syscall fails, status untouched.
    assert_eq!(r, -(errno::ENOMEM as i64));
    assert_eq!(status, vec![i32::MIN, i32::MIN]);
    assert_eq!(head_of(&mm, a), h);
    assert_eq!(w.pa.mem.refcount(h), 1);
    assert!(
        mm::memory::access_ok(&mut mm, Vaddr(a), true),
        "still writable"
    );
    assert!(no_migration_entries(&mm));
    assert_eq!(w.pa.nr_free_pages() + w.pa.nr_pcp_pages(), free_before);
    assert!(w.ev(VmEvent::PGMIGRATE_FAIL) > 0);
    w.pa.check_invariants();
    for (p, o) in held {
        w.pa.free_pages(&mut w.cx, p, o);
    }
    w.teardown(vec![mm]);
}

/// No 2 MiB block on the target, but base pages: the THP is split and its
/// pages migrate (`thp_migration_split`).
#[test]
fn thp_without_a_huge_destination_is_split_and_its_pages_move() {
    // No watermarks, so that every 2 MiB block of node 1 can be taken.
    let mut cfg = Preset::Linux6_18.config();
    cfg.sysctl.min_free_kbytes = Some(0);
    let mut w = World::new(cfg).thp(true);
    let mut mm = w.mm();
    let a = w.populate(&mut mm, 2 * MIB);
    assert!(pmd_mapped(&mm, a));
    let mut held = exhaust(&mut w, 1, 0);
    // Give back every other page of four 4 MiB blocks: 2048 free base
    // pages that cannot merge into a 2 MiB block (drained from the PCP
    // lists, so that the allocator sees them).
    let blocks: Vec<(Pfn, u8)> = held.iter().filter(|b| b.1 == 10).take(4).copied().collect();
    held.retain(|b| !blocks.contains(b));
    for (p, o) in blocks {
        w.pa.split_page(p, o);
        for i in 0..1u64 << o {
            if i % 2 == 0 {
                w.pa.free_pages(&mut w.cx, p.offset(i), 0);
            } else {
                held.push((p.offset(i), 0));
            }
        }
    }
    w.pa.drain_pages(&mut w.cx, VcpuId(0));
    let (r, status) = w.move_pages(vec![&mut mm], &[a], 1, MPOL_MF_MOVE);
    assert_eq!(r, 0, "all split pages moved");
    assert_eq!(status, vec![1]);
    assert_eq!(w.ev(VmEvent::THP_MIGRATION_SPLIT), 1);
    assert_eq!(w.ev(VmEvent::THP_MIGRATION_FAIL), 1);
    assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 512);
    assert!(!pmd_mapped(&mm, a), "the PMD was split");
    for p in (a..a + PMD_SIZE).step_by(4096) {
        assert_eq!(page_node(&w.pa, &mm, p), Some(NodeId(1)));
        assert_eq!(w.pa.mem.refcount(head_of(&mm, p)), 1);
    }
    assert_eq!(w.pa.vmstat.mthp(9, mm::vmstat::MthpStat::NrAnon), 0);
    for (p, o) in held {
        w.pa.free_pages(&mut w.cx, p, o);
    }
    w.teardown(vec![mm]);
}

/// A pinned folio (an extra reference) and a locked one fail after every
/// retry, are mapped as before, and the destinations are freed; unpinned
/// and unlocked, they move.
#[test]
fn pinned_or_locked_folios_are_retried_then_undone() {
    for lock in [false, true] {
        for preset in [Preset::Linux6_18, Preset::Linux4_18] {
            let mut w = World::new(with_flow_of(preset)).thp(true);
            let mut mm = w.mm();
            let a = w.populate(&mut mm, 2 * MIB);
            let h = head_of(&mm, a);
            if lock {
                let f = w.pa.mem.flags(h);
                w.pa.mem.set_flags(h, f | mm::page::PG_LOCKED);
            } else {
                w.pa.mem.set_folio_extra_refs(h, 1);
            }
            let free_before = w.pa.nr_free_pages() + w.pa.nr_pcp_pages();
            let (r, status) = w.move_pages(vec![&mut mm], &[a], 1, MPOL_MF_MOVE);
            assert_eq!(r, 1, "one page not migrated ({preset:?}, lock {lock})");
            assert_eq!(status, vec![i32::MIN]);
            assert_eq!(head_of(&mm, a), h);
            assert!(pmd_mapped(&mm, a));
            assert_eq!(w.pa.mem.refcount(h), 512);
            assert_eq!(w.pa.mem.entire_mapcount(h), 1);
            assert!(no_migration_entries(&mm));
            assert_eq!(w.pa.nr_free_pages() + w.pa.nr_pcp_pages(), free_before);
            assert_eq!(w.ev(VmEvent::PGMIGRATE_FAIL), 512);
            assert_eq!(w.ev(VmEvent::THP_MIGRATION_FAIL), 1);
            assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 0);
            w.pa.check_invariants();
            if lock {
                let f = w.pa.mem.flags(h);
                assert_ne!(f & mm::page::PG_LOCKED, 0, "the test's lock is still held");
                w.pa.mem.set_flags(h, f & !mm::page::PG_LOCKED);
            } else {
                w.pa.mem.set_folio_extra_refs(h, 0);
            }
            let (r, status) = w.move_pages(vec![&mut mm], &[a], 1, MPOL_MF_MOVE);
            assert_eq!((r, status), (0, vec![1]));
            w.teardown(vec![mm]);
        }
    }
}

#[test]
fn status_reports_errors_per_page_and_bad_arguments_fail() {
    let mut w = World::new(Preset::Linux6_18.config()).thp(false);
    let mut mm = w.mm();
    let a = w.populate(&mut mm, 16 * 1024);
    // A mapped but untouched page, and an address outside any VMA.
    let b = mm
        .mmap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(0),
            8192,
            mm::vma::MapFlags::NONE,
        )
        .unwrap();
    let (r, status) = w.move_pages(vec![&mut mm], &[a, b.0, 0x1000, a], 1, MPOL_MF_MOVE);
    assert_eq!(r, 0);
    assert_eq!(
        status,
        vec![1, -errno::ENOENT, -errno::EFAULT, 1],
        "the last one was already moved by the flush before the error entries"
    );
    let (r, _) = w.move_pages(vec![&mut mm], &[a], 1, MPOL_MF_MOVE_MT);
    assert_eq!(
        r,
        -(errno::EINVAL as i64),
        "mainline has no MPOL_MF_MOVE_MT"
    );
    let (r, _) = w.move_pages(vec![&mut mm], &[a], 7, MPOL_MF_MOVE);
    assert_eq!(r, -(errno::ENODEV as i64));
    w.teardown(vec![mm]);
}

/// With the seed's series the multi-threaded copy runs for huge pages
/// only, when `vm.accel_page_copy` is 1 or the call passes
/// `MPOL_MF_MOVE_MT`.
#[test]
fn the_seeds_mt_copy_is_used_for_huge_pages_only() {
    for engine in [CopyEngine::Mt, CopyEngine::Adaptive] {
        for (accel, flags, want) in [
            (true, MPOL_MF_MOVE, 1),
            (false, MPOL_MF_MOVE, 0),
            (false, MPOL_MF_MOVE | MPOL_MF_MOVE_MT, 1),
        ] {
            let mut cfg = Preset::Linux6_18.config();
            cfg.migrate = MigrateConfig {
                copy_engine: engine,
                accel_page_copy: accel,
                ..cfg.migrate
            };
            let mut w = World::new(cfg).thp(true);
            let mut mm = w.mm();
            let a = w.populate(&mut mm, 2 * MIB);
            let b = w.populate(&mut mm, 64 * 1024);
            let (r, _) = w.move_pages(vec![&mut mm], &[a, b], 1, flags);
            assert_eq!(r, 0);
            assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 512 + 1);
            assert_eq!(
                w.ev(VmEvent::MIGRATE_COPY_MT),
                want,
                "{engine:?} accel {accel} flags {flags:#x}"
            );
            w.teardown(vec![mm]);
        }
    }
}

/// The batched engine copies a whole batch once; the DMA engine falls back
/// to the CPU on a machine without channels; the per-folio flow works with
/// every engine.
#[test]
fn batched_and_dma_engines_migrate_the_same_pages() {
    for flow in [MigrateFlow::Batched, MigrateFlow::PerFolio] {
        for engine in CopyEngine::ALL {
            let mut cfg = Preset::Linux6_18.config();
            cfg.migrate.copy_engine = *engine;
            cfg.migrate.flow = flow;
            let mut w = World::new(cfg).thp(false);
            let mut mm = w.mm();
            let a = w.populate(&mut mm, 256 * 1024);
            let pages: Vec<u64> = (0..64).map(|i| a + i * 4096).collect();
            let (r, status) = w.move_pages(vec![&mut mm], &pages, 1, MPOL_MF_MOVE);
            assert_eq!(r, 0);
            assert!(status.iter().all(|&s| s == 1));
            assert_eq!(w.ev(VmEvent::PGMIGRATE_SUCCESS), 64);
            let mt = w.ev(VmEvent::MIGRATE_COPY_MT);
            match (engine, flow) {
                (CopyEngine::Batched, MigrateFlow::Batched) => assert_eq!(mt, 1, "one copy"),
                (CopyEngine::Batched, MigrateFlow::PerFolio) => assert_eq!(mt, 64),
                _ => assert_eq!(mt, 0, "{engine:?}: base pages copy single-threaded"),
            }
            assert_eq!(
                w.ev(VmEvent::MIGRATE_COPY_DMA),
                0,
                "no channels: CPU fallback"
            );
            w.teardown(vec![mm]);
        }
    }
}

/// Zonelists follow the distances: with node 1 full, node 0's CPU falls
/// back to the nearest other node; `__GFP_THISNODE` does not fall back.
#[test]
fn zonelists_follow_node_distance() {
    let layout = MemoryLayout {
        nodes: vec![
            NodeLayout {
                nr_cpus: 1,
                nr_pages: 64 * MIB / 4096,
            };
            3
        ],
        dma32_pages: 0,
    };
    let cfg = Preset::Linux6_18.config();
    let mut pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    // Node 2 is nearer to node 0 than node 1 is.
    pa.set_node_distance(&[10, 30, 20, 30, 10, 20, 20, 20, 10]);
    assert_eq!(pa.node_distance(NodeId(0), NodeId(2)), 20);
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut held = Vec::new();
    while let Ok(p) = pa.alloc_pages_node(
        &mut cx,
        NodeId(0),
        Gfp::HIGHUSER_MOVABLE.or(Gfp::THISNODE),
        9,
    ) {
        assert_eq!(pa.pfn_to_nid(p), NodeId(0));
        held.push(p);
    }
    let p = pa.alloc_pages(&mut cx, Gfp::HIGHUSER_MOVABLE, 9).unwrap();
    assert_eq!(pa.pfn_to_nid(p), NodeId(2), "nearest other node");
    held.push(p);
    for p in held {
        pa.free_pages(&mut cx, p, 9);
    }
    pa.check_invariants();
}

/// `move_pages()` takes the caller's `mmap_lock` for reading around each
/// page it isolates, and the page-table lock of every table whose entries
/// the unmap and the remap rewrite; every lock is released.
#[test]
fn move_pages_reads_mmap_lock_per_page_and_locks_the_tables_it_rewrites() {
    use mm::cost::{LockClass, LockId, Seg};
    let mut w = World::new(Preset::Linux6_18.config()).thp(false);
    let mut mm = w.mm();
    let a = w.populate(&mut mm, 4 * 4096);
    let pages: Vec<u64> = (0..4).map(|i| a + i * 4096).collect();
    let lock = LockId {
        class: LockClass::MmapLock,
        index: 7,
    };
    w.cx.begin(VcpuId(0), mm::SimTime(0));
    let idle = vec![true; 4];
    let mut ctx = MigrateCtx::new(
        &mut w.pa,
        &mut w.cx,
        vec![&mut mm],
        vec![vec![0]],
        w.cfg.migrate,
        &w.hw,
        &idle,
    );
    ctx.mmap_lock = Some(lock);
    let mut status = vec![0; 4];
    assert_eq!(
        ctx.move_pages(0, &pages, Some(&[1; 4]), &mut status, MPOL_MF_MOVE),
        0
    );
    let segs = w.cx.segs().to_vec();
    let count = |f: &dyn Fn(&Seg) -> bool| segs.iter().filter(|s| f(s)).count();
    assert_eq!(count(&|s| *s == Seg::LockRead(lock)), 4);
    assert_eq!(count(&|s| *s == Seg::UnlockRead(lock)), 4);
    let ptl = |s: &Seg| matches!(s, Seg::Lock(l) if l.class == LockClass::Ptl);
    // Four folios: each unmapped and remapped under its table's lock.
    assert_eq!(count(&ptl), 8);
    assert_eq!(
        count(&|s| matches!(s, Seg::Unlock(l) if l.class == LockClass::Ptl)),
        8
    );
    // The query takes the lock once per chunk of 16 pages.
    w.cx.begin(VcpuId(0), mm::SimTime(0));
    let mut ctx = MigrateCtx::new(
        &mut w.pa,
        &mut w.cx,
        vec![&mut mm],
        vec![vec![0]],
        w.cfg.migrate,
        &w.hw,
        &idle,
    );
    ctx.mmap_lock = Some(lock);
    let many: Vec<u64> = (0..20).map(|i| a + (i % 4) * 4096).collect();
    let mut status = vec![0; 20];
    assert_eq!(ctx.move_pages(0, &many, None, &mut status, 0), 0);
    assert!(status.iter().all(|&s| s == 1));
    assert_eq!(
        w.cx.segs()
            .iter()
            .filter(|s| **s == Seg::LockRead(lock))
            .count(),
        2
    );
    w.teardown(vec![mm]);
}

/// The seed's `copy_page_mt()` runs on the destination node's first CPUs:
/// their work is recorded for the engine to play there (and counted in
/// `migrate_copy_helper_ns`); the single-threaded copy makes no other CPU
/// busy.
#[test]
fn mt_copies_make_the_destination_nodes_cpus_busy() {
    for (engine, helpers) in [(CopyEngine::Single, vec![]), (CopyEngine::Mt, vec![2, 3])] {
        let mut cfg = Preset::Linux6_18.config();
        cfg.migrate.copy_engine = engine;
        let mut w = World::new(cfg).thp(true);
        let mut mm = w.mm();
        let a = w.populate(&mut mm, 2 * MIB);
        w.cx.begin(VcpuId(0), mm::SimTime(0));
        let (r, _) = w.move_pages(vec![&mut mm], &[a], 1, MPOL_MF_MOVE);
        assert_eq!(r, 0);
        let work = w.cx.take_helper_work();
        assert_eq!(
            work.iter().map(|(c, _)| c.0).collect::<Vec<_>>(),
            helpers,
            "{engine:?}"
        );
        let busy: u64 = work.iter().map(|w| w.1).sum();
        assert_eq!(w.ev(VmEvent::MIGRATE_COPY_HELPER_NS), busy);
        assert_eq!(busy > 0, engine == CopyEngine::Mt);
        w.teardown(vec![mm]);
    }
}

/// A task's `MPOL_PREFERRED` policy makes `alloc_pages()` start from the
/// preferred node's zonelist; the default policy allocates locally.
#[test]
fn a_preferred_mempolicy_allocates_on_its_node() {
    let mut w = World::new(Preset::Linux6_18.config());
    let local =
        w.pa.alloc_pages(&mut w.cx, Gfp::HIGHUSER_MOVABLE, 0)
            .unwrap();
    assert_eq!(w.pa.pfn_to_nid(local), NodeId(0));
    w.pa.set_task_mempolicy(VcpuId(0), Some(NodeId(1)));
    let far =
        w.pa.alloc_pages(&mut w.cx, Gfp::HIGHUSER_MOVABLE, 9)
            .unwrap();
    assert_eq!(w.pa.pfn_to_nid(far), NodeId(1));
    w.pa.set_task_mempolicy(VcpuId(0), None);
    w.pa.free_pages(&mut w.cx, local, 0);
    w.pa.free_pages(&mut w.cx, far, 9);
    w.teardown(vec![]);
}
