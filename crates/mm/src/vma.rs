//! Address spaces and their VMAs (mm/mmap.c, mm/vma.c, mm/madvise.c; Linux 6.18).
//!
//! # The VMA tree and what a lookup costs
//!
//! Since 6.1 the kernel keeps VMAs in a maple tree: a B-tree with up to 16
//! slots per node. The model keeps them in a `BTreeMap` keyed by start
//! address and charges a lookup as the maple tree would: one
//! [`Cost::VmaLookupLevel`] per tree level, the depth being that of a tree of
//! fan-out 16 over the VMAs (`ceil(log16(nr_vmas))`, at least 1).
//!
//! # Placement
//!
//! `get_unmapped_area()` is the top-down allocator of x86-64: the highest
//! gap below `mm->mmap_base` that fits. By default `mmap_base` is the fixed
//! [`MMAP_BASE`] (ASLR off); with `kernel.randomize_va_space` ≥ 1 the engine
//! lowers it by `arch_mmap_rnd()` pages from its seeded stream
//! ([`MmStruct::randomize_mmap_base`]), so runs stay deterministic. Anonymous mappings whose length is a multiple of 2 MiB are aligned
//! to 2 MiB, as `thp_get_unmapped_area()` does for anonymous mappings since
//! 6.7 (efa7df3e3bb5), restricted to PMD-multiple lengths since 6.12
//! (d4148aeab412); the `linux-4.18` preset does not align ([`MmapLayout`]).
//!
//! # The heap: `brk()`
//!
//! `mm->start_brk` is where the heap begins, just past the program's data
//! and bss; `mm->brk` is the current break. [`MmStruct::brk`] moves the
//! break as the `brk` system call does: growing expands the heap VMA in
//! place (or creates it), shrinking unmaps the pages above the new break.
//!
//! Deviations: the program image itself (text, data, bss) is not mapped;
//! every process's heap starts at [`DEFAULT_START_BRK`], the same address,
//! as on a machine with `kernel.randomize_va_space = 0` (the kernel's
//! default of 2 randomizes it by up to 32 MiB, page-granular, per exec;
//! a trace replay sets `start_brk` and `brk` from the recorded `brk(0)`);
//! `RLIMIT_DATA` is unlimited (its default) and `mlockall(MCL_FUTURE)` is
//! not modelled, so `brk()` never populates.
//!
//! `get_unmapped_area()` with a page offset (`mremap()` moving a VMA passes
//! the VMA's `vm_pgoff`) places the mapping at an address congruent to that
//! offset modulo 2 MiB, so that a moved range keeps its THP alignment: the
//! kernel's `__thp_get_unmapped_area()` searches for `len + 2 MiB` and
//! rounds, falling back to an unaligned search when no such gap exists.
//!
//! # Merging
//!
//! Adjacent VMAs merge when their flags are equal and their `vm_pgoff`s are
//! contiguous (`is_mergeable_vma()`, `can_vma_merge_before/after()`). An
//! anonymous VMA's `vm_pgoff` is its start address in pages when it is
//! created and moves with it (`mremap()` keeps it), so a moved VMA does not
//! merge with a neighbour whose pages were never in line with it.
//!
//! Deviation: only anonymous private mappings exist; the kernel also requires
//! a compatible `anon_vma` (two VMAs that both took faults since they were
//! separate `mmap()`s do not merge); the model does not track `anon_vma`s.
//! No `VM_ACCOUNT` (mprotect's commit accounting, which can also keep two
//! otherwise equal VMAs apart), no stack gap.
//!
//! `mprotect()` is in [`crate::mprotect`], `mremap()` in [`crate::mremap`].

use crate::cost::{Cost, Cx};
use crate::page_alloc::{AllocError, PageAlloc};
use crate::pgtable::{PageTables, PMD_SIZE};
use crate::types::{Vaddr, PAGE_SIZE};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// `TASK_SIZE` of x86-64 with 4-level paging (47 bits, less one page).
pub const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;
/// `mmap_base` without ASLR: `TASK_SIZE` less the default 8 MiB stack gap
/// rounded as `mmap_base()` does (128 MiB minimum gap).
pub const MMAP_BASE: u64 = TASK_SIZE - (128 << 20);
/// `vm.mmap_rnd_bits` default on x86-64 (`CONFIG_ARCH_MMAP_RND_BITS`, 28):
/// the bits of page-granular randomness in `mmap_base`.
pub const MMAP_RND_BITS: u32 = 28;
/// `vm.mmap_min_addr` default.
pub const MMAP_MIN_ADDR: u64 = 0x10000;
/// `stack_guard_gap` (mm/mmap.c): the gap `expand_downwards()` keeps
/// between a growing stack and the accessible VMA below it, 256 pages by
/// default (the `stack_guard_gap=` boot parameter).
pub const STACK_GUARD_GAP: u64 = 256 * PAGE_SIZE;
/// `RLIMIT_STACK`'s usual soft limit (`ulimit -s` 8192 KiB, `_STK_LIM`):
/// how far the stack may grow ([`MmStruct::rlimit_stack`]).
pub const STK_LIM: u64 = 8 << 20;
/// `ELF_ET_DYN_BASE` of x86-64 (`DEFAULT_MAP_WINDOW / 3 * 2`, page-aligned
/// by `load_elf_binary()`): where a position-independent executable is
/// loaded when its base is not randomized.
pub const ELF_ET_DYN_BASE: u64 = (((1 << 47) - PAGE_SIZE) / 3 * 2) & !(PAGE_SIZE - 1);
/// Size assumed for a program's image (text, data and bss) below its heap.
/// Estimate: GCC's `cc1`, the process a kernel build runs most, is about
/// 30 MB (its text and data as `size` prints them for GCC 12 on x86-64).
pub const DEFAULT_IMAGE_SIZE: u64 = 32 << 20;
/// `mm->start_brk` of every process in the model: the page after the
/// program's bss, without randomization (see the module documentation).
pub const DEFAULT_START_BRK: u64 = ELF_ET_DYN_BASE + DEFAULT_IMAGE_SIZE;

/// VMA flags (`vm_flags_t`), reduced to those the model uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct VmFlags(pub u32);

impl VmFlags {
    /// `VM_READ`.
    pub const READ: VmFlags = VmFlags(1 << 0);
    /// `VM_WRITE`.
    pub const WRITE: VmFlags = VmFlags(1 << 1);
    /// `VM_NORESERVE` (0x00200000): a `MAP_NORESERVE` hugetlb mapping that
    /// reserved no pages.
    pub const NORESERVE: VmFlags = VmFlags(1 << 21);
    /// `VM_HUGETLB` (0x00400000): a hugetlb mapping (`MAP_HUGETLB`), see
    /// [`crate::hugetlb`].
    pub const HUGETLB: VmFlags = VmFlags(1 << 22);
    /// Model bit, not a `VM_*` flag: the kernel's `HPAGE_RESV_OWNER` bit in
    /// `vm_private_data`, set on the private hugetlb VMA of the process that
    /// called mmap and holds its reservations (cleared in a forked child's
    /// copy).
    pub const HUGETLB_RESV_OWNER: VmFlags = VmFlags(1 << 28);
    /// `VM_EXEC`.
    pub const EXEC: VmFlags = VmFlags(1 << 2);
    /// `VM_GROWSDOWN` (0x00000100): the stack, which a fault just below it
    /// extends ([`MmStruct::expand_downwards`]).
    pub const GROWSDOWN: VmFlags = VmFlags(1 << 8);
    /// `VM_STACK_INCOMPLETE_SETUP` (`VM_RAND_READ | VM_SEQ_READ`, bits 16
    /// and 15 in the kernel; one model bit here): the temporary stack of an
    /// `execve()` in progress, which gets no large folio
    /// (`vma_is_temporary_stack()` in `__thp_vma_allowable_orders()`).
    pub const STACK_INCOMPLETE_SETUP: VmFlags = VmFlags(1 << 16);
    /// `VM_ACCESS_FLAGS`: read, write, exec. A VMA with none of them is
    /// `PROT_NONE` (`vma_is_accessible()` false).
    pub const ACCESS: VmFlags = VmFlags(0b111);
    /// Model bit, not a `VM_*` flag: a VMA that `brk()` created (the heap).
    /// The kernel's `brk()` expands only a VMA that begins at or above
    /// `start_brk` (`vma_prev_limit(&vmi, mm->start_brk)`) and otherwise
    /// inserts a new VMA without trying to merge it, so the heap stays apart
    /// from a `.bss` that ends exactly at `start_brk` (no brk randomization,
    /// `setarch -R`), and once both took faults their `anon_vma`s keep them
    /// apart. This bit stands for that: heap and non-heap VMAs never merge.
    pub const BRK_HEAP: VmFlags = VmFlags(1 << 27);
    /// `VM_HUGEPAGE`, set by `MADV_HUGEPAGE`.
    pub const HUGEPAGE: VmFlags = VmFlags(1 << 29);
    /// `VM_NOHUGEPAGE`, set by `MADV_NOHUGEPAGE`.
    pub const NOHUGEPAGE: VmFlags = VmFlags(1 << 30);
    /// Anonymous private memory (the kernel: `vma_is_anonymous()` and no `VM_SHARED`).
    pub const ANON_PRIVATE: VmFlags = VmFlags(1 << 31);

    /// True if every bit of `other` is set.
    pub fn contains(self, other: VmFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union.
    pub const fn or(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 | other.0)
    }

    /// Without the bits of `other`.
    pub const fn without(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 & !other.0)
    }
}

/// One virtual memory area, `[start, end)`.
///
/// Invariant: `start < end`, both page-aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Flags.
    pub flags: VmFlags,
    /// `vm_pgoff`: for anonymous memory, the page number of `start` when the
    /// mapping was created; kept when `mremap()` moves it.
    pub pgoff: u64,
}

impl Vma {
    /// A newly created anonymous VMA: `vm_pgoff` is `start >> PAGE_SHIFT`
    /// (`do_mmap()` for `MAP_PRIVATE | MAP_ANONYMOUS`).
    pub fn anon(start: u64, end: u64, flags: VmFlags) -> Vma {
        Vma {
            start,
            end,
            flags,
            pgoff: start / PAGE_SIZE,
        }
    }

    /// `vma_pages()`.
    pub fn nr_pages(&self) -> u64 {
        (self.end - self.start) / PAGE_SIZE
    }

    /// The page offset of `addr` inside the mapping (`linear_page_index()`).
    pub fn pgoff_of(&self, addr: u64) -> u64 {
        self.pgoff + (addr - self.start) / PAGE_SIZE
    }

    /// True if `next` may be merged after this VMA: adjacent, equal flags and
    /// contiguous `vm_pgoff` (`can_vma_merge_after()` without `anon_vma`).
    pub fn mergeable_with(&self, next: &Vma) -> bool {
        // Each MAP_HUGETLB mapping has its own file: never merged.
        self.end == next.start
            && self.flags == next.flags
            && !self.flags.contains(VmFlags::HUGETLB)
            && self.pgoff + self.nr_pages() == next.pgoff
    }
}

/// Errors of the address-space system calls, as the kernel's errno values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// `EINVAL`: a bad address, length or advice.
    Inval,
    /// `ENOMEM`: no room in the address space, a range not mapped, or no
    /// memory for page tables.
    NoMem,
    /// `EFAULT`: `mremap()` of an address with no VMA, or of a range that
    /// runs past the end of its VMA.
    Fault,
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Errno::Inval => "EINVAL",
            Errno::NoMem => "ENOMEM",
            Errno::Fault => "EFAULT",
        })
    }
}

impl std::error::Error for Errno {}

impl From<AllocError> for Errno {
    fn from(_: AllocError) -> Errno {
        Errno::NoMem
    }
}

/// `madvise()` advice the model implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_DONTNEED`: drop the range's pages; the next touch faults.
    DontNeed,
    /// `MADV_HUGEPAGE`: set `VM_HUGEPAGE`.
    HugePage,
    /// `MADV_NOHUGEPAGE`: set `VM_NOHUGEPAGE`.
    NoHugePage,
}

/// How `get_unmapped_area()` places anonymous mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapLayout {
    /// Linux < 6.7: page alignment only.
    PageAligned,
    /// Linux ≥ 6.12: 2 MiB alignment for anonymous mappings whose length is
    /// a multiple of 2 MiB.
    ThpAligned,
}

/// The `flags` argument of `mmap()` beyond `MAP_PRIVATE | MAP_ANONYMOUS`,
/// which every mapping of the model has (values of
/// include/uapi/asm-generic/mman-common.h). Typed, as [`crate::mremap::MremapFlags`]
/// is, so that a call reads `MapFlags::FIXED` rather than `true`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MapFlags(pub u32);

impl MapFlags {
    /// No flag: the kernel picks the address, `hint` is a hint.
    pub const NONE: MapFlags = MapFlags(0);
    /// `MAP_FIXED`: map at `hint` exactly, replacing what is there.
    pub const FIXED: MapFlags = MapFlags(0x10);
    /// `MAP_NORESERVE`: reserve nothing (for hugetlb: no pool pages).
    pub const NORESERVE: MapFlags = MapFlags(0x4000);
    /// `MAP_STACK`: the mapping is `VM_NOHUGEPAGE`, as `calc_vm_flag_bits()`
    /// makes it since 6.7. Callers pass a program's flags through
    /// [`crate::memory::MmConfig::calc_vm_flag_bits`], which drops it for an
    /// older kernel (where the flag did nothing).
    pub const STACK: MapFlags = MapFlags(0x20000);

    /// Union.
    pub const fn or(self, other: MapFlags) -> MapFlags {
        MapFlags(self.0 | other.0)
    }

    /// True if every bit of `other` is set.
    pub fn contains(self, other: MapFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A process's address space (`struct mm_struct`).
#[derive(Clone, Debug)]
pub struct MmStruct {
    /// VMAs by start address (the kernel's `mm_mt`).
    pub vmas: BTreeMap<u64, Vma>,
    /// Page tables.
    pub pgt: PageTables,
    /// Page faults taken, as `ru_minflt` counts them.
    pub nr_faults: u64,
    /// Placement of new mappings.
    pub layout: MmapLayout,
    /// `mm->mmap_base`: where top-down placement starts.
    pub mmap_base: u64,
    /// `mm->vmacache_seqnum` (Linux 3.15–6.0): bumped whenever a VMA leaves
    /// the tree, so that every task's per-task VMA cache revalidates
    /// ([`crate::vmacache`]).
    pub vmacache_seqnum: u64,
    /// `mm->start_brk`: the lowest break, where the heap begins.
    pub start_brk: u64,
    /// `mm->brk`: the current break as the program last set it (not
    /// necessarily page-aligned; the heap VMA ends at its page alignment).
    pub brk: u64,
    /// The reservation map of this process's private hugetlb mappings
    /// (`resv_map` of its `HPAGE_RESV_OWNER` VMAs): the huge pages, by
    /// address, whose reservation a fault has consumed. A page of an owner
    /// VMA not in the set still holds a reservation.
    pub hugetlb_resv_map: BTreeSet<u64>,
    /// `rlimit(RLIMIT_STACK)`: the largest stack VMA `expand_downwards()`
    /// allows ([`STK_LIM`] unless set).
    pub rlimit_stack: u64,
}

fn page_align(len: u64) -> Option<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|l| l & !(PAGE_SIZE - 1))
}

impl MmStruct {
    /// Models `mm_alloc()`: an empty address space with its PGD.
    pub fn new(
        pa: &mut PageAlloc,
        cx: &mut Cx,
        layout: MmapLayout,
    ) -> Result<MmStruct, AllocError> {
        Ok(MmStruct {
            vmas: BTreeMap::new(),
            pgt: PageTables::new(pa, cx)?,
            nr_faults: 0,
            layout,
            mmap_base: MMAP_BASE,
            vmacache_seqnum: 0,
            start_brk: DEFAULT_START_BRK,
            brk: DEFAULT_START_BRK,
            hugetlb_resv_map: BTreeSet::new(),
            rlimit_stack: STK_LIM,
        })
    }

    /// Models x86-64's `arch_pick_mmap_layout()` with `PF_RANDOMIZE`
    /// (`kernel.randomize_va_space` ≥ 1): `mmap_base` lies
    /// `arch_mmap_rnd()` pages below its fixed place, `random` taking
    /// [`MMAP_RND_BITS`] bits (`get_random_long()` in the kernel, a seeded
    /// stream in the model). Done once, at exec; a forked child keeps its
    /// parent's layout.
    pub fn randomize_mmap_base(&mut self, random: u64) {
        let rnd = (random & ((1 << MMAP_RND_BITS) - 1)) << crate::types::PAGE_SHIFT;
        self.mmap_base = MMAP_BASE - rnd;
    }

    /// Depth of a maple tree of fan-out 16 over this many VMAs.
    #[inline]
    pub fn maple_depth(&self) -> u64 {
        let mut depth = 1;
        let mut cap = 16u64;
        while (self.vmas.len() as u64) > cap {
            depth += 1;
            cap *= 16;
        }
        depth
    }

    /// Models `find_vma()`: the first VMA ending above `addr`.
    #[inline]
    pub fn find_vma(&self, cx: &mut Cx, addr: u64) -> Option<Vma> {
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        self.find_vma_uncharged(addr)
    }

    /// [`MmStruct::find_vma`] without charging the walk, for a caller whose
    /// walk is charged elsewhere.
    #[inline]
    pub fn find_vma_uncharged(&self, addr: u64) -> Option<Vma> {
        self.vmas
            .range(..=addr)
            .next_back()
            .map(|(_, v)| *v)
            .filter(|v| v.end > addr)
            .or_else(|| self.vmas.range(addr..).next().map(|(_, v)| *v))
    }

    /// The VMA containing `addr`, without charging a lookup (for the model's
    /// own bookkeeping inside a system call that already walked the tree).
    pub fn vma_at(&self, addr: u64) -> Option<Vma> {
        self.vmas
            .range(..=addr)
            .next_back()
            .map(|(_, v)| *v)
            .filter(|v| v.end > addr)
    }

    /// The VMA containing `addr`, if any (`vma_lookup()`).
    #[inline]
    pub fn vma_lookup(&self, cx: &mut Cx, addr: u64) -> Option<Vma> {
        self.find_vma(cx, addr).filter(|v| v.start <= addr)
    }

    /// Models `expand_downwards()` (mm/mmap.c, 6.18) as a fault below the
    /// stack calls it (`lock_mm_and_find_vma()` → `expand_stack_locked()`):
    /// the `VM_GROWSDOWN` VMA that is the first above `addr` grows down to
    /// `addr`'s page. Refused (`ENOMEM`) below `mmap_min_addr`, when the
    /// stack would exceed [`MmStruct::rlimit_stack`] (`acct_stack_growth()`),
    /// or when it would come within [`STACK_GUARD_GAP`] of an accessible VMA
    /// below that does not itself grow down. Returns the grown VMA.
    ///
    /// Deviation: the kernel's VMA keeps its identity as it grows; the
    /// model's VMAs are keyed by their start, so growing one invalidates the
    /// VMA caches (`vmacache_invalidate()`), which the 3.15–6.0 kernels did
    /// not do here. The guard gap is checked against the model's VMAs only
    /// (a caller that knows of other mappings below checks them itself).
    pub fn expand_downwards(&mut self, cx: &mut Cx, addr: u64) -> Result<Vma, Errno> {
        let address = addr & !(PAGE_SIZE - 1);
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        let vma = self
            .vmas
            .range(addr..)
            .next()
            .map(|(_, v)| *v)
            .filter(|v| v.flags.contains(VmFlags::GROWSDOWN))
            .ok_or(Errno::Fault)?;
        if address >= vma.start {
            return Ok(vma);
        }
        if address < MMAP_MIN_ADDR || vma.end - address > self.rlimit_stack {
            return Err(Errno::NoMem);
        }
        if let Some((_, prev)) = self.vmas.range(..vma.start).next_back() {
            let guarded =
                !prev.flags.contains(VmFlags::GROWSDOWN) && prev.flags.0 & VmFlags::ACCESS.0 != 0;
            if prev.end > address || (guarded && address - prev.end < STACK_GUARD_GAP) {
                return Err(Errno::NoMem);
            }
        }
        let grow = (vma.start - address) / PAGE_SIZE;
        let mut grown = vma;
        grown.start = address;
        grown.pgoff = vma.pgoff.wrapping_sub(grow);
        self.vmas.remove(&vma.start);
        self.vmas.insert(address, grown);
        crate::vmacache::vmacache_invalidate(self);
        Ok(grown)
    }

    /// True if no VMA overlaps `[start, end)`.
    pub(crate) fn range_is_free(&self, start: u64, end: u64) -> bool {
        self.range_free(start, end)
    }

    /// Inserts a new VMA (the caller found the range free) and merges it
    /// with equal neighbours.
    pub(crate) fn insert_vma(&mut self, vma: Vma) {
        self.vmas.insert(vma.start, vma);
        self.merge_range(vma.start, vma.end, Some(vma.start));
    }

    /// `vma->vm_ops->may_split()` for a split at `addr` of the VMA holding
    /// it: a hugetlb VMA splits only at a huge page boundary.
    pub(crate) fn may_split_at(&self, addr: u64) -> Result<(), Errno> {
        match self.vmas.range(..addr).next_back() {
            Some((_, v)) if v.end > addr => crate::hugetlb::hugetlb_vm_op_split(v, addr),
            _ => Ok(()),
        }
    }

    fn range_free(&self, start: u64, end: u64) -> bool {
        let below = self.vmas.range(..end).next_back();
        below.is_none_or(|(_, v)| v.end <= start)
    }

    /// Models `get_unmapped_area()` for an anonymous private mapping: the
    /// hint if it is free, else the highest fitting gap below `mmap_base`
    /// (`vm_unmapped_area()` top-down), aligned as [`MmapLayout`] says.
    pub fn get_unmapped_area(&self, cx: &mut Cx, len: u64, hint: u64) -> Result<u64, Errno> {
        self.get_unmapped_area_pgoff(cx, len, hint, 0)
    }

    /// [`MmStruct::get_unmapped_area`] for a mapping whose first page has
    /// page offset `pgoff` (`mremap()` passes the moved VMA's): under
    /// [`MmapLayout::ThpAligned`], a mapping whose length is a multiple of
    /// 2 MiB and whose offset range holds a whole 2 MiB block is placed at
    /// an address congruent to `pgoff << PAGE_SHIFT` modulo 2 MiB
    /// (`thp_get_unmapped_area_vmflags()` of 6.18: a top-down search for
    /// `len + 2 MiB`, then rounding; an unaligned search if that fails).
    pub fn get_unmapped_area_pgoff(
        &self,
        cx: &mut Cx,
        len: u64,
        hint: u64,
        pgoff: u64,
    ) -> Result<u64, Errno> {
        if len > TASK_SIZE - MMAP_MIN_ADDR {
            return Err(Errno::NoMem);
        }
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        if hint != 0 {
            let h = hint & !(PAGE_SIZE - 1);
            if h >= MMAP_MIN_ADDR && h <= TASK_SIZE - len && self.range_free(h, h + len) {
                return Ok(h);
            }
        }
        let off = pgoff.wrapping_mul(PAGE_SIZE);
        let off_end = off.wrapping_add(len);
        let off_align = off.next_multiple_of(PMD_SIZE);
        if self.layout == MmapLayout::ThpAligned
            && len.is_multiple_of(PMD_SIZE)
            && off_end > off_align
            && off_end - off_align >= PMD_SIZE
        {
            if let Some(ret) = self.unmapped_area_topdown(len + PMD_SIZE) {
                let off_sub = off.wrapping_sub(ret) & (PMD_SIZE - 1);
                // Top-down, an already aligned result leaves the pad below.
                return Ok(if off_sub == 0 {
                    ret + PMD_SIZE
                } else {
                    ret + off_sub
                });
            }
        }
        self.unmapped_area_topdown(len).ok_or(Errno::NoMem)
    }

    /// Models `unmapped_area_topdown()`: the highest page-aligned start of a
    /// gap of `len` bytes between `mmap_min_addr` and the process's `mmap_base`.
    fn unmapped_area_topdown(&self, len: u64) -> Option<u64> {
        let fit = |low: u64, high: u64| -> Option<u64> {
            let start = high.checked_sub(len)?;
            (start >= low.max(MMAP_MIN_ADDR)).then_some(start)
        };
        let mut high = self.mmap_base;
        for (_, v) in self.vmas.range(..self.mmap_base).rev() {
            if v.end < high {
                if let Some(s) = fit(v.end, high) {
                    return Some(s);
                }
            }
            high = high.min(v.start);
        }
        fit(MMAP_MIN_ADDR, high)
    }

    /// Models `__split_vma()`: splits the VMA containing `addr` (if any, and
    /// if `addr` is inside it) into `[start, addr)` and `[addr, end)`. A PMD
    /// leaf that maps across `addr` is split first
    /// (`vma_adjust_trans_huge()`: a huge page cannot be mapped by two VMAs).
    pub(crate) fn split_at(&mut self, pa: &mut PageAlloc, cx: &mut Cx, addr: u64) {
        let Some((&s, v)) = self.vmas.range(..addr).next_back() else {
            return;
        };
        if v.end <= addr {
            return;
        }
        let mut hi = *v;
        hi.start = addr;
        hi.pgoff = v.pgoff_of(addr);
        let haddr = addr & !(PMD_SIZE - 1);
        if addr != haddr && haddr >= v.start && haddr + PMD_SIZE <= v.end {
            crate::memory::split_huge_pmd_address(pa, cx, self, addr);
        }
        self.vmas.get_mut(&s).expect("vma").end = addr;
        self.vmas.insert(addr, hi);
    }

    /// Merges VMAs around `[start, end)` that touch, with equal flags and
    /// contiguous page offsets (`vma_merge_new_range()`/`vma_modify()`'s
    /// merge step).
    ///
    /// `fresh` is the start of a VMA that `mmap()` inserted just now: no
    /// lookup can have cached it, so its disappearing into the VMA below does
    /// not invalidate the VMA caches (the kernel never allocated it: 4.19's
    /// `vma_merge()` only extends the previous VMA). Every other VMA that
    /// leaves the tree does.
    pub(crate) fn merge_range(&mut self, start: u64, end: u64, fresh: Option<u64>) {
        let first = self
            .vmas
            .range(..start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(start);
        // The VMAs with their keys, copied once; `cur` is the VMA the next
        // may merge into, kept up to date with the map (host speed only: no
        // map lookup per VMA).
        let vmas: Vec<(u64, Vma)> = self
            .vmas
            .range(first..=end)
            .map(|(&s, &v)| (s, v))
            .collect();
        let mut cur: Option<(u64, Vma)> = None;
        for (k, v) in vmas {
            if let Some((c, cv)) = cur.as_mut() {
                if cv.mergeable_with(&v) {
                    self.vmas.remove(&k);
                    if fresh != Some(k) {
                        crate::vmacache::vmacache_invalidate(self);
                    }
                    cv.end = v.end;
                    self.vmas.get_mut(c).expect("vma").end = v.end;
                    continue;
                }
            }
            cur = Some((k, v));
        }
    }

    /// Models `do_mmap()` of an anonymous private read-write mapping:
    /// `mmap(hint, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS
    /// | flags, -1, 0)`. Returns the address. Of `flags`, `MAP_FIXED`
    /// places the mapping at `hint`; `MAP_STACK` makes it `VM_NOHUGEPAGE`
    /// (6.7+, [`MapFlags::STACK`]), so that it merges only with neighbours
    /// of the same flags; `MAP_NORESERVE` changes nothing here, as the
    /// model does no overcommit accounting for private memory.
    pub fn mmap(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        hint: Vaddr,
        len: u64,
        flags: MapFlags,
    ) -> Result<Vaddr, Errno> {
        let hint = hint.0;
        if len == 0 {
            return Err(Errno::Inval);
        }
        let len = page_align(len).ok_or(Errno::NoMem)?;
        let addr = if flags.contains(MapFlags::FIXED) {
            if !hint.is_multiple_of(PAGE_SIZE) {
                return Err(Errno::Inval);
            }
            if hint > TASK_SIZE || len > TASK_SIZE - hint || hint < MMAP_MIN_ADDR {
                return Err(Errno::NoMem);
            }
            // MAP_FIXED replaces whatever was there.
            self.munmap(pa, cx, Vaddr(hint), len)?;
            hint
        } else {
            self.get_unmapped_area(cx, len, hint)?
        };
        let mut vm_flags = VmFlags::READ.or(VmFlags::WRITE).or(VmFlags::ANON_PRIVATE);
        if flags.contains(MapFlags::STACK) {
            vm_flags = vm_flags.or(VmFlags::NOHUGEPAGE);
        }
        self.vmas
            .insert(addr, Vma::anon(addr, addr + len, vm_flags));
        self.merge_range(addr, addr + len, Some(addr));
        Ok(Vaddr(addr))
    }

    /// Models `do_vmi_munmap()`: unmaps `[addr, addr + len)`, splitting
    /// VMAs that straddle its ends, freeing the pages and then the page
    /// tables that only the removed range used.
    pub fn munmap(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: Vaddr,
        len: u64,
    ) -> Result<(), Errno> {
        let addr = addr.0;
        if !addr.is_multiple_of(PAGE_SIZE) || addr > TASK_SIZE || len > TASK_SIZE - addr {
            return Err(Errno::Inval);
        }
        let len = page_align(len).ok_or(Errno::Inval)?;
        if len == 0 {
            return Err(Errno::Inval);
        }
        let end = addr + len;
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        self.may_split_at(addr)?;
        self.may_split_at(end)?;
        self.split_at(pa, cx, addr);
        self.split_at(pa, cx, end);
        let gone: Vec<u64> = self.vmas.range(addr..end).map(|(&s, _)| s).collect();
        if gone.is_empty() {
            return Ok(());
        }
        for s in &gone {
            let v = self.vmas.remove(s).expect("vma");
            // Detaching a VMA is what makes cached pointers to it stale
            // (`detach_vmas_to_be_unmapped()` calls `vmacache_invalidate()`).
            crate::vmacache::vmacache_invalidate(self);
            if v.flags.contains(VmFlags::HUGETLB) {
                crate::hugetlb::hugetlb_unmap_vma(pa, cx, self, &v);
            } else {
                crate::memory::zap_page_range(pa, cx, self, v.start, v.end);
            }
        }
        // Page tables may be freed up to the neighbouring VMAs (the kernel's
        // floor and ceiling in free_pgtables()).
        let floor = self
            .vmas
            .range(..addr)
            .next_back()
            .map_or(0, |(_, v)| v.end);
        let ceiling = self
            .vmas
            .range(end..)
            .next()
            .map_or(u64::MAX, |(_, v)| v.start);
        self.pgt.free_pgd_range(pa, cx, floor, ceiling);
        Ok(())
    }

    /// Models the `brk()` system call of Linux 6.18 (mm/mmap.c): moves the
    /// program break to `brk` and returns the new break, or the old one if
    /// the request is refused (the kernel's convention: `brk()` never
    /// returns an errno, and `brk(0)` is how a C library learns the current
    /// break).
    ///
    /// - Below `start_brk`: refused.
    /// - Same page-aligned end: only `mm->brk` changes.
    /// - Shrinking (always allowed): the pages from the new page-aligned
    ///   break to the old one are unmapped (`do_vmi_align_munmap()`),
    ///   provided a VMA lies there.
    /// - Growing: refused if any VMA begins below the new end plus one
    ///   guard page; otherwise `do_brk_flags()` expands the heap VMA when it
    ///   ends at the old break, or inserts a new VMA there.
    ///
    /// Deviation: `mm->brk` is set before the unmap of a shrink and not
    /// restored if that unmap fails (the kernel restores it).
    pub fn brk(&mut self, pa: &mut PageAlloc, cx: &mut Cx, brk: Vaddr) -> Vaddr {
        Vaddr(self.do_brk(pa, cx, brk.0))
    }

    /// The body of [`MmStruct::brk`], in plain byte addresses.
    fn do_brk(&mut self, pa: &mut PageAlloc, cx: &mut Cx, brk: u64) -> u64 {
        let origbrk = self.brk;
        if brk < self.start_brk {
            return origbrk;
        }
        let (Some(newbrk), Some(oldbrk)) = (page_align(brk), page_align(self.brk)) else {
            return origbrk;
        };
        if oldbrk == newbrk {
            self.brk = brk;
            return brk;
        }
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        if brk <= self.brk {
            // Search one VMA in [newbrk, oldbrk): it must be the heap.
            let brkvma = self
                .vmas
                .range(..oldbrk)
                .next_back()
                .map(|(_, v)| *v)
                .filter(|v| v.end > newbrk);
            if brkvma.is_none() {
                return origbrk;
            }
            self.brk = brk;
            if self.munmap(pa, cx, Vaddr(newbrk), oldbrk - newbrk).is_err() {
                return origbrk;
            }
            return brk;
        }
        // check_brk_limits(): the range must fit below TASK_SIZE.
        if newbrk > TASK_SIZE {
            return origbrk;
        }
        // The next VMA must leave a guard page above the new break.
        let limit = newbrk + PAGE_SIZE;
        let next = self
            .vmas
            .range(..limit)
            .next_back()
            .map(|(_, v)| *v)
            .filter(|v| v.end > oldbrk);
        if next.is_some() {
            return origbrk;
        }
        self.do_brk_flags(cx, oldbrk, newbrk - oldbrk);
        self.brk = brk;
        brk
    }

    /// Models `do_brk_flags()` (mm/vma.c, 6.18): maps `[addr, addr + len)`
    /// as heap, expanding the VMA that ends at `addr` (at or above
    /// `start_brk`, with the heap's flags) in place, else inserting a new
    /// VMA. The new range never merges with the VMA after it (the kernel's
    /// `just_expand` merge looks only at the previous one, and `brk()` has
    /// checked that a guard page separates the next).
    fn do_brk_flags(&mut self, cx: &mut Cx, addr: u64, len: u64) {
        let flags = VmFlags::READ
            .or(VmFlags::WRITE)
            .or(VmFlags::ANON_PRIVATE)
            .or(VmFlags::BRK_HEAP);
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        let prev = self
            .vmas
            .range(..addr)
            .next_back()
            .map(|(_, v)| *v)
            .filter(|v| v.end == addr && v.end > self.start_brk && v.flags == flags);
        match prev {
            Some(v) => self.vmas.get_mut(&v.start).expect("vma").end = addr + len,
            None => {
                // A VMA that ends exactly at `start_brk` (a `.bss` without
                // brk randomization) has no [`VmFlags::BRK_HEAP`]: it stays
                // apart, as in the kernel.
                self.vmas.insert(addr, Vma::anon(addr, addr + len, flags));
                self.merge_range(addr, addr + len, Some(addr));
            }
        }
    }

    /// Models `do_madvise()` for the advice the model has. Applies to the
    /// mapped parts of the range and returns `ENOMEM` if part of it is
    /// unmapped, as the kernel does.
    pub fn madvise(
        &mut self,
        pa: &mut PageAlloc,
        cx: &mut Cx,
        addr: Vaddr,
        len: u64,
        advice: Advice,
    ) -> Result<(), Errno> {
        let addr = addr.0;
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::Inval);
        }
        let len = page_align(len).ok_or(Errno::Inval)?;
        let end = addr.checked_add(len).ok_or(Errno::Inval)?;
        if len == 0 {
            return Ok(());
        }
        cx.charge_n(Cost::VmaLookupLevel, self.maple_depth());
        // The walk starts at the first VMA ending above `addr` (the kernel's
        // find_vma()), not at the lowest VMA of the address space.
        let from = self
            .find_vma_uncharged(addr)
            .map_or(end, |v| v.start.min(end));
        let mut unmapped = false;
        let mut pos = addr;
        for (_, v) in self.vmas.range(from..end) {
            if v.end > pos && v.start < end {
                unmapped |= v.start > pos;
                pos = v.end;
            }
        }
        unmapped |= pos < end;
        match advice {
            Advice::DontNeed => {
                let parts: Vec<(u64, u64, bool)> = self
                    .vmas
                    .range(from..end)
                    .map(|(_, v)| {
                        (
                            v.start.max(addr),
                            v.end.min(end),
                            v.flags.contains(VmFlags::HUGETLB),
                        )
                    })
                    .collect();
                // madvise_dontneed_free_valid_vma(): in a hugetlb VMA the
                // start must be huge-page aligned and the end is rounded
                // down to a huge page.
                let hsize = crate::hugetlb::HPAGE_SIZE;
                if parts.iter().any(|&(s, _, h)| h && !s.is_multiple_of(hsize)) {
                    return Err(Errno::Inval);
                }
                for (s, e, hugetlb) in parts {
                    if hugetlb {
                        let e = e & !(hsize - 1);
                        if e > s {
                            crate::hugetlb::unmap_hugepage_range(pa, cx, self, s, e);
                        }
                    } else {
                        crate::memory::zap_page_range(pa, cx, self, s, e);
                    }
                }
            }
            Advice::HugePage | Advice::NoHugePage => {
                self.may_split_at(addr)?;
                self.may_split_at(end)?;
                self.split_at(pa, cx, addr);
                self.split_at(pa, cx, end);
                let (set, clear) = if advice == Advice::HugePage {
                    (VmFlags::HUGEPAGE, VmFlags::NOHUGEPAGE)
                } else {
                    (VmFlags::NOHUGEPAGE, VmFlags::HUGEPAGE)
                };
                for (_, v) in self.vmas.range_mut(addr..end) {
                    v.flags = v.flags.without(clear).or(set);
                }
                self.merge_range(addr, end, None);
            }
        }
        if unmapped {
            Err(Errno::NoMem)
        } else {
            Ok(())
        }
    }

    /// Checks the VMA tree's invariants: sorted, non-overlapping, aligned,
    /// keyed by start, inside the user address space, and no two mergeable
    /// neighbours left unmerged.
    pub fn check_vmas(&self) {
        let mut prev: Option<Vma> = None;
        for (&k, v) in &self.vmas {
            assert_eq!(k, v.start, "vma keyed by {k:#x} starts at {:#x}", v.start);
            assert!(
                v.start < v.end
                    && v.start.is_multiple_of(PAGE_SIZE)
                    && v.end.is_multiple_of(PAGE_SIZE)
                    && v.start >= MMAP_MIN_ADDR
                    && v.end <= TASK_SIZE,
                "bad vma {v:?}"
            );
            if let Some(p) = prev {
                assert!(p.end <= v.start, "overlapping vmas {p:?} {v:?}");
                assert!(!p.mergeable_with(v), "unmerged neighbours {p:?} {v:?}");
            }
            prev = Some(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::CostTable;
    use crate::page_alloc::{MemoryLayout, NodeLayout, VmSysctl};
    use crate::types::VcpuId;

    const P: u64 = PAGE_SIZE;

    fn setup() -> (PageAlloc, Cx, MmStruct) {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 1,
                nr_pages: 1 << 16,
            }],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(&layout, VmSysctl::default(), Default::default());
        let mut cx = Cx::new(VcpuId(0), CostTable::uniform(1));
        let mm = MmStruct::new(&mut pa, &mut cx, MmapLayout::ThpAligned).unwrap();
        (pa, cx, mm)
    }

    fn spans(mm: &MmStruct) -> Vec<(u64, u64)> {
        mm.check_vmas();
        mm.vmas.values().map(|v| (v.start, v.end)).collect()
    }

    #[test]
    fn split_and_merge_scenario() {
        let (mut pa, mut cx, mut mm) = setup();
        let b = 0x1000_0000;
        // AAAAAAAAAA      one mapping of 10 pages
        mm.mmap(&mut pa, &mut cx, Vaddr(b), 10 * P, MapFlags::FIXED)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 10 * P)]);
        // AAA BBBB AAA    MADV_HUGEPAGE in the middle splits it in three
        mm.madvise(&mut pa, &mut cx, Vaddr(b + 3 * P), 4 * P, Advice::HugePage)
            .unwrap();
        assert_eq!(
            spans(&mm),
            vec![
                (b, b + 3 * P),
                (b + 3 * P, b + 7 * P),
                (b + 7 * P, b + 10 * P)
            ]
        );
        // AAAAAAAAAA      MADV_NOHUGEPAGE over all of it: equal flags merge back
        mm.madvise(&mut pa, &mut cx, Vaddr(b), 10 * P, Advice::NoHugePage)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 10 * P)]);
        // AA  AAAAAA      munmap of two pages leaves a hole
        mm.munmap(&mut pa, &mut cx, Vaddr(b + 2 * P), 2 * P)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 2 * P), (b + 4 * P, b + 10 * P)]);
        // AA  AAAAAA      madvise across the hole applies to both sides, ENOMEM
        assert_eq!(
            mm.madvise(&mut pa, &mut cx, Vaddr(b), 10 * P, Advice::HugePage),
            Err(Errno::NoMem)
        );
        // AACCAAAAAA      a fixed mapping filling the hole merges all three
        mm.mmap(&mut pa, &mut cx, Vaddr(b + 2 * P), 2 * P, MapFlags::FIXED)
            .unwrap();
        mm.madvise(&mut pa, &mut cx, Vaddr(b + 2 * P), 2 * P, Advice::HugePage)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 10 * P)]);
    }

    #[test]
    fn a_map_stack_mapping_is_nohugepage_and_merges_only_with_its_kind() {
        let (mut pa, mut cx, mut mm) = setup();
        let b = 0x1000_0000;
        let nohuge = |mm: &MmStruct| -> Vec<bool> {
            mm.vmas
                .values()
                .map(|v| v.flags.contains(VmFlags::NOHUGEPAGE))
                .collect()
        };
        // AAAA            a plain mapping of 4 pages
        mm.mmap(&mut pa, &mut cx, Vaddr(b), 4 * P, MapFlags::FIXED)
            .unwrap();
        // AAAASSSS        a MAP_STACK one beside it: VM_NOHUGEPAGE, no merge
        let stack = MapFlags::FIXED.or(MapFlags::STACK);
        mm.mmap(&mut pa, &mut cx, Vaddr(b + 4 * P), 4 * P, stack)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 4 * P), (b + 4 * P, b + 8 * P)]);
        assert_eq!(nohuge(&mm), vec![false, true]);
        // AAAASSSSSSSS    another MAP_STACK one merges with the first
        mm.mmap(&mut pa, &mut cx, Vaddr(b + 8 * P), 4 * P, stack)
            .unwrap();
        assert_eq!(spans(&mm), vec![(b, b + 4 * P), (b + 4 * P, b + 12 * P)]);
        assert_eq!(nohuge(&mm), vec![false, true]);
    }

    #[test]
    fn errors_are_the_kernels() {
        let (mut pa, mut cx, mut mm) = setup();
        assert_eq!(
            mm.mmap(&mut pa, &mut cx, Vaddr(0), 0, MapFlags::NONE),
            Err(Errno::Inval)
        );
        assert_eq!(
            mm.mmap(&mut pa, &mut cx, Vaddr(0x1001), P, MapFlags::FIXED),
            Err(Errno::Inval)
        );
        assert_eq!(
            mm.mmap(&mut pa, &mut cx, Vaddr(0), TASK_SIZE, MapFlags::NONE),
            Err(Errno::NoMem)
        );
        assert_eq!(
            mm.munmap(&mut pa, &mut cx, Vaddr(0x1001), P),
            Err(Errno::Inval)
        );
        assert_eq!(
            mm.munmap(&mut pa, &mut cx, Vaddr(0x10000), 0),
            Err(Errno::Inval)
        );
    }

    #[test]
    fn top_down_placement_aligns_pmd_multiples() {
        let (mut pa, mut cx, mut mm) = setup();
        let a = mm
            .mmap(&mut pa, &mut cx, Vaddr(0), 3 * P, MapFlags::NONE)
            .unwrap();
        assert_eq!(a + 3 * P, Vaddr(MMAP_BASE));
        let b = mm
            .mmap(&mut pa, &mut cx, Vaddr(0), 2 * PMD_SIZE, MapFlags::NONE)
            .unwrap();
        assert!(b.is_multiple_of(PMD_SIZE) && b + 2 * PMD_SIZE <= a);
        assert_eq!(mm.maple_depth(), 1);
    }

    #[test]
    fn brk_grows_shrinks_and_returns_the_old_break_on_failure() {
        let (mut pa, mut cx, mut mm) = setup();
        let s = DEFAULT_START_BRK;
        // brk(0): below start_brk, refused; the answer is the current break.
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(0)), Vaddr(s));
        assert!(spans(&mm).is_empty());
        // HH              grow by 5000 bytes: the heap VMA ends page-aligned
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s + 5000)), Vaddr(s + 5000));
        assert_eq!(spans(&mm), vec![(s, s + 2 * P)]);
        assert_eq!(mm.brk, s + 5000);
        // HHHH            grow again: the same VMA expands in place
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s + 4 * P)), Vaddr(s + 4 * P));
        assert_eq!(spans(&mm), vec![(s, s + 4 * P)]);
        // HHHH MM         a fixed mapping one guard page above the break
        mm.mmap(&mut pa, &mut cx, Vaddr(s + 5 * P), 2 * P, MapFlags::FIXED)
            .unwrap();
        // growing into the guard page is refused: the old break comes back
        assert_eq!(
            mm.brk(&mut pa, &mut cx, Vaddr(s + 4 * P + 1)),
            Vaddr(s + 4 * P)
        );
        assert_eq!(mm.brk, s + 4 * P);
        // HH   MM         shrinking unmaps above the new page-aligned break
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s + P + 1)), Vaddr(s + P + 1));
        assert_eq!(spans(&mm), vec![(s, s + 2 * P), (s + 5 * P, s + 7 * P)]);
        // a break inside the same page only moves mm->brk
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s + 2 * P)), Vaddr(s + 2 * P));
        assert_eq!(spans(&mm), vec![(s, s + 2 * P), (s + 5 * P, s + 7 * P)]);
        //      MM         back to start_brk: the heap VMA is gone
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s)), Vaddr(s));
        assert_eq!(spans(&mm), vec![(s + 5 * P, s + 7 * P)]);
        // H    MM         and comes back as a new VMA
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s + P)), Vaddr(s + P));
        assert_eq!(spans(&mm), vec![(s, s + P), (s + 5 * P, s + 7 * P)]);
        //      MM         the program unmapped its heap itself: a shrink
        //                 finds no VMA and is refused
        mm.munmap(&mut pa, &mut cx, Vaddr(s), P).unwrap();
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s)), Vaddr(s + P));
        // below start_brk: refused
        assert_eq!(mm.brk(&mut pa, &mut cx, Vaddr(s - P)), Vaddr(s + P));
    }

    #[test]
    fn brk_shrink_frees_the_heap_pages() {
        use crate::memory::{handle_mm_fault, MmConfig, MmGlobal};
        let (mut pa, mut cx, mut mm) = setup();
        let mut g = MmGlobal::new(MmConfig::default());
        let s = DEFAULT_START_BRK;
        let free0 = pa.zones.iter().map(|z| z.nr_free_pages).sum::<u64>() + pa.nr_pcp_pages();
        mm.brk(&mut pa, &mut cx, Vaddr(s + 64 * P));
        for i in 0..64 {
            handle_mm_fault(&mut pa, &mut cx, &mut g, &mut mm, Vaddr(s + i * P), true).unwrap();
        }
        let used = |pa: &PageAlloc| {
            free0 - pa.zones.iter().map(|z| z.nr_free_pages).sum::<u64>() - pa.nr_pcp_pages()
        };
        // 64 pages and the page tables (PUD, PMD, PTE table).
        assert_eq!(used(&pa), 64 + 3);
        mm.brk(&mut pa, &mut cx, Vaddr(s + 16 * P));
        assert_eq!(used(&pa), 16 + 3);
        // An access above the new break is outside every VMA.
        assert!(
            handle_mm_fault(&mut pa, &mut cx, &mut g, &mut mm, Vaddr(s + 20 * P), true).is_err()
        );
    }
}
