//! The deterministic discrete-event engine.
//!
//! # Time and order
//!
//! Each vCPU has a local clock. Events are ordered by `(virtual time,
//! sequence number)`, FIFO on ties, and the engine processes them in that
//! order. An event says "vCPU v continues at time t". Every operation of a
//! task *starts* at an event, and so does every lock acquisition and
//! release inside it: the kernel model changes its state when the operation
//! starts and returns the segments of work it did ([`mm::cost::Seg`]); the
//! engine plays those out, stopping at each lock so that acquisitions happen
//! in global time order. A vCPU that finds a lock held joins its FIFO queue
//! (qspinlock hands the lock over in queue order) and spins, busy, until the
//! holder releases it; hold and wait times are accounted per lock class.
//!
//! # Tasks
//!
//! Tasks are bound to vCPUs; a vCPU runs its tasks one operation at a time
//! from a FIFO run queue, switching only when a task blocks or exits.
//!
//! Deviation from a real machine: no preemption and no migration between
//! vCPUs; a blocked vCPU idles at no cost.
//!
//! # Processes
//!
//! Every task belongs to a process, which owns an address space
//! ([`MmStruct`]); threads of one process share it. The address space is
//! created on the process's first memory operation (so that workloads that
//! never map memory, like page-churn, allocate no page tables), copied by
//! `fork` ([`mm::memory::fork`]) and torn down by `exit_mmap` when the last
//! task of the process ends, so that every page comes back. A forked child
//! runs on the vCPU after its parent's, then the next, round-robin over the
//! parent's forks: a deterministic stand-in for the scheduler placing it on
//! an idle CPU.
//!
//! `mm->mmap_lock` is a lock of class [`LockClass::MmapLock`], taken for
//! writing around `mmap`, `munmap`, `mprotect`, `mremap`, `madvise`, `brk`, `fork`
//! and `exit_mmap`, and for reading around each page fault (deviation for
//! 6.4+: see [`LockClass::MmapLock`]). Locks are read-write: readers share,
//! a writer waits for them, and a reader queues behind a waiting writer.
//! Page-table locks ([`LockClass::Ptl`]) are taken inside the model's
//! functions, one per page-table page.
//!
//! A `Touch` runs one access at a time: the engine returns to the event
//! queue after each fault (and after every [`TOUCH_CHUNK`] accesses that do
//! not fault), so that the faults of different vCPUs interleave in virtual
//! time as they would on a machine.
//!
//! # Events
//!
//! The queue holds three kinds of [`Event`]: a vCPU continuing
//! (`Event::Run`), a vCPU's periodic vmstat work coming due
//! (`Event::VmstatTimer`) and a sleeping task waking (`Event::Wake`).
//! Each is queued with the time it comes due and a sequence number, and
//! the queue hands them out by `(time, sequence)`: two events due at the
//! same nanosecond come out in the order they were queued.
//!
//! # Dispatch
//!
//! [`Engine::start_next_op`] runs the per-CPU kernel work that is due, then
//! asks the vCPU's current task for its next operation and hands it to one
//! method per [`Op`] (`op_mmap`, `op_touch`, ...). A method that calls into
//! `mm` does it through [`Engine::record`] (the cost context begun at the
//! vCPU's time, the recorded segments queued on the vCPU) or, for a system
//! call on an address space, [`Engine::mm_syscall`] (the same, under the
//! process's `mmap_lock`, with the address space made on first use).

use crate::cache::{AccessKind, CacheCosts, CacheModel, CacheStats};
use crate::op::{Block, ChanId, ChildProgram, Op, OpResult, Program, TaskSpec};
use crate::rng::Rng;
use crate::timeline::{MemKind, Timeline, TimelineOptions};
use mm::cost::{Cost, CostTable, Cx, LockClass, LockId, MemAccess, Seg};
use mm::memory::{MmConfig, MmGlobal, VmFault};
use mm::mprotect::Prot;
use mm::mremap::MremapFlags;
use mm::page_alloc::{AllocError, Gfp, PageAlloc};
use mm::vma::{Advice, Errno, MapFlags, MmStruct};
use mm::vmacache::{TaskStruct, VmacachePolicy};
use mm::Vaddr;
use mm::{NodeId, Pfn, SimTime, VcpuId};
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// A task, by its place in the engine's task table (spawned tasks first, in
/// spawn order, then forked ones as they are forked).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct TaskId(usize);

/// A process, by its index in the engine's process table.
type Pid = usize;

/// An id that indexes a [`Table`].
trait TableId: Copy {
    fn from_idx(i: usize) -> Self;
    fn idx(self) -> usize;
}

impl TableId for TaskId {
    fn from_idx(i: usize) -> TaskId {
        TaskId(i)
    }
    fn idx(self) -> usize {
        self.0
    }
}

impl TableId for VcpuId {
    fn from_idx(i: usize) -> VcpuId {
        VcpuId(i as u32)
    }
    fn idx(self) -> usize {
        self.0 as usize
    }
}

/// A `Vec` indexed by one kind of id only, so that a task number can never
/// pick a vCPU or the other way round.
struct Table<I, T> {
    items: Vec<T>,
    id: PhantomData<fn(I)>,
}

impl<I: TableId, T> Table<I, T> {
    fn new(items: Vec<T>) -> Self {
        Table {
            items,
            id: PhantomData,
        }
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    /// Appends `item` and returns its id.
    fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::from_idx(self.items.len() - 1)
    }

    fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// Every id, in order.
    fn ids(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::from_idx)
    }
}

impl<I: TableId, T> Index<I> for Table<I, T> {
    type Output = T;
    #[inline]
    fn index(&self, i: I) -> &T {
        &self.items[i.idx()]
    }
}

impl<I: TableId, T> IndexMut<I> for Table<I, T> {
    #[inline]
    fn index_mut(&mut self, i: I) -> &mut T {
        &mut self.items[i.idx()]
    }
}

/// Accesses of a `Touch` that do not fault, played before the engine returns
/// to the event queue: enough to keep the event count low on a mapped range,
/// few enough that other vCPUs' operations interleave.
pub const TOUCH_CHUNK: u64 = 512;

/// `sysctl_stat_interval`: the vmstat work runs once a second (HZ).
pub const VMSTAT_INTERVAL_NS: u64 = 1_000_000_000;

/// What a queued event does when it comes due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// The vCPU goes on: plays the rest of its segments, then starts its
    /// next operation.
    Run(VcpuId),
    /// The vCPU's per-CPU vmstat timer fires (`vmstat_update()`).
    VmstatTimer(VcpuId),
    /// A task's `Sleep` ends.
    Wake(TaskId),
}

/// An event with the time it comes due and its place in queueing order.
#[derive(Debug)]
struct Queued {
    at: SimTime,
    seq: u64,
    event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Queued) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Queued) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    /// By time, then FIFO: sequence numbers are unique, so the event is
    /// never needed to break a tie.
    fn cmp(&self, other: &Queued) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The event queue: a min-heap on `(time, sequence)`.
#[derive(Default)]
struct EventQueue {
    heap: BinaryHeap<Reverse<Queued>>,
    seq: u64,
}

impl EventQueue {
    fn push(&mut self, at: SimTime, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse(Queued {
            at,
            seq: self.seq,
            event,
        }));
    }

    fn pop(&mut self) -> Option<(SimTime, Event)> {
        self.heap.pop().map(|Reverse(q)| (q.at, q.event))
    }

    /// When the first queued event comes due.
    fn next_at(&self) -> Option<SimTime> {
        self.heap.peek().map(|Reverse(q)| q.at)
    }
}

/// The operation being started: which task, of which process, on which
/// vCPU, at what time.
#[derive(Clone, Copy, Debug)]
struct OpCtx {
    tid: TaskId,
    pid: Pid,
    v: VcpuId,
    t: SimTime,
}

/// Where a task is in a `Touch` operation.
#[derive(Clone, Copy, Debug)]
struct TouchCursor {
    next: u64,
    end: u64,
    stride: u64,
    bytes: u64,
    write: bool,
}

/// A process: the address space its tasks share, and its family.
#[derive(Default)]
struct Process {
    /// The address space, created at the first memory operation.
    mm: Option<MmStruct>,
    /// Tasks of the process that have not ended.
    live_tasks: u32,
    /// The process that forked this one.
    parent: Option<Pid>,
    /// Children that have not yet exited.
    live_children: u32,
    /// Tasks blocked in `Wait`.
    waiters: Vec<TaskId>,
    /// Children forked so far (picks the next child's vCPU).
    nr_forks: u32,
    /// `exit_group()` was called, or the process was killed: its remaining
    /// tasks end at their next operation.
    dying: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum TaskState {
    Runnable,
    Blocked,
    Done,
}

struct Task {
    program: Box<dyn Program>,
    rng: Rng,
    cpu: VcpuId,
    state: TaskState,
    result: Option<OpResult>,
    nr_ops: u64,
    pid: Pid,
    touch: Option<TouchCursor>,
    /// The task's VMA cache (`task_struct::vmacache`), made at its first
    /// fault; a forked child starts with an empty one, as after
    /// `vmacache_flush()`.
    vmacache: Option<TaskStruct>,
    /// Bytes covered by the task's `Touch` accesses.
    touch_bytes: u64,
    /// When its first `Touch` started and its last one ended (the measured
    /// phase of a usemem-like program).
    touch_start: Option<SimTime>,
    touch_end: SimTime,
    /// A `Touch` is the task's current operation.
    in_touch: bool,
    /// `set_mempolicy(MPOL_PREFERRED)`'s node; `None`: the default policy.
    mempolicy: Option<NodeId>,
    /// Pages its accesses reached since its last user fault (saturating;
    /// `u32::MAX` before its first).
    pages_since_fault: u32,
}

impl Task {
    /// Task number `id` of process `pid`, about to run `program` on `cpu`.
    fn new(id: TaskId, seed: u64, program: Box<dyn Program>, cpu: VcpuId, pid: Pid) -> Task {
        Task {
            pages_since_fault: u32::MAX,
            program,
            rng: Rng::stream(seed, id.0 as u64 + 1),
            cpu,
            state: TaskState::Runnable,
            result: Some(OpResult::Start),
            nr_ops: 0,
            pid,
            touch: None,
            vmacache: None,
            touch_bytes: 0,
            touch_start: None,
            touch_end: SimTime::default(),
            in_touch: false,
            mempolicy: None,
        }
    }

    /// Ends the task's access phase at `t` if a `Touch` was its last
    /// operation.
    fn end_touch_phase(&mut self, t: SimTime) {
        if self.in_touch {
            self.in_touch = false;
            self.touch_end = t;
        }
    }
}

#[derive(Default)]
struct Vcpu {
    segs: Vec<Seg>,
    pos: usize,
    time: SimTime,
    current: Option<TaskId>,
    runq: VecDeque<TaskId>,
    /// True while an event for this vCPU is queued or it waits for a lock.
    active: bool,
    busy_ns: u64,
    lock_wait_since: SimTime,
    /// The per-CPU vmstat work is due and runs before the next operation.
    kwork_pending: bool,
    /// Nanoseconds of work items other CPUs' migrations queued here (a
    /// multi-threaded copy's share), run by a kworker before the next
    /// operation.
    helper_ns: u64,
    /// The segments being played are a task's (not the vmstat work, and not
    /// nothing at all on an idle vCPU).
    playing_task: bool,
    /// When this vCPU last finished work for a task (operations and the
    /// teardown of an address space), for the run's duration.
    task_work_end: SimTime,
    /// Busy time spent on tasks' behalf (their operations, the kernel work
    /// they cause and the spinning in it), not on periodic kernel work.
    task_ns: u64,
    /// The user-mode part of `task_ns`: `Compute` and the accesses of
    /// `Touch` that did not fault.
    user_ns: u64,
    /// Picoseconds of cache-model time not yet whole nanoseconds.
    mem_ps_rem: u64,
}

impl Vcpu {
    /// Counts `ns` of work (computing or spinning) in the vCPU's busy time
    /// and, while it plays a task's operation, in the task's time.
    fn charge_busy(&mut self, ns: u64) {
        self.busy_ns += ns;
        if self.playing_task {
            self.task_ns += ns;
        }
    }

    /// Drops what the vCPU was playing, to play something new from the start.
    fn reset_segs(&mut self) {
        self.segs.clear();
        self.pos = 0;
    }

    /// True if the vCPU neither has an event queued nor runs a task: it
    /// needs an event to notice new work.
    fn idle(&self) -> bool {
        // A vCPU with segments left and no event queued waits for a lock
        // (its grant schedules it): it is not idle, even when the task
        // whose exit it is playing is gone (`current` is None). Kicking it
        // replayed its `Lock` segment: queued twice, it waited on itself.
        !self.active && self.current.is_none() && self.pos >= self.segs.len()
    }
}

#[derive(Default)]
struct LockState {
    /// The vCPU holding it exclusively.
    owner: Option<VcpuId>,
    last_owner: Option<VcpuId>,
    acquired_at: SimTime,
    /// vCPUs holding it for reading, with the time each got it.
    readers: Vec<(VcpuId, SimTime)>,
    /// Queued vCPUs, in arrival order, and whether each wants to read.
    waiters: VecDeque<(VcpuId, bool)>,
}

#[derive(Default)]
struct Chan {
    msgs: VecDeque<Vec<Block>>,
    waiters: VecDeque<TaskId>,
}
/// Time accounted to one lock class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that found the lock held.
    pub contended: u64,
    /// Nanoseconds vCPUs spent waiting (spinning) for the lock.
    pub wait_ns: u64,
    /// Nanoseconds the lock was held.
    pub hold_ns: u64,
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Virtual time when the last task finished.
    pub runtime_ns: u64,
    /// Nanoseconds vCPUs were busy (computing or spinning), summed.
    pub busy_ns: u64,
    /// Per lock class, by [`LockClass`] order.
    pub locks: Vec<LockStats>,
    /// Operations executed.
    pub nr_ops: u64,
    /// Tasks that ran.
    pub nr_tasks: u64,
    /// Most pages held on PCP lists at once, sampled at operation starts.
    pub peak_pcp_pages: u64,
    /// Pages on PCP lists at the end.
    pub final_pcp_pages: u64,
    /// Each vCPU's PCP state for each zone, sampled when its vmstat work runs
    /// (once a virtual second).
    pub pcp_series: Vec<PcpSample>,
    /// Processes that ran (initial and forked).
    pub nr_processes: u64,
    /// User accesses outside any VMA (or writes to a read-only one): each
    /// killed its process with SIGSEGV.
    pub nr_sigsegv: u64,
    /// Faults that found no memory (`VM_FAULT_OOM`): each killed its process.
    pub nr_oom_kills: u64,
    /// CPU time the tasks spent in user mode, summed over vCPUs (the
    /// `user` of `time(1)`): `Compute` operations, the user accesses of
    /// `Touch` (one `touch_ns` each) and, with the cache model, the time of
    /// the lines they accessed.
    pub user_ns: u64,
    /// CPU time the kernel spent on the tasks' behalf, summed over vCPUs
    /// (the `sys` of `time(1)`): system calls, faults, fork, exit and
    /// teardown, the spinning on locks included; not the periodic per-CPU
    /// vmstat work, which runs in a kworker.
    pub sys_ns: u64,
    /// Hugetlb faults that found no huge page (`VM_FAULT_SIGBUS`): each
    /// killed its process.
    pub nr_sigbus: u64,
    /// Bytes covered by user accesses (`Touch`), all tasks.
    pub touch_bytes: u64,
    /// Sum over tasks of the bytes each task's accesses covered per second
    /// of its access phase (first `Touch` start to last `Touch` end): the
    /// throughput vm-scalability reports, summed over its processes.
    pub touch_bytes_per_s: u64,
    /// Line accesses counted by the cache model (all zero without one).
    pub cache: CacheStats,
    /// Of those, the kernel's (page clearing and copying).
    pub cache_kernel: CacheStats,
    /// `move_pages()` calls.
    pub nr_move_pages: u64,
    /// Virtual nanoseconds spent inside `move_pages()` calls, summed.
    pub move_pages_ns: u64,
}

/// One sample of one CPU's pageset for one zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcpSample {
    /// Virtual time of the sample.
    pub time_ns: u64,
    /// The CPU.
    pub cpu: u32,
    /// The zone's index in the allocator.
    pub zone: u32,
    /// Pages on the CPU's lists.
    pub count: i32,
    /// The CPU's `high`.
    pub high: i32,
}

impl RunStats {
    /// Share of busy vCPU time spent waiting for or holding `class`, in percent.
    pub fn lock_pct(&self, class: LockClass) -> f64 {
        let l = self.locks[class as usize];
        if self.busy_ns == 0 {
            return 0.0;
        }
        100.0 * (l.wait_ns + l.hold_ns) as f64 / self.busy_ns as f64
    }

    /// Share of busy vCPU time spent waiting for `class`, in percent.
    pub fn lock_wait_pct(&self, class: LockClass) -> f64 {
        let l = self.locks[class as usize];
        if self.busy_ns == 0 {
            return 0.0;
        }
        100.0 * l.wait_ns as f64 / self.busy_ns as f64
    }
}

/// The engine: the kernel model, the vCPUs, the tasks and the event queue.
pub struct Engine {
    /// The page allocator being driven.
    pub pa: PageAlloc,
    /// The fault path's configuration and global state.
    pub mmg: MmGlobal,
    /// Page migration's configuration.
    migrate_cfg: mm::migrate::MigrateConfig,
    /// The machine's memory system, for the copy model.
    numa_hw: mm::copy_page::NumaHw,
    /// Per node, when a migration last queued work on its CPUs (which
    /// woke its package); see [`Engine::packages_asleep`].
    package_woken_at: Vec<Option<SimTime>>,
    vmacache_policy: VmacachePolicy,
    procs: Vec<Process>,
    groups: BTreeMap<u32, Pid>,
    costs: CostTable,
    cx: Cx,
    vcpus: Table<VcpuId, Vcpu>,
    tasks: Table<TaskId, Task>,
    queue: EventQueue,
    locks: Vec<Vec<LockState>>,
    /// Page-table locks by table pfn (sparse: a Vec would be as long as the
    /// highest pfn).
    ptls: BTreeMap<u32, LockState>,
    chans: Vec<Chan>,
    stats: RunStats,
    seed: u64,
    check_every: u64,
    pcp_sample_every: u64,
    live_tasks: usize,
    idle_tail_ns: u64,
    /// See [`Engine::stop_with_last_task`].
    stop_with_last_task: bool,
    /// See [`Engine::vmstat_work_from_workload`].
    vmstat_timer_off: bool,
    /// When an operation last started, on any vCPU.
    last_op_start: SimTime,
    /// Per pageset (`PageAlloc::pcp_index`): the `(count, high)` of its last
    /// vmstat timer sample.
    last_pcp_sample: Vec<Option<(i32, i32)>>,
    /// vCPUs whose vmstat timer is paused until the next operation starts
    /// anywhere (see [`Engine::vmstat_timer`]).
    timers_paused: Vec<VcpuId>,
    /// Events left before [`Engine::run`] gives up (a fuzzer's liveness
    /// budget); `None`: no limit.
    event_budget: Option<u64>,
    /// The budget ran out: the run stopped with tasks still live.
    budget_exhausted: bool,
    /// Lock statistics and busy time when the last task ended: the run's
    /// figures, before any idle tail.
    at_last_task: Option<(Vec<LockStats>, u64)>,
    last_task_end: SimTime,
    /// The cache model fed with the memory traffic, and what it costs.
    cache: Option<(CacheModel, CacheCosts)>,
    /// What each vCPU did when, if a timeline was asked for
    /// ([`Engine::with_timeline`]); it only observes.
    timeline: Option<Box<Timeline>>,
    /// Per socket: the picosecond at which its memory channels have served
    /// every line missed so far (a FIFO server at the socket's bandwidth).
    dram_free_at_ps: Vec<u64>,
}

/// What a system call on an address space works with: the allocator, the
/// cost context, the address space (its `mmap_lock` held for writing) and
/// the calling task's VMA cache.
struct SyscallCx<'a> {
    pa: &'a mut PageAlloc,
    cx: &'a mut Cx,
    mm: &'a mut MmStruct,
    vmacache: &'a mut Option<TaskStruct>,
    policy: VmacachePolicy,
}

impl SyscallCx<'_> {
    /// The cached `find_vma()` at the start of `munmap()`, `madvise()` and a
    /// hinted `mmap()` (Linux 3.15–6.0): makes the task's VMA cache if it
    /// has none yet, then [`mm::vmacache::find_vma_syscall`]. Nothing under
    /// the `none` policy.
    fn find_vma(&mut self, addr: u64) {
        if self.policy == VmacachePolicy::None {
            return;
        }
        let mm = &*self.mm;
        let policy = self.policy;
        let t = self
            .vmacache
            .get_or_insert_with(|| TaskStruct::new(mm, policy));
        mm::vmacache::find_vma_syscall(t, mm, &mut self.pa.vmstat, self.cx, addr);
    }
}

impl Engine {
    /// An engine over `pa` with the given costs and seed.
    pub fn new(pa: PageAlloc, costs: CostTable, seed: u64) -> Engine {
        let nr_cpus = pa.nr_cpus() as usize;
        let cx = Cx::new(VcpuId(0), costs.clone());
        let numa_hw = mm::copy_page::NumaHw::from_costs(&costs);
        Engine {
            pa,
            mmg: MmGlobal::new(MmConfig::default()),
            migrate_cfg: mm::migrate::MigrateConfig::default(),
            numa_hw,
            package_woken_at: Vec::new(),
            vmacache_policy: VmacachePolicy::None,
            procs: Vec::new(),
            groups: BTreeMap::new(),
            costs,
            cx,
            vcpus: Table::new((0..nr_cpus).map(|_| Vcpu::default()).collect()),
            tasks: Table::new(Vec::new()),
            queue: EventQueue::default(),
            locks: (0..LockClass::COUNT).map(|_| Vec::new()).collect(),
            ptls: BTreeMap::new(),
            chans: Vec::new(),
            stats: RunStats {
                locks: vec![LockStats::default(); LockClass::COUNT],
                ..RunStats::default()
            },
            seed,
            check_every: 0,
            pcp_sample_every: 64,
            live_tasks: 0,
            idle_tail_ns: 0,
            stop_with_last_task: false,
            vmstat_timer_off: false,
            last_op_start: SimTime::default(),
            last_pcp_sample: Vec::new(),
            timers_paused: Vec::new(),
            event_budget: None,
            budget_exhausted: false,
            at_last_task: None,
            last_task_end: SimTime::default(),
            cache: None,
            timeline: None,
            dram_free_at_ps: Vec::new(),
        }
    }

    /// Plays all memory traffic through `cache`: page clears and copies in
    /// the order the kernel model does them, and user accesses line by line,
    /// each line costing what `costs` says for the level that served it
    /// (instead of the cost table's `clear_page_ns` / `copy_page_ns`). The
    /// cache's CPUs must be the machine's (same count, sockets as nodes).
    pub fn with_cache(mut self, cache: CacheModel, costs: CacheCosts) -> Engine {
        assert_eq!(
            cache.config().nr_cpus() as usize,
            self.vcpus.len(),
            "the cache model's CPUs are not the machine's"
        );
        self.cx.set_record_mem(true);
        self.dram_free_at_ps = vec![0; cache.config().sockets as usize];
        self.cache = Some((cache, costs));
        self
    }

    /// Records a timeline of what each vCPU does (`sim::timeline`). It
    /// observes only: the run's results are the same with it.
    pub fn with_timeline(mut self, opts: TimelineOptions) -> Engine {
        let tl = Timeline::new(opts, self.vcpus.len(), &self.pa);
        self.timeline = Some(Box::new(tl));
        self
    }

    /// The timeline recorded so far (taken out of the engine).
    pub fn take_timeline(&mut self) -> Option<Timeline> {
        self.timeline.take().map(|b| *b)
    }

    /// Names the next operation started on `v`, on the timeline if any.
    fn timeline_name(&mut self, v: VcpuId, name: &'static str) {
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.name_next(v, name);
        }
    }

    /// The cache model, if the engine has one.
    pub fn cache_model(&self) -> Option<&CacheModel> {
        self.cache.as_ref().map(|(c, _)| c)
    }

    /// An engine whose kernel steps see `struct page` lines (and a copy's
    /// or clear's pages) leave each LLC after an LLC's worth of traffic
    /// ([`mm::cacheline::LlcClocks`]; the allocator must keep line records:
    /// [`mm::page_alloc::PageAlloc::set_llc_lines`] or a topology).
    pub fn with_llc(mut self, clocks: mm::cacheline::LlcClocks) -> Engine {
        self.cx.set_llc(clocks);
        self
    }

    /// Uses `cfg` (a kernel's `KernelConfig.mm`) for the fault path instead
    /// of [`MmConfig::default`]. Call before spawning tasks.
    ///
    /// The hugetlb pool is set up here, as a boot-time `vm.nr_hugepages`
    /// (`hugepages=`) would: its pages are taken from the buddy allocator
    /// before any task runs, at no cost to any vCPU.
    pub fn with_mm_config(mut self, cfg: MmConfig) -> Engine {
        self.mmg = MmGlobal::new(cfg);
        self.pa.hugetlb.nr_overcommit_huge_pages = cfg.nr_overcommit_hugepages;
        self.cx.begin(VcpuId(0), SimTime(0));
        mm::hugetlb::set_max_huge_pages(&mut self.pa, &mut self.cx, cfg.nr_hugepages);
        self.cx.begin(VcpuId(0), SimTime(0));
        self
    }

    /// Uses `cfg` (a kernel's `KernelConfig.migrate`) for page migration.
    pub fn with_migrate_config(mut self, cfg: mm::migrate::MigrateConfig) -> Engine {
        self.migrate_cfg = cfg;
        self
    }

    /// Uses `hw` as the machine's memory system (from the profile's
    /// `[numa]` section) and `distance` (row-major, `nodes × nodes`) as
    /// its node distances.
    pub fn with_numa(mut self, hw: mm::copy_page::NumaHw, distance: &[u32]) -> Engine {
        self.pa.set_node_distance(distance);
        self.numa_hw = hw;
        self
    }

    /// Uses the per-task VMA cache with `policy` (`none`: 6.1+, every
    /// lookup walks the tree).
    pub fn with_vmacache(mut self, policy: VmacachePolicy) -> Engine {
        self.vmacache_policy = policy;
        self
    }

    /// Runs the allocator's invariant checker every `n` operations (0: never).
    /// For tests: the checker is O(pages).
    pub fn check_invariants_every(&mut self, n: u64) {
        self.check_every = n;
    }

    /// Keeps the machine running, idle, for `ns` after the last task ends, so
    /// that periodic kernel work (PCP `high` decay) shows what it does to an
    /// idle machine.
    pub fn set_idle_tail_ns(&mut self, ns: u64) {
        self.idle_tail_ns = ns;
    }

    /// Runs no periodic kernel work (the vmstat timer) once the last task
    /// has ended, where the timer armed while tasks ran would otherwise
    /// fire once more: a trace replay's counters are compared with a
    /// recording that stopped at its last event, which cannot hold a
    /// `vmstat_update()` (and its `decay_pcp_high()` drain) after it.
    /// Without an idle tail only.
    pub fn stop_with_last_task(&mut self) {
        self.stop_with_last_task = self.idle_tail_ns == 0;
    }

    /// Runs the vmstat work only where the tasks say it is due
    /// ([`Op::VmstatUpdate`]), never on the engine's one-second timer: a
    /// replay of a trace that recorded when the kernel's
    /// `vmstat_update()` ran on each CPU. The kernel's timer is a
    /// deferrable delayed work re-armed `round_jiffies_relative(HZ)` after
    /// each run (mm/vmstat.c, 6.18), so its phase within the second is the
    /// timer wheel's and moves with every idle stop and restart by
    /// `vmstat_shepherd()`: a model timer on whole seconds drains the PCP
    /// lists at other moments of the workload than the kernel did.
    pub fn vmstat_work_from_workload(&mut self) {
        self.vmstat_timer_off = true;
    }

    /// Adds a task; it starts at time 0 on its vCPU.
    pub fn spawn(&mut self, spec: TaskSpec) {
        assert!(
            spec.cpu.idx() < self.vcpus.len(),
            "task bound to vCPU {} of {}",
            spec.cpu.0,
            self.vcpus.len()
        );
        let pid = match spec.process {
            Some(g) => match self.groups.get(&g) {
                Some(&p) => p,
                None => {
                    let p = self.new_process(None);
                    self.groups.insert(g, p);
                    p
                }
            },
            None => self.new_process(None),
        };
        self.procs[pid].live_tasks += 1;
        let id = TaskId(self.tasks.len());
        let id = self
            .tasks
            .push(Task::new(id, self.seed, spec.program, spec.cpu, pid));
        self.vcpus[spec.cpu].runq.push_back(id);
    }

    fn new_process(&mut self, parent: Option<Pid>) -> Pid {
        self.procs.push(Process {
            parent,
            ..Process::default()
        });
        self.procs.len() - 1
    }

    /// Empties every vCPU's PCP lists into the buddy free areas
    /// (`drain_all_pages()`), for checks that every page came back.
    pub fn drain_all_pages(&mut self) {
        for v in self.vcpus.ids() {
            self.cx.begin(v, SimTime(0));
            self.pa.drain_pages(&mut self.cx, v);
        }
    }

    /// Runs the allocator's invariant checker (`CONFIG_DEBUG_VM`), and the
    /// VMA tree checker of every live address space.
    pub fn check_invariants(&self) {
        self.pa.check_invariants();
        let mms: Vec<&MmStruct> = self.procs.iter().filter_map(|p| p.mm.as_ref()).collect();
        mm::memory::check_mm_invariants(&self.pa, &mms);
    }

    /// Address spaces still alive (of processes that have not ended).
    pub fn nr_live_mms(&self) -> usize {
        self.procs.iter().filter(|p| p.mm.is_some()).count()
    }

    /// Queues an event for vCPU `v` to go on at `t`.
    fn schedule(&mut self, v: VcpuId, t: SimTime) {
        self.vcpus[v].active = true;
        self.queue.push(t, Event::Run(v));
    }

    /// Wakes vCPU `v` at `t` (or when its clock says, if later) for work
    /// that was just given to it, unless it is busy and will find the work
    /// itself.
    fn kick(&mut self, v: VcpuId, t: SimTime) {
        if self.vcpus[v].idle() {
            let at = t.max(self.vcpus[v].time);
            self.schedule(v, at);
        }
    }

    fn lock_state(&mut self, l: LockId) -> &mut LockState {
        if l.class == LockClass::Ptl {
            return self.ptls.entry(l.index).or_default();
        }
        let class = &mut self.locks[l.class as usize];
        let i = l.index as usize;
        if class.len() <= i {
            class.resize_with(i + 1, LockState::default);
        }
        &mut class[i]
    }

    /// What moving lock `l` from vCPU `from` to vCPU `to` costs `to`.
    ///
    /// With the machine's topology known (the profile's `[topology]`), the
    /// lock word's cache line comes from `from`'s cache at the distance
    /// between them (`c2c_*`), and a hand-off to a queued waiter
    /// (`queued`) costs a second transfer: with qspinlock the releaser
    /// writes the waiter's MCS node, which the waiter then reads. Waiters
    /// further back spin on their own MCS nodes and add nothing, so the
    /// cost does not grow with the queue's length. Without a topology,
    /// `zone_lock_handoff_ns` for any lock.
    fn handoff_ns(&self, l: LockId, from: VcpuId, to: VcpuId, queued: bool) -> u64 {
        if from == to {
            return 0;
        }
        match self.pa.cpu_topology() {
            Some(topo) => {
                let one = mm::cacheline::transfer_ns(&self.costs, topo.class(from.0, to.0));
                if queued {
                    2 * one
                } else {
                    one
                }
            }
            None => match l.class {
                LockClass::Zone => self.costs.get(Cost::ZoneLockHandoff),
                // The cost of moving a contended lock's cache line is the
                // same whichever lock it is; the profile measures it on
                // zone->lock.
                LockClass::MmapLock | LockClass::Ptl => self.costs.get(Cost::ZoneLockHandoff),
            },
        }
    }

    /// Runs every task to completion and returns what was measured.
    pub fn run(&mut self) -> RunStats {
        for v in self.vcpus.ids() {
            if !self.vcpus[v].runq.is_empty() {
                self.schedule(v, SimTime(0));
            }
        }
        self.stats.nr_tasks = self.tasks.len() as u64;
        self.live_tasks = self.tasks.len();
        if !self.vmstat_timer_off {
            for v in self.vcpus.ids() {
                self.queue
                    .push(SimTime(VMSTAT_INTERVAL_NS), Event::VmstatTimer(v));
            }
        }
        while let Some((t, event)) = self.queue.pop() {
            if let Some(left) = self.event_budget.as_mut() {
                if *left == 0 {
                    self.budget_exhausted = true;
                    break;
                }
                *left -= 1;
            }
            match event {
                Event::Run(v) => self.step(v, t),
                Event::VmstatTimer(v) => self.vmstat_timer(v, t),
                Event::Wake(tid) => {
                    // A task whose process died while it slept is done
                    // already.
                    if self.tasks[tid].state == TaskState::Blocked {
                        self.tasks[tid].result = Some(OpResult::Done);
                        self.wake(tid, t);
                    }
                }
            }
        }
        let stuck: Vec<usize> = self
            .tasks
            .ids()
            .filter(|&i| self.tasks[i].state != TaskState::Done)
            .map(|i| i.0)
            .collect();
        assert!(
            stuck.is_empty() || self.budget_exhausted,
            "deadlock: tasks {stuck:?} never finished (waiting on a channel nobody sends to)"
        );
        self.sum_stats();
        self.stats.clone()
    }

    /// Makes [`Engine::run`] stop after `events` events, with tasks still
    /// live if they need more ([`Engine::budget_exhausted`]). A fuzzer uses
    /// it to tell a run that is merely long from one that never ends: its
    /// inputs are sized so that every run ends well within the budget.
    pub fn set_event_budget(&mut self, events: u64) {
        self.event_budget = Some(events);
    }

    /// Whether the last [`Engine::run`] stopped at the event budget.
    pub fn budget_exhausted(&self) -> bool {
        self.budget_exhausted
    }

    /// Sums what the vCPUs and tasks counted into the run's statistics.
    fn sum_stats(&mut self) {
        self.stats.busy_ns = self.vcpus.iter().map(|v| v.busy_ns).sum();
        self.stats.user_ns = self.vcpus.iter().map(|v| v.user_ns).sum();
        self.stats.sys_ns = self.vcpus.iter().map(|v| v.task_ns).sum::<u64>() - self.stats.user_ns;
        // With an idle tail, lock shares describe the run itself; the tail's
        // periodic work (PCP decay) shows in the final PCP pages instead.
        // Deviation: the last process's teardown after its last task is
        // then counted only in the run time, not in the lock shares.
        if let Some((locks, busy)) = self.at_last_task.take() {
            self.stats.locks = locks;
            self.stats.busy_ns = busy;
        }
        // The teardown of the last process runs after its last task ended;
        // periodic kernel work after that does not make the run longer.
        let last = self
            .vcpus
            .iter()
            .map(|v| v.task_work_end)
            .max()
            .unwrap_or_default();
        self.stats.runtime_ns = self.stats.runtime_ns.max(last.0);
        self.stats.nr_tasks = self.tasks.len() as u64;
        self.stats.nr_processes = self.procs.len() as u64;
        self.stats.touch_bytes = self.tasks.iter().map(|t| t.touch_bytes).sum();
        self.stats.touch_bytes_per_s = self
            .tasks
            .iter()
            .filter_map(|t| {
                let start = t.touch_start?;
                let ns = t.touch_end.0.saturating_sub(start.0).max(1);
                Some((t.touch_bytes as u128 * 1_000_000_000 / ns as u128) as u64)
            })
            .sum();
        if let Some((c, _)) = &self.cache {
            self.stats.cache = c.total_stats();
        }
        self.stats.final_pcp_pages = self.pa.nr_pcp_pages();
    }

    /// Brings vCPU `v`, whose work has reached `t`, to global time `now`:
    /// true if it may go on at once, false if it queued an event for `t`
    /// and must return to the event loop.
    ///
    /// If no queued event comes at or before `t`, the vCPU goes on to `t`
    /// at once, exactly as if it had queued an event for `t` (which would
    /// be the next one processed), without the round trip.
    fn reach(&mut self, v: VcpuId, t: SimTime, now: &mut SimTime) -> bool {
        if t <= *now {
            return true;
        }
        self.vcpus[v].time = t;
        if self.queue.next_at().is_some_and(|at| at <= t) {
            self.schedule(v, t);
            return false;
        }
        *now = t;
        true
    }

    /// Continues vCPU `v` at the time of its event, `now`: plays its
    /// segments and starts operation after operation until it must wait for
    /// global time to catch up, for a lock, or for work.
    fn step(&mut self, v: VcpuId, now: SimTime) {
        self.vcpus[v].active = false;
        let mut now = now;
        let mut t = now.max(self.vcpus[v].time);
        loop {
            if !self.play_segs(v, &mut t, &mut now) {
                return;
            }
            if let Some(tl) = self.timeline.as_deref_mut() {
                tl.op_ended(v, t);
            }
            if self.vcpus[v].playing_task {
                self.vcpus[v].task_work_end = self.vcpus[v].task_work_end.max(t);
            }
            // The operation is over: the next one starts in global time order.
            if !self.reach(v, t, &mut now) {
                return;
            }
            if !self.start_next_op(v, t) {
                // Idle: whatever wakes the vCPU next is not a task's work yet.
                self.vcpus[v].playing_task = false;
                self.vcpus[v].time = t;
                return;
            }
            if let Some(tl) = self.timeline.as_deref_mut() {
                tl.op_started(v, t, &self.pa);
            }
        }
    }

    /// Plays vCPU `v`'s remaining segments from its time `t`, advancing
    /// `t`. Returns false if it stopped to wait (for global time, queued
    /// as an event, or for a lock), true when all were played.
    fn play_segs(&mut self, v: VcpuId, t: &mut SimTime, now: &mut SimTime) -> bool {
        while self.vcpus[v].pos < self.vcpus[v].segs.len() {
            let seg = self.vcpus[v].segs[self.vcpus[v].pos];
            // Lock operations and memory traffic (which reaches the shared
            // caches) happen in global time order.
            if !matches!(seg, Seg::Compute(_)) && !self.reach(v, *t, now) {
                return false;
            }
            let ns = match seg {
                Seg::Compute(ns) => ns,
                Seg::Lock(l) | Seg::LockRead(l) => {
                    let read = matches!(seg, Seg::LockRead(_));
                    let Some(extra) = self.acquire(l, read, v, *t) else {
                        return false;
                    };
                    extra
                }
                Seg::Unlock(l) | Seg::UnlockRead(l) => {
                    self.release(l, v, *t, matches!(seg, Seg::UnlockRead(_)));
                    0
                }
                Seg::Mem(m) => self.play_mem(v, *t, m),
            };
            *t = t.after(ns);
            self.vcpus[v].charge_busy(ns);
            self.vcpus[v].pos += 1;
        }
        true
    }

    /// Vcpu `v` takes `l` at `t` (for reading if `read`). Returns the
    /// nanoseconds the acquisition took (the lock's cache line coming from
    /// its last owner's CPU), or `None` if the lock is held and the vCPU
    /// queued to wait for it.
    fn acquire(&mut self, l: LockId, read: bool, v: VcpuId, t: SimTime) -> Option<u64> {
        let last = self.lock_state(l).last_owner;
        let handoff = last.map_or(0, |o| self.handoff_ns(l, o, v, false));
        let st = self.lock_state(l);
        // A reader waits behind a queued writer (rwsem fairness); a writer
        // waits for every reader.
        let busy = st.owner.is_some()
            || (read && !st.waiters.is_empty())
            || (!read && !st.readers.is_empty());
        if busy {
            st.waiters.push_back((v, read));
            self.stats.locks[l.class as usize].contended += 1;
            self.stats.locks[l.class as usize].acquisitions += 1;
            let vc = &mut self.vcpus[v];
            vc.time = t;
            vc.lock_wait_since = t;
            vc.active = true;
            return None;
        }
        let extra = handoff;
        if read {
            st.readers.push((v, t.after(extra)));
        } else {
            st.owner = Some(v);
            st.acquired_at = t.after(extra);
        }
        let ls = &mut self.stats.locks[l.class as usize];
        ls.acquisitions += 1;
        ls.wait_ns += extra;
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.lock_taken(v, l.class, read, t, t.after(extra));
        }
        Some(extra)
    }

    /// Plays one memory access through the cache model on vCPU `v`, starting
    /// at `t`, and returns its duration in whole nanoseconds (the
    /// picoseconds left over carry to the vCPU's next access).
    ///
    /// The duration is what the lines cost on a core alone
    /// ([`CacheCosts::ps`]), or, if the socket's memory channels are busy
    /// with earlier misses, the time until they have also served this
    /// access's misses: a FIFO server at the socket's sustained bandwidth.
    fn play_mem(&mut self, v: VcpuId, t: SimTime, m: MemAccess) -> u64 {
        let Some((cache, costs)) = self.cache.as_mut() else {
            return 0;
        };
        let mut st = CacheStats::default();
        let user = match m {
            MemAccess::ClearPage(pfn) => {
                cache.clear_page(v, pfn, &mut st);
                false
            }
            MemAccess::CopyPage { dst, src } => {
                cache.copy_page(v, dst, src, &mut st);
                false
            }
            MemAccess::User { phys, len, write } => {
                let kind = if write {
                    AccessKind::Write
                } else {
                    AccessKind::Read
                };
                cache.access_range(v, phys, len as u64, kind, &mut st);
                true
            }
        };
        let vc = &mut self.vcpus[v];
        let mut ps = costs.ps(&st) + vc.mem_ps_rem;
        if user {
            ps += st.accesses() * costs.user_line_ps;
        }
        if st.llc_misses > 0 && costs.dram_socket_line_ps > 0 {
            let socket = v.idx() / cache.config().cpus_per_socket as usize;
            let now_ps = t.0 * 1000 + vc.mem_ps_rem;
            let free = &mut self.dram_free_at_ps[socket];
            *free = (*free).max(now_ps) + st.llc_misses * costs.dram_socket_line_ps;
            ps = ps.max(*free - t.0 * 1000);
        }
        vc.mem_ps_rem = ps % 1000;
        let ns = ps / 1000;
        if user {
            vc.user_ns += ns;
        } else {
            self.stats.cache_kernel += st;
        }
        if let Some(tl) = self.timeline.as_deref_mut() {
            match m {
                MemAccess::ClearPage(_) => tl.mem(v, MemKind::Clear, t, ns),
                MemAccess::CopyPage { .. } => tl.mem(v, MemKind::Copy, t, ns),
                MemAccess::User { .. } => {}
            }
        }
        ns
    }

    /// The per-CPU vmstat timer (`vmstat_update()`): marks the work due on
    /// vCPU `v`, samples its pagesets, and re-arms while tasks run (and for
    /// the idle tail after).
    ///
    /// Why it pauses: the samples must grow with what happens, not with
    /// simulated time. While tasks live but no operation has started for a
    /// whole interval (every task asleep or inside one long operation: a
    /// gap of days in a damaged trace is one `Compute`), a vCPU whose
    /// pagesets read as at its last sample has reached a fixed point: the
    /// vmstat work would change nothing, and every further sample would
    /// repeat the last. Its timer then stops, without a sample, until an
    /// operation starts somewhere ([`Engine::note_activity`]), and resumes
    /// on the same one-second grid. The kernel's timer likewise stops
    /// re-arming on a CPU with nothing to do (`vmstat_update()` requeues
    /// only when `refresh_cpu_vm_stats()` did work; `vmstat_shepherd()`
    /// restarts it). The idle tail after the last task is sampled as before.
    fn vmstat_timer(&mut self, v: VcpuId, t: SimTime) {
        if self.stop_with_last_task && self.live_tasks == 0 && t > self.last_task_end {
            return;
        }
        let nz = self.pa.zones.len();
        if self.last_pcp_sample.len() < self.pa.pcp.len() {
            self.last_pcp_sample.resize(self.pa.pcp.len(), None);
        }
        let inactive =
            self.live_tasks > 0 && t.0 - self.last_op_start.0.min(t.0) >= VMSTAT_INTERVAL_NS;
        if inactive
            && (0..nz).all(|zi| {
                let i = self.pa.pcp_index(v, zi);
                let p = &self.pa.pcp[i];
                self.last_pcp_sample[i] == Some((p.count, p.high))
            })
        {
            self.timers_paused.push(v);
            return;
        }
        self.vmstat_work_due(v, t);
        // An idle vCPU wakes for the work; a busy one runs it between
        // operations, as a kworker would run when the task yields.
        self.kick(v, t);
        let next = t.after(VMSTAT_INTERVAL_NS);
        if self.live_tasks > 0 || next <= self.last_task_end.after(self.idle_tail_ns) {
            self.queue.push(next, Event::VmstatTimer(v));
        }
    }

    /// The vmstat work is due on vCPU `v` at `t` (its timer fired, or the
    /// workload says so): samples `v`'s pagesets, the work's view of them,
    /// into the run's PCP series, and leaves the work to the kworker, which
    /// runs before `v`'s next operation.
    fn vmstat_work_due(&mut self, v: VcpuId, t: SimTime) {
        if self.last_pcp_sample.len() < self.pa.pcp.len() {
            self.last_pcp_sample.resize(self.pa.pcp.len(), None);
        }
        for zi in 0..self.pa.zones.len() {
            let i = self.pa.pcp_index(v, zi);
            let p = &self.pa.pcp[i];
            self.last_pcp_sample[i] = Some((p.count, p.high));
            self.stats.pcp_series.push(PcpSample {
                time_ns: t.0,
                cpu: v.0,
                zone: zi as u32,
                count: p.count,
                high: p.high,
            });
        }
        self.vcpus[v].kwork_pending = true;
    }

    /// Releases `l` held by vCPU `v` at `t` (a read hold if `read`) and, if
    /// it is now free, grants it to the first waiter: a writer alone, or the
    /// readers at the head of the queue together.
    fn release(&mut self, l: LockId, v: VcpuId, t: SimTime, read: bool) {
        let st = self.lock_state(l);
        let acquired_at = if read {
            let i = st
                .readers
                .iter()
                .position(|&(r, _)| r == v)
                .expect("read unlock by a vCPU that does not hold the lock");
            st.readers.swap_remove(i).1
        } else {
            debug_assert_eq!(
                st.owner,
                Some(v),
                "unlock by a vCPU that does not hold the lock"
            );
            st.owner = None;
            st.acquired_at
        };
        st.last_owner = Some(v);
        let mut grants: Vec<(VcpuId, bool)> = Vec::new();
        if st.owner.is_none() && st.readers.is_empty() {
            while let Some(&(w, wr)) = st.waiters.front() {
                if !grants.is_empty() && !wr {
                    break;
                }
                st.waiters.pop_front();
                grants.push((w, wr));
                if !wr {
                    break;
                }
            }
        }
        self.stats.locks[l.class as usize].hold_ns += t.0 - acquired_at.0;
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.lock_released(v, l.class, read, t);
        }
        for (w, wr) in grants {
            let extra = self.handoff_ns(l, v, w, true);
            let tw = t.after(extra);
            let st = self.lock_state(l);
            if wr {
                st.readers.push((w, tw));
            } else {
                st.owner = Some(w);
                st.acquired_at = tw;
            }
            let waited = tw.0 - self.vcpus[w].lock_wait_since.0;
            if let Some(tl) = self.timeline.as_deref_mut() {
                tl.lock_taken(w, l.class, wr, self.vcpus[w].lock_wait_since, tw);
            }
            self.stats.locks[l.class as usize].wait_ns += waited;
            let wc = &mut self.vcpus[w];
            wc.charge_busy(waited);
            wc.pos += 1;
            wc.time = tw;
            self.schedule(w, tw);
        }
    }

    /// Records into `self.cx` what `f` makes the kernel model do on vCPU
    /// `v` at `t`, and queues those segments on the vCPU to be played.
    fn record<R>(&mut self, v: VcpuId, t: SimTime, f: impl FnOnce(&mut Engine) -> R) -> R {
        self.cx.begin(v, t);
        let r = f(self);
        self.vcpus[v].segs.extend_from_slice(self.cx.segs());
        r
    }

    /// Starts the next operation on vCPU `v` at `t`: the per-CPU kernel
    /// work that is due, or else the next operation of a task. Returns
    /// false if the vCPU has nothing to run.
    fn start_next_op(&mut self, v: VcpuId, t: SimTime) -> bool {
        // Until a task's operation starts, nothing played belongs to a task.
        self.vcpus[v].playing_task = false;
        if self.run_kworker(v, t) {
            return true;
        }
        loop {
            let vc = &mut self.vcpus[v];
            if vc.current.is_none() {
                vc.current = vc.runq.pop_front();
            }
            let Some(tid) = vc.current else {
                return false;
            };
            if self.start_task_op(tid, v, t) {
                return true;
            }
        }
    }

    /// Queues the per-CPU kernel work due on vCPU `v` at `t`, if any: the
    /// vmstat work (PCP `high` decay), else the copy work items other CPUs'
    /// migrations queued here. A kworker runs it before the vCPU's task goes
    /// on (at the task's next operation: no preemption in the model).
    fn run_kworker(&mut self, v: VcpuId, t: SimTime) -> bool {
        let vc = &mut self.vcpus[v];
        if vc.kwork_pending {
            vc.kwork_pending = false;
            vc.reset_segs();
            self.record(v, t, |e| e.pa.decay_pcp_high(&mut e.cx, v));
            self.timeline_name(v, "vmstat_update (decay_pcp_high)");
            return true;
        }
        if vc.helper_ns > 0 {
            let ns = std::mem::take(&mut vc.helper_ns);
            vc.reset_segs();
            vc.segs.push(Seg::Compute(ns));
            self.timeline_name(v, "migration copy work (kworker)");
            return true;
        }
        false
    }

    /// Starts task `tid`'s next operation on vCPU `v` at `t` (or goes on
    /// with its `Touch`, or ends it if its process is dying). Returns true
    /// if that gave the vCPU something to play (possibly nothing at all, for
    /// an operation that takes no time), false if the task left the vCPU
    /// without work (it blocked, or it ended with nothing to tear down).
    fn start_task_op(&mut self, tid: TaskId, v: VcpuId, t: SimTime) -> bool {
        let vc = &mut self.vcpus[v];
        vc.reset_segs();
        vc.playing_task = true;
        self.pa.set_task_mempolicy(v, self.tasks[tid].mempolicy);
        let pid = self.tasks[tid].pid;
        if self.procs[pid].dying {
            // A sibling called exit_group(): this thread ends here.
            self.tasks[tid].touch = None;
            self.timeline_name(v, "exit_group (teardown)");
            return self.finish_task(tid, v, t);
        }
        if self.tasks[tid].touch.is_some() {
            self.timeline_name(v, "touch");
            return self.continue_touch(tid, v, t);
        }
        let task = &mut self.tasks[tid];
        let res = task.result.take().unwrap_or(OpResult::Done);
        task.end_touch_phase(t);
        let Some(op) = task.program.next(res, &mut task.rng) else {
            self.timeline_name(v, "exit (teardown)");
            return self.finish_task(tid, v, t);
        };
        task.nr_ops += 1;
        self.count_op();
        self.note_activity(t);
        if self.timeline.is_some() {
            self.timeline_name(v, crate::timeline::op_name(&op));
        }
        self.start_op(OpCtx { tid, pid, v, t }, op)
    }

    /// An operation starts at `t`: the paused vmstat timers
    /// ([`Engine::vmstat_timer`]) resume at the next tick of their
    /// one-second grid.
    fn note_activity(&mut self, t: SimTime) {
        self.last_op_start = t;
        if self.timers_paused.is_empty() {
            return;
        }
        let next = SimTime((t.0 / VMSTAT_INTERVAL_NS + 1) * VMSTAT_INTERVAL_NS);
        for v in std::mem::take(&mut self.timers_paused) {
            self.queue.push(next, Event::VmstatTimer(v));
        }
    }

    /// Counts an operation; samples the PCP pages and runs the invariant
    /// checker every so many.
    fn count_op(&mut self) {
        self.stats.nr_ops += 1;
        if self.stats.nr_ops.is_multiple_of(self.pcp_sample_every) {
            self.stats.peak_pcp_pages = self.stats.peak_pcp_pages.max(self.pa.nr_pcp_pages());
        }
        if self.check_every > 0 && self.stats.nr_ops.is_multiple_of(self.check_every) {
            self.check_invariants();
        }
    }

    /// Starts `op` (see [`Engine::start_task_op`] for what it returns). The
    /// task learns the result at its next operation.
    fn start_op(&mut self, c: OpCtx, op: Op) -> bool {
        let res = match op {
            Op::AllocPages { gfp, order } => OpResult::Alloc(self.op_alloc_pages(c, gfp, order)),
            Op::FreePages { block } => self.op_free_pages(c, block),
            Op::Compute { ns } => self.op_compute(c, ns),
            Op::Send { chan, blocks } => self.op_send(c, chan, blocks),
            Op::Recv { chan } => match self.op_recv(c, chan) {
                Some(msg) => OpResult::Received(msg),
                None => return false,
            },
            Op::Mmap {
                len,
                hint,
                flags,
                advice,
            } => OpResult::Mapped(self.op_mmap(c, len, hint, flags, advice)),
            Op::MmapHugetlb { len, hint, flags } => {
                OpResult::Mapped(self.op_mmap_hugetlb(c, len, hint, flags))
            }
            Op::SetHugepages {
                nr_hugepages,
                nr_overcommit_hugepages,
            } => OpResult::Sys(self.op_set_hugepages(c, nr_hugepages, nr_overcommit_hugepages)),
            Op::Munmap { addr, len } => OpResult::Sys(self.op_munmap(c, addr, len)),
            Op::Mprotect { addr, len, prot } => OpResult::Sys(self.op_mprotect(c, addr, len, prot)),
            Op::Mremap {
                addr,
                old_len,
                new_len,
                flags,
                new_addr,
            } => OpResult::Mapped(self.op_mremap(c, addr, old_len, new_len, flags, new_addr)),
            Op::Madvise { addr, len, advice } => {
                OpResult::Sys(self.op_madvise(c, addr, len, advice))
            }
            Op::Brk { brk } => OpResult::Brk(self.op_brk(c, brk)),
            Op::Touch {
                addr,
                len,
                stride,
                bytes,
                write,
            } => return self.op_touch(c, addr, len, stride, bytes, write),
            Op::Fork { child, cpu } => OpResult::Forked(self.op_fork(c, child, cpu)),
            Op::Exit => return self.op_exit(c),
            Op::MovePages {
                pages,
                nodes,
                flags,
            } => self.op_move_pages(c, &pages, nodes.as_deref(), flags),
            Op::SetMempolicy { preferred } => OpResult::Sys(self.op_set_mempolicy(c, preferred)),
            Op::Sleep { ns } => return self.op_sleep(c, ns),
            Op::KernelWork { ns } => self.op_kernel_work(c, ns),
            Op::VmstatUpdate => self.op_vmstat_update(c),
            Op::Wait => {
                if !self.op_wait(c) {
                    return false;
                }
                OpResult::Done
            }
        };
        self.tasks[c.tid].result = Some(res);
        true
    }

    /// Runs `f` as a system call of task `c.tid` on its process's address
    /// space, recorded on the vCPU: under `mmap_lock` held for writing, the
    /// address space made first if the process has none yet.
    fn mm_syscall<R>(
        &mut self,
        c: OpCtx,
        f: impl FnOnce(&mut SyscallCx<'_>) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        self.record(c.v, c.t, |e| {
            e.ensure_mm(c.pid)?;
            let lock = mmap_lock(c.pid);
            e.cx.lock(lock);
            let mut vmacache = e.tasks[c.tid].vmacache.take();
            let r = f(&mut SyscallCx {
                pa: &mut e.pa,
                cx: &mut e.cx,
                mm: e.procs[c.pid].mm.as_mut().expect("made above"),
                vmacache: &mut vmacache,
                policy: e.vmacache_policy,
            });
            e.tasks[c.tid].vmacache = vmacache;
            e.cx.unlock(lock);
            r
        })
    }

    /// Gives process `pid` an address space if it has none yet, recording
    /// into `self.cx`: `mm_alloc()` at exec, the PGD, and the layout that
    /// `arch_pick_mmap_layout()` chooses (randomized with ASLR, from a
    /// stream of the run's seed that is this process's own).
    fn ensure_mm(&mut self, pid: Pid) -> Result<(), Errno> {
        if self.procs[pid].mm.is_some() {
            return Ok(());
        }
        let mut mm = MmStruct::new(&mut self.pa, &mut self.cx, self.mmg.cfg.mmap_layout)?;
        if self.mmg.cfg.randomize_va_space != 0 {
            let mut r = mm::rng::SplitMix64(
                self.seed ^ (pid as u64 + 1).wrapping_mul(0xA5A5_5A5A_0F0F_F0F1),
            );
            mm.randomize_mmap_base(r.next_u64());
        }
        self.procs[pid].mm = Some(mm);
        Ok(())
    }

    /// `alloc_pages(gfp, order)`.
    fn op_alloc_pages(&mut self, c: OpCtx, gfp: Gfp, order: u8) -> Result<Pfn, AllocError> {
        self.record(c.v, c.t, |e| e.pa.alloc_pages(&mut e.cx, gfp, order))
    }

    /// `__free_pages()` of a block the task owns.
    fn op_free_pages(&mut self, c: OpCtx, block: Block) -> OpResult {
        self.record(c.v, c.t, |e| e.pa.free_pages(&mut e.cx, block.0, block.1));
        OpResult::Done
    }

    /// User-mode work.
    fn op_compute(&mut self, c: OpCtx, ns: u64) -> OpResult {
        let vc = &mut self.vcpus[c.v];
        vc.segs.push(Seg::Compute(ns));
        vc.user_ns += ns;
        OpResult::Done
    }

    /// The vmstat work is due on the task's vCPU ([`Op::VmstatUpdate`]), as
    /// when its timer fires.
    fn op_vmstat_update(&mut self, c: OpCtx) -> OpResult {
        self.vmstat_work_due(c.v, c.t);
        OpResult::Done
    }

    /// Kernel work the model does not play step by step: system time (busy
    /// time of the task that is not user time).
    fn op_kernel_work(&mut self, c: OpCtx, ns: u64) -> OpResult {
        self.vcpus[c.v].segs.push(Seg::Compute(ns));
        OpResult::Done
    }

    /// Sends `blocks` on `chan`: a task already waiting gets them directly
    /// (one killed while it waited is skipped); else they wait in the
    /// channel.
    fn op_send(&mut self, c: OpCtx, chan: ChanId, blocks: Vec<Block>) -> OpResult {
        let mut blocks = Some(blocks);
        while let Some(w) = self.chan(chan).waiters.pop_front() {
            if self.tasks[w].state == TaskState::Blocked {
                let b = blocks.take().expect("delivered once");
                self.tasks[w].result = Some(OpResult::Received(b));
                self.wake(w, c.t);
                break;
            }
        }
        if let Some(b) = blocks {
            self.chan(chan).msgs.push_back(b);
        }
        OpResult::Done
    }

    /// Takes a message from `chan`, or blocks the task until one comes
    /// (`None`).
    fn op_recv(&mut self, c: OpCtx, chan: ChanId) -> Option<Vec<Block>> {
        let ch = self.chan(chan);
        if let Some(m) = ch.msgs.pop_front() {
            return Some(m);
        }
        ch.waiters.push_back(c.tid);
        self.block(c.tid, c.v);
        None
    }

    /// `mmap()` of an anonymous private mapping, then `madvise(advice)` on it.
    fn op_mmap(
        &mut self,
        c: OpCtx,
        len: u64,
        hint: Option<u64>,
        flags: MapFlags,
        advice: Option<Advice>,
    ) -> Result<u64, Errno> {
        let flags = self.mmg.cfg.calc_vm_flag_bits(flags);
        self.mm_syscall(c, |s| {
            // arch_get_unmapped_area_topdown() looks the hint up; MAP_FIXED
            // over a mapping goes through do_munmap().
            if let Some(h) = hint {
                let over =
                    s.mm.find_vma_uncharged(h)
                        .is_some_and(|v| v.start < h.saturating_add(len));
                if !flags.contains(MapFlags::FIXED) || over {
                    s.find_vma(h);
                }
            }
            let addr =
                s.mm.mmap(s.pa, s.cx, Vaddr(hint.unwrap_or(0)), len, flags)?;
            if let Some(a) = advice {
                s.mm.madvise(s.pa, s.cx, addr, len, a)?;
            }
            Ok(addr.0)
        })
    }

    /// `mmap(MAP_HUGETLB)` ([`mm::hugetlb::hugetlb_mmap`]).
    fn op_mmap_hugetlb(
        &mut self,
        c: OpCtx,
        len: u64,
        hint: Option<u64>,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        self.mm_syscall(c, |s| {
            mm::hugetlb::hugetlb_mmap(s.pa, s.cx, s.mm, Vaddr(hint.unwrap_or(0)), len, flags)
                .map(|a| a.0)
        })
    }

    /// Writes to the hugetlb pool's `nr_overcommit_hugepages` and
    /// `nr_hugepages`.
    fn op_set_hugepages(
        &mut self,
        c: OpCtx,
        nr_hugepages: Option<u64>,
        nr_overcommit_hugepages: Option<u64>,
    ) -> Result<(), Errno> {
        self.record(c.v, c.t, |e| {
            if let Some(n) = nr_overcommit_hugepages {
                e.pa.hugetlb.nr_overcommit_huge_pages = n;
            }
            if let Some(n) = nr_hugepages {
                mm::hugetlb::set_max_huge_pages(&mut e.pa, &mut e.cx, n);
            }
        });
        Ok(())
    }

    /// `munmap()`.
    fn op_munmap(&mut self, c: OpCtx, addr: u64, len: u64) -> Result<(), Errno> {
        // unmap_region() starts with lru_add_drain().
        self.mmg.lru_add.lru_add_drain_cpu(c.v);
        self.mm_syscall(c, |s| {
            s.find_vma(addr);
            s.mm.munmap(s.pa, s.cx, Vaddr(addr), len)
        })
    }

    /// `mprotect()`.
    fn op_mprotect(&mut self, c: OpCtx, addr: u64, len: u64, prot: Prot) -> Result<(), Errno> {
        self.mm_syscall(c, |s| s.mm.mprotect(s.pa, s.cx, Vaddr(addr), len, prot))
    }

    /// `mremap()`.
    fn op_mremap(
        &mut self,
        c: OpCtx,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        self.mm_syscall(c, |s| {
            s.mm.mremap(
                s.pa,
                s.cx,
                Vaddr(addr),
                old_len,
                new_len,
                flags,
                Vaddr(new_addr),
            )
            .map(|a| a.0)
        })
    }

    /// `madvise()`.
    fn op_madvise(&mut self, c: OpCtx, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        self.mm_syscall(c, |s| {
            s.find_vma(addr);
            s.mm.madvise(s.pa, s.cx, Vaddr(addr), len, advice)
        })
    }

    /// `brk()`: the break afterwards (0 if the process could not even get
    /// an address space).
    fn op_brk(&mut self, c: OpCtx, brk: u64) -> u64 {
        self.mm_syscall(c, |s| Ok(s.mm.brk(s.pa, s.cx, Vaddr(brk))))
            .map_or(0, |b| b.0)
    }

    /// Starts a `Touch` and plays its first chunk.
    fn op_touch(
        &mut self,
        c: OpCtx,
        addr: u64,
        len: u64,
        stride: u64,
        bytes: u64,
        write: bool,
    ) -> bool {
        let task = &mut self.tasks[c.tid];
        task.touch = Some(TouchCursor {
            next: addr,
            end: addr.saturating_add(len),
            stride: stride.max(1),
            bytes: bytes.max(1),
            write,
        });
        task.touch_start.get_or_insert(c.t);
        task.in_touch = true;
        task.result = Some(OpResult::Done);
        self.continue_touch(c.tid, c.v, c.t)
    }

    /// `fork()`.
    fn op_fork(
        &mut self,
        c: OpCtx,
        child: ChildProgram,
        cpu: Option<VcpuId>,
    ) -> Result<u32, Errno> {
        self.record(c.v, c.t, |e| e.fork(c.tid, child.0, cpu, c.t))
    }

    /// `exit_group()`.
    fn op_exit(&mut self, c: OpCtx) -> bool {
        self.exit_group(c.pid);
        self.finish_task(c.tid, c.v, c.t)
    }

    /// `move_pages()`: the migration's copy work that other CPUs do (a
    /// multi-threaded copy) is queued on them.
    fn op_move_pages(
        &mut self,
        c: OpCtx,
        pages: &[u64],
        nodes: Option<&[u16]>,
        flags: i32,
    ) -> OpResult {
        let (ret, status) =
            self.record(c.v, c.t, |e| e.move_pages(c.pid, pages, nodes, flags, c.t));
        self.stats.nr_move_pages += 1;
        self.stats.move_pages_ns += self.cx.compute_ns();
        for (cpu, ns) in self.cx.take_helper_work() {
            self.vcpus[cpu].helper_ns += ns;
            self.kick(cpu, c.t);
        }
        OpResult::MovedPages { ret, status }
    }

    /// `set_mempolicy(MPOL_PREFERRED)` or `MPOL_DEFAULT`.
    fn op_set_mempolicy(&mut self, c: OpCtx, preferred: Option<u16>) -> Result<(), Errno> {
        let r = match preferred {
            Some(n) if n as usize >= self.pa.nr_nodes() => Err(Errno::Inval),
            p => {
                let p = p.map(NodeId);
                self.tasks[c.tid].mempolicy = p;
                self.pa.set_task_mempolicy(c.v, p);
                Ok(())
            }
        };
        let ns = self.costs.get(Cost::SyscallEntry);
        self.vcpus[c.v].segs.push(Seg::Compute(ns));
        r
    }

    /// `nanosleep()`: the task blocks until its wake event.
    fn op_sleep(&mut self, c: OpCtx, ns: u64) -> bool {
        self.queue.push(c.t.after(ns), Event::Wake(c.tid));
        self.block(c.tid, c.v);
        false
    }

    /// `wait()` for every child: false if the task blocked until the last
    /// child exits.
    fn op_wait(&mut self, c: OpCtx) -> bool {
        if self.procs[c.pid].live_children == 0 {
            return true;
        }
        self.procs[c.pid].waiters.push(c.tid);
        self.block(c.tid, c.v);
        false
    }

    /// `move_pages()` by process `pid`, recording into `self.cx`: every
    /// live address space is visible to the rmap walk (the caller's first),
    /// each with the CPUs of its tasks (`mm_cpumask()`); a CPU is idle if it
    /// runs and queues no task.
    fn move_pages(
        &mut self,
        pid: Pid,
        pages: &[u64],
        nodes: Option<&[u16]>,
        flags: i32,
        t: SimTime,
    ) -> (i64, Vec<i32>) {
        if self.procs[pid].mm.is_none() {
            match MmStruct::new(&mut self.pa, &mut self.cx, self.mmg.cfg.mmap_layout) {
                Ok(mm) => self.procs[pid].mm = Some(mm),
                Err(_) => return (-(mm::migrate::errno::ENOMEM as i64), Vec::new()),
            }
        }
        let idle: Vec<bool> = self
            .vcpus
            .iter()
            .map(|c| c.current.is_none() && c.runq.is_empty())
            .collect();
        let asleep = self.packages_asleep(t);
        let mut cpus_of = vec![Vec::new(); self.procs.len()];
        for task in self.tasks.iter() {
            if task.state != TaskState::Done && !cpus_of[task.pid].contains(&task.cpu.0) {
                cpus_of[task.pid].push(task.cpu.0);
            }
        }
        let mut mms = Vec::new();
        let mut mm_cpus = Vec::new();
        for (p, proc_) in self.procs.iter_mut().enumerate() {
            if let Some(mm) = proc_.mm.as_mut() {
                if p == pid {
                    mms.insert(0, mm);
                    mm_cpus.insert(0, std::mem::take(&mut cpus_of[p]));
                } else {
                    mms.push(mm);
                    mm_cpus.push(std::mem::take(&mut cpus_of[p]));
                }
            }
        }
        let mut ctx = mm::migrate::MigrateCtx::new(
            &mut self.pa,
            &mut self.cx,
            mms,
            mm_cpus,
            self.migrate_cfg,
            &self.numa_hw,
            &idle,
        );
        ctx.mmap_lock = Some(mmap_lock(pid));
        ctx.lru_pending = Some(self.mmg.lru_add.cpus_with_folios());
        ctx.asleep = asleep.clone();
        let mut status = vec![i32::MIN; pages.len()];
        let ret = ctx.move_pages(0, pages, nodes, &mut status, flags);
        let after = std::mem::take(&mut ctx.asleep);
        self.note_packages_woken(&asleep, &after, t);
        if nodes.is_some() {
            // lru_add_drain_all() / lru_cache_disable() emptied them all.
            self.mmg.lru_add.drain_all();
        }
        (ret, status)
    }

    /// Per node, true if its package is in its deep idle state at `t`
    /// ([`mm::copy_page::NumaHw::package_idle_exit_ns`]): every CPU of it
    /// idle (no task, no queued work) for at least the state's target
    /// residency, counted from its last work, from the last migration that
    /// queued work on the node, or (a CPU that has done nothing in this
    /// run) from before the run. Empty when the profile gives no exit
    /// latency. Deviation: the idle governor picks the state from its
    /// prediction of the idle time to come; the model takes the idle time
    /// so far instead.
    fn packages_asleep(&self, t: SimTime) -> Vec<bool> {
        let hw = &self.numa_hw;
        if hw.package_idle_exit_ns == 0 {
            return Vec::new();
        }
        let asleep = |n: usize| {
            let node = mm::types::NodeId(n as u16);
            let first = self.pa.node_first_cpu(node);
            let mut last = self.package_woken_at.get(n).copied().flatten();
            for c in first..first + self.pa.node_nr_cpus(node) {
                let v = &self.vcpus[VcpuId(c)];
                if v.current.is_some() || !v.runq.is_empty() || v.helper_ns > 0 || v.active {
                    return false;
                }
                if v.busy_ns > 0 {
                    last = last.max(Some(v.time));
                }
            }
            last.is_none_or(|l| t.0.saturating_sub(l.0) >= hw.package_idle_residency_ns)
        };
        (0..self.pa.nr_nodes()).map(asleep).collect()
    }

    /// Records that the migration at `t` woke the packages asleep
    /// `before` and no longer asleep `after` it.
    fn note_packages_woken(&mut self, before: &[bool], after: &[bool], t: SimTime) {
        for (n, (&b, &a)) in before.iter().zip(after).enumerate() {
            if b && !a {
                if self.package_woken_at.len() <= n {
                    self.package_woken_at.resize(n + 1, None);
                }
                self.package_woken_at[n] = Some(t);
            }
        }
    }

    /// Takes task `tid` off vCPU `v` until something wakes it.
    fn block(&mut self, tid: TaskId, v: VcpuId) {
        self.tasks[tid].state = TaskState::Blocked;
        self.vcpus[v].current = None;
    }

    /// Plays task `tid`'s `Touch` up to and including its next fault (or
    /// [`TOUCH_CHUNK`] accesses). Returns true if it produced work for the
    /// vCPU; false if the task ended without any (killed, nothing to tear
    /// down).
    fn continue_touch(&mut self, tid: TaskId, v: VcpuId, t: SimTime) -> bool {
        let pid = self.tasks[tid].pid;
        let mut cur = self.tasks[tid].touch.take().expect("a touch in progress");
        let mut nr_fresh = 0;
        let (n, fault) = self.record(v, t, |e| e.touch_chunk(tid, pid, &mut cur, &mut nr_fresh));
        self.vcpus[v].user_ns +=
            n * self.costs.get(Cost::Touch) + nr_fresh * self.costs.get(Cost::FreshPteTouch);
        let Some(fault) = fault else {
            if cur.next < cur.end {
                self.tasks[tid].touch = Some(cur);
            }
            return true;
        };
        // force_sig(SIGSEGV) or the OOM killer: the process dies.
        match fault {
            VmFault::Sigsegv => self.stats.nr_sigsegv += 1,
            VmFault::Oom => self.stats.nr_oom_kills += 1,
            VmFault::Sigbus => self.stats.nr_sigbus += 1,
        }
        self.exit_group(pid);
        let torn_down = self.finish_task(tid, v, t);
        torn_down || !self.vcpus[v].segs.is_empty()
    }

    /// Plays the accesses of `cur` into `self.cx`, up to and including the
    /// first one that faults, or [`TOUCH_CHUNK`] of them. Returns how many
    /// it played and the fault that kills the process, if one does; counts
    /// in `nr_fresh` those charged [`Cost::FreshPteTouch`].
    fn touch_chunk(
        &mut self,
        tid: TaskId,
        pid: Pid,
        cur: &mut TouchCursor,
        nr_fresh: &mut u64,
    ) -> (u64, Option<VmFault>) {
        let mut n = 0;
        while cur.next < cur.end && n < TOUCH_CHUNK {
            let addr = cur.next;
            cur.next = cur.next.saturating_add(cur.stride);
            n += 1;
            let task = &mut self.tasks[tid];
            task.pages_since_fault = task.pages_since_fault.saturating_add(1);
            self.cx.charge(Cost::Touch);
            // The bytes of this access, within its page.
            let in_page = mm::PAGE_SIZE - (addr & (mm::PAGE_SIZE - 1));
            let len = cur.bytes.min(in_page).min(cur.end - addr) as u32;
            self.tasks[tid].touch_bytes += len as u64;
            let Some(mm) = self.procs[pid].mm.as_mut() else {
                return (n, Some(VmFault::Sigsegv));
            };
            let access = mm::memory::user_access_fresh(&mut self.pa, mm, Vaddr(addr), cur.write);
            if let Some((phys, fresh)) = access {
                if fresh {
                    self.cx.charge(Cost::FreshPteTouch);
                    *nr_fresh += 1;
                }
                self.cx.user_access(phys, len, cur.write);
                continue;
            }
            return (n, self.user_fault(tid, pid, addr, len, cur.write).err());
        }
        (n, None)
    }

    /// The page fault of task `tid`'s access of `len` bytes at `addr`
    /// (`do_user_addr_fault()`, under `mmap_lock` held for reading), then
    /// the access again, which now succeeds. Records into `self.cx`.
    fn user_fault(
        &mut self,
        tid: TaskId,
        pid: Pid,
        addr: u64,
        len: u32,
        write: bool,
    ) -> Result<(), VmFault> {
        self.charge_cold_fault(tid);
        let mm = self.procs[pid].mm.as_mut().expect("the access found it");
        let policy = self.vmacache_policy;
        let task = self.tasks[tid]
            .vmacache
            .get_or_insert_with(|| TaskStruct::new(mm, policy));
        let lock = mmap_lock(pid);
        self.cx.lock_read(lock);
        let r = mm::memory::do_user_addr_fault(
            &mut self.pa,
            &mut self.cx,
            &mut self.mmg,
            mm,
            task,
            Vaddr(addr),
            write,
        );
        self.cx.unlock_read(lock);
        r?;
        let phys = mm::memory::user_access(&mut self.pa, mm, Vaddr(addr), write);
        debug_assert!(phys.is_some(), "fault at {addr:#x} left it unmapped");
        if let Some(phys) = phys {
            self.cx.user_access(phys, len, write);
        }
        Ok(())
    }

    /// What task `tid`'s program says a fault costs after the pages it used
    /// since its last one ([`Program::cold_fault_ns`]), charged as part of
    /// the fault; the count starts again.
    fn charge_cold_fault(&mut self, tid: TaskId) {
        let task = &mut self.tasks[tid];
        let m = std::mem::take(&mut task.pages_since_fault).max(1) as usize;
        if let Some(table) = task.program.cold_fault_ns() {
            if let Some(&ns) = table.get(m - 1).or(table.last()) {
                self.cx.charge_ns(ns);
            }
        }
    }

    /// `fork()` by task `tid` at `t`: copies its process's address space and
    /// starts `program` in the child. Records into `self.cx`.
    fn fork(
        &mut self,
        tid: TaskId,
        program: Box<dyn Program>,
        cpu: Option<VcpuId>,
        t: SimTime,
    ) -> Result<u32, Errno> {
        let pid = self.tasks[tid].pid;
        let child_mm = if self.procs[pid].mm.is_some() {
            let lock = mmap_lock(pid);
            self.cx.lock(lock);
            let mm = self.procs[pid].mm.as_mut().expect("checked");
            let r = mm::memory::fork(&mut self.pa, &mut self.cx, mm);
            self.cx.unlock(lock);
            Some(r.map_err(|_| Errno::NoMem)?)
        } else {
            None
        };
        let child = self.new_process(Some(pid));
        self.procs[child].mm = child_mm;
        self.procs[child].live_tasks = 1;
        let nth = self.procs[pid].nr_forks;
        self.procs[pid].nr_forks += 1;
        self.procs[pid].live_children += 1;
        let nr_cpus = self.vcpus.len() as u32;
        let cpu = match cpu {
            Some(c) => VcpuId(c.0 % nr_cpus),
            None => VcpuId((self.tasks[tid].cpu.0 + 1 + nth % nr_cpus) % nr_cpus),
        };
        let mut task = Task::new(TaskId(self.tasks.len()), self.seed, program, cpu, child);
        task.state = TaskState::Blocked;
        // The child inherits the task's memory policy (mpol_dup()).
        task.mempolicy = self.tasks[tid].mempolicy;
        self.live_tasks += 1;
        let ctid = self.tasks.push(task);
        // The child runs once the parent's fork() has done its work.
        let at = t.after(self.cx.compute_ns());
        self.wake(ctid, at);
        Ok(child as u32)
    }

    /// `exit_group()` of process `pid`: its blocked tasks end now, its
    /// running ones at their next operation.
    fn exit_group(&mut self, pid: Pid) {
        self.procs[pid].dying = true;
        self.procs[pid].waiters.clear();
        for i in self.tasks.ids() {
            if self.tasks[i].pid == pid && self.tasks[i].state == TaskState::Blocked {
                self.tasks[i].state = TaskState::Done;
                self.procs[pid].live_tasks -= 1;
                self.live_tasks -= 1;
            }
        }
    }

    /// Ends task `tid` on vCPU `v` at `t`. If it was its process's last
    /// task, tears the address space down (`exit_mmap()`), with the work
    /// put on the vCPU, and tells the parent; returns true if there is such
    /// work to play.
    fn finish_task(&mut self, tid: TaskId, v: VcpuId, t: SimTime) -> bool {
        // Its exit frees memory: the pagesets move.
        self.note_activity(t);
        self.tasks[tid].state = TaskState::Done;
        self.tasks[tid].end_touch_phase(t);
        self.vcpus[v].current = None;
        self.stats.runtime_ns = self.stats.runtime_ns.max(t.0);
        self.live_tasks -= 1;
        self.last_task_end = self.last_task_end.max(t);
        if self.live_tasks == 0 && self.idle_tail_ns > 0 {
            let busy = self.vcpus.iter().map(|v| v.busy_ns).sum();
            self.at_last_task = Some((self.stats.locks.clone(), busy));
        }
        let pid = self.tasks[tid].pid;
        self.procs[pid].live_tasks -= 1;
        if self.procs[pid].live_tasks > 0 {
            return false;
        }
        let work = if let Some(mm) = self.procs[pid].mm.take() {
            self.record(v, t, |e| {
                let lock = mmap_lock(pid);
                e.cx.lock(lock);
                // exit_mmap() starts with lru_add_drain().
                e.mmg.lru_add.lru_add_drain_cpu(v);
                mm::memory::exit_mmap(&mut e.pa, &mut e.cx, mm);
                e.cx.unlock(lock);
            });
            true
        } else {
            false
        };
        if let Some(parent) = self.procs[pid].parent {
            let p = &mut self.procs[parent];
            p.live_children -= 1;
            if p.live_children == 0 {
                let waiters = std::mem::take(&mut p.waiters);
                let at = t.after(if work { self.cx.compute_ns() } else { 0 });
                for w in waiters {
                    self.tasks[w].result = Some(OpResult::Done);
                    self.wake(w, at);
                }
            }
        }
        work
    }

    fn chan(&mut self, c: ChanId) -> &mut Chan {
        let i = c as usize;
        if self.chans.len() <= i {
            self.chans.resize_with(i + 1, Chan::default);
        }
        &mut self.chans[i]
    }

    /// Makes a blocked task runnable again, its message already delivered.
    fn wake(&mut self, tid: TaskId, t: SimTime) {
        let task = &mut self.tasks[tid];
        task.state = TaskState::Runnable;
        let cpu = task.cpu;
        self.vcpus[cpu].runq.push_back(tid);
        self.kick(cpu, t);
    }

    /// The address space of process `pid` (processes are numbered in the
    /// order they were created, spawned or forked), if it is alive.
    pub fn mm(&self, pid: usize) -> Option<&MmStruct> {
        self.procs.get(pid).and_then(|p| p.mm.as_ref())
    }

    /// Counters, as `(name, value)`.
    pub fn vmstat(&self) -> &mm::vmstat::VmStat {
        &self.pa.vmstat
    }
}

/// The `mmap_lock` of process `pid`.
fn mmap_lock(pid: Pid) -> LockId {
    LockId {
        class: LockClass::MmapLock,
        index: pid as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_orders_by_time_then_fifo() {
        let mut q = EventQueue::default();
        q.push(SimTime(20), Event::Run(VcpuId(0)));
        q.push(SimTime(10), Event::Wake(TaskId(7)));
        q.push(SimTime(20), Event::VmstatTimer(VcpuId(3)));
        q.push(SimTime(10), Event::Run(VcpuId(1)));
        // Far more tasks than the old bit-packed events could name (2^30).
        q.push(SimTime(20), Event::Wake(TaskId(1 << 40)));
        assert_eq!(q.next_at(), Some(SimTime(10)));
        let order: Vec<(SimTime, Event)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![
                (SimTime(10), Event::Wake(TaskId(7))),
                (SimTime(10), Event::Run(VcpuId(1))),
                (SimTime(20), Event::Run(VcpuId(0))),
                (SimTime(20), Event::VmstatTimer(VcpuId(3))),
                (SimTime(20), Event::Wake(TaskId(1 << 40))),
            ]
        );
        assert_eq!(q.next_at(), None);
    }
}
