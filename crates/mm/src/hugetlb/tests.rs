//! Scenario tests of the hugetlb pool, reservations, faults and
//! copy-on-write. Layouts are drawn one character per 2 MiB huge page:
//! `R` reserved and not faulted, `W` mapped writable, `w` mapped
//! write-protected (shared with a fork), `.` not mapped.

use super::*;
use crate::cost::CostTable;
use crate::memory::huge_order::{process_huge_page_order, HugeOrderPolicy, HugePageOp};
use crate::memory::{handle_mm_fault, MmConfig, MmGlobal};
use crate::page_alloc::{MemoryLayout, NodeLayout, VmSysctl};
use crate::pgtable::PAGE_RW;
use crate::types::VcpuId;
use crate::vma::{Advice, MmapLayout};

const H: u64 = HPAGE_SIZE;
/// A huge-page-aligned address for MAP_FIXED mappings.
const B: u64 = 0x4000_0000;

struct World {
    pa: PageAlloc,
    cx: Cx,
    g: MmGlobal,
    /// Free base pages in the buddy lists and on PCP lists at boot.
    boot_free: u64,
}

/// A one-node machine of 128 MiB (64 huge pages) with two CPUs.
fn world_with(nodes: usize, policy: HugeOrderPolicy) -> World {
    let layout = MemoryLayout {
        nodes: (0..nodes)
            .map(|_| NodeLayout {
                nr_cpus: 2,
                nr_pages: 1 << 15,
            })
            .collect(),
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
    pa.hugetlb.log = HugePageLog::recording();
    let boot_free = pa.nr_free_pages() + pa.nr_pcp_pages();
    World {
        pa,
        cx: Cx::new(VcpuId(0), CostTable::uniform(1)),
        g: MmGlobal::new(MmConfig {
            clear_order: policy,
            copy_order: policy,
            ..MmConfig::default()
        }),
        boot_free,
    }
}

fn world() -> World {
    world_with(1, HugeOrderPolicy::TargetLast)
}

impl World {
    fn mm(&mut self) -> MmStruct {
        MmStruct::new(&mut self.pa, &mut self.cx, MmapLayout::ThpAligned).unwrap()
    }
    fn pool(&mut self, n: u64) -> u64 {
        set_max_huge_pages(&mut self.pa, &mut self.cx, n)
    }
    fn map(&mut self, mm: &mut MmStruct, addr: u64, len: u64) -> Result<u64, Errno> {
        hugetlb_mmap(
            &mut self.pa,
            &mut self.cx,
            mm,
            Vaddr(addr),
            len,
            MapFlags::FIXED,
        )
        .map(|a| a.0)
    }
    fn fault(&mut self, mm: &mut MmStruct, addr: u64, write: bool) -> Result<(), VmFault> {
        handle_mm_fault(
            &mut self.pa,
            &mut self.cx,
            &mut self.g,
            mm,
            Vaddr(addr),
            write,
        )
    }
    fn meminfo(&self) -> (u64, u64, u64, u64) {
        let m = self.pa.hugetlb.meminfo();
        (m.total, m.free, m.rsvd, m.surp)
    }
    fn ev(&self, e: VmEvent) -> u64 {
        self.pa.vmstat.get(e)
    }
    fn log(&mut self) -> Vec<HugePageOp> {
        self.pa.hugetlb.log.0.replace(Vec::new()).unwrap()
    }
    /// Draws `n` huge pages from `addr`.
    fn draw(&self, mm: &MmStruct, addr: u64, n: u64) -> String {
        (0..n)
            .map(|i| {
                let a = addr + i * H;
                let e = mm.pgt.lookup(a, Level::Pmd).map_or(0, |s| mm.pgt.get(s));
                if present(e) {
                    if e & PAGE_RW != 0 {
                        'W'
                    } else {
                        'w'
                    }
                } else if mm.vmas.range(..=a).next_back().is_some_and(|(_, v)| {
                    v.end > a && v.flags.contains(VmFlags::HUGETLB_RESV_OWNER)
                }) && !mm.hugetlb_resv_map.contains(&a)
                {
                    'R'
                } else {
                    '.'
                }
            })
            .collect()
    }
    fn folio(&self, mm: &MmStruct, addr: u64) -> Pfn {
        let s = mm.pgt.lookup(addr, Level::Pmd).unwrap();
        entry_pfn(mm.pgt.get(s))
    }
    /// Everything is back: pool consistent, allocator consistent.
    fn check(&self) {
        self.pa.hugetlb.check();
        self.pa.check_invariants();
    }
    /// Drains every PCP list and checks that all memory is free again.
    fn assert_all_free(&mut self) {
        for cpu in 0..self.pa.nr_cpus() {
            self.pa.drain_pages(&mut self.cx, VcpuId(cpu));
        }
        self.check();
        assert_eq!(self.pa.nr_free_pages(), self.boot_free);
    }
}

#[test]
fn pool_grows_from_the_buddy_allocator_and_shrinks_back() {
    let mut w = world();
    assert_eq!(w.pool(4), 4);
    assert_eq!(w.meminfo(), (4, 4, 0, 0));
    assert_eq!(w.ev(VmEvent::HTLB_BUDDY_PGALLOC), 4);
    assert_eq!(
        w.ev(VmEvent::NR_HUGETLB),
        0,
        "free pool pages are not in use"
    );
    assert_eq!(
        w.pa.nr_free_pages() + w.pa.nr_pcp_pages(),
        w.boot_free - 4 * 512
    );
    w.check();
    assert_eq!(w.pool(1), 1);
    assert_eq!(w.meminfo(), (1, 1, 0, 0));
    assert_eq!(w.pool(0), 0);
    assert_eq!(w.meminfo(), (0, 0, 0, 0));
    w.assert_all_free();
    // Asking for more than memory holds: as many as the allocator gives
    // (watermarks keep some back), and one failed try to end the loop.
    let got = w.pool(1_000);
    assert!(got > 50 && got < 64, "got {got}");
    assert_eq!(w.ev(VmEvent::HTLB_BUDDY_PGALLOC_FAIL), 1);
    assert_eq!(w.meminfo(), (got, got, 0, 0));
    w.pool(0);
    w.assert_all_free();
}

#[test]
fn pool_pages_alternate_between_nodes() {
    let mut w = world_with(2, HugeOrderPolicy::TargetLast);
    w.pool(5);
    assert_eq!(w.pa.hugetlb.node_counts(NodeId(0)), (3, 3, 0));
    assert_eq!(w.pa.hugetlb.node_counts(NodeId(1)), (2, 2, 0));
    // Shrinking takes from the nodes in turn as well.
    w.pool(3);
    assert_eq!(w.pa.hugetlb.node_counts(NodeId(0)), (2, 2, 0));
    assert_eq!(w.pa.hugetlb.node_counts(NodeId(1)), (1, 1, 0));
    w.check();
}

#[test]
fn mmap_reserves_and_munmap_releases() {
    let mut w = world();
    w.pool(4);
    let mut mm = w.mm();
    // RRR      three huge pages reserved, none faulted
    let a = hugetlb_mmap(
        &mut w.pa,
        &mut w.cx,
        &mut mm,
        Vaddr(0),
        3 * H - 5,
        MapFlags::NONE,
    )
    .unwrap()
    .0;
    assert!(a.is_multiple_of(H));
    assert_eq!(
        mm.vmas[&a].end - a,
        3 * H,
        "length rounded up to huge pages"
    );
    assert_eq!(w.draw(&mm, a, 3), "RRR");
    assert_eq!(w.meminfo(), (4, 4, 3, 0));
    // Two more cannot be promised (one available): ENOMEM, nothing changes.
    assert_eq!(w.map(&mut mm, B, 2 * H), Err(Errno::NoMem));
    assert_eq!(w.meminfo(), (4, 4, 3, 0));
    // MAP_NORESERVE promises nothing.
    let n = hugetlb_mmap(
        &mut w.pa,
        &mut w.cx,
        &mut mm,
        Vaddr(B),
        2 * H,
        MapFlags::FIXED.or(MapFlags::NORESERVE),
    )
    .unwrap();
    assert_eq!(w.draw(&mm, n.0, 2), "..");
    assert_eq!(w.meminfo(), (4, 4, 3, 0));
    // R.R      unmapping the middle page (a split at a huge page boundary)
    mm.munmap(&mut w.pa, &mut w.cx, Vaddr(a + H), H).unwrap();
    assert_eq!(w.draw(&mm, a, 3), "R.R");
    assert_eq!(w.meminfo(), (4, 4, 2, 0));
    mm.check_vmas();
    let mut cx = w.cx.clone();
    exit_mmap_for_test(&mut w.pa, &mut cx, mm);
    assert_eq!(w.meminfo(), (4, 4, 0, 0));
    w.check();
}

fn exit_mmap_for_test(pa: &mut PageAlloc, cx: &mut Cx, mm: MmStruct) {
    crate::memory::exit_mmap(pa, cx, mm);
}

#[test]
fn first_touch_clears_in_the_configured_order_with_the_fault_address_as_target() {
    for policy in HugeOrderPolicy::ALL {
        let mut w = world_with(1, policy);
        w.pool(2);
        let mut mm = w.mm();
        let a = w.map(&mut mm, B, 2 * H).unwrap();
        // W.   a write fault in sub-page 300 maps the whole huge page writable
        let addr = a + 300 * 4096 + 17;
        w.fault(&mut mm, addr, true).unwrap();
        assert_eq!(w.draw(&mm, a, 2), "WR");
        assert_eq!(w.meminfo(), (2, 1, 1, 0));
        assert_eq!(w.ev(VmEvent::NR_HUGETLB), 512);
        assert_eq!(mm.nr_faults, 1);
        let log = w.log();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].src, None);
        assert_eq!(log[0].dst, w.folio(&mm, a));
        let want: Vec<u32> = process_huge_page_order(policy, 512, 300).collect();
        assert_eq!(log[0].subpages, want, "{policy}");
        // Every later access to the page needs no fault.
        assert!(crate::memory::access_ok(&mut mm, Vaddr(a + H - 1), true));
        crate::memory::exit_mmap(&mut w.pa, &mut w.cx, mm);
        assert_eq!(w.meminfo(), (2, 2, 0, 0));
        assert_eq!(w.ev(VmEvent::NR_HUGETLB), 0);
    }
}

#[test]
fn read_fault_maps_read_only_and_a_write_reuses_the_page() {
    let mut w = world();
    w.pool(1);
    let mut mm = w.mm();
    let a = w.map(&mut mm, B, H).unwrap();
    w.fault(&mut mm, a, false).unwrap();
    assert_eq!(w.draw(&mm, a, 1), "w");
    let f = w.folio(&mm, a);
    assert!(!crate::memory::access_ok(&mut mm, Vaddr(a), true));
    w.fault(&mut mm, a, true).unwrap();
    assert_eq!(w.draw(&mm, a, 1), "W");
    assert_eq!(w.folio(&mm, a), f, "reused, not copied");
    assert_eq!(mm.nr_faults, 2);
    assert_eq!(w.log().len(), 1, "one clear, no copy");
    assert_eq!(w.meminfo(), (1, 0, 0, 0));
}

#[test]
fn fork_shares_write_protected_and_cow_copies_the_whole_page_in_order() {
    let mut w = world();
    w.pool(4);
    let mut parent = w.mm();
    let a = w.map(&mut parent, B, 2 * H).unwrap();
    for i in 0..2 {
        w.fault(&mut parent, a + i * H, true).unwrap();
    }
    w.log();
    // WW -> ww / ww   fork write-protects both sides
    let mut child = crate::memory::fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    assert_eq!(w.draw(&parent, a, 2), "ww");
    assert_eq!(w.draw(&child, a, 2), "ww");
    assert!(!child.vmas[&a].flags.contains(VmFlags::HUGETLB_RESV_OWNER));
    assert!(parent.vmas[&a].flags.contains(VmFlags::HUGETLB_RESV_OWNER));
    let shared = w.folio(&parent, a + H);
    assert_eq!(w.pa.mem.entire_mapcount(shared), 2);
    assert_eq!(w.meminfo(), (4, 2, 0, 0));
    // The child writes sub-page 5 of the second huge page: a new page from
    // the pool gets a copy of all 512 sub-pages, sub-page 5 last.
    w.fault(&mut child, a + H + 5 * 4096, true).unwrap();
    assert_eq!(w.draw(&child, a, 2), "wW");
    let log = w.log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].src, Some(shared));
    assert_eq!(log[0].dst, w.folio(&child, a + H));
    let want: Vec<u32> = process_huge_page_order(HugeOrderPolicy::TargetLast, 512, 5).collect();
    assert_eq!(log[0].subpages, want);
    assert_eq!(*log[0].subpages.last().unwrap(), 5);
    assert_eq!(w.meminfo(), (4, 1, 0, 0));
    assert_eq!(w.pa.mem.entire_mapcount(shared), 1);
    // The parent's write now finds itself the only mapping: reuse, no copy.
    w.fault(&mut parent, a + H, true).unwrap();
    assert_eq!(w.folio(&parent, a + H), shared);
    assert!(w.log().is_empty());
    // exit of both returns every page to the pool, the pool to the buddy
    // allocator when shrunk.
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, child);
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, parent);
    assert_eq!(w.meminfo(), (4, 4, 0, 0));
    assert_eq!(w.ev(VmEvent::NR_HUGETLB), 0);
    w.pool(0);
    w.assert_all_free();
}

#[test]
fn a_child_without_free_pages_gets_sigbus_and_reserved_pages_are_not_stolen() {
    let mut w = world();
    w.pool(3);
    let mut parent = w.mm();
    // WR       one page faulted, one still reserved; one page unreserved
    let a = w.map(&mut parent, B, 2 * H).unwrap();
    w.fault(&mut parent, a, true).unwrap();
    let mut child = crate::memory::fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    assert_eq!(w.meminfo(), (3, 2, 1, 0));
    // First COW: the one free page nobody reserved.
    w.fault(&mut child, a, true).unwrap();
    assert_eq!(w.meminfo(), (3, 1, 1, 0));
    // The child touches the second page: the last free page is the
    // parent's reservation, which a child may not take.
    assert_eq!(w.fault(&mut child, a + H, true), Err(VmFault::Sigbus));
    assert_eq!(w.meminfo(), (3, 1, 1, 0));
    // The parent can still fault it.
    w.fault(&mut parent, a + H, true).unwrap();
    assert_eq!(w.meminfo(), (3, 0, 0, 0));
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, child);
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, parent);
    assert_eq!(w.meminfo(), (3, 3, 0, 0));
    w.check();
}

#[test]
fn overcommit_allocates_surplus_pages_at_mmap_and_frees_them_after() {
    let mut w = world();
    w.pa.hugetlb.nr_overcommit_huge_pages = 3;
    let mut mm = w.mm();
    assert_eq!(
        w.map(&mut mm, B, 4 * H),
        Err(Errno::NoMem),
        "over overcommit"
    );
    assert_eq!(w.meminfo(), (0, 0, 0, 0));
    let a = w.map(&mut mm, B, 2 * H).unwrap();
    assert_eq!(w.meminfo(), (2, 2, 2, 2));
    // The failed mmap got 3 surplus pages before the fourth was refused
    // (overcommit is checked before the buddy allocator is asked), and gave
    // them back; this one got 2.
    assert_eq!(w.ev(VmEvent::HTLB_BUDDY_PGALLOC), 3 + 2);
    assert_eq!(w.ev(VmEvent::HTLB_BUDDY_PGALLOC_FAIL), 0);
    w.fault(&mut mm, a, true).unwrap();
    assert_eq!(w.meminfo(), (2, 1, 1, 2));
    // A fork's copy-on-write takes one more surplus page at fault time.
    let mut child = crate::memory::fork(&mut w.pa, &mut w.cx, &mut mm).unwrap();
    w.fault(&mut child, a, true).unwrap();
    assert_eq!(w.meminfo(), (3, 1, 1, 3));
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, child);
    assert_eq!(w.meminfo(), (2, 1, 1, 2));
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, mm);
    assert_eq!(w.meminfo(), (0, 0, 0, 0));
    w.assert_all_free();
}

#[test]
fn shrinking_below_pages_in_use_makes_them_surplus() {
    let mut w = world();
    w.pool(3);
    let mut mm = w.mm();
    let a = w.map(&mut mm, B, 2 * H).unwrap();
    w.fault(&mut mm, a, true).unwrap();
    // One page in use, one reserved: two must stay; the third goes.
    assert_eq!(w.pool(0), 0);
    assert_eq!(w.meminfo(), (2, 1, 1, 2));
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, mm);
    assert_eq!(w.meminfo(), (0, 0, 0, 0));
    w.assert_all_free();
    // Growing the pool turns surplus pages back into persistent ones.
    w.pa.hugetlb.nr_overcommit_huge_pages = 1;
    let mut mm = w.mm();
    w.map(&mut mm, B, H).unwrap();
    assert_eq!(w.meminfo(), (1, 1, 1, 1));
    assert_eq!(w.pool(2), 2);
    assert_eq!(w.meminfo(), (2, 2, 1, 0));
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, mm);
    assert_eq!(w.meminfo(), (2, 2, 0, 0));
}

#[test]
fn alignment_errors_are_the_kernels() {
    let mut w = world();
    w.pool(4);
    let mut mm = w.mm();
    assert_eq!(w.map(&mut mm, B, 0), Err(Errno::Inval));
    assert_eq!(
        w.map(&mut mm, B + 4096, H),
        Err(Errno::Inval),
        "unaligned MAP_FIXED"
    );
    let a = w.map(&mut mm, B, 2 * H).unwrap();
    w.fault(&mut mm, a, true).unwrap();
    // munmap or madvise that would split inside a huge page: EINVAL.
    assert_eq!(
        mm.munmap(&mut w.pa, &mut w.cx, Vaddr(a + 4096), H),
        Err(Errno::Inval)
    );
    assert_eq!(
        mm.munmap(&mut w.pa, &mut w.cx, Vaddr(a), 4096),
        Err(Errno::Inval)
    );
    assert_eq!(
        mm.madvise(
            &mut w.pa,
            &mut w.cx,
            Vaddr(a + 4096),
            4096,
            Advice::DontNeed
        ),
        Err(Errno::Inval)
    );
    // MADV_DONTNEED of less than a huge page rounds down to nothing.
    mm.madvise(&mut w.pa, &mut w.cx, Vaddr(a), 4096, Advice::DontNeed)
        .unwrap();
    assert_eq!(w.draw(&mm, a, 2), "WR");
    // Of a whole one it drops the page; its reservation stays consumed.
    mm.madvise(&mut w.pa, &mut w.cx, Vaddr(a), H, Advice::DontNeed)
        .unwrap();
    assert_eq!(w.draw(&mm, a, 2), ".R");
    assert_eq!(w.meminfo(), (4, 4, 1, 0));
    // Writing into the middle of a hugetlb mapping from a plain mapping's
    // point of view: a 4 KiB MAP_FIXED mmap over it must split it: EINVAL.
    assert_eq!(
        mm.mmap(&mut w.pa, &mut w.cx, Vaddr(a + 4096), 4096, MapFlags::FIXED),
        Err(Errno::Inval)
    );
    mm.check_vmas();
    crate::memory::exit_mmap(&mut w.pa, &mut w.cx, mm);
    assert_eq!(w.meminfo(), (4, 4, 0, 0));
}

#[test]
fn adjacent_hugetlb_mappings_stay_separate_vmas() {
    let mut w = world();
    w.pool(2);
    let mut mm = w.mm();
    w.map(&mut mm, B, H).unwrap();
    w.map(&mut mm, B + H, H).unwrap();
    assert_eq!(mm.vmas.len(), 2);
    mm.check_vmas();
}
