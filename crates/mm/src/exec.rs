//! What `execve()` leaves in a new address space (fs/exec.c and
//! fs/binfmt_elf.c; Linux 6.18, checked against the 6.12 source).
//!
//! # The kernel's steps
//!
//! `bprm_mm_init()` gives the new mm a one-page temporary stack just below
//! `STACK_TOP_MAX`, flagged `VM_STACK_INCOMPLETE_SETUP`; `copy_strings()`
//! writes the file name, the environment and the arguments into it from
//! the top down, each page through `get_arg_page()` (`expand_downwards()`
//! to the page, then `get_user_pages_remote()`, a write fault in the
//! kernel's own context). `load_elf_binary()` then picks the stack top
//! (`randomize_stack_top()`, `arch_align_stack()`), and
//! [`setup_arg_pages`] moves the stack there with its page tables
//! (`relocate_vma_down()`), clears the temporary flag and grows it by
//! [`STACK_EXPAND`] so that the program starts with room below its
//! arguments. The ELF loader maps each `PT_LOAD` segment's file part
//! (`elf_map()`, a private file mapping) and the rest of its memory size,
//! the `.bss`, as anonymous memory (`elf_load()` → `vm_brk_flags()`), first
//! for the program and then for its interpreter (`load_elf_interp()`), maps
//! the vDSO and vvar pages (`arch_setup_additional_pages()`), writes the
//! auxiliary vector, `argv` and `envp` pointers below the strings
//! (`create_elf_tables()`, ordinary faults of the kernel on the new stack)
//! and sets `mm->start_brk` one page past the program's `.bss`, randomized
//! by up to 1 GiB on x86-64 (`arch_randomize_brk()` in the 6.12 source).
//!
//! # What the model does and where it deviates
//!
//! The model has anonymous memory only: the file parts of the segments and
//! the special mappings belong to whoever replays the exec (the trace
//! replay keeps them beside the model, where faults are carried over). The
//! `.bss` is an ordinary anonymous private mapping. [`setup_arg_pages`]
//! builds the stack at its final place directly: the argument pages are
//! faulted in order 0 while the VMA still has the temporary flag (as the
//! kernel's are, whatever the large-folio settings), then the flag goes and
//! the VMA grows by [`STACK_EXPAND`]. The relocation itself, which moves
//! page tables without changing any folio, is not modelled.
//!
//! The live kernel of this host (6.18.44) agrees (`micro` tests in the
//! corpus notes): writes to a program's `.bss` and to its `brk` heap get
//! 16 KiB, 64 KiB and 2 MiB folios as any anonymous mapping does; the
//! stack gets them only inside its initial extent (below the arguments),
//! because each fault below it grows the VMA to exactly the faulting page,
//! so no larger aligned block fits; copy-on-write of a private file mapping
//! (the program's `.data`) is order 0 under every setting.

use crate::cost::Cx;
use crate::memory::{handle_mm_fault, MmGlobal, VmFault};
use crate::page_alloc::PageAlloc;
use crate::types::Vaddr;
use crate::types::PAGE_SIZE;
use crate::vma::{MmStruct, VmFlags, Vma, MMAP_MIN_ADDR, TASK_SIZE};

/// `stack_expand` of `setup_arg_pages()`: 128 KiB (the kernel's comment:
/// "randomly 32*4k (or 2*64k) pages") below the argument pages.
pub const STACK_EXPAND: u64 = 128 << 10;

/// Why [`setup_arg_pages`] refused a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// The range is not page-aligned, is empty, lies outside the user
    /// address space, or is smaller than its argument pages.
    BadStack,
    /// An argument page could not be faulted in (no memory in the model).
    Fault(VmFault),
}

/// Models `setup_arg_pages()` (fs/exec.c, 6.18) with the argument copy
/// before it: the stack VMA `[stack_start, stack_end)` (`VM_GROWSDOWN`,
/// read-write), whose top `nr_arg_pages` pages hold the strings that
/// `copy_strings()` wrote and are mapped, each an order-0 folio. These
/// faults are the kernel's (`get_user_pages_remote()`), which fire no page
/// fault tracepoint but count in `pgfault` and in the exec'ing task's
/// `ru_minflt` (`mm_account_fault()` counts `current->min_flt` before it
/// looks for registers), so `mm.nr_faults` counts them.
///
/// `stack_start` is normally `stack_end - nr_arg_pages * PAGE_SIZE -`
/// [`STACK_EXPAND`]; a smaller `RLIMIT_STACK` gives less.
#[allow(clippy::too_many_arguments)]
pub fn setup_arg_pages(
    pa: &mut PageAlloc,
    cx: &mut Cx,
    g: &mut MmGlobal,
    mm: &mut MmStruct,
    stack_start: u64,
    stack_end: u64,
    nr_arg_pages: u64,
) -> Result<(), ExecError> {
    let aligned = stack_start.is_multiple_of(PAGE_SIZE) && stack_end.is_multiple_of(PAGE_SIZE);
    let args = nr_arg_pages.max(1).saturating_mul(PAGE_SIZE);
    if !aligned
        || stack_start < MMAP_MIN_ADDR
        || stack_end > TASK_SIZE + PAGE_SIZE
        || stack_end <= stack_start
        || stack_end - stack_start < args
    {
        return Err(ExecError::BadStack);
    }
    let _ = mm.munmap(pa, cx, Vaddr(stack_start), stack_end - stack_start);
    let temporary = VmFlags::READ
        .or(VmFlags::WRITE)
        .or(VmFlags::ANON_PRIVATE)
        .or(VmFlags::GROWSDOWN)
        .or(VmFlags::STACK_INCOMPLETE_SETUP);
    let arg_start = stack_end - args;
    mm.insert_vma(Vma::anon(arg_start, stack_end, temporary));
    // copy_strings() fills the pages from the top down.
    let mut addr = stack_end;
    while addr > arg_start {
        addr -= PAGE_SIZE;
        handle_mm_fault(pa, cx, g, mm, Vaddr(addr), true).map_err(ExecError::Fault)?;
    }
    // vm_flags_clear(VM_STACK_INCOMPLETE_SETUP), then expand_stack_locked()
    // to the stack base.
    let mut vma = mm
        .vmas
        .remove(&arg_start)
        .expect("the stack VMA just inserted");
    vma.flags = vma.flags.without(VmFlags::STACK_INCOMPLETE_SETUP);
    vma.pgoff = vma
        .pgoff
        .wrapping_sub((arg_start - stack_start) / PAGE_SIZE);
    vma.start = stack_start;
    mm.vmas.insert(stack_start, vma);
    crate::vmacache::vmacache_invalidate(mm);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Preset;
    use crate::memory::{do_user_addr_fault, MthpEnabled, ThpEnabled};
    use crate::page_alloc::{MemoryLayout, NodeLayout};
    use crate::vmacache::TaskStruct;

    fn setup(mthp64: bool) -> (PageAlloc, Cx, MmGlobal, MmStruct) {
        let layout = MemoryLayout {
            nodes: vec![NodeLayout {
                nr_cpus: 1,
                nr_pages: 64 << 8,
            }],
            dma32_pages: 0,
        };
        let cfg = Preset::Linux6_18.config();
        let mut pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
        let mut cx = Cx::new(crate::VcpuId(0), crate::cost::CostTable::uniform(1));
        let mut mmcfg = cfg.mm;
        mmcfg.thp_enabled = ThpEnabled::Never;
        if mthp64 {
            mmcfg.mthp_enabled[4] = MthpEnabled::Always;
        }
        let g = MmGlobal::new(mmcfg);
        let mm = MmStruct::new(&mut pa, &mut cx, mmcfg.mmap_layout).expect("mm");
        (pa, cx, g, mm)
    }

    /// The stack of an exec with one argument page, top at a 64 KiB
    /// boundary, under 64 KiB mTHP:
    ///
    /// ```text
    ///   stack_start        ... 64K blocks ...      [A] stack_end
    ///   |<------------- 128 KiB ------------->|<4K>|
    /// ```
    ///
    /// The argument page A is order 0 (a fault of the task). A write just
    /// below it cannot take the 64 KiB block (A is mapped), so it gets a
    /// smaller folio; the next 64 KiB block down is whole and gets one
    /// folio; a write below the VMA grows it to exactly that page, 4 KiB.
    #[test]
    fn arg_pages_are_order_0_and_the_stack_grows_page_by_page() {
        let (mut pa, mut cx, mut g, mut mm) = setup(true);
        let end = 0x7ffd_0000_0000;
        let start = end - PAGE_SIZE - STACK_EXPAND;
        setup_arg_pages(&mut pa, &mut cx, &mut g, &mut mm, start, end, 1).expect("stack");
        assert_eq!(mm.nr_faults, 1, "the argument page is the task's fault");
        let v = mm.vma_at(end - 1).expect("stack vma");
        assert_eq!((v.start, v.end), (start, end));
        assert!(v.flags.contains(VmFlags::GROWSDOWN));
        assert!(!v.flags.contains(VmFlags::STACK_INCOMPLETE_SETUP));
        let allocs = |pa: &PageAlloc, kb| pa.vmstat.mthp_stat(kb, "anon_fault_alloc");
        assert_eq!(allocs(&pa, 64), 0);
        let mut task = TaskStruct::new(&mm, crate::vmacache::VmacachePolicy::None);
        let mut touch =
            |pa: &mut PageAlloc, cx: &mut Cx, g: &mut MmGlobal, mm: &mut MmStruct, a| {
                do_user_addr_fault(pa, cx, g, mm, &mut task, a, true)
            };
        // The page below the arguments: its 64 KiB block holds A.
        touch(
            &mut pa,
            &mut cx,
            &mut g,
            &mut mm,
            Vaddr(end - 2 * PAGE_SIZE),
        )
        .expect("fault");
        assert_eq!(allocs(&pa, 64), 0);
        // The whole block below.
        touch(&mut pa, &mut cx, &mut g, &mut mm, Vaddr(end - 0x10000 - 8)).expect("fault");
        assert_eq!(allocs(&pa, 64), 1);
        // Below the VMA: it grows to the page, which gets 4 KiB.
        let below = start - 3 * PAGE_SIZE + 100;
        touch(&mut pa, &mut cx, &mut g, &mut mm, Vaddr(below)).expect("fault");
        assert_eq!(
            mm.vma_at(end - 1).expect("stack").start,
            start - 3 * PAGE_SIZE
        );
        assert_eq!(allocs(&pa, 64), 1);
        assert_eq!(mm.nr_faults, 4);
    }

    #[test]
    fn the_stack_keeps_its_guard_gap() {
        let (mut pa, mut cx, mut g, mut mm) = setup(false);
        let end = 0x7ffd_0000_0000;
        let start = end - PAGE_SIZE - STACK_EXPAND;
        setup_arg_pages(&mut pa, &mut cx, &mut g, &mut mm, start, end, 1).expect("stack");
        let below = start - crate::vma::STACK_GUARD_GAP - 0x20000;
        mm.mmap(
            &mut pa,
            &mut cx,
            Vaddr(below),
            0x10000,
            crate::vma::MapFlags::FIXED,
        )
        .expect("mmap");
        assert!(mm.expand_downwards(&mut cx, start - PAGE_SIZE).is_ok());
        assert_eq!(
            mm.expand_downwards(&mut cx, below + 0x10000 + PAGE_SIZE),
            Err(crate::vma::Errno::NoMem),
            "inside the guard gap"
        );
        assert!(setup_arg_pages(&mut pa, &mut cx, &mut g, &mut mm, end, end, 1).is_err());
    }
}
