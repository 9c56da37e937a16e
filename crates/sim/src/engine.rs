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

use crate::op::{Block, ChanId, Op, OpResult, TaskSpec};
use crate::rng::Rng;
use mm::cost::{Cost, CostTable, Cx, LockClass, LockId, Seg};
use mm::page_alloc::PageAlloc;
use mm::{SimTime, VcpuId};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

type TaskId = usize;

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
    last_task_end: u64,
}

impl Engine {
    /// An engine over `pa` with the given costs and seed.
    pub fn new(pa: PageAlloc, costs: CostTable, seed: u64) -> Engine {
        let nr_cpus = pa.nr_cpus() as usize;
        let cx = Cx::new(VcpuId(0), costs.clone());
        Engine {
            pa,
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
            last_task_end: 0,
        }
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
        self.tasks.push(Task {
            program: spec.program,
            rng: Rng::stream(self.seed, id as u64 + 1),
            cpu: spec.cpu,
            state: TaskState::Runnable,
            result: Some(OpResult::Start),
            nr_ops: 0,
        });
        self.vcpus[spec.cpu.idx()].runq.push_back(id);
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
        self.stats.final_pcp_pages = self.pa.nr_pcp_pages();
        self.stats.clone()
    }

    /// Continues vCPU `v` at the time of its event, `now`.
    fn step(&mut self, v: u32, now: u64) {
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
                            self.schedule(v, t);
                            return;
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
                            self.schedule(v, t);
                            return;
                        }
                        self.release(l, v, t);
                        self.vcpus[vi].pos += 1;
                    }
                }
            }
            // The operation is over: the next one starts in global time order.
            if t > now {
                self.vcpus[vi].time = t;
                self.schedule(v, t);
                return;
            }
            if !self.start_next_op(v, t) {
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
            let res = self.tasks[tid].result.take().unwrap_or(OpResult::Done);
            let task = &mut self.tasks[tid];
            let Some(op) = task.program.next(res, &mut task.rng) else {
                task.state = TaskState::Done;
                self.vcpus[vi].current = None;
                self.stats.runtime_ns = self.stats.runtime_ns.max(t);
                self.live_tasks -= 1;
                self.last_task_end = self.last_task_end.max(t);
                continue;
            };
            task.nr_ops += 1;
            self.stats.nr_ops += 1;
            if self.stats.nr_ops.is_multiple_of(self.pcp_sample_every) {
                self.stats.peak_pcp_pages = self.stats.peak_pcp_pages.max(self.pa.nr_pcp_pages());
            }
            if self.check_every > 0 && self.stats.nr_ops.is_multiple_of(self.check_every) {
                self.pa.check_invariants();
            }
            self.vcpus[vi].segs.clear();
            self.vcpus[vi].pos = 0;
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
                    // A task already waiting gets the message directly.
                    let c = self.chan(chan);
                    if let Some(w) = c.waiters.pop_front() {
                        self.tasks[w].result = Some(OpResult::Received(blocks));
                        self.wake(w, t);
                    } else {
                        c.msgs.push_back(blocks);
                    }
                }
                Op::Recv { chan } => {
                    let c = self.chan(chan);
                    if let Some(m) = c.msgs.pop_front() {
                        self.tasks[tid].result = Some(OpResult::Received(m));
                    } else {
                        c.waiters.push_back(tid);
                        self.tasks[tid].state = TaskState::Blocked;
                        self.vcpus[vi].current = None;
                        continue;
                    }
                }
            }
            return true;
        }
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

    /// Counters, as `(name, value)`.
    pub fn vmstat(&self) -> &mm::vmstat::VmStat {
        &self.pa.vmstat
    }
}
