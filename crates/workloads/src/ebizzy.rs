//! ebizzy: threads of one process copying random chunks into fresh buffers
//! and searching them.
//!
//! # What it models
//!
//! ebizzy 0.3 (Valerie Henson; LTP `utils/benchmark/ebizzy-0.3/ebizzy.c`),
//! the benchmark the 2014 per-thread vmacache series reported (hit rate
//! 1.1 % with the single `mm->mmap_cache` → 99.97 % with the per-thread
//! cache). The main thread allocates `chunks` chunks of `chunk_size` bytes
//! and writes a pattern into them; then every thread loops: pick a chunk at
//! random, allocate a buffer of `chunk_size` bytes, copy the chunk into it,
//! binary-search it for a random key, free the buffer. All threads share one
//! mm, so one thread's `munmap()` invalidates every thread's VMA cache.
//!
//! The model follows ebizzy's `-m` option ("always use mmap"): the buffer is
//! `mmap()`ed, so the copy's writes fault on every page, and freed with
//! `munmap()`. Without `-m` the buffer comes from `malloc()`; glibc maps
//! 512 KiB blocks at first but raises its mmap threshold after the first
//! free, after which the buffer is reused heap memory that no longer faults
//! — too little VMA traffic to compare caches.
//!
//! Parameters (ebizzy's defaults where it has them): `chunks` 10 (`-n`),
//! `chunk_size` 512 KiB (`-s`; 64 Ki records of 8 bytes). ebizzy runs
//! `2 * nr_cpus` threads (`-t`) for 10 s (`-S`); the model runs one thread
//! per CPU (deviation: tasks never preempt each other here, so a second
//! thread on a CPU would only start when the first ended) for `records`
//! searches each. The search itself (~16 compares) costs nothing here.
//!
//! `runs` (default 1) runs ebizzy that many times one after another, as a
//! benchmark script repeats it: each run is a new process, with its own
//! `mmap_base` drawn by ASLR, and starts when every thread of the run
//! before has ended. Counters add up over the runs. Where a figure depends
//! on the ASLR draw (under the 4.18 pfn hash, which slot a buffer's VMA is
//! cached in follows its page number mod 4, fixed by the draw for a whole
//! process), several runs give its mean over draws rather than one draw.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::types::PAGE_SIZE;
use mm::vma::MapFlags;
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "ebizzy",
    summary: "ebizzy -m: threads of one process copy random chunks into mmap'd buffers, \
              search, munmap",
    params: &[
        P::int(
            "threads",
            Count::CPUS,
            1,
            N(65_536),
            "threads of the one process, bound round-robin to CPUs",
        ),
        P::int(
            "chunks",
            N(10),
            1,
            N(65_536),
            "chunks the main thread allocates (-n)",
        ),
        P::size(
            "chunk_size",
            512 << 10,
            PAGE_SIZE,
            1 << 30,
            "bytes per chunk and per copy (-s)",
        ),
        P::int("records", N(32), 1, N(1_000_000), "searches per thread"),
        P::int(
            "runs",
            N(1),
            1,
            N(4096),
            "times ebizzy is run, one after another, each a new process with its own ASLR draw",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let threads = a.int("threads")? as u32;
    let chunks = a.int("chunks")? as u64;
    let chunk_size = a.size("chunk_size")?;
    let records = a.int("records")? as u32;
    let runs = a.int("runs")? as u32;
    let mut tasks = Vec::new();
    for run in 0..runs {
        // The chunks' addresses, written by the main thread before it lets
        // the others go. Shared only among the tasks of this one run.
        let mem = Rc::new(RefCell::new(Vec::new()));
        for i in 0..threads {
            let phase = match (i, run) {
                (0, 0) => Phase::Allocate,
                (0, _) => Phase::AwaitPrev,
                _ => Phase::Wait,
            };
            tasks.push(TaskSpec {
                program: Box::new(Ebizzy {
                    main: i == 0,
                    threads,
                    chunks,
                    chunk_size,
                    records,
                    done: 0,
                    mem: Rc::clone(&mem),
                    phase,
                    queue: VecDeque::new(),
                    go: go_chan(run),
                    prev_done: run.checked_sub(1).map(done_chan),
                    done_chan: (run + 1 < runs).then(|| done_chan(run)),
                    prev_ended: 0,
                }),
                cpu: mm::VcpuId(i % nr_cpus),
                process: Some(run),
            });
        }
    }
    Ok(tasks)
}

/// The channel on which run `run`'s main thread starts the others
/// (`threads_go`).
fn go_chan(run: u32) -> sim::ChanId {
    2 * run
}

/// The channel on which run `run`'s threads say they have ended, for the
/// main thread of the next run (which starts only then, as a shell running
/// ebizzy again would).
fn done_chan(run: u32) -> sim::ChanId {
    2 * run + 1
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Main thread of a run after the first: wait until every thread of
    /// the run before has ended.
    AwaitPrev,
    /// Main thread: map the chunks one by one (answers: their addresses).
    Allocate,
    /// Other threads: wait for the main thread's start signal.
    Wait,
    /// A search's buffer was mapped: queue the copy and the free.
    Copy,
    /// Play queued operations, then start the next search.
    Queue,
}

/// One ebizzy thread.
pub struct Ebizzy {
    main: bool,
    threads: u32,
    chunks: u64,
    chunk_size: u64,
    records: u32,
    done: u32,
    mem: Rc<RefCell<Vec<u64>>>,
    phase: Phase,
    queue: VecDeque<Op>,
    /// This run's start channel.
    go: sim::ChanId,
    /// The previous run's end channel (main thread of a later run).
    prev_done: Option<sim::ChanId>,
    /// This run's end channel, if another run follows.
    done_chan: Option<sim::ChanId>,
    /// Threads of the previous run seen ending.
    prev_ended: u32,
}

impl Ebizzy {
    fn map(&self) -> Op {
        Op::Mmap {
            len: self.chunk_size,
            hint: None,
            flags: MapFlags::NONE,
            advice: None,
        }
    }

    /// The next search (`search_mem()`'s loop body) starts with its buffer.
    fn next_search(&mut self) -> Option<Op> {
        if self.done == self.records {
            // Tell the next run's main thread that this thread has ended.
            return self.done_chan.take().map(|chan| Op::Send {
                chan,
                blocks: Vec::new(),
            });
        }
        self.done += 1;
        self.phase = Phase::Copy;
        Some(self.map())
    }
}

impl Program for Ebizzy {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        match self.phase {
            Phase::AwaitPrev => {
                let prev = self.prev_done.expect("a later run has a previous one");
                if matches!(last, OpResult::Received(_)) {
                    self.prev_ended += 1;
                }
                if self.prev_ended < self.threads {
                    return Some(Op::Recv { chan: prev });
                }
                self.phase = Phase::Allocate;
                Some(self.map())
            }
            Phase::Allocate => {
                // `allocate()`, then `write_pattern()`: one write per page
                // is what faults.
                if let OpResult::Mapped(r) = last {
                    // ebizzy exit()s if an allocation fails: the whole
                    // process, threads waiting to start included (ending
                    // only this thread left them waiting forever).
                    let Ok(addr) = r else {
                        // The next run waits for every thread of this one.
                        if let Some(chan) = self.done_chan.take() {
                            for _ in 0..self.threads {
                                self.queue.push_back(Op::Send {
                                    chan,
                                    blocks: Vec::new(),
                                });
                            }
                            self.queue.push_back(Op::Exit);
                            self.phase = Phase::Queue;
                            return self.queue.pop_front();
                        }
                        return Some(Op::Exit);
                    };
                    self.mem.borrow_mut().push(addr);
                }
                if (self.mem.borrow().len() as u64) < self.chunks {
                    return Some(self.map());
                }
                for &c in self.mem.borrow().iter() {
                    self.queue.push_back(Op::Touch {
                        bytes: 1,
                        addr: c,
                        len: self.chunk_size,
                        stride: PAGE_SIZE,
                        write: true,
                    });
                }
                for _ in 1..self.threads {
                    self.queue.push_back(Op::Send {
                        chan: self.go,
                        blocks: Vec::new(),
                    });
                }
                self.phase = Phase::Queue;
                self.queue.pop_front()
            }
            Phase::Wait => {
                if matches!(last, OpResult::Start) {
                    return Some(Op::Recv { chan: self.go });
                }
                debug_assert!(!self.main);
                self.next_search()
            }
            Phase::Copy => {
                let OpResult::Mapped(Ok(copy)) = last else {
                    return None;
                };
                let chunk = self.mem.borrow()[rng.below(self.chunks) as usize];
                // memcpy(copy, src, chunk_size): reads of the populated
                // chunk, writes that fault on every page of the buffer.
                self.queue.push_back(Op::Touch {
                    bytes: 1,
                    addr: chunk,
                    len: self.chunk_size,
                    stride: PAGE_SIZE,
                    write: false,
                });
                self.queue.push_back(Op::Touch {
                    bytes: 1,
                    addr: copy,
                    len: self.chunk_size,
                    stride: PAGE_SIZE,
                    write: true,
                });
                self.queue.push_back(Op::Munmap {
                    addr: copy,
                    len: self.chunk_size,
                });
                self.phase = Phase::Queue;
                self.queue.pop_front()
            }
            Phase::Queue => match self.queue.pop_front() {
                Some(op) => Some(op),
                None => self.next_search(),
            },
        }
    }
}
