//! mmlab's deterministic engine: virtual CPUs, tasks, an event queue ordered
//! by `(time, sequence)`, locks as timed resources with wait accounting, the
//! cost model, and the seeded random streams.
//!
//! The engine drives the kernel model (crate `mm`) and never reads a wall
//! clock, spawns a thread or iterates a hash table: the same tasks and seed
//! give the same results, byte for byte.

pub mod cache;
pub mod engine;
pub mod machine;
pub mod op;
pub mod profile;
pub mod rng;
pub mod timeline;

pub use engine::{Engine, LockStats, PcpSample, RunStats};
pub use machine::{Machine, MachineError, NodeSpec};
pub use op::{Block, ChanId, ChildProgram, Op, OpResult, Program, TaskSpec};
pub use rng::Rng;
pub use timeline::{Timeline, TimelineOptions};
