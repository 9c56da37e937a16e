//! The operations a task performs, and what it learns back.
//!
//! A task is a lazy stream of operations: the engine asks its [`Program`]
//! for the next one, passing the result of the previous, so a workload never
//! holds more than its own live state (a list of pages it owns, a position in
//! a loop) however long it runs.

use crate::rng::Rng;
use mm::mprotect::Prot;
use mm::mremap::MremapFlags;
use mm::page_alloc::{AllocError, Gfp};
use mm::vma::{Advice, Errno, MapFlags};
use mm::Pfn;
use std::fmt;

/// A channel between tasks, by index.
pub type ChanId = u32;

/// A block of pages a task owns: its first pfn and its order.
pub type Block = (Pfn, u8);

/// One operation of a task.
///
/// Not `Clone` or `PartialEq`: [`Op::Fork`] carries the child's program.
#[derive(Debug)]
pub enum Op {
    /// `alloc_pages(gfp, order)`.
    AllocPages {
        /// Allocation flags.
        gfp: Gfp,
        /// Order of the block.
        order: u8,
    },
    /// `__free_pages(page, order)` of a block this task owns.
    FreePages {
        /// The block.
        block: Block,
    },
    /// User-space work for this many nanoseconds.
    Compute {
        /// Duration.
        ns: u64,
    },
    /// Hands blocks to whichever task receives on `chan` (a pipe or socket
    /// buffer passed to another CPU, which frees it there).
    Send {
        /// The channel.
        chan: ChanId,
        /// The blocks, whose ownership moves to the receiver.
        blocks: Vec<Block>,
    },
    /// Waits for one message on `chan`.
    Recv {
        /// The channel.
        chan: ChanId,
    },
    /// `mmap(hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
    /// | flags)` in the task's process, followed by `madvise(advice)` on the
    /// new mapping if `advice` is given. Answers [`OpResult::Mapped`].
    Mmap {
        /// Length in bytes (rounded up to pages).
        len: u64,
        /// The address hint (`MAP_FIXED`: the address).
        hint: Option<u64>,
        /// `MAP_FIXED`, or none.
        flags: MapFlags,
        /// Advice applied to the new mapping (`MADV_HUGEPAGE`, ...).
        advice: Option<Advice>,
    },
    /// `mmap(hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
    /// | MAP_HUGETLB [| MAP_NORESERVE] [| MAP_FIXED])` with the default
    /// 2 MiB huge page size, in the task's process (see
    /// [`mm::hugetlb::hugetlb_mmap`]). Answers [`OpResult::Mapped`]:
    /// `ENOMEM` if the hugetlb pool cannot reserve the pages.
    MmapHugetlb {
        /// Length in bytes (rounded up to 2 MiB).
        len: u64,
        /// The address hint (`MAP_FIXED`: the address, 2 MiB aligned).
        hint: Option<u64>,
        /// `MAP_FIXED`, and `MAP_NORESERVE` (reserve no pool pages; faults
        /// take what is free).
        flags: MapFlags,
    },
    /// Writes `/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages`
    /// and/or `nr_overcommit_hugepages` (as a benchmark's setup script
    /// does): resizes the hugetlb pool from the buddy allocator
    /// ([`mm::hugetlb::set_max_huge_pages`]). Answers [`OpResult::Sys`].
    SetHugepages {
        /// New `nr_hugepages`, if written.
        nr_hugepages: Option<u64>,
        /// New `nr_overcommit_hugepages`, if written.
        nr_overcommit_hugepages: Option<u64>,
    },
    /// `munmap(addr, len)`. Answers [`OpResult::Sys`].
    Munmap {
        /// Start, page aligned.
        addr: u64,
        /// Length in bytes.
        len: u64,
    },
    /// `madvise(addr, len, advice)`. Answers [`OpResult::Sys`].
    Madvise {
        /// Start, page aligned.
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// The advice.
        advice: Advice,
    },
    /// `brk(brk)`: moves the program break of the task's process
    /// ([`mm::vma::MmStruct::brk`]). Answers [`OpResult::Brk`] with the new
    /// break, or the old one if the kernel refused (`brk: 0` asks for the
    /// current break, as a C library does at start-up).
    Brk {
        /// The requested break (any byte address; the heap ends at its page
        /// alignment).
        brk: u64,
    },
    /// User-space accesses to `addr`, `addr + stride`, ... below
    /// `addr + len`: each one that would fault enters the fault path. An
    /// access outside any VMA (or a write to a read-only one) is a SIGSEGV
    /// and kills the task's process. Answers [`OpResult::Done`].
    ///
    /// Each access covers `bytes` bytes from its address, clipped to the end
    /// of its 4 KiB page (and of the range): one translation, and at most
    /// one fault, per access; with the engine's cache model on, every cache
    /// line of those bytes is played through the caches. `bytes = 1` is a
    /// single store or load; `stride = bytes = PAGE_SIZE` is a program that
    /// writes every word of every page in order (usemem), coarsened to one
    /// access per page without losing a line.
    Touch {
        /// First address.
        addr: u64,
        /// Length of the range in bytes.
        len: u64,
        /// Distance between accesses (at least 1).
        stride: u64,
        /// Bytes covered by each access (at least 1).
        bytes: u64,
        /// Writes rather than reads.
        write: bool,
    },
    /// `fork()`: a new process with a copy of this one's address space
    /// (copy-on-write), whose single task runs `child`. Answers
    /// [`OpResult::Forked`].
    Fork {
        /// The child's program.
        child: ChildProgram,
        /// The vCPU the child runs on; `None` lets the engine place it (the
        /// vCPU after the parent's, round-robin over the parent's forks).
        cpu: Option<mm::VcpuId>,
    },
    /// `exit_group()`: ends every task of the process and tears down its
    /// address space.
    Exit,
    /// Waits until every child process of this process has exited
    /// (`wait()` in a loop). Answers [`OpResult::Done`].
    Wait,
    /// `mprotect(addr, len, prot)`: changes the protection of a range,
    /// splitting and merging VMAs ([`mm::mprotect`]). A later write to a
    /// range without `PROT_WRITE`, or any access to a `PROT_NONE` one, is a
    /// SIGSEGV. Answers [`OpResult::Sys`].
    Mprotect {
        /// Start, page aligned.
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// `PROT_*` bits.
        prot: Prot,
    },
    /// `mremap(addr, old_len, new_len, flags, new_addr)`: shrinks, grows in
    /// place or moves a mapping, moving its page tables ([`mm::mremap`]).
    /// Answers [`OpResult::Mapped`] with the range's address afterwards.
    Mremap {
        /// Start of the range, page aligned.
        addr: u64,
        /// Its length in bytes.
        old_len: u64,
        /// The new length in bytes.
        new_len: u64,
        /// `MREMAP_*` flags.
        flags: MremapFlags,
        /// The target of `MREMAP_FIXED` (a hint with `MREMAP_DONTUNMAP`).
        new_addr: u64,
    },
    /// `move_pages(0, pages.len(), pages, nodes, status, flags)` on the
    /// task's own process (`mm::migrate::MigrateCtx::move_pages`): moves
    /// the page at each address to its node (`nodes: None` only reports
    /// where each page is). Answers [`OpResult::MovedPages`].
    MovePages {
        /// User addresses, one per page.
        pages: Vec<u64>,
        /// Target node per page, or `None` (the `nodes = NULL` query).
        nodes: Option<Vec<u16>>,
        /// `MPOL_MF_MOVE`, `MPOL_MF_MOVE_ALL`, the seed's `MPOL_MF_MOVE_MT`.
        flags: i32,
    },
    /// `set_mempolicy(MPOL_PREFERRED, {node})` for this task (`None`:
    /// `MPOL_DEFAULT`): its later allocations start from `node`'s zonelist
    /// ([`mm::page_alloc::PageAlloc::set_task_mempolicy`]). Answers
    /// [`OpResult::Sys`]: `EINVAL` for a node the machine does not have.
    SetMempolicy {
        /// The preferred node, or `None` for the default policy.
        preferred: Option<u16>,
    },
    /// `nanosleep()`: the task blocks for `ns` and its vCPU is free for
    /// others (or idle) meanwhile. Answers [`OpResult::Done`].
    Sleep {
        /// How long.
        ns: u64,
    },
    /// Kernel work on the task's behalf that the model does not play step
    /// by step (system calls and fault paths it has no model of, such as
    /// `execve()`, file-backed faults, `read()`): `ns` of system time on
    /// the task's vCPU, taking no lock. Answers [`OpResult::Done`].
    KernelWork {
        /// Duration.
        ns: u64,
    },
    /// The per-CPU vmstat work is due on the task's vCPU now: a replay of a
    /// trace that recorded when each CPU's `vmstat_update()` ran gives it
    /// here, in that CPU's recorded order (an engine told so by
    /// [`crate::Engine::vmstat_work_from_workload`] then runs no timer of
    /// its own). A kworker runs it (`decay_pcp_high()`) before the task's
    /// next operation, as the timer's work does. Answers
    /// [`OpResult::Done`].
    VmstatUpdate,
}

/// The program of a forked child, wrapped so that [`Op`] can be printed.
pub struct ChildProgram(pub Box<dyn Program>);

impl fmt::Debug for ChildProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChildProgram(..)")
    }
}

impl Op {
    /// A [`Op::Fork`] running `child` in the child process.
    pub fn fork(child: impl Program + 'static) -> Op {
        Op::Fork {
            child: ChildProgram(Box::new(child)),
            cpu: None,
        }
    }

    /// A [`Op::Fork`] whose child runs on `cpu`, as if the scheduler's fork
    /// balancing had picked it.
    pub fn fork_on(child: impl Program + 'static, cpu: mm::VcpuId) -> Op {
        Op::Fork {
            child: ChildProgram(Box::new(child)),
            cpu: Some(cpu),
        }
    }
}

/// What the previous operation returned.
#[derive(Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The task has just started.
    Start,
    /// The operation completed with nothing to report.
    Done,
    /// The result of `AllocPages`.
    Alloc(Result<Pfn, AllocError>),
    /// The message received by `Recv`.
    Received(Vec<Block>),
    /// The result of `Mmap` or `Mremap`: the address of the mapping.
    Mapped(Result<u64, Errno>),
    /// The result of `Munmap`, `Madvise` or `Mprotect`.
    Sys(Result<(), Errno>),
    /// The result of `Fork` in the parent: the child's process id.
    Forked(Result<u32, Errno>),
    /// The result of `Brk`: the break after the call (the old one if the
    /// request was refused; 0 if the process could not even get an address
    /// space).
    Brk(u64),
    /// The result of `MovePages`: the syscall's return value (0, pages not
    /// migrated, or a negative errno) and the status array (a node, or a
    /// negative errno; `i32::MIN` where the kernel left the entry as the
    /// caller had it).
    MovedPages {
        /// The return value.
        ret: i64,
        /// The status of each page.
        status: Vec<i32>,
    },
}

/// A task's behaviour: a generator of operations.
pub trait Program {
    /// The next operation, given the result of the last one; `None` ends the
    /// task. `rng` is this task's own seeded stream.
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op>;

    /// What each of this program's user page faults costs beyond a fault
    /// that follows another at once, by how many pages the program has
    /// touched since its last fault: element `m - 1` for a fault `m` pages
    /// after the last, the last element for that many or more (and for the
    /// first fault of a task). `None` (the default): nothing, as the cost
    /// profile's fault costs come from back-to-back fault loops.
    ///
    /// Why: between two faults the program runs its own code, which pushes
    /// the fault path's code and branch history out of the core; the
    /// longer the stretch (the more pages it used in between), the colder
    /// the next fault. A program that knows its code rate and how its
    /// faults are spaced gives the table (see `kernel-compile`).
    fn cold_fault_ns(&self) -> Option<&[u64]> {
        None
    }
}

/// A task to start: its program, the vCPU it runs on and its process.
pub struct TaskSpec {
    /// What the task does.
    pub program: Box<dyn Program>,
    /// The vCPU it is bound to.
    pub cpu: mm::VcpuId,
    /// The process it belongs to: `None` starts a process of its own; tasks
    /// given the same `Some(group)` are threads of one process and share its
    /// address space. Groups are the workload's own numbering.
    pub process: Option<u32>,
}

impl TaskSpec {
    /// A single-threaded process running `program` on `cpu`.
    pub fn new(program: Box<dyn Program>, cpu: mm::VcpuId) -> TaskSpec {
        TaskSpec {
            program,
            cpu,
            process: None,
        }
    }
}
