//! hugetlb on the live kernel and in the model, step by step: the faults of
//! each access and `/proc/meminfo`'s `HugePages_Total/Free/Rsvd/Surp` after
//! each step of `native::hugetlb`'s scenario (map 4 huge pages, read and write
//! them, fork a child that copies two on write and faults a third, map too
//! much, unmap badly, unmap), replayed through `mm::hugetlb` with the same
//! pool size.
//!
//! It sets `vm.nr_hugepages` (and `nr_overcommit_hugepages` to 0) for the run
//! under the live-kernel lock and restores both, also on failure; it says
//! SKIPPED when not root, without hugetlb, or when the host's pool is in use.

use mm::cost::{CostTable, Cx};
use mm::hugetlb::{hugetlb_mmap, set_max_huge_pages, HPAGE_SIZE};
use mm::memory::{exit_mmap, fork, handle_mm_fault, MmConfig, MmGlobal};
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc, VmSysctl};
use mm::types::{VcpuId, PAGE_SIZE};
use mm::vma::{Errno, MmStruct, MmapLayout};
use mm::Vaddr;
use native::hugetlb::{HugetlbConfig, Meminfo, Step, NR_MAPPED, STEPS};

/// The scenario through the model.
fn model(nr_hugepages: u64) -> Vec<Step> {
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: 1 << 16,
        }],
        dma32_pages: 0,
    };
    let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
    let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
    let mut g = MmGlobal::new(MmConfig::default());
    assert_eq!(
        set_max_huge_pages(&mut pa, &mut cx, nr_hugepages),
        nr_hugepages
    );
    let mut steps = Vec::new();
    let mut record = |pa: &PageAlloc, step: usize, nr_minflt: u64, errno: i32| {
        let m = pa.hugetlb.meminfo();
        steps.push(Step {
            step,
            nr_minflt,
            errno,
            meminfo: Meminfo {
                total: m.total,
                free: m.free,
                rsvd: m.rsvd,
                surp: m.surp,
            },
        });
    };
    let errno = |e: Errno| match e {
        Errno::Inval => EINVAL,
        Errno::NoMem => ENOMEM,
        Errno::Fault => EFAULT,
    };
    let mut mm = MmStruct::new(&mut pa, &mut cx, MmapLayout::ThpAligned).unwrap();
    let len = NR_MAPPED as u64 * HPAGE_SIZE;
    let a = hugetlb_mmap(
        &mut pa,
        &mut cx,
        &mut mm,
        Vaddr(0),
        len,
        mm::vma::MapFlags::NONE,
    )
    .unwrap();
    record(&pa, 0, 0, 0);
    let mut touch = |pa: &mut PageAlloc, cx: &mut Cx, mm: &mut MmStruct, addr: u64, write| {
        let before = mm.nr_faults;
        if !mm::memory::access_ok(mm, Vaddr(addr), write) {
            handle_mm_fault(pa, cx, &mut g, mm, Vaddr(addr), write).unwrap();
        }
        mm.nr_faults - before
    };
    let f = touch(&mut pa, &mut cx, &mut mm, a.0, false);
    record(&pa, 1, f, 0);
    let f = touch(&mut pa, &mut cx, &mut mm, a.0, true);
    record(&pa, 2, f, 0);
    let f = touch(
        &mut pa,
        &mut cx,
        &mut mm,
        (a + HPAGE_SIZE + 5 * PAGE_SIZE + 8).0,
        true,
    );
    record(&pa, 3, f, 0);
    let mut child = fork(&mut pa, &mut cx, &mut mm).unwrap();
    let f = touch(&mut pa, &mut cx, &mut child, (a + 3 * PAGE_SIZE).0, true);
    record(&pa, 4, f, 0);
    let f = touch(
        &mut pa,
        &mut cx,
        &mut child,
        (a + HPAGE_SIZE + 300 * PAGE_SIZE).0,
        true,
    );
    record(&pa, 5, f, 0);
    let f = touch(
        &mut pa,
        &mut cx,
        &mut child,
        (a + 2 * HPAGE_SIZE + 7).0,
        true,
    );
    record(&pa, 6, f, 0);
    exit_mmap(&mut pa, &mut cx, child);
    record(&pa, 7, 0, 0);
    let pool = pa.hugetlb.nr_huge_pages * HPAGE_SIZE;
    let e = hugetlb_mmap(
        &mut pa,
        &mut cx,
        &mut mm,
        Vaddr(0),
        pool,
        mm::vma::MapFlags::NONE,
    )
    .err()
    .map_or(0, errno);
    record(&pa, 8, 0, e);
    let e = mm
        .munmap(&mut pa, &mut cx, a + PAGE_SIZE, HPAGE_SIZE)
        .err()
        .map_or(0, errno);
    record(&pa, 9, 0, e);
    let e = mm.munmap(&mut pa, &mut cx, a, len).err().map_or(0, errno);
    record(&pa, 10, 0, e);
    exit_mmap(&mut pa, &mut cx, mm);
    pa.hugetlb.check();
    steps
}

/// Linux's errno values (asm-generic/errno-base.h).
const ENOMEM: i32 = 12;
const EFAULT: i32 = 14;
const EINVAL: i32 = 22;

#[test]
fn hugetlb_faults_and_pool_counters_match_the_live_kernel() {
    let cfg = HugetlbConfig::default();
    let predicted = model(cfg.nr_hugepages);
    let live = match native::hugetlb::run(&cfg) {
        Ok(r) => r,
        Err(e) if e.is_cannot_run() => {
            eprintln!("SKIPPED (cannot run here): {e}");
            return;
        }
        Err(e) => panic!("live hugetlb scenario failed: {e}"),
    };
    eprintln!("live kernel:\n{}", live.table());
    let mut diffs = Vec::new();
    for (m, l) in predicted.iter().zip(&live.steps) {
        if m != l {
            diffs.push(format!("{}: model {m:?}\n      live  {l:?}", STEPS[m.step]));
        }
    }
    assert_eq!(predicted.len(), live.steps.len());
    assert!(
        diffs.is_empty(),
        "model and kernel differ:\n{}",
        diffs.join("\n")
    );
}
