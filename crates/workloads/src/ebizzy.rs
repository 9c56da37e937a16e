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
    // The chunks' addresses, written by the main thread before it lets the
    // others go. Shared only among the tasks of this one run.
    let mem = Rc::new(RefCell::new(Vec::new()));
    Ok((0..threads)
        .map(|i| TaskSpec {
            program: Box::new(Ebizzy {
                main: i == 0,
                threads,
                chunks,
                chunk_size,
                records,
                done: 0,
                mem: Rc::clone(&mem),
                phase: if i == 0 { Phase::Allocate } else { Phase::Wait },
                queue: VecDeque::new(),
            }),
            cpu: mm::VcpuId(i % nr_cpus),
            process: Some(0),
        })
        .collect())
}

/// The channel on which the main thread starts the others (`threads_go`).
const GO: sim::ChanId = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
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
            return None;
        }
        self.done += 1;
        self.phase = Phase::Copy;
        Some(self.map())
    }
}

impl Program for Ebizzy {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        match self.phase {
            Phase::Allocate => {
                // `allocate()`, then `write_pattern()`: one write per page
                // is what faults.
                if let OpResult::Mapped(r) = last {
                    // ebizzy exit()s if an allocation fails: the whole
                    // process, threads waiting to start included (ending
                    // only this thread left them waiting forever).
                    let Ok(addr) = r else {
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
                        chan: GO,
                        blocks: Vec::new(),
                    });
                }
                self.phase = Phase::Queue;
                self.queue.pop_front()
            }
            Phase::Wait => {
                if matches!(last, OpResult::Start) {
                    return Some(Op::Recv { chan: GO });
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
