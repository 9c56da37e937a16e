//! The operations a task performs, and what it learns back.
//!
//! A task is a lazy stream of operations: the engine asks its [`Program`]
//! for the next one, passing the result of the previous, so a workload never
//! holds more than its own live state (a list of pages it owns, a position in
//! a loop) however long it runs.

use crate::rng::Rng;
use mm::page_alloc::{AllocError, Gfp};
use mm::Pfn;

/// A channel between tasks, by index.
pub type ChanId = u32;

/// A block of pages a task owns: its first pfn and its order.
pub type Block = (Pfn, u8);

/// One operation of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

/// A task's behaviour: a generator of operations.
pub trait Program {
    /// The next operation, given the result of the last one; `None` ends the
    /// task. `rng` is this task's own seeded stream.
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op>;
}

/// A task to start: its program and the vCPU it runs on.
pub struct TaskSpec {
    /// What the task does.
    pub program: Box<dyn Program>,
    /// The vCPU it is bound to.
    pub cpu: mm::VcpuId,
}
