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

use crate::cache::{AccessKind, CacheCosts, CacheModel, CacheStats};
use crate::op::{Block, ChanId, Op, OpResult, TaskSpec};
use crate::rng::Rng;
use mm::cost::{Cost, CostTable, Cx, LockClass, LockId, MemAccess, Seg};
use mm::memory::{MmConfig, MmGlobal, VmFault};
use mm::page_alloc::PageAlloc;
use mm::vma::{Errno, MmStruct};
use mm::{SimTime, VcpuId};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

type TaskId = usize;
type Pid = usize;

/// Accesses of a `Touch` that do not fault, played before the engine returns
/// to the event queue: enough to keep the event count low on a mapped range,
/// few enough that other vCPUs' operations interleave.
pub const TOUCH_CHUNK: u64 = 512;

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
    program: Box<dyn crate::op::Program>,
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
    vmacache: Option<mm::vmacache::TaskStruct>,
    /// Bytes covered by the task's `Touch` accesses.
    touch_bytes: u64,
    /// When its first `Touch` started and its last one ended (the measured
    /// phase of a usemem-like program).
    touch_start: Option<u64>,
    touch_end: u64,
    /// A `Touch` is the task's current operation.
    in_touch: bool,
    /// `set_mempolicy(MPOL_PREFERRED)`'s node; `None`: the default policy.
    mempolicy: Option<mm::NodeId>,
}

#[derive(Default)]
struct Vcpu {
    segs: Vec<Seg>,
    pos: usize,
    time: u64,
    current: Option<TaskId>,
    runq: VecDeque<TaskId>,
    /// True while an event for this vCPU is queued or it waits for a lock.
    active: bool,
    busy_ns: u64,
    lock_wait_since: u64,
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
    task_work_end: u64,
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
}

#[derive(Default)]
struct LockState {
    /// The vCPU holding it exclusively.
    owner: Option<u32>,
    last_owner: Option<u32>,
    acquired_at: u64,
    /// vCPUs holding it for reading, with the time each got it.
    readers: Vec<(u32, u64)>,
    /// Queued vCPUs, in arrival order, and whether each wants to read.
    waiters: VecDeque<(u32, bool)>,
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

/// Marks an event as the firing of a vCPU's vmstat timer.
const TIMER: u32 = 1 << 31;
/// Marks an event as the end of a task's `Sleep` (the low bits are the
/// task, not a vCPU).
const WAKE: u32 = 1 << 30;
/// `sysctl_stat_interval`: the vmstat work runs once a second (HZ).
pub const VMSTAT_INTERVAL_NS: u64 = 1_000_000_000;

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
    vmacache_policy: mm::vmacache::VmacachePolicy,
    procs: Vec<Process>,
    groups: BTreeMap<u32, Pid>,
    costs: CostTable,
    cx: Cx,
    vcpus: Vec<Vcpu>,
    tasks: Vec<Task>,
    queue: BinaryHeap<Reverse<(u64, u64, u32)>>,
    seq: u64,
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
    /// Lock statistics and busy time when the last task ended: the run's
    /// figures, before any idle tail.
    at_last_task: Option<(Vec<LockStats>, u64)>,
    last_task_end: u64,
    /// The cache model fed with the memory traffic, and what it costs.
    cache: Option<(CacheModel, CacheCosts)>,
    /// Per socket: the picosecond at which its memory channels have served
    /// every line missed so far (a FIFO server at the socket's bandwidth).
    dram_free_at_ps: Vec<u64>,
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
            vmacache_policy: mm::vmacache::VmacachePolicy::None,
            procs: Vec::new(),
            groups: BTreeMap::new(),
            costs,
            cx,
            vcpus: (0..nr_cpus).map(|_| Vcpu::default()).collect(),
            tasks: Vec::new(),
            queue: BinaryHeap::new(),
            seq: 0,
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
            at_last_task: None,
            last_task_end: 0,
            cache: None,
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

    /// The cache model, if the engine has one.
    pub fn cache_model(&self) -> Option<&CacheModel> {
        self.cache.as_ref().map(|(c, _)| c)
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
    pub fn with_vmacache(mut self, policy: mm::vmacache::VmacachePolicy) -> Engine {
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

    /// Adds a task; it starts at time 0 on its vCPU.
    pub fn spawn(&mut self, spec: TaskSpec) {
        let id = self.tasks.len();
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
        self.tasks.push(Task {
            program: spec.program,
            rng: Rng::stream(self.seed, id as u64 + 1),
            cpu: spec.cpu,
            state: TaskState::Runnable,
            result: Some(OpResult::Start),
            nr_ops: 0,
            pid,
            touch: None,
            vmacache: None,
            touch_bytes: 0,
            touch_start: None,
            touch_end: 0,
            in_touch: false,
            mempolicy: None,
        });
        self.vcpus[spec.cpu.idx()].runq.push_back(id);
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
        for c in 0..self.vcpus.len() as u32 {
            self.cx.begin(VcpuId(c), SimTime(0));
            self.pa.drain_pages(&mut self.cx, VcpuId(c));
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

    fn schedule(&mut self, v: u32, t: u64) {
        self.seq += 1;
        self.vcpus[v as usize].active = true;
        self.queue.push(Reverse((t, self.seq, v)));
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

    fn handoff_ns(&self, l: LockId) -> u64 {
        match l.class {
            LockClass::Zone => self.costs.get(Cost::ZoneLockHandoff),
            // The cost of moving a contended lock's cache line is the same
            // whichever lock it is; the profile measures it on zone->lock.
            LockClass::MmapLock | LockClass::Ptl => self.costs.get(Cost::ZoneLockHandoff),
        }
    }

    /// Runs every task to completion and returns what was measured.
    pub fn run(&mut self) -> RunStats {
        for v in 0..self.vcpus.len() as u32 {
            if !self.vcpus[v as usize].runq.is_empty() {
                self.schedule(v, 0);
            }
        }
        self.stats.nr_tasks = self.tasks.len() as u64;
        self.live_tasks = self.tasks.len();
        for v in 0..self.vcpus.len() as u32 {
            self.seq += 1;
            self.queue
                .push(Reverse((VMSTAT_INTERVAL_NS, self.seq, v | TIMER)));
        }
        while let Some(Reverse((t, _, v))) = self.queue.pop() {
            if v & TIMER != 0 {
                self.vmstat_timer(v & !TIMER, t);
            } else if v & WAKE != 0 {
                let tid = (v & !WAKE) as usize;
                // A task whose process died while it slept is done already.
                if self.tasks[tid].state == TaskState::Blocked {
                    self.tasks[tid].result = Some(OpResult::Done);
                    self.wake(tid, t);
                }
            } else {
                self.step(v, t);
            }
        }
        let stuck: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| self.tasks[i].state != TaskState::Done)
            .collect();
        assert!(
            stuck.is_empty(),
            "deadlock: tasks {stuck:?} never finished (waiting on a channel nobody sends to)"
        );
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
            .unwrap_or(0);
        self.stats.runtime_ns = self.stats.runtime_ns.max(last);
        self.stats.nr_tasks = self.tasks.len() as u64;
        self.stats.nr_processes = self.procs.len() as u64;
        self.stats.touch_bytes = self.tasks.iter().map(|t| t.touch_bytes).sum();
        self.stats.touch_bytes_per_s = self
            .tasks
            .iter()
            .filter_map(|t| {
                let start = t.touch_start?;
                let ns = t.touch_end.saturating_sub(start).max(1);
                Some((t.touch_bytes as u128 * 1_000_000_000 / ns as u128) as u64)
            })
            .sum();
        if let Some((c, _)) = &self.cache {
            self.stats.cache = c.total_stats();
        }
        self.stats.final_pcp_pages = self.pa.nr_pcp_pages();
        self.stats.clone()
    }

    /// True if no queued event comes at or before `t`: then the vCPU may go
    /// on to `t` at once, exactly as if it had queued an event for `t` (which
    /// would be the next one processed), without the round trip.
    fn nothing_before(&self, t: u64) -> bool {
        self.queue.peek().is_none_or(|Reverse((at, _, _))| *at > t)
    }

    /// Brings vCPU `v`, whose work has reached `t`, to global time `now`:
    /// true if it may go on at once (no queued event comes before `t`; `now`
    /// advances to `t`), false if it queued an event for `t` and must
    /// return to the event loop.
    fn reach(&mut self, v: u32, t: u64, now: &mut u64) -> bool {
        if t <= *now {
            return true;
        }
        self.vcpus[v as usize].time = t;
        if !self.nothing_before(t) {
            self.schedule(v, t);
            return false;
        }
        *now = t;
        true
    }

    /// Continues vCPU `v` at the time of its event, `now`.
    fn step(&mut self, v: u32, now: u64) {
        let vi = v as usize;
        self.vcpus[vi].active = false;
        let mut now = now;
        let mut t = now.max(self.vcpus[vi].time);
        loop {
            // Play the current operation's segments.
            while self.vcpus[vi].pos < self.vcpus[vi].segs.len() {
                let seg = self.vcpus[vi].segs[self.vcpus[vi].pos];
                match seg {
                    Seg::Compute(ns) => {
                        t += ns;
                        self.vcpus[vi].charge_busy(ns);
                        self.vcpus[vi].pos += 1;
                    }
                    Seg::Lock(l) | Seg::LockRead(l) => {
                        if !self.reach(v, t, &mut now) {
                            return;
                        }
                        let read = matches!(seg, Seg::LockRead(_));
                        let handoff = self.handoff_ns(l);
                        let st = self.lock_state(l);
                        // A reader waits behind a queued writer (rwsem
                        // fairness); a writer waits for every reader.
                        let busy = st.owner.is_some()
                            || (read && !st.waiters.is_empty())
                            || (!read && !st.readers.is_empty());
                        if busy {
                            st.waiters.push_back((v, read));
                            self.stats.locks[l.class as usize].contended += 1;
                            self.stats.locks[l.class as usize].acquisitions += 1;
                            self.vcpus[vi].time = t;
                            self.vcpus[vi].lock_wait_since = t;
                            self.vcpus[vi].active = true;
                            return;
                        }
                        let extra = if st.last_owner.is_some_and(|o| o != v) {
                            handoff
                        } else {
                            0
                        };
                        if read {
                            st.readers.push((v, t + extra));
                        } else {
                            st.owner = Some(v);
                            st.acquired_at = t + extra;
                        }
                        let ls = &mut self.stats.locks[l.class as usize];
                        ls.acquisitions += 1;
                        ls.wait_ns += extra;
                        t += extra;
                        self.vcpus[vi].charge_busy(extra);
                        self.vcpus[vi].pos += 1;
                    }
                    Seg::Unlock(l) | Seg::UnlockRead(l) => {
                        if !self.reach(v, t, &mut now) {
                            return;
                        }
                        self.release(l, v, t, matches!(seg, Seg::UnlockRead(_)));
                        self.vcpus[vi].pos += 1;
                    }
                    Seg::Mem(m) => {
                        // Memory traffic reaches the shared caches in global
                        // time order, like a lock acquisition.
                        if !self.reach(v, t, &mut now) {
                            return;
                        }
                        let ns = self.play_mem(v, t, m);
                        t += ns;
                        self.vcpus[vi].charge_busy(ns);
                        self.vcpus[vi].pos += 1;
                    }
                }
            }
            if self.vcpus[vi].playing_task {
                self.vcpus[vi].task_work_end = self.vcpus[vi].task_work_end.max(t);
            }
            // The operation is over: the next one starts in global time order.
            if !self.reach(v, t, &mut now) {
                return;
            }
            if !self.start_next_op(v, t) {
                // Idle: whatever wakes the vCPU next is not a task's work yet.
                self.vcpus[vi].playing_task = false;
                self.vcpus[vi].time = t;
                return;
            }
        }
    }

    /// Plays one memory access through the cache model on vCPU `v`, starting
    /// at `t`, and returns its duration in whole nanoseconds (the
    /// picoseconds left over carry to the vCPU's next access).
    ///
    /// The duration is what the lines cost on a core alone
    /// ([`CacheCosts::ps`]), or, if the socket's memory channels are busy
    /// with earlier misses, the time until they have also served this
    /// access's misses: a FIFO server at the socket's sustained bandwidth.
    fn play_mem(&mut self, v: u32, t: u64, m: MemAccess) -> u64 {
        let Some((cache, costs)) = self.cache.as_mut() else {
            return 0;
        };
        let cpu = VcpuId(v);
        let mut st = CacheStats::default();
        let user = match m {
            MemAccess::ClearPage(pfn) => {
                cache.clear_page(cpu, pfn, &mut st);
                false
            }
            MemAccess::CopyPage { dst, src } => {
                cache.copy_page(cpu, dst, src, &mut st);
                false
            }
            MemAccess::User { phys, len, write } => {
                let kind = if write {
                    AccessKind::Write
                } else {
                    AccessKind::Read
                };
                cache.access_range(cpu, phys, len as u64, kind, &mut st);
                true
            }
        };
        let vc = &mut self.vcpus[v as usize];
        let mut ps = costs.ps(&st) + vc.mem_ps_rem;
        if user {
            ps += st.accesses() * costs.user_line_ps;
        }
        if st.llc_misses > 0 && costs.dram_socket_line_ps > 0 {
            let socket = v as usize / cache.config().cpus_per_socket as usize;
            let now_ps = t * 1000 + vc.mem_ps_rem;
            let free = &mut self.dram_free_at_ps[socket];
            *free = (*free).max(now_ps) + st.llc_misses * costs.dram_socket_line_ps;
            ps = ps.max(*free - t * 1000);
        }
        vc.mem_ps_rem = ps % 1000;
        let ns = ps / 1000;
        if user {
            self.vcpus[v as usize].user_ns += ns;
        } else {
            self.stats.cache_kernel += st;
        }
        ns
    }

    /// The per-CPU vmstat timer (`vmstat_update()`): marks the work due on
    /// vCPU `v`, samples its pagesets, and re-arms while tasks run (and for
    /// the idle tail after).
    fn vmstat_timer(&mut self, v: u32, t: u64) {
        let vi = v as usize;
        for zi in 0..self.pa.zones.len() {
            let p = &self.pa.pcp[self.pa.pcp_index(VcpuId(v), zi)];
            self.stats.pcp_series.push(PcpSample {
                time_ns: t,
                cpu: v,
                zone: zi as u32,
                count: p.count,
                high: p.high,
            });
        }
        self.vcpus[vi].kwork_pending = true;
        // An idle vCPU wakes for the work; a busy one runs it between
        // operations, as a kworker would run when the task yields.
        if !self.vcpus[vi].active && self.vcpus[vi].current.is_none() {
            let at = t.max(self.vcpus[vi].time);
            self.schedule(v, at);
        }
        let next = t + VMSTAT_INTERVAL_NS;
        if self.live_tasks > 0 || next <= self.last_task_end + self.idle_tail_ns {
            self.seq += 1;
            self.queue.push(Reverse((next, self.seq, v | TIMER)));
        }
    }

    /// Releases `l` held by vCPU `v` at `t` (a read hold if `read`) and, if
    /// it is now free, grants it to the first waiter: a writer alone, or the
    /// readers at the head of the queue together.
    fn release(&mut self, l: LockId, v: u32, t: u64, read: bool) {
        let handoff = self.handoff_ns(l);
        let st = self.lock_state(l);
        let held = if read {
            let i = st
                .readers
                .iter()
                .position(|&(r, _)| r == v)
                .expect("read unlock by a vCPU that does not hold the lock");
            t - st.readers.swap_remove(i).1
        } else {
            debug_assert_eq!(
                st.owner,
                Some(v),
                "unlock by a vCPU that does not hold the lock"
            );
            st.owner = None;
            t - st.acquired_at
        };
        st.last_owner = Some(v);
        let mut grants: Vec<(u32, bool)> = Vec::new();
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
        self.stats.locks[l.class as usize].hold_ns += held;
        for (w, wr) in grants {
            let extra = if w != v { handoff } else { 0 };
            let tw = t + extra;
            let st = self.lock_state(l);
            if wr {
                st.readers.push((w, tw));
            } else {
                st.owner = Some(w);
                st.acquired_at = tw;
            }
            let wi = w as usize;
            let waited = tw - self.vcpus[wi].lock_wait_since;
            self.stats.locks[l.class as usize].wait_ns += waited;
            self.vcpus[wi].charge_busy(waited);
            self.vcpus[wi].pos += 1;
            self.vcpus[wi].time = tw;
            self.schedule(w, tw);
        }
    }

    /// Starts the next operation on vCPU `v` at `t`. Returns false if the
    /// vCPU has nothing to run.
    fn start_next_op(&mut self, v: u32, t: u64) -> bool {
        let vi = v as usize;
        // Until a task's operation starts, nothing played belongs to a task.
        self.vcpus[vi].playing_task = false;
        if self.vcpus[vi].kwork_pending {
            self.vcpus[vi].kwork_pending = false;
            self.vcpus[vi].segs.clear();
            self.vcpus[vi].pos = 0;
            self.cx.begin(VcpuId(v), SimTime(t));
            self.pa.decay_pcp_high(&mut self.cx, VcpuId(v));
            self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
            return true;
        }
        if self.vcpus[vi].helper_ns > 0 {
            // A kworker runs the copy work items queued here before the
            // task goes on (no preemption in the model: at its next
            // operation).
            let ns = std::mem::take(&mut self.vcpus[vi].helper_ns);
            self.vcpus[vi].segs.clear();
            self.vcpus[vi].pos = 0;
            self.vcpus[vi].segs.push(Seg::Compute(ns));
            return true;
        }
        loop {
            let tid = match self.vcpus[vi].current {
                Some(tid) => tid,
                None => match self.vcpus[vi].runq.pop_front() {
                    Some(tid) => {
                        self.vcpus[vi].current = Some(tid);
                        tid
                    }
                    None => return false,
                },
            };
            self.vcpus[vi].segs.clear();
            self.vcpus[vi].pos = 0;
            self.vcpus[vi].playing_task = true;
            self.pa
                .set_task_mempolicy(VcpuId(v), self.tasks[tid].mempolicy);
            let pid = self.tasks[tid].pid;
            if self.procs[pid].dying {
                // A sibling called exit_group(): this thread ends here.
                self.tasks[tid].touch = None;
                if self.finish_task(tid, v, t) {
                    return true;
                }
                continue;
            }
            if self.tasks[tid].touch.is_some() {
                if self.continue_touch(tid, v, t) {
                    return true;
                }
                continue;
            }
            let res = self.tasks[tid].result.take().unwrap_or(OpResult::Done);
            let task = &mut self.tasks[tid];
            if task.in_touch {
                task.in_touch = false;
                task.touch_end = t;
            }
            let Some(op) = task.program.next(res, &mut task.rng) else {
                if self.finish_task(tid, v, t) {
                    return true;
                }
                continue;
            };
            task.nr_ops += 1;
            self.stats.nr_ops += 1;
            if self.stats.nr_ops.is_multiple_of(self.pcp_sample_every) {
                self.stats.peak_pcp_pages = self.stats.peak_pcp_pages.max(self.pa.nr_pcp_pages());
            }
            if self.check_every > 0 && self.stats.nr_ops.is_multiple_of(self.check_every) {
                self.check_invariants();
            }
            match op {
                Op::AllocPages { gfp, order } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.pa.alloc_pages(&mut self.cx, gfp, order);
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Alloc(r));
                }
                Op::FreePages { block } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    self.pa.free_pages(&mut self.cx, block.0, block.1);
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                }
                Op::Compute { ns } => {
                    self.vcpus[vi].segs.push(Seg::Compute(ns));
                    self.vcpus[vi].user_ns += ns;
                }
                Op::Send { chan, blocks } => {
                    // A task already waiting gets the message directly; one
                    // killed while it waited is skipped.
                    let mut blocks = Some(blocks);
                    while let Some(w) = self.chan(chan).waiters.pop_front() {
                        if self.tasks[w].state == TaskState::Blocked {
                            let b = blocks.take().expect("delivered once");
                            self.tasks[w].result = Some(OpResult::Received(b));
                            self.wake(w, t);
                            break;
                        }
                    }
                    if let Some(b) = blocks {
                        self.chan(chan).msgs.push_back(b);
                    }
                }
                Op::Recv { chan } => {
                    let c = self.chan(chan);
                    if let Some(m) = c.msgs.pop_front() {
                        self.tasks[tid].result = Some(OpResult::Received(m));
                    } else {
                        c.waiters.push_back(tid);
                        self.block(tid, v);
                        continue;
                    }
                }
                Op::Mmap {
                    len,
                    hint,
                    fixed,
                    advice,
                } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let mut task = self.tasks[tid].vmacache.take();
                    let policy = self.vmacache_policy;
                    let r = self.with_mm_locked(pid, |pa, cx, mm| {
                        // arch_get_unmapped_area_topdown() looks the hint up;
                        // MAP_FIXED over a mapping goes through do_munmap().
                        if let Some(h) = hint {
                            let over = mm
                                .find_vma_uncharged(h)
                                .is_some_and(|v| v.start < h.saturating_add(len));
                            if !fixed || over {
                                syscall_find_vma(&mut task, policy, pa, cx, mm, h);
                            }
                        }
                        let addr = mm.mmap(pa, cx, hint.unwrap_or(0), len, fixed)?;
                        if let Some(a) = advice {
                            mm.madvise(pa, cx, addr, len, a)?;
                        }
                        Ok(addr)
                    });
                    self.tasks[tid].vmacache = task;
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Mapped(r));
                }
                Op::MmapHugetlb {
                    len,
                    hint,
                    fixed,
                    noreserve,
                } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.with_mm_locked(pid, |pa, cx, mm| {
                        mm::hugetlb::hugetlb_mmap(
                            pa,
                            cx,
                            mm,
                            hint.unwrap_or(0),
                            len,
                            fixed,
                            noreserve,
                        )
                    });
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Mapped(r));
                }
                Op::SetHugepages {
                    nr_hugepages,
                    nr_overcommit_hugepages,
                } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    if let Some(n) = nr_overcommit_hugepages {
                        self.pa.hugetlb.nr_overcommit_huge_pages = n;
                    }
                    if let Some(n) = nr_hugepages {
                        mm::hugetlb::set_max_huge_pages(&mut self.pa, &mut self.cx, n);
                    }
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Sys(Ok(())));
                }
                Op::Munmap { addr, len } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let mut task = self.tasks[tid].vmacache.take();
                    let policy = self.vmacache_policy;
                    let r = self.with_mm_locked(pid, |pa, cx, mm| {
                        syscall_find_vma(&mut task, policy, pa, cx, mm, addr);
                        mm.munmap(pa, cx, addr, len)
                    });
                    self.tasks[tid].vmacache = task;
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Sys(r));
                }
                Op::Mprotect { addr, len, prot } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r =
                        self.with_mm_locked(pid, |pa, cx, mm| mm.mprotect(pa, cx, addr, len, prot));
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Sys(r));
                }
                Op::Mremap {
                    addr,
                    old_len,
                    new_len,
                    flags,
                    new_addr,
                } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.with_mm_locked(pid, |pa, cx, mm| {
                        mm.mremap(pa, cx, addr, old_len, new_len, flags, new_addr)
                    });
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Mapped(r));
                }
                Op::Madvise { addr, len, advice } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let mut task = self.tasks[tid].vmacache.take();
                    let policy = self.vmacache_policy;
                    let r = self.with_mm_locked(pid, |pa, cx, mm| {
                        syscall_find_vma(&mut task, policy, pa, cx, mm, addr);
                        mm.madvise(pa, cx, addr, len, advice)
                    });
                    self.tasks[tid].vmacache = task;
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Sys(r));
                }
                Op::Brk { brk } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.with_mm_locked(pid, |pa, cx, mm| Ok(mm.brk(pa, cx, brk)));
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Brk(r.unwrap_or(0)));
                }
                Op::Touch {
                    addr,
                    len,
                    stride,
                    bytes,
                    write,
                } => {
                    let task = &mut self.tasks[tid];
                    task.touch = Some(TouchCursor {
                        next: addr,
                        end: addr.saturating_add(len),
                        stride: stride.max(1),
                        bytes: bytes.max(1),
                        write,
                    });
                    task.touch_start.get_or_insert(t);
                    task.in_touch = true;
                    self.tasks[tid].result = Some(OpResult::Done);
                    if self.continue_touch(tid, v, t) {
                        return true;
                    }
                    continue;
                }
                Op::Fork { child, cpu } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.fork(tid, child.0, cpu, t);
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Forked(r));
                }
                Op::Exit => {
                    self.exit_group(pid);
                    if self.finish_task(tid, v, t) {
                        return true;
                    }
                    continue;
                }
                Op::MovePages {
                    pages,
                    nodes,
                    flags,
                } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let (ret, status) = self.move_pages(pid, &pages, nodes.as_deref(), flags);
                    self.stats.nr_move_pages += 1;
                    self.stats.move_pages_ns += self.cx.compute_ns();
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::MovedPages { ret, status });
                    for (cpu, ns) in self.cx.take_helper_work() {
                        let ci = cpu.idx();
                        self.vcpus[ci].helper_ns += ns;
                        if !self.vcpus[ci].active && self.vcpus[ci].current.is_none() {
                            let at = t.max(self.vcpus[ci].time);
                            self.schedule(cpu.0, at);
                        }
                    }
                }
                Op::SetMempolicy { preferred } => {
                    let r = match preferred {
                        Some(n) if n as usize >= self.pa.nr_nodes() => Err(Errno::Inval),
                        p => {
                            let p = p.map(mm::NodeId);
                            self.tasks[tid].mempolicy = p;
                            self.pa.set_task_mempolicy(VcpuId(v), p);
                            Ok(())
                        }
                    };
                    self.vcpus[vi]
                        .segs
                        .push(Seg::Compute(self.costs.get(Cost::SyscallEntry)));
                    self.tasks[tid].result = Some(OpResult::Sys(r));
                }
                Op::Sleep { ns } => {
                    self.seq += 1;
                    let at = t + ns;
                    self.queue.push(Reverse((at, self.seq, tid as u32 | WAKE)));
                    self.block(tid, v);
                    continue;
                }
                Op::Wait => {
                    if self.procs[pid].live_children > 0 {
                        self.procs[pid].waiters.push(tid);
                        self.block(tid, v);
                        continue;
                    }
                    self.tasks[tid].result = Some(OpResult::Done);
                }
            }
            return true;
        }
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
        let mut cpus_of = vec![Vec::new(); self.procs.len()];
        for task in &self.tasks {
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
        let mut status = vec![i32::MIN; pages.len()];
        let ret = ctx.move_pages(0, pages, nodes, &mut status, flags);
        (ret, status)
    }

    /// Takes task `tid` off vCPU `v` until something wakes it.
    fn block(&mut self, tid: TaskId, v: u32) {
        self.tasks[tid].state = TaskState::Blocked;
        self.vcpus[v as usize].current = None;
    }

    /// Runs `f` on process `pid`'s address space (created if need be) under
    /// its `mmap_lock` held for writing, recording into `self.cx`.
    fn with_mm_locked<R>(
        &mut self,
        pid: Pid,
        f: impl FnOnce(&mut PageAlloc, &mut Cx, &mut MmStruct) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        if self.procs[pid].mm.is_none() {
            // mm_alloc() at exec: the PGD, and the layout that
            // arch_pick_mmap_layout() chooses (randomized with ASLR, from a
            // stream of the run's seed that is this process's own).
            let mut mm = MmStruct::new(&mut self.pa, &mut self.cx, self.mmg.cfg.mmap_layout)?;
            if self.mmg.cfg.randomize_va_space != 0 {
                let mut r = mm::rng::SplitMix64(
                    self.seed ^ (pid as u64 + 1).wrapping_mul(0xA5A5_5A5A_0F0F_F0F1),
                );
                mm.randomize_mmap_base(r.next_u64());
            }
            self.procs[pid].mm = Some(mm);
        }
        let lock = mmap_lock(pid);
        self.cx.lock(lock);
        let mm = self.procs[pid].mm.as_mut().expect("created above");
        let r = f(&mut self.pa, &mut self.cx, mm);
        self.cx.unlock(lock);
        r
    }

    /// Plays task `tid`'s `Touch` up to and including its next fault (or
    /// [`TOUCH_CHUNK`] accesses). Returns true if it produced work for the
    /// vCPU; false if the task ended without any (killed, nothing to tear
    /// down).
    fn continue_touch(&mut self, tid: TaskId, v: u32, t: u64) -> bool {
        let vi = v as usize;
        let pid = self.tasks[tid].pid;
        let mut cur = self.tasks[tid].touch.take().expect("a touch in progress");
        self.cx.begin(VcpuId(v), SimTime(t));
        let mut fault = None;
        let mut n = 0;
        while cur.next < cur.end && n < TOUCH_CHUNK {
            let addr = cur.next;
            cur.next = cur.next.saturating_add(cur.stride);
            n += 1;
            self.cx.charge(Cost::Touch);
            // The bytes of this access, within its page.
            let in_page = mm::PAGE_SIZE - (addr & (mm::PAGE_SIZE - 1));
            let len = cur.bytes.min(in_page).min(cur.end - addr) as u32;
            self.tasks[tid].touch_bytes += len as u64;
            let Some(mm) = self.procs[pid].mm.as_mut() else {
                fault = Some(VmFault::Sigsegv);
                break;
            };
            if let Some(phys) = mm::memory::user_access(&mut self.pa, mm, addr, cur.write) {
                self.cx.user_access(phys, len, cur.write);
                continue;
            }
            let policy = self.vmacache_policy;
            let task = self.tasks[tid]
                .vmacache
                .get_or_insert_with(|| mm::vmacache::TaskStruct::new(mm, policy));
            // The fault runs under mmap_lock held for reading.
            let lock = mmap_lock(pid);
            self.cx.lock_read(lock);
            let r = mm::memory::do_user_addr_fault(
                &mut self.pa,
                &mut self.cx,
                &mut self.mmg,
                mm,
                task,
                addr,
                cur.write,
            );
            self.cx.unlock_read(lock);
            match r {
                Ok(()) => {
                    // The access is retried and now succeeds.
                    let phys = mm::memory::user_access(&mut self.pa, mm, addr, cur.write);
                    debug_assert!(phys.is_some(), "fault at {addr:#x} left it unmapped");
                    if let Some(phys) = phys {
                        self.cx.user_access(phys, len, cur.write);
                    }
                    break;
                }
                Err(e) => {
                    fault = Some(e);
                    break;
                }
            }
        }
        self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
        self.vcpus[vi].user_ns += n * self.costs.get(Cost::Touch);
        match fault {
            None => {
                if cur.next < cur.end {
                    self.tasks[tid].touch = Some(cur);
                }
                true
            }
            Some(e) => {
                // force_sig(SIGSEGV) or the OOM killer: the process dies.
                match e {
                    VmFault::Sigsegv => self.stats.nr_sigsegv += 1,
                    VmFault::Oom => self.stats.nr_oom_kills += 1,
                    VmFault::Sigbus => self.stats.nr_sigbus += 1,
                }
                self.exit_group(pid);
                let torn_down = self.finish_task(tid, v, t);
                torn_down || !self.vcpus[vi].segs.is_empty()
            }
        }
    }

    /// `fork()` by task `tid` at `t`: copies its process's address space and
    /// starts `program` in the child. Records into `self.cx`.
    fn fork(
        &mut self,
        tid: TaskId,
        program: Box<dyn crate::op::Program>,
        cpu: Option<VcpuId>,
        t: u64,
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
        let ctid = self.tasks.len();
        // The child inherits the task's memory policy (mpol_dup()).
        let mempolicy = self.tasks[tid].mempolicy;
        self.live_tasks += 1;
        self.tasks.push(Task {
            program,
            rng: Rng::stream(self.seed, ctid as u64 + 1),
            cpu,
            state: TaskState::Blocked,
            result: Some(OpResult::Start),
            nr_ops: 0,
            pid: child,
            touch: None,
            vmacache: None,
            touch_bytes: 0,
            touch_start: None,
            touch_end: 0,
            in_touch: false,
            mempolicy,
        });
        // The child runs once the parent's fork() has done its work.
        let at = t + self.cx.compute_ns();
        self.wake(ctid, at);
        Ok(child as u32)
    }

    /// `exit_group()` of process `pid`: its blocked tasks end now, its
    /// running ones at their next operation.
    fn exit_group(&mut self, pid: Pid) {
        self.procs[pid].dying = true;
        self.procs[pid].waiters.clear();
        for i in 0..self.tasks.len() {
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
    fn finish_task(&mut self, tid: TaskId, v: u32, t: u64) -> bool {
        let vi = v as usize;
        self.tasks[tid].state = TaskState::Done;
        if self.tasks[tid].in_touch {
            self.tasks[tid].in_touch = false;
            self.tasks[tid].touch_end = t;
        }
        self.vcpus[vi].current = None;
        self.stats.runtime_ns = self.stats.runtime_ns.max(t);
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
        let mut work = false;
        if let Some(mm) = self.procs[pid].mm.take() {
            self.cx.begin(VcpuId(v), SimTime(t));
            let lock = mmap_lock(pid);
            self.cx.lock(lock);
            mm::memory::exit_mmap(&mut self.pa, &mut self.cx, mm);
            self.cx.unlock(lock);
            self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
            work = true;
        }
        if let Some(parent) = self.procs[pid].parent {
            let p = &mut self.procs[parent];
            p.live_children -= 1;
            if p.live_children == 0 {
                let waiters = std::mem::take(&mut p.waiters);
                let at = t + if work { self.cx.compute_ns() } else { 0 };
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
    fn wake(&mut self, tid: TaskId, t: u64) {
        let task = &mut self.tasks[tid];
        task.state = TaskState::Runnable;
        let cpu = task.cpu.0;
        let ci = cpu as usize;
        self.vcpus[ci].runq.push_back(tid);
        if !self.vcpus[ci].active && self.vcpus[ci].current.is_none() {
            let at = t.max(self.vcpus[ci].time);
            self.schedule(cpu, at);
        }
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

/// The cached `find_vma()` at the start of `munmap()`, `madvise()` and a
/// hinted `mmap()` (Linux 3.15–6.0): makes the task's VMA cache if it has
/// none yet, then [`mm::vmacache::find_vma_syscall`]. Nothing under the
/// `none` policy.
fn syscall_find_vma(
    task: &mut Option<mm::vmacache::TaskStruct>,
    policy: mm::vmacache::VmacachePolicy,
    pa: &mut PageAlloc,
    cx: &mut Cx,
    mm: &MmStruct,
    addr: u64,
) {
    if policy == mm::vmacache::VmacachePolicy::None {
        return;
    }
    let t = task.get_or_insert_with(|| mm::vmacache::TaskStruct::new(mm, policy));
    mm::vmacache::find_vma_syscall(t, mm, &mut pa.vmstat, cx, addr);
}
