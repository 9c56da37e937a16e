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
//! writing around `mmap`, `munmap`, `madvise`, `fork` and `exit_mmap`.
//! Deviation: page faults do not take it (see [`LockClass::MmapLock`]).
//!
//! A `Touch` runs one access at a time: the engine returns to the event
//! queue after each fault (and after every [`TOUCH_CHUNK`] accesses that do
//! not fault), so that the faults of different vCPUs interleave in virtual
//! time as they would on a machine.

use crate::op::{Block, ChanId, Op, OpResult, TaskSpec};
use crate::rng::Rng;
use mm::cost::{Cost, CostTable, Cx, LockClass, LockId, Seg};
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
    /// The segments being played are a task's (not the vmstat work, and not
    /// nothing at all on an idle vCPU).
    playing_task: bool,
    /// When this vCPU last finished work for a task (operations and the
    /// teardown of an address space), for the run's duration.
    task_work_end: u64,
}

#[derive(Default)]
struct LockState {
    owner: Option<u32>,
    last_owner: Option<u32>,
    acquired_at: u64,
    waiters: VecDeque<u32>,
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
}

impl Engine {
    /// An engine over `pa` with the given costs and seed.
    pub fn new(pa: PageAlloc, costs: CostTable, seed: u64) -> Engine {
        let nr_cpus = pa.nr_cpus() as usize;
        let cx = Cx::new(VcpuId(0), costs.clone());
        Engine {
            pa,
            mmg: MmGlobal::new(MmConfig::default()),
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
        }
    }

    /// Uses `cfg` (a kernel's `KernelConfig.mm`) for the fault path instead
    /// of [`MmConfig::default`]. Call before spawning tasks.
    pub fn with_mm_config(mut self, cfg: MmConfig) -> Engine {
        self.mmg = MmGlobal::new(cfg);
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
        for p in &self.procs {
            if let Some(mm) = &p.mm {
                mm.check_vmas();
            }
        }
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
            LockClass::MmapLock => self.costs.get(Cost::ZoneLockHandoff),
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
        self.stats.final_pcp_pages = self.pa.nr_pcp_pages();
        self.stats.clone()
    }

    /// True if vCPU `v` may go on at `t` without the event queue: every
    /// queued event is later than `t`, so the event it would queue for
    /// itself (its `seq` the largest) would be the next one popped anyway.
    /// Skipping the round trip changes no order of events, only the host
    /// time spent (a queue push and pop per operation of a replay).
    #[inline]
    fn runs_next(&self, t: u64) -> bool {
        self.queue
            .peek()
            .is_none_or(|Reverse((top, _, _))| t < *top)
    }

    /// Continues vCPU `v` at the time of its event, `now`.
    fn step(&mut self, v: u32, mut now: u64) {
        let vi = v as usize;
        self.vcpus[vi].active = false;
        let mut t = now.max(self.vcpus[vi].time);
        loop {
            // Play the current operation's segments.
            while self.vcpus[vi].pos < self.vcpus[vi].segs.len() {
                match self.vcpus[vi].segs[self.vcpus[vi].pos] {
                    Seg::Compute(ns) => {
                        t += ns;
                        self.vcpus[vi].busy_ns += ns;
                        self.vcpus[vi].pos += 1;
                    }
                    Seg::Lock(l) => {
                        if t > now {
                            self.vcpus[vi].time = t;
                            if !self.runs_next(t) {
                                self.schedule(v, t);
                                return;
                            }
                            now = t;
                        }
                        let handoff = self.handoff_ns(l);
                        let st = self.lock_state(l);
                        if st.owner.is_some() {
                            st.waiters.push_back(v);
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
                        st.owner = Some(v);
                        st.acquired_at = t + extra;
                        let ls = &mut self.stats.locks[l.class as usize];
                        ls.acquisitions += 1;
                        ls.wait_ns += extra;
                        t += extra;
                        self.vcpus[vi].busy_ns += extra;
                        self.vcpus[vi].pos += 1;
                    }
                    Seg::Unlock(l) => {
                        if t > now {
                            self.vcpus[vi].time = t;
                            if !self.runs_next(t) {
                                self.schedule(v, t);
                                return;
                            }
                            now = t;
                        }
                        self.release(l, v, t);
                        self.vcpus[vi].pos += 1;
                    }
                }
            }
            if self.vcpus[vi].playing_task {
                self.vcpus[vi].task_work_end = self.vcpus[vi].task_work_end.max(t);
            }
            // The operation is over: the next one starts in global time order.
            if t > now {
                self.vcpus[vi].time = t;
                if !self.runs_next(t) {
                    self.schedule(v, t);
                    return;
                }
                now = t;
            }
            if !self.start_next_op(v, t) {
                // Idle: whatever wakes the vCPU next is not a task's work yet.
                self.vcpus[vi].playing_task = false;
                self.vcpus[vi].time = t;
                return;
            }
        }
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

    fn release(&mut self, l: LockId, v: u32, t: u64) {
        let handoff = self.handoff_ns(l);
        let st = self.lock_state(l);
        debug_assert_eq!(
            st.owner,
            Some(v),
            "unlock by a vCPU that does not hold the lock"
        );
        let held = t - st.acquired_at;
        st.last_owner = Some(v);
        st.owner = None;
        let next = st.waiters.pop_front();
        self.stats.locks[l.class as usize].hold_ns += held;
        if let Some(w) = next {
            let extra = if w != v { handoff } else { 0 };
            let tw = t + extra;
            let st = self.lock_state(l);
            st.owner = Some(w);
            st.acquired_at = tw;
            let wi = w as usize;
            let waited = tw - self.vcpus[wi].lock_wait_since;
            self.stats.locks[l.class as usize].wait_ns += waited;
            self.vcpus[wi].busy_ns += waited;
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
                Op::Compute { ns } => self.vcpus[vi].segs.push(Seg::Compute(ns)),
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
                    let r = self.with_mm_locked(pid, |pa, cx, mm| {
                        let addr = mm.mmap(pa, cx, hint.unwrap_or(0), len, fixed)?;
                        if let Some(a) = advice {
                            mm.madvise(pa, cx, addr, len, a)?;
                        }
                        Ok(addr)
                    });
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Mapped(r));
                }
                Op::Munmap { addr, len } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.with_mm_locked(pid, |pa, cx, mm| mm.munmap(pa, cx, addr, len));
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Sys(r));
                }
                Op::Madvise { addr, len, advice } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self
                        .with_mm_locked(pid, |pa, cx, mm| mm.madvise(pa, cx, addr, len, advice));
                    self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
                    self.tasks[tid].result = Some(OpResult::Sys(r));
                }
                Op::Touch {
                    addr,
                    len,
                    stride,
                    write,
                } => {
                    self.tasks[tid].touch = Some(TouchCursor {
                        next: addr,
                        end: addr.saturating_add(len),
                        stride: stride.max(1),
                        write,
                    });
                    self.tasks[tid].result = Some(OpResult::Done);
                    if self.continue_touch(tid, v, t) {
                        return true;
                    }
                    continue;
                }
                Op::Fork { child } => {
                    self.cx.begin(VcpuId(v), SimTime(t));
                    let r = self.fork(tid, child.0, t);
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
            // mm_alloc() at exec: the PGD.
            let mm = MmStruct::new(&mut self.pa, &mut self.cx, self.mmg.cfg.mmap_layout)?;
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
            let Some(mm) = self.procs[pid].mm.as_mut() else {
                fault = Some(VmFault::Sigsegv);
                break;
            };
            if mm::memory::access_ok(mm, addr, cur.write) {
                continue;
            }
            let policy = self.vmacache_policy;
            let task = self.tasks[tid]
                .vmacache
                .get_or_insert_with(|| mm::vmacache::TaskStruct::new(mm, policy));
            match mm::memory::do_user_addr_fault(
                &mut self.pa,
                &mut self.cx,
                &mut self.mmg,
                mm,
                task,
                addr,
                cur.write,
            ) {
                Ok(()) => {
                    // The access is retried and now succeeds.
                    let ok = mm::memory::access_ok(mm, addr, cur.write);
                    debug_assert!(ok, "fault at {addr:#x} left it unmapped");
                    break;
                }
                Err(e) => {
                    fault = Some(e);
                    break;
                }
            }
        }
        self.vcpus[vi].segs.extend_from_slice(self.cx.segs());
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
        let cpu = VcpuId((self.tasks[tid].cpu.0 + 1 + nth % nr_cpus) % nr_cpus);
        let ctid = self.tasks.len();
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
