//! Replay mode (b): a recorded trace's address-space stream driving the
//! model's fault path, per process, under any kernel configuration.
//!
//! # What is replayed
//!
//! Per process (thread group), in trace order:
//!
//! - the address-space system calls, at their exit (their return value says
//!   where a mapping went and whether it succeeded), through the model's own
//!   system calls with the recorded arguments, the recorded result being the
//!   authority where the kernel chose one:
//!   - anonymous private `mmap` is [`MmStruct::mmap`] at the *recorded*
//!     address (`MAP_FIXED`, so that the model's address space is the
//!     recorded one whatever the model's placement would have chosen),
//!     followed by [`MmStruct::mprotect`] to the recorded protection when it
//!     is not read-write (`PROT_NONE` reservations, read-only and executable
//!     mappings are VMAs of their own, as in the kernel); `MAP_STACK` makes
//!     it `VM_NOHUGEPAGE` where the kernel does (6.7+,
//!     `MmConfig::map_stack_nohugepage`);
//!   - `munmap` is [`MmStruct::munmap`];
//!   - `brk` is [`MmStruct::brk`]: a process's first `brk` event (normally
//!     the C library's `brk(0)`) sets `mm->start_brk` and `mm->brk` to the
//!     break it returns, after which every call moves the model's break as
//!     the kernel's `brk()` does (expanding the heap VMA, unmapping a
//!     shrink). Where the model's answer differs from the recorded one (the
//!     kernel refused a growth because a mapping the model does not have
//!     lies there, or the model's heap is not the kernel's), the recorded
//!     break is applied, and counted;
//!   - `mprotect` is [`MmStruct::mprotect`] on each run of modelled VMAs in
//!     the range (splits, merges, entries rewritten: a `PROT_READ` page
//!     takes a SIGSEGV on a write, a `PROT_NONE` range on any access, and a
//!     range made writable again keeps its exclusive pages writable);
//!   - `mremap` is [`MmStruct::mremap`] with the recorded arguments. Where
//!     the kernel chose the new address (`MREMAP_MAYMOVE` without
//!     `MREMAP_FIXED`), the call is made with `MREMAP_FIXED` at the
//!     recorded address, so the page tables move there as the kernel moved
//!     them; an in-place result is replayed without `MREMAP_MAYMOVE`;
//!   - `madvise` of `MADV_DONTNEED`, `MADV_HUGEPAGE` and `MADV_NOHUGEPAGE`
//!     is [`MmStruct::madvise`];
//! - `sched_process_fork` [`mm::memory::fork`], `sched_process_exec` a new,
//!   empty address space (the old one torn down by
//!   [`mm::memory::exit_mmap`]), filled by the exec's `ExecLayout` event
//!   when the trace has one (`World::load_elf_binary`): the stack through
//!   [`mm::exec::setup_arg_pages`] (a `VM_GROWSDOWN` VMA whose argument
//!   pages are mapped in order 0 and count as faults of the task, and
//!   which a fault below it grows to the faulting page,
//!   `expand_downwards()` with the stack guard gap), the `.bss` of the
//!   program and of its interpreter into the model as anonymous memory,
//!   the file parts of their segments and the vDSO/vvar pages beside it;
//!   the exit of a process's last task `exit_mmap`;
//! - each `exceptions:page_fault_user` as an access of its address, a write
//!   if the error code has `X86_PF_WRITE` (bit 1), and each
//!   `exceptions:page_fault_kernel` on a user address likewise (the kernel
//!   touching user memory first, as `read()` into a fresh buffer does; such
//!   faults count in `pgfault` but fire no `page_fault_user`): if the model has the page
//!   mapped (and writable for a write), the access does not fault under the
//!   replayed kernel ("absorbed"); otherwise it goes through
//!   [`mm::memory::do_user_addr_fault`], the per-task VMA cache included.
//!   An access the VMA's protection refuses (a write to a `PROT_READ`
//!   range, any access to a `PROT_NONE` one) is a SIGSEGV there, as it was
//!   in the kernel (`AspaceModel::faults_sigsegv`, in neither `pgfault`).
//!
//! The model predicts `pgfault`, the per-size `anon_fault_alloc` /
//! `anon_fault_fallback`, `thp_fault_alloc` and the VMA cache's hit rate of
//! every kernel it is given, from one pass over the trace: the kernels are
//! replayed side by side, each with its own page allocator and processes.
//!
//! # What the model does not have, and what is done instead
//!
//! The model knows only anonymous private memory. Everything else is
//! carried over unchanged, and counted ([`AspaceModel::notes`]):
//!
//! - File-backed mappings, `MAP_SHARED` and hugetlb mappings are kept in a
//!   side map per process; a fault in one is *passed through*: counted as a
//!   fault under every kernel, since no anonymous-memory policy changes it.
//! - Faults outside every recorded mapping are passed through likewise:
//!   with exec layouts in the trace only what was mapped before the
//!   recording began; without them (traces of format 1, perf.data without
//!   mapping records) also the stack, the program and the interpreter that
//!   `execve` maps and their `.bss`, which larger folios then do not change.
//!   A kernel fault outside every mapping is held until the process's next
//!   event: `execve()` takes such faults (`create_elf_tables()` on the new
//!   stack, the `.bss` padding of the segments) before its
//!   `sched_process_exec`, and they are replayed in the address space its
//!   layout builds; if no exec follows, they are passed through.
//! - The special mappings of an exec (`[vdso]`, `[vvar]`, `[vvar_vclock]`)
//!   are kept in the side map; their faults pass through.
//! - Copy-on-write of a private file mapping (a program's `.data`) stays
//!   a file fault: the kernel copies into an order-0 page under every
//!   folio setting (measured on this host's 6.18), so it changes with no
//!   anonymous policy.
//! - Anonymous mappings larger than the machine (at least 64 GiB: a
//!   sanitizer's shadow, a runtime's `MAP_NORESERVE` arena) are kept in the
//!   side map too (the model's fork and exit walk every PMD of a VMA) and
//!   their faults pass through; an `mprotect` that opens part of one brings
//!   that part into the model.
//! - A `brk`, `mprotect` or `mremap` the model refuses where the kernel
//!   succeeded (its VMAs differ from the kernel's: lost events, a range
//!   that is partly file-backed, a heap that began before the recording)
//!   is replayed as its effect on the VMAs instead and counted: a break
//!   moved by mapping or unmapping the pages between the breaks, an
//!   `mremap` as unmap + map of the new range *empty* (the moved pages are
//!   not in the model; the kernel does not fault on them either, so the
//!   replay never looks at them, but a large folio placed next to them may
//!   be larger than the kernel could have placed). A `brk` that moves the
//!   break of a process whose first `brk` was not a query tells no heap
//!   start: the heap below that break is not modelled.
//! - A `brk` without its exit (no `sys_exit_brk`) and without a mapping
//!   record of the heap (no `perf record -d`) tells the break asked for,
//!   not the heap's start: the heap is taken to start at the page of the
//!   first fault below that break with no mapping between them (glibc's
//!   `malloc` writes the top chunk's header at the old break first), and
//!   counted; until then the heap's faults pass through.
//! - `mprotect` of ranges the model does not have (file-backed mappings,
//!   as the dynamic linker's RELRO `mprotect(PROT_READ)`, the stack, the
//!   program) changes nothing in the model and is counted.
//!   `PROT_GROWSDOWN`/`PROT_GROWSUP` (no VMA grows in the model) are
//!   dropped and counted.
//! - Other `madvise` advice is skipped and counted (`MADV_FREE` as if there
//!   were no memory pressure: the pages stay).
//! - `MAP_POPULATE` pre-faults through `get_user_pages()`, which fires no
//!   `page_fault_user`: those faults are in `pgfault` but not in the trace.
//!
//! # Threads, `fork` and `vfork`
//!
//! `sched_process_fork` does not say whether the child is a thread; the
//! child's first event after the fork does (its thread group). The replay
//! reads ahead to it at each fork ([`ForkLookahead`], at most
//! [`FORK_LOOKAHEAD`] events), so that a thread's `clone()` (`copy_process()` with `CLONE_VM |
//! CLONE_THREAD`, 6.18) copies and write-protects nothing in the model
//! either, and a process's fork is modelled from its first moment (the
//! parent's copy-on-write faults right after it). A child with no event
//! within that reach is forked in the model at once, and should an event of
//! it show it to be a thread after all, the copy is torn down again and
//! the parent's entries that the fork write-protected are made writable
//! again where nothing touched them since
//! ([`memory::restore_fork_wrprotect`]). Deciding only at the child's
//! first event left the other threads' writes in between on
//! write-protected entries: under large folios a page the replayed kernel
//! had mapped writable in a folio took a fault where the 4 KiB recording
//! had the page's first touch (node under all sizes: +340 faults, 57-63 in
//! each of V8's first 256 KiB pages, before the entries were put back;
//! zstd under all sizes, perf recording: +14 faults of a worker's `read()`
//! into a 132 KiB buffer while the main thread created the next two
//! workers, before the decision moved to the fork). A `vfork` or
//! `posix_spawn` child (`CLONE_VM` without `CLONE_THREAD`) is a process of
//! its own that shares the parent's memory until it execs: the model gives
//! it a copy instead. This needs the thread group of each event (the
//! recorder's `record-tgid`, perf's samples): without it every thread is
//! replayed as a process.
//!
//! # Memory
//!
//! One pass over the trace with [`TraceReader`]; the state is the live
//! processes' address spaces, side maps and VMA caches, and the pending
//! forks: it grows with live state, not with the trace's length.

use mm::Vaddr;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use mm::cost::{CostTable, Cx};
use mm::knobs::{KernelConfig, KnobValue};
use mm::memory::anon_folio::MTHP_DEFAULTS;
use mm::memory::MthpEnabled;
use mm::memory::{self, MmGlobal, VmFault};
use mm::mprotect::Prot;
use mm::mremap::MremapFlags;
use mm::page_alloc::{MemoryLayout, PageAlloc};
use mm::vma::{Advice, MmStruct, VmFlags, Vma, MMAP_MIN_ADDR, TASK_SIZE};
use mm::vmacache::{MmId, TaskStruct, VmacachePolicy};
use mm::vmstat::VmStat;
use mm::{SimTime, VcpuId, PAGE_SIZE};

use crate::event::{Event, EventKind, ExecVma, Header, TraceSource, Trailer};
use crate::format::{TraceError, TraceReader};
use crate::kfault::{KernelFaultEstimate, KernelFaultEstimator};
use crate::replay::ReplayError;

/// `PROT_READ | PROT_WRITE`.
const PROT_RW: u64 = 0x3;
/// `PROT_READ | PROT_WRITE | PROT_EXEC`.
const PROT_ACCESS: u64 = 0x7;
/// `PROT_GROWSDOWN | PROT_GROWSUP`.
const PROT_GROWS: u64 = 0x0300_0000;
/// `MAP_*` bits (x86-64).
const MAP_SHARED: u64 = 0x01;
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_POPULATE: u64 = 0x8000;
const MAP_HUGETLB: u64 = 0x40000;
const MAP_STACK: u64 = 0x20000;
const MAP_FIXED: u64 = 0x10;
const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;
/// `MADV_*` values.
const MADV_DONTNEED: i64 = 4;
const MADV_FREE: i64 = 8;
const MADV_HUGEPAGE: i64 = 14;
const MADV_NOHUGEPAGE: i64 = 15;
const MADV_DONTNEED_LOCKED: i64 = 24;
/// `MREMAP_FIXED`, `MREMAP_DONTUNMAP`.
const MREMAP_FIXED: u64 = 0x2;
const MREMAP_DONTUNMAP: u64 = 0x4;
/// `X86_PF_WRITE` in the page fault error code.
const X86_PF_WRITE: u64 = 0x2;

/// What a range of a process's address space is, when it is not modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A file-backed mapping (private or shared).
    File,
    /// `MAP_SHARED|MAP_ANONYMOUS`: shmem.
    SharedAnon,
    /// `MAP_HUGETLB`.
    Hugetlb,
    /// A special mapping `execve()` made: the vDSO and its data pages
    /// (`[vdso]`, `[vvar]`, `[vvar_vclock]`), whose faults no anonymous
    /// policy changes.
    Special,
    /// Anonymous private, larger than the machine (a sanitizer's shadow, a
    /// runtime's `MAP_NORESERVE` arena): not modelled, see
    /// `World::map_anon`. An `mprotect` that opens part of it brings that
    /// part into the model.
    Oversize,
}

/// Disjoint ranges `[start, end)` of one process that the model does not
/// have, with what they are.
///
/// Invariant: the ranges do not overlap; each is non-empty.
#[derive(Clone, Debug, Default)]
struct Ranges(BTreeMap<u64, (u64, Kind)>);

impl Ranges {
    /// Removes `[start, end)`, trimming and splitting ranges that cross it.
    fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        if let Some((&s, &(e, k))) = self.0.range(..start).next_back() {
            if e > start {
                self.0.insert(s, (start, k));
                if e > end {
                    self.0.insert(end, (e, k));
                }
            }
        }
        let inside: Vec<u64> = self.0.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some((e, k)) = self.0.remove(&s) {
                if e > end {
                    self.0.insert(end, (e, k));
                }
            }
        }
    }

    fn insert(&mut self, start: u64, end: u64, kind: Kind) {
        if start < end {
            self.remove(start, end);
            self.0.insert(start, (end, kind));
        }
    }

    /// The start of the first range that overlaps `[start, end)`.
    fn first_overlap(&self, start: u64, end: u64) -> Option<u64> {
        if let Some((&s, _)) = self
            .0
            .range(..=start)
            .next_back()
            .filter(|(_, &(e, _))| e > start)
        {
            return Some(s);
        }
        self.0.range(start..end).next().map(|(&s, _)| s)
    }

    fn get(&self, addr: u64) -> Option<Kind> {
        self.0
            .range(..=addr)
            .next_back()
            .filter(|(_, &(e, _))| e > addr)
            .map(|(_, &(_, k))| k)
    }

    /// The parts of `[start, end)` of kind `kind`.
    fn parts(&self, start: u64, end: u64, kind: Kind) -> Vec<(u64, u64)> {
        if start >= end {
            return Vec::new();
        }
        let first = self
            .0
            .range(..start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(start);
        self.0
            .range(first..end)
            .filter(|(_, &(e, k))| k == kind && e > start)
            .map(|(&s, &(e, _))| (s.max(start), e.min(end)))
            .collect()
    }
}

/// One process in one replayed kernel.
struct Proc {
    mm: MmStruct,
    other: Ranges,
    /// True once a `brk` event has set the model's `start_brk` and `brk`
    /// from the recording.
    brk_known: bool,
    /// The break that a `brk` without its exit asked for while the heap's
    /// start was unknown (no `sys_exit_brk`, no `-d` mapping record): the
    /// heap is then taken to begin at the first fault below this break that
    /// no mapping explains ([`World::heap_from_fault`]).
    brk_asked: Option<u64>,
    /// Mappings inferred from faults outside every mapping of a trace
    /// without `mremap()` ([`World::moved_from_fault`]): start → end.
    inferred: BTreeMap<u64, u64>,
    /// Pages of those that a recorded write fault has touched: a recorded
    /// fault there again means the memory was replaced (moved away by an
    /// unrecorded `mremap()`, the place reused).
    inferred_written: BTreeSet<u64>,
    /// The live tasks (thread ids) of the process.
    tids: BTreeSet<i32>,
}

/// What the trace itself says about the address-space stream; the same for
/// every replayed kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AspaceRecorded {
    /// Events in the trace, all kinds.
    pub nr_events: u64,
    /// `exceptions:page_fault_user` events.
    pub faults: u64,
    /// Of those, writes (`X86_PF_WRITE`).
    pub write_faults: u64,
    /// `exceptions:page_fault_kernel` events on user addresses: the
    /// kernel's own faults on user memory, replayed like user faults.
    pub kernel_faults: u64,
    /// Address-space system calls by name (`mmap`, `munmap`, `brk`,
    /// `mremap`, `mprotect`, `madvise`), failed ones included.
    pub syscalls: BTreeMap<&'static str, u64>,
    /// `sched_process_fork`, `sched_process_exec`, `sched_process_exit`.
    pub forks: u64,
    pub execs: u64,
    pub exits: u64,
    /// `ExecLayout` events: execs whose mappings the trace records, so that
    /// the stack, the `.bss` and the program's and interpreter's files are
    /// in the replay.
    pub exec_layouts: u64,
    /// Forked children that turned out to be threads.
    pub threads: u64,
    /// Processes whose first event was not their fork (they existed before
    /// the recording, or their fork was lost).
    pub procs_without_fork: u64,
    /// Nanoseconds from the first to the last event.
    pub span_ns: u64,
    /// The kernel's faults on user memory as the allocator events tell
    /// them ([`crate::kfault`]): what stands in for `page_fault_kernel`
    /// when the trace lacks it (computed for every trace, so that it can be
    /// checked against the recorded count where there is one).
    pub kernel_fault_estimate: KernelFaultEstimate,
}

/// What one kernel's model did during a replay.
#[derive(Clone, Debug, Default)]
pub struct AspaceModel {
    /// The model's counters (`pgfault`, `thp_fault_alloc`, the per-size
    /// statistics, the VMA cache's calls and hits, the allocator's).
    pub vmstat: VmStat,
    /// Recorded faults in anonymous VMAs the model has.
    pub faults_replayed: u64,
    /// Of those, the ones the model took: the page was not mapped (or not
    /// writable for a write) under this kernel.
    pub faults_taken: u64,
    /// Of those, the ones that needed no fault under this kernel: an earlier
    /// fault had mapped the page already (a larger folio, a THP).
    pub faults_absorbed: u64,
    /// Recorded faults outside the model's VMAs, carried over unchanged.
    pub faults_passthrough: u64,
    /// Of those: in file-backed, shared or hugetlb mappings, and the
    /// special mappings of an exec (vDSO, vvar).
    pub faults_passthrough_file: u64,
    /// Faults the model could not handle: [`Self::faults_sigsegv`], or no
    /// memory in the model.
    pub faults_failed: u64,
    /// Of those, the ones the VMA's protection refused (a write to a
    /// `PROT_READ` VMA, any access to a `PROT_NONE` one): a SIGSEGV, in the
    /// kernel as in the model, and counted in neither's `pgfault`.
    pub faults_sigsegv: u64,
    /// Faults the model took for the argument pages of each recorded exec
    /// (`get_user_pages_remote()` in `copy_strings()`): no tracepoint fires
    /// for them, but the kernel counts them in `pgfault` and in the task's
    /// `ru_minflt`. Order 0 under every kernel.
    pub faults_exec_args: u64,
    /// Recorded faults in mappings the replay inferred (a trace without
    /// `mremap()`: [`World::moved_from_fault`]), counted in
    /// `faults_replayed`; and of those, the ones the model took.
    pub faults_inferred: u64,
    pub faults_inferred_taken: u64,
    /// Virtual nanoseconds the model charged for the faults it took.
    pub fault_ns: u64,
    /// Most processes alive at once.
    pub peak_procs: u64,
    /// What was emulated or skipped, with how often (see the module docs).
    pub notes: BTreeMap<&'static str, u64>,
    /// The model's address space of each process still alive at the end of
    /// the trace, by thread group id.
    pub live: BTreeMap<i32, LiveProc>,
}

/// A process's address space in the model at the end of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveProc {
    /// `mm->start_brk` and `mm->brk`.
    pub start_brk: u64,
    pub brk: u64,
    /// The VMAs, in address order.
    pub vmas: Vec<Vma>,
}

impl AspaceModel {
    /// The model's prediction of `pgfault`: the faults it took plus those
    /// it carried over, and the argument pages of the execs.
    pub fn predicted_pgfault(&self) -> u64 {
        self.faults_taken + self.faults_passthrough + self.faults_exec_args
    }
}

/// One kernel being replayed.
struct World {
    pa: PageAlloc,
    cx: Cx,
    g: MmGlobal,
    vmacache: VmacachePolicy,
    nr_cpus: u32,
    procs: BTreeMap<i32, Proc>,
    /// Per thread id: its VMA cache.
    tasks: BTreeMap<i32, TaskStruct>,
    /// Forked children whose first event has not come yet: child tid →
    /// parent's thread group.
    pending: BTreeMap<i32, i32>,
    /// Per pending child: the parent's leaf entries its tentative fork
    /// write-protected ([`memory::fork_wrprotect_list`]), put back if the
    /// child is a thread.
    fork_saved: BTreeMap<i32, Vec<(u64, mm::pgtable::Level, u64)>>,
    /// Anonymous mappings larger than this are not modelled: the machine's
    /// memory, at least 64 GiB.
    max_anon_bytes: u64,
    /// The task the last event bound (`bind()`), until a process event:
    /// runs of events of one task skip the lookups.
    last_bound: Option<(i32, i32)>,
    /// The process of the last fault, taken out of `procs`, the task of
    /// the last fault, taken out of `tasks`, and the VMA range `[start,
    /// end)` the last fault found in that process: a run of faults (nearly
    /// every event of a trace) skips the map lookups. Faults never change
    /// a VMA; every other event puts them back first ([`World::park`]).
    hot: Option<(i32, Proc)>,
    hot_task: Option<(i32, TaskStruct)>,
    hot_vma: (u64, u64),
    /// Kernel faults outside every mapping of their process, per thread
    /// group, held until the process's next event: the ones `execve()`
    /// takes on the new stack (`create_elf_tables()`) come before its
    /// `sched_process_exec`, and belong to the address space that the
    /// exec's layout describes ([`World::flush_deferred`]).
    deferred: BTreeMap<i32, Vec<(i32, u64, bool)>>,
    /// The perf record of a VMA just before this event (see
    /// [`World::place_entry_only_mmap`]).
    last_record: Option<LastRecord>,
    /// The trace lacks `mremap()`: a user fault outside every mapping
    /// infers one ([`World::moved_from_fault`]).
    infer_moved: bool,
    /// The thread group of the child of the `Fork` event being applied,
    /// as its next event shows ([`ForkLookahead`]); `None` when unknown.
    fork_child_tgid: Option<i32>,
    out: AspaceModel,
}

/// A `PERF_RECORD_MMAP2` seen by the replay: the VMA `[start, end)` the
/// kernel reported for task `tid`, after any merge.
#[derive(Clone, Copy, Debug)]
struct LastRecord {
    tid: i32,
    start: u64,
    end: u64,
    /// Named `[heap]`: the brk area.
    heap: bool,
}

fn page_up(x: u64) -> u64 {
    x.saturating_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// True if `mm` has a VMA over `addr`.
fn has_vma(mm: &MmStruct, addr: u64) -> bool {
    mm.vmas
        .range(..=addr)
        .next_back()
        .is_some_and(|(_, v)| v.end > addr)
}

fn page_down(x: u64) -> u64 {
    x & !(PAGE_SIZE - 1)
}

impl World {
    fn new(layout: &MemoryLayout, cfg: &KernelConfig, table: &CostTable) -> World {
        let nr_cpus = layout.nodes.iter().map(|n| n.nr_cpus).sum::<u32>().max(1);
        World {
            pa: PageAlloc::new(layout, cfg.sysctl, cfg.pcp),
            cx: Cx::new(VcpuId(0), table.clone()),
            g: MmGlobal::new(cfg.mm),
            vmacache: cfg.vmacache,
            nr_cpus,
            procs: BTreeMap::new(),
            tasks: BTreeMap::new(),
            pending: BTreeMap::new(),
            fork_saved: BTreeMap::new(),
            last_bound: None,
            hot: None,
            hot_task: None,
            hot_vma: (0, 0),
            deferred: BTreeMap::new(),
            last_record: None,
            infer_moved: false,
            fork_child_tgid: None,
            max_anon_bytes: (layout.nodes.iter().map(|n| n.nr_pages).sum::<u64>() * PAGE_SIZE)
                .max(64 << 30),
            out: AspaceModel::default(),
        }
    }

    fn note(&mut self, what: &'static str) {
        *self.out.notes.entry(what).or_default() += 1;
    }

    fn new_proc(&mut self, tid: i32) -> Option<Proc> {
        match MmStruct::new(&mut self.pa, &mut self.cx, self.g.cfg.mmap_layout) {
            Ok(mm) => Some(Proc {
                mm,
                other: Ranges::default(),
                brk_known: false,
                brk_asked: None,
                inferred: BTreeMap::new(),
                inferred_written: BTreeSet::new(),
                tids: BTreeSet::from([tid]),
            }),
            Err(_) => {
                self.note("processes without memory for a page table in the model");
                None
            }
        }
    }

    fn drop_proc(&mut self, p: Proc) {
        for t in &p.tids {
            self.tasks.remove(t);
        }
        memory::exit_mmap(&mut self.pa, &mut self.cx, p.mm);
    }

    /// Finds (or creates) the process of the event's thread group, settling
    /// a pending fork of this task first.
    /// Puts the hot process and task back into their maps.
    fn park(&mut self) {
        if let Some((pid, p)) = self.hot.take() {
            self.procs.insert(pid, p);
        }
        if let Some((tid, t)) = self.hot_task.take() {
            self.tasks.insert(tid, t);
        }
        self.hot_vma = (0, 0);
    }

    fn bind(&mut self, pid: i32, tid: i32, rec: &mut AspaceRecorded, first: bool) {
        if self.last_bound == Some((pid, tid)) {
            return;
        }
        self.park();
        self.bind_slow(pid, tid, rec, first);
        if self.procs.contains_key(&pid) {
            self.last_bound = Some((pid, tid));
        }
    }

    fn bind_slow(&mut self, pid: i32, tid: i32, rec: &mut AspaceRecorded, first: bool) {
        if let Some(parent) = self.pending.remove(&tid) {
            let saved = self.fork_saved.remove(&tid);
            if pid == parent && tid != pid {
                // A thread: the tentative copy goes, and with it the
                // write protection its fork gave the parent's entries.
                if first {
                    rec.threads += 1;
                }
                if let Some(copy) = self.procs.remove(&tid) {
                    self.drop_proc(copy);
                }
                if let (Some(p), Some(saved)) = (self.procs.get_mut(&pid), saved) {
                    memory::restore_fork_wrprotect(&mut p.mm, &saved);
                }
                self.tasks.remove(&tid);
            } else if pid != tid && !self.procs.contains_key(&pid) {
                if let Some(p) = self.procs.remove(&tid) {
                    self.procs.insert(pid, p);
                }
            }
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.tids.insert(tid);
            return;
        }
        if first {
            rec.procs_without_fork += 1;
        }
        if let Some(p) = self.new_proc(tid) {
            self.procs.insert(pid, p);
            self.out.peak_procs = self.out.peak_procs.max(self.procs.len() as u64);
        }
    }

    /// Maps `[start, end)` as anonymous private memory of protection `prot`
    /// (`PROT_*` bits) at that address, replacing what was there.
    fn map_anon(&mut self, pid: i32, start: u64, end: u64, prot: u64) {
        self.map_anon_as(pid, start, end, prot, mm::vma::MapFlags::FIXED);
    }

    /// [`World::map_anon`] with the model's `mmap()` flags `how` (which
    /// hold `MAP_FIXED`).
    fn map_anon_as(&mut self, pid: i32, start: u64, end: u64, prot: u64, how: mm::vma::MapFlags) {
        if start >= end {
            return;
        }
        if end - start > self.max_anon_bytes {
            // A reservation larger than the machine (a sanitizer's shadow, a
            // runtime's heap arena with MAP_NORESERVE): the model's fork and
            // exit walk every PMD of a VMA, so it is kept out of the model;
            // its faults pass through.
            self.note(
                "anonymous mappings larger than the machine (not modelled, faults passed through)",
            );
            self.map_other(pid, start, end, Kind::Oversize);
            return;
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        p.other.remove(start, end);
        if p.mm
            .mmap(&mut self.pa, &mut self.cx, Vaddr(start), end - start, how)
            .is_err()
        {
            self.note("anonymous mappings the model refused (address or memory)");
            return;
        }
        let prot = Prot((prot & PROT_ACCESS) as u32);
        if prot != Prot::RW
            && p.mm
                .mprotect(&mut self.pa, &mut self.cx, Vaddr(start), end - start, prot)
                .is_err()
        {
            self.note("anonymous mappings the model could not protect (left read-write)");
        }
    }

    /// Unmaps `[start, end)`; false if the model's `munmap()` refused.
    fn unmap(&mut self, pid: i32, start: u64, end: u64) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return true;
        };
        if start >= end {
            return true;
        }
        p.other.remove(start, end);
        p.inferred.retain(|&s, &mut e| e <= start || s >= end);
        let gone: Vec<u64> = p.inferred_written.range(start..end).copied().collect();
        for pg in gone {
            p.inferred_written.remove(&pg);
        }
        p.mm.munmap(&mut self.pa, &mut self.cx, Vaddr(start), end - start)
            .is_ok()
    }

    /// A system call replayed with the model's result: `f` makes the call
    /// and says whether the model succeeded. With the recorded result
    /// (`Some(0)`), a model that fails is a disagreement and counted; with
    /// none (the exit was not recorded), the model's result stands, and
    /// the call is counted as replayed at its entry.
    fn check_result(
        &mut self,
        recorded: Option<i64>,
        call: &'static str,
        f: impl FnOnce(&mut Self) -> bool,
    ) {
        let ok = f(self);
        match (recorded, ok) {
            (None, _) => self.note(match call {
                "munmap" => {
                    "munmap without its exit (replayed at its entry with the model's result)"
                }
                _ => "mprotect without its exit (replayed at its entry with the model's result)",
            }),
            (Some(_), false) => self.note(match call {
                "munmap" => "munmap results the model disagreed with (the kernel succeeded)",
                _ => "mprotect the model refused where the kernel succeeded (skipped)",
            }),
            (Some(_), true) => {}
        }
    }

    fn map_other(&mut self, pid: i32, start: u64, end: u64, kind: Kind) {
        self.unmap(pid, start, end);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.other.insert(start, end, kind);
        }
    }

    fn apply(&mut self, ev: &Event, t0: u64, rec: &mut AspaceRecorded, first: bool) {
        let is_fault = matches!(
            ev.kind,
            EventKind::PageFaultUser { .. } | EventKind::PageFaultKernel { .. }
        );
        if !is_fault {
            self.park();
        }
        if matches!(
            ev.kind,
            EventKind::Fork { .. }
                | EventKind::Exec { .. }
                | EventKind::Exit { .. }
                | EventKind::ExecLayout { .. }
        ) {
            // They add, replace and remove processes and tasks.
            self.last_bound = None;
        }
        let (pid, tid) = (ev.pid, ev.tid);
        if !self.deferred.is_empty()
            && !matches!(
                ev.kind,
                EventKind::PageFaultKernel { .. }
                    | EventKind::Exec { .. }
                    | EventKind::ExecLayout { .. }
            )
        {
            // The held kernel faults were not an exec's after all (or the
            // exec's layout was not recorded): carried over as before.
            self.flush_deferred(pid, false);
        }
        let cpu = VcpuId(ev.cpu % self.nr_cpus);
        self.cx.begin(cpu, SimTime(ev.ts_ns.saturating_sub(t0)));
        // A perf record is the placement of the system call right after it
        // (the importer writes the two together), of the same task.
        let record = self.last_record.take().filter(|r| r.tid == tid);
        match &ev.kind {
            EventKind::MmapRecord {
                addr,
                len,
                filename,
                ..
            } => {
                // Only as the placement of the system call that follows it
                // (`place_entry_only_mmap`, `brk_from_record`).
                self.last_record = Some(LastRecord {
                    tid,
                    start: *addr,
                    end: addr.saturating_add(*len),
                    heap: filename == "[heap]",
                });
            }
            EventKind::Comm { .. } => {}
            EventKind::PageFaultUser {
                address,
                error_code,
                ..
            } => {
                self.bind(pid, tid, rec, first);
                self.on_fault(pid, tid, *address, *error_code, false);
            }
            EventKind::PageFaultKernel {
                address,
                error_code,
                ..
            } => {
                self.bind(pid, tid, rec, first);
                self.on_fault(pid, tid, *address, *error_code, true);
            }
            EventKind::Exit { pid: task } => self.exit(pid, *task),
            EventKind::Fork { child, .. } => {
                self.bind(pid, tid, rec, first);
                self.fork(pid, *child, rec, first);
            }
            EventKind::PageAlloc { .. }
            | EventKind::PageFree { .. }
            | EventKind::PageAllocZoneLocked { .. }
            | EventKind::PagePcpuDrain { .. } => {}
            kind => {
                self.bind(pid, tid, rec, first);
                self.apply_call(pid, tid, kind, record);
            }
        }
    }

    /// The system calls and process events of a bound task. A call without
    /// its recorded result (`ret: None`) is made with the model's own; with
    /// it, the recorded result is the authority (and a disagreement is
    /// counted). `record` is the perf record just before the call.
    fn apply_call(&mut self, pid: i32, tid: i32, kind: &EventKind, record: Option<LastRecord>) {
        let ok = |ret: &Option<i64>| ret.is_none_or(|r| r == 0);
        match kind {
            EventKind::Mmap {
                addr,
                len,
                prot,
                flags,
                ret,
                ..
            } => {
                let start = match ret {
                    Some(r) if *r < 0 => return,
                    Some(r) => *r as u64,
                    None => match self.place_entry_only_mmap(pid, record, *addr, *len, *flags) {
                        Some(a) => a,
                        None => return,
                    },
                };
                self.mmap(pid, start, *len, *prot, *flags);
            }
            EventKind::Munmap { addr, len, ret } if ok(ret) => {
                let end = addr.saturating_add(page_up(*len));
                self.check_result(*ret, "munmap", |m| m.unmap(pid, *addr, end));
            }
            EventKind::Brk { brk, ret } => {
                let ret = ret.or_else(|| self.brk_from_record(pid, *brk, record));
                self.brk(pid, *brk, ret);
            }
            EventKind::Mprotect {
                start,
                len,
                prot,
                ret,
            } if ok(ret) => {
                let end = start.saturating_add(page_up(*len));
                self.check_result(*ret, "mprotect", |m| m.mprotect(pid, *start, end, *prot));
            }
            EventKind::Mremap {
                addr,
                old_len,
                new_len,
                flags,
                new_addr,
                ret,
            } => {
                let (a, o, n) = (*addr, *old_len, *new_len);
                match ret {
                    Some(r) if *r >= 0 => self.mremap(pid, a, o, n, *flags, *new_addr, *r as u64),
                    Some(_) => {}
                    None => self.mremap_entry_only(pid, a, o, n, *flags, *new_addr),
                }
            }
            // ENOMEM still applies the advice to the mapped parts.
            EventKind::Madvise {
                start,
                len_in,
                behavior,
                ret,
            } if ret.is_none_or(|r| r == 0 || r == -12) => {
                self.madvise(pid, *start, *len_in, *behavior)
            }
            EventKind::Exec { .. } => self.exec(pid, tid),
            EventKind::ExecLayout { vmas, .. } => {
                self.load_elf_binary(pid, vmas);
                self.flush_deferred(pid, true);
            }
            _ => {}
        }
    }

    /// `mmap(...) = start`: the kind of mapping decides who has it.
    fn mmap(&mut self, pid: i32, start: u64, len: u64, prot: u64, flags: u64) {
        let end = start.saturating_add(page_up(len));
        if flags & MAP_HUGETLB != 0 {
            self.map_other(pid, start, end, Kind::Hugetlb);
        } else if flags & MAP_ANONYMOUS == 0 {
            self.map_other(pid, start, end, Kind::File);
        } else if flags & MAP_SHARED != 0 {
            self.map_other(pid, start, end, Kind::SharedAnon);
        } else {
            if flags & MAP_POPULATE != 0 {
                self.note("MAP_POPULATE mappings (pre-faulted without page_fault_user)");
            }
            let mut how = mm::vma::MapFlags::FIXED;
            if flags & MAP_STACK != 0 {
                // A thread stack (glibc's allocate_stack()): VM_NOHUGEPAGE
                // from 6.7.
                how = how.or(mm::vma::MapFlags::STACK);
            }
            self.map_anon_as(pid, start, end, prot, self.g.cfg.calc_vm_flag_bits(how));
        }
    }

    /// `sched_process_exec`: a new, empty address space (what the exec
    /// mapped follows in its `ExecLayout` event, when recorded).
    fn exec(&mut self, pid: i32, tid: i32) {
        if let Some(old) = self.procs.remove(&pid) {
            self.drop_proc(old);
        }
        if let Some(p) = self.new_proc(tid) {
            self.procs.insert(pid, p);
        }
    }

    /// `sched_process_exit` of `task`: the process goes with its last task.
    fn exit(&mut self, pid: i32, task: i32) {
        self.flush_deferred(pid, false);
        self.pending.remove(&task);
        self.fork_saved.remove(&task);
        self.tasks.remove(&task);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        p.tids.remove(&task);
        if p.tids.is_empty() {
            if let Some(p) = self.procs.remove(&pid) {
                self.drop_proc(p);
            }
        }
    }

    /// Models the address space `load_elf_binary()` leaves, from the
    /// mappings the kernel reported for the exec (in its order, so that the
    /// program's first segment, mapped over the whole image, is then cut by
    /// the others): the stack through [`mm::exec::setup_arg_pages`], the
    /// `.bss` (and any other private anonymous mapping) into the model, the
    /// file parts of the segments and the vDSO/vvar pages beside it.
    ///
    /// Deviation: the argument pages are the stack's length less
    /// [`mm::exec::STACK_EXPAND`] (true unless `RLIMIT_STACK` is below
    /// 128 KiB plus the arguments); a stack of 128 KiB or less gets one.
    fn load_elf_binary(&mut self, pid: i32, vmas: &[ExecVma]) {
        for v in vmas {
            let start = page_down(v.start);
            let end = v.start.saturating_add(page_up(v.len));
            if start >= end || end > TASK_SIZE + PAGE_SIZE {
                self.note("exec mappings outside the user address space (skipped)");
                continue;
            }
            if v.name == "[stack]" {
                self.setup_arg_pages(pid, start, end);
            } else if v.name.starts_with('[') && v.name != "[heap]" {
                self.map_other(pid, start, end, Kind::Special);
            } else if v.name == "//anon" || v.name == "[heap]" {
                if v.flags as u64 & MAP_SHARED != 0 {
                    self.map_other(pid, start, end, Kind::SharedAnon);
                } else {
                    self.map_anon(pid, start, end, v.prot as u64);
                }
            } else {
                self.map_other(pid, start, end, Kind::File);
            }
        }
    }

    fn setup_arg_pages(&mut self, pid: i32, start: u64, end: u64) {
        self.unmap(pid, start, end);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let nr_args = ((end - start).saturating_sub(mm::exec::STACK_EXPAND) / PAGE_SIZE).max(1);
        let (pa, cx, g) = (&mut self.pa, &mut self.cx, &mut self.g);
        match mm::exec::setup_arg_pages(pa, cx, g, &mut p.mm, start, end, nr_args) {
            Ok(()) => self.out.faults_exec_args += nr_args,
            Err(_) => self.note("exec stacks the model refused (address or memory)"),
        }
    }

    /// Replays the kernel faults held for `pid` ([`World::deferred`]): in
    /// the address space the exec's layout has just built (`in_exec`), or
    /// carried over unchanged.
    fn flush_deferred(&mut self, pid: i32, in_exec: bool) {
        let Some(held) = self.deferred.remove(&pid) else {
            return;
        };
        for (tid, addr, write) in held {
            if in_exec {
                self.fault(pid, tid, addr, write, false);
            } else {
                self.out.faults_passthrough += 1;
            }
        }
    }

    fn on_fault(&mut self, pid: i32, tid: i32, address: u64, error_code: u64, kernel: bool) {
        if address >= TASK_SIZE {
            // A kernel fault on a kernel address: not an mm fault.
            return;
        }
        self.fault(pid, tid, address, error_code & X86_PF_WRITE != 0, kernel);
    }

    /// True if `addr` is below a stack (`VM_GROWSDOWN`) that a fault there
    /// would grow within `RLIMIT_STACK`, and in no other mapping. (A
    /// kernel fault farther down is an exec's, on the new stack.)
    fn below_stack(p: &Proc, addr: u64) -> bool {
        p.mm.vmas.range(addr..).next().is_some_and(|(_, v)| {
            v.flags.contains(VmFlags::GROWSDOWN) && v.end - page_down(addr) <= p.mm.rlimit_stack
        }) && p.other.get(addr).is_none()
    }

    /// Takes `pid` out of `procs` as the hot process; false if it has none.
    fn make_hot(&mut self, pid: i32) -> bool {
        if self.hot.as_ref().is_some_and(|(h, _)| *h == pid) {
            return true;
        }
        self.park();
        match self.procs.remove(&pid) {
            Some(p) => {
                self.hot = Some((pid, p));
                true
            }
            None => false,
        }
    }

    /// A recorded fault outside the model's VMAs: carried over, or held if
    /// it is a kernel fault in no mapping at all (an exec's, see
    /// [`World::deferred`]).
    fn fault_outside(&mut self, pid: i32, tid: i32, addr: u64, write: bool, kernel: bool) {
        let Some((_, p)) = self.hot.as_ref() else {
            return;
        };
        match p.other.get(addr) {
            Some(Kind::File | Kind::SharedAnon | Kind::Hugetlb | Kind::Special) => {
                self.out.faults_passthrough += 1;
                self.out.faults_passthrough_file += 1;
            }
            Some(Kind::Oversize) => self.out.faults_passthrough += 1,
            None if kernel => self
                .deferred
                .entry(pid)
                .or_default()
                .push((tid, addr, write)),
            None => self.out.faults_passthrough += 1,
        }
    }

    fn fault(&mut self, pid: i32, tid: i32, addr: u64, write: bool, kernel: bool) {
        if !self.make_hot(pid) {
            self.out.faults_passthrough += 1;
            return;
        }
        let Some((_, p)) = self.hot.as_mut() else {
            unreachable!("the hot process was just set");
        };
        let in_vma = (self.hot_vma.0 <= addr && addr < self.hot_vma.1)
            || match p.mm.vmas.range(..=addr).next_back() {
                Some((_, v)) if v.end > addr => {
                    self.hot_vma = (v.start, v.end);
                    true
                }
                _ => Self::below_stack(p, addr),
            };
        if !in_vma && !self.heap_from_fault(addr) && (kernel || !self.moved_from_fault(addr)) {
            self.fault_outside(pid, tid, addr, write, kernel);
            return;
        }
        let Some((_, p)) = self.hot.as_mut() else {
            unreachable!("the hot process was just set");
        };
        let inferred = !p.inferred.is_empty()
            && p.inferred
                .range(..=addr)
                .next_back()
                .is_some_and(|(_, &e)| e > addr);
        if inferred && !kernel {
            self.replaced_from_fault(addr, write);
        }
        self.out.faults_replayed += 1;
        self.out.faults_inferred += u64::from(inferred);
        let Some((_, p)) = self.hot.as_mut() else {
            unreachable!("the hot process was just set");
        };
        if memory::access_ok(&mut p.mm, Vaddr(addr), write) {
            self.out.faults_absorbed += 1;
            return;
        }
        let taken = self.out.faults_taken;
        self.fault_in_vma(tid, addr, write);
        if inferred {
            self.out.faults_inferred_taken += self.out.faults_taken - taken;
        }
    }

    /// A user fault at `addr` in a mapping of the hot process that
    /// [`World::moved_from_fault`] inferred. A recorded fault on a page a
    /// recorded write had mapped means the memory there was replaced: an
    /// unrecorded `mremap()` moved it away and another (or an `mmap()`)
    /// put new memory in its place, which, placed top-down as there, runs
    /// from that page to the end of the inferred mapping. That part is
    /// unmapped and inferred afresh, so the fault is replayed on new
    /// memory.
    fn replaced_from_fault(&mut self, addr: u64, write: bool) {
        let Some((_, p)) = self.hot.as_mut() else {
            return;
        };
        let pg = page_down(addr);
        if !p.inferred_written.contains(&pg) {
            if write {
                p.inferred_written.insert(pg);
            }
            return;
        }
        let Some((&s, &e)) = p.inferred.range(..=pg).next_back() else {
            return;
        };
        let (pa, cx) = (&mut self.pa, &mut self.cx);
        let redone = p.mm.munmap(pa, cx, Vaddr(pg), e - pg).is_ok()
            && p.mm
                .mmap(pa, cx, Vaddr(pg), e - pg, mm::vma::MapFlags::FIXED)
                .is_ok();
        if s < pg {
            p.inferred.insert(s, pg);
        } else {
            p.inferred.remove(&s);
        }
        let gone: Vec<u64> = p.inferred_written.range(pg..e).copied().collect();
        for g in gone {
            p.inferred_written.remove(&g);
        }
        if redone {
            p.inferred.insert(pg, e);
            if write {
                p.inferred_written.insert(pg);
            }
        }
        self.hot_vma = (0, 0);
        self.note("inferred mappings replaced from a fault on a page written before (no mremap in the trace)");
    }

    /// A user fault at `addr` in no mapping of the hot process, in a trace
    /// without `mremap()`: the mapping that held it is taken to be one an
    /// unrecorded `mremap()` moved or grew, and is made anonymous and
    /// read-write from the fault's page up to the next mapping above
    /// (true). Why there: a moved mapping goes where
    /// `get_unmapped_area()` puts a new one, at the top of the highest gap
    /// that fits it (`unmapped_area_topdown()`), so it ends where the next
    /// mapping above begins; and its first fault is at the end of the part
    /// moved (those pages came along, mapped), so nothing below the fault
    /// is free for a folio in the kernel either. A later fault lower down
    /// grows it down the same way. Not inferred: below a stack (its guard
    /// gap), with no mapping above, or larger than the machine. The
    /// mapping's size is a guess where it grew in place (it may end below
    /// the next mapping); every fault in it is counted
    /// ([`AspaceModel::faults_inferred`]) and printed with its band.
    fn moved_from_fault(&mut self, addr: u64) -> bool {
        if !self.infer_moved {
            return false;
        }
        let Some((_, p)) = self.hot.as_mut() else {
            return false;
        };
        let start = page_down(addr);
        if p.other.get(addr).is_some() {
            return false;
        }
        let above = p.mm.vmas.range(addr..).next();
        let Some(end) = above
            .filter(|(_, v)| !v.flags.contains(VmFlags::GROWSDOWN))
            .map(|(_, v)| v.start)
        else {
            return false;
        };
        let end = p
            .other
            .first_overlap(start, end)
            .map_or(end, |s| s.max(start));
        if end <= start || end - start > self.max_anon_bytes {
            return false;
        }
        let made =
            p.mm.mmap(
                &mut self.pa,
                &mut self.cx,
                Vaddr(start),
                end - start,
                mm::vma::MapFlags::FIXED,
            )
            .is_ok();
        if made {
            p.inferred.insert(start, end);
            self.hot_vma = (0, 0);
            self.note(
                "mappings inferred from a fault outside every mapping (no mremap in the trace)",
            );
        }
        made
    }

    /// A fault at `addr`, in no mapping of the hot process, below the break
    /// that a `brk` without its exit asked for while the heap's start was
    /// unknown, with no mapping between it and that break: the heap starts
    /// at its page, and the model's heap is made from there to the break
    /// asked for (true). Why the first fault: the C library's `malloc`
    /// (glibc's `sysmalloc()`) writes the new top chunk's header at the old
    /// break right after `sbrk()`, so the first fault of a heap is on its
    /// first page, and `start_brk` is page-aligned (with or without
    /// `arch_randomize_brk()`). An allocator that first writes higher up
    /// gives a heap that starts too high, whose lowest pages then fault as
    /// in the recording; it is counted in the notes like every inference.
    fn heap_from_fault(&mut self, addr: u64) -> bool {
        let Some((_, p)) = self.hot.as_mut() else {
            return false;
        };
        let start = page_down(addr);
        let Some(asked) = p.brk_asked.filter(|&a| !p.brk_known && start < a) else {
            return false;
        };
        let below_is_free =
            p.mm.vmas
                .range(..asked)
                .next_back()
                .is_none_or(|(_, v)| v.end <= start)
                && p.other.first_overlap(start, asked).is_none();
        if !below_is_free {
            return false;
        }
        p.brk_known = true;
        p.brk_asked = None;
        p.mm.start_brk = start;
        p.mm.brk = start;
        let made = p.mm.brk(&mut self.pa, &mut self.cx, Vaddr(asked)) == Vaddr(asked);
        self.hot_vma = (0, 0);
        self.note("heap start taken from its first fault (brk without its exit)");
        made
    }

    /// A recorded fault in a modelled VMA of the hot process, not mapped
    /// under this kernel: through `do_user_addr_fault()`.
    fn fault_in_vma(&mut self, tid: i32, addr: u64, write: bool) {
        let Some((_, p)) = self.hot.as_mut() else {
            unreachable!("a fault in a VMA has a hot process");
        };
        let policy = self.vmacache;
        if self.hot_task.as_ref().is_none_or(|(t, _)| *t != tid) {
            if let Some((t, task)) = self.hot_task.take() {
                self.tasks.insert(t, task);
            }
            let task = self
                .tasks
                .remove(&tid)
                .unwrap_or_else(|| TaskStruct::new(&p.mm, policy));
            self.hot_task = Some((tid, task));
        }
        let Some((_, task)) = self.hot_task.as_mut() else {
            unreachable!("the hot task was just set");
        };
        let id = MmId::of(&p.mm);
        if task.mm != Some(id) {
            *task = TaskStruct::new(&p.mm, policy);
        }
        let r = memory::do_user_addr_fault(
            &mut self.pa,
            &mut self.cx,
            &mut self.g,
            &mut p.mm,
            task,
            Vaddr(addr),
            write,
        );
        self.out.fault_ns += self.cx.compute_ns();
        match r {
            Ok(()) => self.out.faults_taken += 1,
            Err(e) => {
                self.out.faults_failed += 1;
                if e == VmFault::Sigsegv {
                    self.out.faults_sigsegv += 1;
                }
            }
        }
    }

    /// Where an `mmap()` whose exit was not recorded went: its address
    /// with `MAP_FIXED`; else where the kernel's `PERF_RECORD_MMAP2` right
    /// after it says (the reported VMA may have merged with a neighbour:
    /// then the part of it that is free in the model, as the kernel's
    /// top-down search would have chosen it); else the model's own
    /// `get_unmapped_area()`, which cannot know the kernel's randomized
    /// placement (faults there then pass through: counted).
    fn place_entry_only_mmap(
        &mut self,
        pid: i32,
        record: Option<LastRecord>,
        addr: u64,
        len: u64,
        flags: u64,
    ) -> Option<u64> {
        let l = page_up(len);
        let p = self.procs.get(&pid)?;
        if l == 0 || l > TASK_SIZE {
            return None;
        }
        if flags & (MAP_FIXED | MAP_FIXED_NOREPLACE) != 0 {
            self.note("mmap without its exit (MAP_FIXED: at its address)");
            return (addr.is_multiple_of(PAGE_SIZE) && addr <= TASK_SIZE - l).then_some(addr);
        }
        if let Some(r) = record.filter(|r| r.end.saturating_sub(r.start) >= l) {
            if let Some(a) = Self::free_part(p, r.start, r.end, l) {
                self.note("mmap without its exit (placed by its PERF_RECORD_MMAP2)");
                return Some(a);
            }
        }
        let hint = if addr.is_multiple_of(PAGE_SIZE) {
            addr
        } else {
            0
        };
        match p.mm.get_unmapped_area(&mut self.cx, l, hint) {
            Ok(a) => {
                self.note("mmap without its exit or a PERF_RECORD_MMAP2 (placed by the model: the kernel's address is unknown)");
                Some(a)
            }
            Err(_) => {
                self.note("mmap without its exit that the model could not place (skipped)");
                None
            }
        }
    }

    /// The highest `len` bytes of `[start, end)` that neither the model's
    /// VMAs nor the unmodelled ranges occupy, in the highest free gap (the
    /// kernel searches top-down), or the whole range when it is `len`.
    fn free_part(p: &Proc, start: u64, end: u64, len: u64) -> Option<u64> {
        if end - start == len {
            return Some(start);
        }
        let mut used: Vec<(u64, u64)> =
            p.mm.vmas
                .values()
                .filter(|v| v.start < end && v.end > start)
                .map(|v| (v.start, v.end))
                .chain(
                    p.other
                        .0
                        .iter()
                        .filter(|(&s, &(e, _))| s < end && e > start)
                        .map(|(&s, &(e, _))| (s, e)),
                )
                .collect();
        used.sort_unstable();
        let mut gaps = Vec::new();
        let mut at = start;
        for (s, e) in used {
            if s > at {
                gaps.push((at, s));
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps.iter()
            .rev()
            .find(|(s, e)| e - s >= len)
            .map(|&(_, e)| e - len)
    }

    /// `mremap()` whose exit was not recorded: the model's own call with
    /// the recorded arguments. A move lands where the model's search puts
    /// it, which cannot be the kernel's randomized choice (counted).
    fn mremap_entry_only(
        &mut self,
        pid: i32,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        new_addr: u64,
    ) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let f = MremapFlags((flags & 0x7) as u32);
        if !has_vma(&p.mm, addr) {
            let fixed = flags & MREMAP_FIXED != 0;
            let in_place = new_len <= old_len || !f.contains(MremapFlags::MAYMOVE);
            if fixed || in_place {
                let ret = if fixed { new_addr } else { addr };
                self.mremap_other(pid, addr, old_len, new_len, flags, ret);
            } else {
                self.note("mremap without its exit of unmodelled memory that may move (skipped)");
            }
            return;
        }
        match p.mm.mremap(
            &mut self.pa,
            &mut self.cx,
            Vaddr(addr),
            old_len,
            new_len,
            f,
            Vaddr(new_addr),
        ) {
            Ok(a) if a != Vaddr(addr) && flags & MREMAP_FIXED == 0 => self.note(
                "mremap without its exit moved by the model (the kernel's address is unknown)",
            ),
            Ok(_) => {
                self.note("mremap without its exit (replayed at its entry with the model's result)")
            }
            Err(_) => self.note("mremap without its exit that the model refused (skipped)"),
        }
    }

    /// `brk(brk)` returned `ret`: the model's [`MmStruct::brk`], the
    /// recorded break applied where the model answers otherwise. Without a
    /// recorded result the model's answer stands, once the heap's start is
    /// known.
    fn brk(&mut self, pid: i32, brk: u64, ret: Option<i64>) {
        let Some(ret) = ret else {
            let Some(p) = self.procs.get_mut(&pid) else {
                return;
            };
            if p.brk_known {
                p.mm.brk(&mut self.pa, &mut self.cx, Vaddr(brk));
                self.note("brk without its exit (replayed at its entry with the model's result)");
            } else {
                // brk(0) asks for nothing; a break asked for is where the
                // heap ends once its first fault says where it starts.
                if brk != 0 {
                    p.brk_asked = Some(brk);
                }
                self.note("brk without its exit before the heap's start was known (the heap is taken to start at its first fault)");
            }
            return;
        };
        // brk() returns a break, never an errno; a negative or null value
        // is a damaged record.
        if ret <= 0 || ret as u64 > TASK_SIZE {
            return;
        }
        let new = ret as u64;
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if !p.brk_known {
            // The first brk of the process: before it, the break was `new`
            // unless the call moved it. After an exec, the C library's
            // brk(0) comes first and returns start_brk itself.
            p.brk_known = true;
            p.mm.start_brk = new;
            p.mm.brk = new;
            if brk != 0 && brk == new {
                self.note("brk changes from an unknown break (the heap below it is not modelled)");
            }
            return;
        }
        if p.mm.brk(&mut self.pa, &mut self.cx, Vaddr(brk)) == Vaddr(new) {
            return;
        }
        // The model answered otherwise: the kernel's break is the truth.
        if new < p.mm.start_brk {
            p.mm.start_brk = new;
        }
        let old = p.mm.brk;
        let forced = p.mm.brk(&mut self.pa, &mut self.cx, Vaddr(new)) != Vaddr(new);
        if forced {
            p.mm.brk = new;
        }
        self.note("brk results the model disagreed with (the recorded break applied)");
        if forced {
            let (lo, hi) = (page_up(old.min(new)), page_up(old.max(new)));
            if new > old {
                self.map_anon(pid, lo, hi, PROT_RW);
            } else {
                self.unmap(pid, lo, hi);
            }
        }
    }

    /// The result of `brk(brk)` whose exit was not recorded, from the VMA
    /// that `do_brk_flags()` reported right after it (named `[heap]`, or
    /// `//anon` for the first growth: the kernel names a VMA the heap
    /// only once `mm->brk` has moved past `start_brk`): the requested
    /// break if the VMA ends at its page, else the VMA's end. The VMA's
    /// start is the heap's start where the replay did not know it yet
    /// (exact unless the heap was merged into the `.bss` below it, which
    /// happens only without brk randomization).
    fn brk_from_record(&mut self, pid: i32, brk: u64, record: Option<LastRecord>) -> Option<i64> {
        let r = record.filter(|r| {
            (r.heap || r.end == page_up(brk)) && r.start < r.end && r.end <= TASK_SIZE
        })?;
        let p = self.procs.get_mut(&pid)?;
        if !p.brk_known {
            p.brk_known = true;
            p.mm.start_brk = r.start;
            p.mm.brk = r.start;
            self.note("heap start taken from the PERF_RECORD_MMAP2 of a brk without its exit");
        }
        let end = if page_up(brk) == r.end { brk } else { r.end };
        Some(end as i64)
    }

    /// The model's VMAs that overlap `[start, end)`, clipped to it and
    /// joined into runs of adjacent VMAs.
    fn modelled_runs(mm: &MmStruct, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        // An empty or wrapped range (a damaged length) covers nothing; a
        // BTreeMap range with its start past its end would panic.
        if end <= start {
            return runs;
        }
        let first = mm
            .vmas
            .range(..=start)
            .next_back()
            .filter(|(_, v)| v.end > start)
            .map(|(_, v)| v);
        for v in first
            .into_iter()
            .chain(mm.vmas.range(start.saturating_add(1)..end).map(|(_, v)| v))
        {
            let (s, e) = (v.start.max(start), v.end.min(end));
            match runs.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => runs.push((s, e)),
            }
        }
        runs
    }

    /// `mprotect()` on the modelled runs of `[start, end)`; false if the
    /// model refused a run.
    fn mprotect(&mut self, pid: i32, start: u64, end: u64, prot: u64) -> bool {
        if prot & PROT_GROWS != 0 {
            self.note("mprotect PROT_GROWSDOWN/GROWSUP (dropped: no VMA grows in the model)");
        }
        let prot = Prot((prot & !PROT_GROWS) as u32);
        let Some(p) = self.procs.get(&pid) else {
            return true;
        };
        // Parts of an unmodelled oversized reservation that become
        // accessible come into the model (nothing of them can have been
        // touched: exact).
        let opened = if prot.0 as u64 & PROT_ACCESS != 0 {
            p.other.parts(start, end, Kind::Oversize)
        } else {
            Vec::new()
        };
        for (s, e) in opened {
            if e - s > self.max_anon_bytes {
                continue;
            }
            self.note("mprotect opening part of an unmodelled oversized reservation (modelled from then on)");
            self.map_anon(pid, s, e, prot.0 as u64);
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            return true;
        };
        let runs = Self::modelled_runs(&p.mm, start, end);
        if runs.is_empty() {
            self.note(
                "mprotect outside modelled memory (file-backed, stack, program: nothing to change)",
            );
            return true;
        }
        let mut ok = true;
        for (s, e) in runs {
            ok &=
                p.mm.mprotect(&mut self.pa, &mut self.cx, Vaddr(s), e - s, prot)
                    .is_ok();
        }
        ok
    }

    #[allow(clippy::too_many_arguments)]
    fn mremap(
        &mut self,
        pid: i32,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        new_addr: u64,
        ret: u64,
    ) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if !has_vma(&p.mm, addr) {
            self.mremap_other(pid, addr, old_len, new_len, flags, ret);
            return;
        }
        // The model's mremap with the recorded arguments; the kernel's
        // choice of address made explicit.
        let f = (flags & 0x7) as u32;
        let r = if ret == addr && f & (MREMAP_FIXED as u32 | MREMAP_DONTUNMAP as u32) == 0 {
            // Resized in place: so must the model.
            let f = MremapFlags(f & !MremapFlags::MAYMOVE.0);
            p.mm.mremap(
                &mut self.pa,
                &mut self.cx,
                Vaddr(addr),
                old_len,
                new_len,
                f,
                Vaddr(0),
            )
        } else if ret >= MMAP_MIN_ADDR {
            if f & MREMAP_FIXED as u32 != 0 && ret != new_addr {
                Err(mm::vma::Errno::Inval)
            } else {
                let f = MremapFlags(f)
                    .or(MremapFlags::MAYMOVE)
                    .or(MremapFlags::FIXED);
                p.mm.mremap(
                    &mut self.pa,
                    &mut self.cx,
                    Vaddr(addr),
                    old_len,
                    new_len,
                    f,
                    Vaddr(ret),
                )
            }
        } else {
            Err(mm::vma::Errno::Inval)
        };
        if r == Ok(Vaddr(ret)) {
            return;
        }
        let prot = Self::prot_of(&p.mm, addr);
        self.note("mremap the model refused, replayed as its effect on the VMAs (moved pages not in the model)");
        self.mremap_effect(
            pid,
            addr,
            old_len,
            new_len,
            flags,
            ret,
            |m, pid, start, end| m.map_anon(pid, start, end, prot),
        );
    }

    /// The effect of `mremap(addr, old_len, new_len, flags) = ret` on the
    /// address space, with `map` mapping a range of the moved kind: in place
    /// the range grows or shrinks; moved, the old range goes (unless
    /// `MREMAP_DONTUNMAP`) and the new one is mapped.
    #[allow(clippy::too_many_arguments)]
    fn mremap_effect(
        &mut self,
        pid: i32,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        ret: u64,
        map: impl Fn(&mut Self, i32, u64, u64),
    ) {
        let (old_len, new_len) = (page_up(old_len), page_up(new_len));
        if ret == addr {
            if new_len > old_len {
                map(
                    self,
                    pid,
                    addr.saturating_add(old_len),
                    addr.saturating_add(new_len),
                );
            } else if new_len < old_len {
                self.unmap(
                    pid,
                    addr.saturating_add(new_len),
                    addr.saturating_add(old_len),
                );
            }
        } else {
            if flags & MREMAP_DONTUNMAP == 0 {
                self.unmap(pid, addr, addr.saturating_add(old_len));
            }
            map(self, pid, ret, ret.saturating_add(new_len));
        }
    }

    /// The `PROT_*` bits of the model's VMA at `addr` (read-write if none).
    fn prot_of(mm: &MmStruct, addr: u64) -> u64 {
        mm.vma_at(addr)
            .map_or(PROT_RW, |v| (v.flags.0 & mm::vma::VmFlags::ACCESS.0) as u64)
    }

    /// `mremap` of a range the model does not have: its kind moves in the
    /// side map.
    fn mremap_other(
        &mut self,
        pid: i32,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        ret: u64,
    ) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let Some(kind) = p.other.get(addr) else {
            self.note("mremap of memory the trace never mapped (skipped)");
            return;
        };
        self.mremap_effect(
            pid,
            addr,
            old_len,
            new_len,
            flags,
            ret,
            |m, pid, start, end| m.map_other(pid, start, end, kind),
        );
    }

    fn madvise(&mut self, pid: i32, start: u64, len: u64, behavior: i64) {
        let advice = match behavior {
            MADV_DONTNEED | MADV_DONTNEED_LOCKED => Advice::DontNeed,
            MADV_HUGEPAGE => Advice::HugePage,
            MADV_NOHUGEPAGE => Advice::NoHugePage,
            MADV_FREE => {
                self.note("MADV_FREE (skipped: pages kept, as without memory pressure)");
                return;
            }
            _ => {
                self.note("madvise advice the model lacks (skipped)");
                return;
            }
        };
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let start = page_down(start);
        let _ =
            p.mm.madvise(&mut self.pa, &mut self.cx, Vaddr(start), len, advice);
    }

    fn fork(&mut self, parent: i32, child: i32, rec: &mut AspaceRecorded, first: bool) {
        if child != parent && self.fork_child_tgid == Some(parent) {
            // A thread (its next event is in the parent's thread group):
            // `clone(CLONE_VM | CLONE_THREAD)` shares the address space.
            if let Some(old) = self.procs.remove(&child) {
                self.drop_proc(old);
            }
            if first {
                rec.threads += 1;
            }
            return;
        }
        if self.procs.contains_key(&child) {
            // A task id reused while the model still has it: the old one
            // has gone (its exit was lost).
            if let Some(old) = self.procs.remove(&child) {
                self.drop_proc(old);
            }
        }
        let Some(p) = self.procs.get_mut(&parent) else {
            return;
        };
        let (other, brk_known, brk_asked) = (p.other.clone(), p.brk_known, p.brk_asked);
        let inferred = p.inferred.clone();
        let inferred_written = p.inferred_written.clone();
        let saved = memory::fork_wrprotect_list(&p.mm);
        let copy = match memory::fork(&mut self.pa, &mut self.cx, &mut p.mm) {
            Ok(mm) => mm,
            Err(_) => {
                self.note("forks without memory in the model (child starts empty)");
                match self.new_proc(child) {
                    Some(c) => c.mm,
                    None => return,
                }
            }
        };
        let c = Proc {
            mm: copy,
            other,
            brk_known,
            brk_asked,
            inferred,
            inferred_written,
            tids: BTreeSet::from([child]),
        };
        self.procs.insert(child, c);
        self.pending.insert(child, parent);
        self.fork_saved.insert(child, saved);
        self.out.peak_procs = self.out.peak_procs.max(self.procs.len() as u64);
    }

    fn finish(mut self) -> AspaceModel {
        self.park();
        let held: Vec<i32> = self.deferred.keys().copied().collect();
        for pid in held {
            self.flush_deferred(pid, false);
        }
        self.out.vmstat = self.pa.vmstat.clone();
        self.out.live = self
            .procs
            .iter()
            .map(|(&pid, p)| {
                let l = LiveProc {
                    start_brk: p.mm.start_brk,
                    brk: p.mm.brk,
                    vmas: p.mm.vmas.values().copied().collect(),
                };
                (pid, l)
            })
            .collect();
        self.out
    }
}

/// The fault-path knobs of the recording's kernel, by their kernel names:
/// `transparent_hugepage/enabled` and each
/// `transparent_hugepage/hugepages-<size>kB/enabled` the model has that is
/// not at the kernel's default (`inherit` for 2048kB, `never` otherwise).
pub fn recorded_thp_knobs(h: &Header) -> Vec<(String, KnobValue)> {
    let mut knobs = Vec::new();
    if let Some(t) = &h.knobs.thp_enabled {
        knobs.push((
            "transparent_hugepage/enabled".to_string(),
            KnobValue::Str(t.clone()),
        ));
    }
    for (dir, v) in &h.knobs.thp_sizes_enabled {
        let name = format!("transparent_hugepage/{dir}/enabled");
        // Sizes of another page size cannot be set and are left out.
        let Some(order) = mm::knobs::MTHP_KNOBS
            .iter()
            .position(|k| k.name == name)
            .map(|i| i + 2)
        else {
            continue;
        };
        if MthpEnabled::parse(v) != Some(MTHP_DEFAULTS[order]) {
            knobs.push((name, KnobValue::Str(v.clone())));
        }
    }
    knobs
}

/// The result of a mode (b) replay: what the trace says, and per kernel
/// what the model did.
pub struct AspaceReplay {
    pub header: Header,
    pub trailer: Option<Trailer>,
    pub recorded: AspaceRecorded,
    /// In the order of the kernels given.
    pub models: Vec<AspaceModel>,
}

/// Replays the address-space stream of the trace at `path` under each of
/// `kernels`, on a machine of `layout`, charging the costs of `table`.
pub fn replay_aspace(
    path: &Path,
    layout: &MemoryLayout,
    table: &CostTable,
    kernels: &[KernelConfig],
) -> Result<AspaceReplay, ReplayError> {
    let terr = |source| ReplayError::Trace {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = TraceReader::open(path).map_err(terr)?;
    let kfaults = KernelFaultEstimator::new(reader.header().kmem_system_wide);
    let infer_moved = lacks_mremap(path, reader.header()).map_err(terr)?;
    let (recorded, models) = replay_events(
        reader.by_ref().map(|e| e.map_err(terr)),
        layout,
        table,
        kernels,
        kfaults,
        infer_moved,
    );
    let recorded = recorded?;
    if recorded.faults + recorded.kernel_faults == 0
        && recorded.syscalls.is_empty()
        && recorded.forks == 0
    {
        return Err(ReplayError::NoAspaceEvents {
            path: path.to_path_buf(),
        });
    }
    let (header, trailer) = reader.into_header_trailer();
    Ok(AspaceReplay {
        header,
        trailer,
        recorded,
        models,
    })
}

/// True when the trace at `path` is a perf.data import whose trailer says
/// `syscalls:sys_enter_mremap` was not recorded: its moved and grown
/// mappings are then inferred from faults ([`World::moved_from_fault`]).
/// The trailer is at the end, so such a trace is read twice.
fn lacks_mremap(path: &Path, header: &Header) -> Result<bool, TraceError> {
    if !matches!(header.source, TraceSource::PerfImport { .. }) {
        return Ok(false);
    }
    let mut r = TraceReader::open(path)?;
    for ev in r.by_ref() {
        ev?;
    }
    Ok(r.trailer().is_some_and(|t| {
        t.missing_event_kinds
            .iter()
            .any(|k| k == "syscalls:sys_enter_mremap")
    }))
}

/// Events looked ahead for a fork's child at most: past this, the child's
/// thread group is left unknown (the tentative fork decides, see the module
/// doc). Bounds the memory the look-ahead holds.
const FORK_LOOKAHEAD: usize = 1 << 16;

/// The event stream with, for each `Fork` event, the thread group (`pid`)
/// of the child's next event, found by reading ahead (at most
/// [`FORK_LOOKAHEAD`] events, held until they are replayed): a child in its
/// parent's thread group is a thread. `None` for other events, and for a
/// child with no event within reach.
struct ForkLookahead<E, I: Iterator<Item = Result<Event, E>>> {
    inner: I,
    ahead: VecDeque<Result<Event, E>>,
}

impl<E, I: Iterator<Item = Result<Event, E>>> ForkLookahead<E, I> {
    fn new(inner: I) -> Self {
        ForkLookahead {
            inner,
            ahead: VecDeque::new(),
        }
    }

    fn child_tgid(&mut self, child: i32) -> Option<i32> {
        let found = |ev: &Result<Event, E>| match ev {
            Ok(e) if e.tid == child => Some(e.pid),
            _ => None,
        };
        if let Some(t) = self.ahead.iter().find_map(found) {
            return Some(t);
        }
        while self.ahead.len() < FORK_LOOKAHEAD {
            let ev = self.inner.next()?;
            let stop = ev.is_err();
            let t = found(&ev);
            self.ahead.push_back(ev);
            if t.is_some() || stop {
                return t;
            }
        }
        None
    }
}

impl<E, I: Iterator<Item = Result<Event, E>>> Iterator for ForkLookahead<E, I> {
    type Item = (Result<Event, E>, Option<i32>);

    fn next(&mut self) -> Option<Self::Item> {
        let ev = match self.ahead.pop_front() {
            Some(ev) => ev,
            None => self.inner.next()?,
        };
        let tgid = match &ev {
            Ok(Event {
                kind: EventKind::Fork { child, .. },
                ..
            }) => self.child_tgid(*child),
            _ => None,
        };
        Some((ev, tgid))
    }
}

/// The replay loop over any stream of events; stops at the first error.
fn replay_events<I: Iterator<Item = Result<Event, ReplayError>>>(
    events: I,
    layout: &MemoryLayout,
    table: &CostTable,
    kernels: &[KernelConfig],
    mut kfaults: KernelFaultEstimator,
    infer_moved: bool,
) -> (Result<AspaceRecorded, ReplayError>, Vec<AspaceModel>) {
    let mut worlds: Vec<World> = kernels
        .iter()
        .map(|k| {
            let mut w = World::new(layout, k, table);
            w.infer_moved = infer_moved;
            w
        })
        .collect();
    let mut rec = AspaceRecorded::default();
    let mut t0: Option<u64> = None;
    let mut last = 0u64;
    let mut error = None;
    for (ev, tgid) in ForkLookahead::new(events) {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        rec.nr_events += 1;
        kfaults.observe(&ev);
        let name = match &ev.kind {
            EventKind::PageFaultUser { error_code, .. } => {
                rec.faults += 1;
                if error_code & X86_PF_WRITE != 0 {
                    rec.write_faults += 1;
                }
                None
            }
            EventKind::PageFaultKernel { address, .. } => {
                if *address < TASK_SIZE {
                    rec.kernel_faults += 1;
                }
                None
            }
            EventKind::Mmap { .. } => Some("mmap"),
            EventKind::Munmap { .. } => Some("munmap"),
            EventKind::Brk { .. } => Some("brk"),
            EventKind::Mremap { .. } => Some("mremap"),
            EventKind::Mprotect { .. } => Some("mprotect"),
            EventKind::Madvise { .. } => Some("madvise"),
            EventKind::Fork { .. } => {
                rec.forks += 1;
                for w in &mut worlds {
                    w.fork_child_tgid = tgid;
                }
                None
            }
            EventKind::Exec { .. } => {
                rec.execs += 1;
                None
            }
            EventKind::ExecLayout { .. } => {
                rec.exec_layouts += 1;
                None
            }
            EventKind::Exit { .. } => {
                rec.exits += 1;
                None
            }
            EventKind::PageAlloc { .. }
            | EventKind::PageFree { .. }
            | EventKind::PageAllocZoneLocked { .. }
            | EventKind::PagePcpuDrain { .. }
            | EventKind::VmstatWork {} => continue,
            EventKind::MmapRecord { .. } | EventKind::Comm { .. } => None,
        };
        if let Some(n) = name {
            *rec.syscalls.entry(n).or_default() += 1;
        }
        let start = *t0.get_or_insert(ev.ts_ns);
        last = last.max(ev.ts_ns);
        for (i, w) in worlds.iter_mut().enumerate() {
            w.apply(&ev, start, &mut rec, i == 0);
        }
    }
    rec.span_ns = last.saturating_sub(t0.unwrap_or(0));
    rec.kernel_fault_estimate = kfaults.finish();
    let models = worlds.into_iter().map(World::finish).collect();
    match error {
        Some(e) => (Err(e), models),
        None => (Ok(rec), models),
    }
}

/// One 24-byte record of [`replay_fuzz_input`]: byte 0 picks the event,
/// 1-7 its pid, thread, value shapes and small fields, 8-15 and 16-23 two
/// words.
struct FuzzRecord<'a>(&'a [u8]);

impl FuzzRecord<'_> {
    fn word(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[i..i + 8]);
        u64::from_le_bytes(b)
    }

    /// Mostly an address in a 1 GiB window (pages, sometimes odd bytes),
    /// now and then any value.
    fn addr(&self, v: u64) -> u64 {
        if self.0[3] & 0x80 != 0 {
            v
        } else {
            0x7f00_0000_0000 + (v & 0x3fff_ffff & if self.0[3] & 1 != 0 { !0 } else { !0xfff })
        }
    }

    /// Mostly a length under 8 MiB, now and then any value.
    fn len(&self, v: u64) -> u64 {
        if self.0[3] & 0x40 != 0 {
            v
        } else {
            (v >> 32) & 0x7f_ffff
        }
    }

    /// Failed, not recorded (an entry without its exit), or succeeded.
    fn ret(&self, ok: i64) -> Option<i64> {
        match self.0[4] & 7 {
            0 => Some(-12),
            1 => None,
            _ => Some(ok),
        }
    }

    fn kind(&self, pid: i32, tid: i32) -> EventKind {
        let (x, y) = (self.word(8), self.word(16));
        match self.0[0] % 16 {
            0 | 1 => EventKind::PageFaultUser {
                address: self.addr(x),
                ip: 0,
                error_code: y & 0x1f,
            },
            2 => EventKind::PageFaultKernel {
                address: self.addr(x),
                ip: 0,
                error_code: y & 0x1f,
            },
            3 | 4 => EventKind::Mmap {
                addr: 0,
                len: self.len(y),
                prot: (self.0[5] & 7) as u64,
                flags: [0x22, 0x22, 0x02, 0x21, 0x40022, 0x8022][self.0[6] as usize % 6],
                fd: u64::MAX,
                off: 0,
                ret: self.ret(self.addr(x) as i64),
            },
            5 => EventKind::Munmap {
                addr: self.addr(x),
                len: self.len(y),
                ret: self.ret(0),
            },
            6 => EventKind::Brk {
                brk: self.addr(x),
                ret: self.ret(self.addr(x) as i64),
            },
            7 => EventKind::Mremap {
                addr: self.addr(x),
                old_len: self.len(y),
                new_len: self.len(y.rotate_left(17)),
                flags: (self.0[5] & 7) as u64,
                new_addr: 0,
                ret: self.ret(if self.0[6] & 1 != 0 {
                    self.addr(x)
                } else {
                    self.addr(y)
                } as i64),
            },
            8 => EventKind::Mprotect {
                start: self.addr(x),
                len: self.len(y),
                prot: (self.0[5] & 7) as u64,
                ret: self.ret(0),
            },
            9 => EventKind::Madvise {
                start: self.addr(x),
                len_in: self.len(y),
                behavior: [4, 8, 14, 15, 24, 3, 9][self.0[5] as usize % 7],
                ret: self.ret(0),
            },
            10 | 11 => EventKind::Fork {
                parent: pid,
                child: 1 + (self.0[5] % 8) as i32 + if self.0[6] & 1 != 0 { 100 } else { 0 },
            },
            12 => EventKind::Exec {
                pid,
                filename: String::new(),
            },
            13 => EventKind::Exit {
                pid: if self.0[5] & 1 != 0 { tid } else { pid },
            },
            14 => EventKind::MmapRecord {
                addr: self.addr(x),
                len: self.len(y),
                pgoff: 0,
                prot: (self.0[5] & 7) as u32,
                flags: 0x02,
                filename: if self.0[6] & 1 != 0 {
                    "[heap]"
                } else {
                    "//anon"
                }
                .to_string(),
            },
            _ => EventKind::PageFree { pfn: x, order: 0 },
        }
    }
}

/// The fuzz target `aspace_replay` (and its regression test): `bytes` read
/// as 24-byte records, each one event with its fields taken from the bytes
/// (addresses mostly inside a 1 GiB window, so that events meet), replayed
/// on a 64 MiB machine under three kernels (6.18; 6.18 with THP and 64 KiB
/// mTHP always; 4.19 with its VMA cache and THP copy-on-write). Whatever
/// the events, the replay must not panic.
#[doc(hidden)]
pub fn replay_fuzz_input(bytes: &[u8]) -> AspaceRecorded {
    let events: Vec<Event> = bytes
        .chunks_exact(24)
        .enumerate()
        .map(|(i, c)| {
            let pid = 1 + (c[1] % 4) as i32;
            let tid = if c[2] & 3 == 0 { pid + 100 } else { pid };
            Event {
                ts_ns: i as u64 * 100,
                cpu: (c[7] % 2) as u32,
                pid,
                tid,
                kind: FuzzRecord(c).kind(pid, tid),
            }
        })
        .collect();
    let layout = MemoryLayout {
        nodes: vec![mm::page_alloc::NodeLayout {
            nr_cpus: 2,
            nr_pages: 64 << 8,
        }],
        dma32_pages: 0,
    };
    let mut wide = mm::knobs::Preset::Linux6_18.config();
    let _ = wide.set_knob(
        "transparent_hugepage/enabled",
        &KnobValue::Str("always".into()),
    );
    let _ = wide.set_knob(
        "transparent_hugepage/hugepages-64kB/enabled",
        &KnobValue::Str("always".into()),
    );
    let kernels = [
        mm::knobs::Preset::Linux6_18.config(),
        wide,
        mm::knobs::Preset::Linux4_19.config(),
    ];
    let (rec, _) = replay_events(
        events.into_iter().map(Ok),
        &layout,
        &CostTable::uniform(1),
        &kernels,
        KernelFaultEstimator::default(),
        // An odd number of records: replayed as a trace without mremap
        // (mappings inferred from faults outside every mapping).
        bytes.len() / 24 % 2 == 1,
    );
    rec.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pid: i32, tid: i32, kind: EventKind) -> Result<Event, ()> {
        Ok(Event {
            ts_ns: 0,
            cpu: 0,
            pid,
            tid,
            kind,
        })
    }

    #[test]
    fn fork_lookahead_finds_the_childs_thread_group_within_reach() {
        let fork = || EventKind::Fork {
            parent: 1,
            child: 5,
        };
        let exit = |p| EventKind::Exit { pid: p };
        // The child's next event, two events on: a thread of 1; every
        // event comes out once, in order.
        let evs = vec![ev(1, 1, fork()), ev(1, 1, exit(9)), ev(1, 5, exit(5))];
        let out: Vec<_> = ForkLookahead::new(evs.into_iter()).collect();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].1, Some(1));
        assert_eq!(out[1].1, None);
        assert!(matches!(&out[2].0, Ok(e) if e.tid == 5));
        // Beyond FORK_LOOKAHEAD events: unknown, and nothing is lost.
        let mut evs = vec![ev(1, 1, fork())];
        evs.extend((0..FORK_LOOKAHEAD).map(|_| ev(1, 1, exit(9))));
        evs.push(ev(1, 5, exit(5)));
        let out: Vec<_> = ForkLookahead::new(evs.into_iter()).collect();
        assert_eq!(out.len(), FORK_LOOKAHEAD + 2);
        assert_eq!(out[0].1, None);
        // An error ends the look-ahead and comes out in its place.
        let evs = vec![ev(1, 1, fork()), Err(()), ev(1, 5, exit(5))];
        let out: Vec<_> = ForkLookahead::new(evs.into_iter()).collect();
        assert_eq!(out[0].1, None);
        assert!(out[1].0.is_err());
    }

    #[test]
    fn ranges_trim_and_split() {
        let mut r = Ranges::default();
        r.insert(0x1000, 0x9000, Kind::File);
        r.remove(0x3000, 0x5000);
        assert_eq!(r.get(0x2fff), Some(Kind::File));
        assert_eq!(r.get(0x3000), None);
        assert_eq!(r.get(0x5000), Some(Kind::File));
        r.insert(0x4000, 0x6000, Kind::Oversize);
        assert_eq!(r.get(0x4000), Some(Kind::Oversize));
        assert_eq!(r.get(0x6000), Some(Kind::File));
        assert_eq!(r.parts(0, 0x10000, Kind::Oversize), vec![(0x4000, 0x6000)]);
        assert_eq!(
            r.parts(0x2000, 0x8000, Kind::File),
            vec![(0x2000, 0x3000), (0x6000, 0x8000)]
        );
    }
}
