//! The test world of the fault-count tests: one kernel's page allocator,
//! a kernel-entry context and the fault path's global state on a 3 GiB,
//! 2-CPU machine, with helpers to map, touch and tear down address spaces.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use mm::cost::{CostTable, Cx};
use mm::knobs::KernelConfig;
use mm::memory::{exit_mmap, handle_mm_fault, MmGlobal};
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc};
use mm::pgtable::PMD_SIZE;
use mm::vma::MmStruct;
use mm::Vaddr;
use mm::VcpuId;

pub const KIB: u64 = 1 << 10;
pub const GIB: u64 = 1 << 30;
/// Every anonymous mTHP size, 16 KiB to 2 MiB.
pub const SIZES_KB: [u64; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];

pub struct World {
    pub pa: PageAlloc,
    pub cx: Cx,
    pub g: MmGlobal,
    free_at_boot: u64,
}

impl World {
    /// A machine of 3 GiB and 2 CPUs running a kernel configured as `cfg`.
    pub fn new(cfg: KernelConfig) -> World {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 2,
                nr_pages: 3 * GIB / 4096,
            }],
            dma32_pages: 0,
        };
        let pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
        let free_at_boot = pa.nr_free_pages() + pa.nr_pcp_pages();
        World {
            pa,
            cx: Cx::new(VcpuId(0), CostTable::uniform(1)),
            g: MmGlobal::new(cfg.mm),
            free_at_boot,
        }
    }

    pub fn mm(&mut self) -> MmStruct {
        MmStruct::new(&mut self.pa, &mut self.cx, self.g.cfg.mmap_layout).unwrap()
    }

    /// Writes one byte at `a`, faulting if the page is not mapped writable.
    pub fn touch_one(&mut self, mm: &mut MmStruct, a: u64) {
        if !mm::memory::access_ok(mm, Vaddr(a), true) {
            handle_mm_fault(&mut self.pa, &mut self.cx, &mut self.g, mm, Vaddr(a), true).unwrap();
            assert!(
                mm::memory::access_ok(mm, Vaddr(a), true),
                "fault at {a:#x} left it unmapped"
            );
        }
    }

    /// Writes one byte per 4 KiB of `[start, start + len)`; returns the faults.
    pub fn touch(&mut self, mm: &mut MmStruct, start: u64, len: u64) -> u64 {
        let before = mm.nr_faults;
        let mut a = start;
        while a < start + len {
            self.touch_one(mm, a);
            a += 4096;
        }
        mm.nr_faults - before
    }

    /// A 2 MiB-aligned 1 GiB mapping.
    pub fn aligned(&mut self, mm: &mut MmStruct) -> u64 {
        let a = mm
            .mmap(
                &mut self.pa,
                &mut self.cx,
                Vaddr(0),
                GIB,
                mm::vma::MapFlags::NONE,
            )
            .unwrap();
        assert_eq!(a % PMD_SIZE, 0);
        a.0
    }

    /// A mapping 12 KiB past a 2 MiB boundary, 20 KiB shorter than 1 GiB.
    pub fn ragged(&mut self, mm: &mut MmStruct) -> (u64, u64) {
        let base = mm
            .mmap(
                &mut self.pa,
                &mut self.cx,
                Vaddr(0),
                GIB + 2 * PMD_SIZE,
                mm::vma::MapFlags::NONE,
            )
            .unwrap();
        mm.munmap(&mut self.pa, &mut self.cx, base, GIB + 2 * PMD_SIZE)
            .unwrap();
        let start = base.next_multiple_of(PMD_SIZE) + 12 * KIB;
        let len = GIB - 20 * KIB;
        assert_eq!(
            mm.mmap(
                &mut self.pa,
                &mut self.cx,
                start,
                len,
                mm::vma::MapFlags::FIXED
            )
            .unwrap(),
            start
        );
        (start.0, len)
    }

    /// A per-size statistic of `hugepages-<kb>kB/stats`.
    pub fn stat(&self, kb: u64, name: &str) -> u64 {
        self.pa.vmstat.mthp_stat(kb, name)
    }

    pub fn exit(&mut self, mm: MmStruct) {
        exit_mmap(&mut self.pa, &mut self.cx, mm);
    }

    /// Every page is back in the free areas (buddy + PCP) and no large
    /// folio of any size is left.
    pub fn check_all_free(&self) {
        self.pa.check_invariants();
        assert_eq!(
            self.pa.nr_free_pages() + self.pa.nr_pcp_pages(),
            self.free_at_boot,
            "pages leaked"
        );
        for kb in SIZES_KB {
            assert_eq!(self.stat(kb, "nr_anon"), 0, "{kb}kB folios left");
            assert_eq!(self.stat(kb, "nr_anon_partially_mapped"), 0);
        }
    }
}
