//! Pairs of tasks passing buffers between CPUs: network and local-socket
//! benchmarks as the page allocator sees them.
//!
//! # What it models
//!
//! - `netperf SCTP_STREAM_MANY` (seed 003: 64 pairs on a 128-CPU machine):
//!   a sender allocates socket buffer pages (order 0, with orders 1–3 for
//!   larger skb heads and fragments) on its CPU and queues them; the receiver
//!   on another CPU consumes and frees them there. Pages move one way, so the
//!   sender's lists run empty and the receiver's overflow.
//! - `lmbench3 AF_UNIX` (16 pairs): `bw_unix`, a one-way stream of 64 KiB
//!   writes (`pingpong = 0`); `pingpong = 1` is `lat_unix`, where each side
//!   sends a buffer and waits for the other's, so high-order buffer pages
//!   bounce between two CPUs.
//!
//! Deviation: the network stack itself (protocol processing, copies) is a
//! time per message (`work_ns`, or the time the message's bytes take at
//! `mbps`), not modelled; only the page allocations and frees are. Sizes
//! are synthetic.
//!
//! # The receiver's copy
//!
//! In a one-way stream the receiver's `read()`/`recvmsg()` copies each
//! message out of the socket buffer's pages (`skb_copy_datagram_iter()`)
//! before `consume_skb()` frees them. With `recv_copy_mbps` set, the
//! receiver spends the message's bytes at that rate between receiving the
//! message and freeing its blocks (charged as [`Op::Compute`]: the engine
//! has no kernel-mode compute, so it lands in `user_ns`, though the kernel
//! does it). The rate is the experiment's, with its source: the lines were
//! last written by the sender's CPU, so they arrive by core-to-core
//! transfers, as many at a time as the core's line fill buffers allow.
//! Its other work per message (the system call, socket locking, the skb
//! head's slab free, the sender's wake-up) is not charged: a lower bound.
//!
//! # Throughput
//!
//! `mbps` sets the time per message from a measured per-pair throughput:
//! a message of `b` bytes takes `b × 8000 / mbps` ns, so a pair moves
//! `mbps` megabits a second whatever the sizes drawn. Published
//! SCTP_STREAM_MANY figures for the seed's kind of machine and setup (the
//! 0-day robot's `lkp-icl-2sp4`, a 2-socket, 128-thread Ice Lake server;
//! 50 % of the CPUs as client/server pairs, i.e. 64 pairs, `send_size`
//! 10K, over loopback): 9 078 Mbit/s per pair before and 4 006 after commit
//! 4890b686f408 ("net: keep sk->sk_forward_alloc as small as possible",
//! merged for 6.0), which the seed's 6.6-based kernels contain (the
//! robot's report "[net] 4890b686f4: netperf.Throughput_Mbps -69.4%
//! regression", linux-mm/netdev, 16 August 2022, `netperf.Throughput_Mbps`
//! 9078 → 4006, `netperf.Throughput_total_Mbps` 581006 → 256385).

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::page_alloc::Gfp;
use sim::{Block, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "stream",
    summary: "sender/receiver pairs passing page buffers between CPUs (netperf, lmbench AF_UNIX)",
    params: &[
        P::int(
            "pairs",
            Count::HALF_CPUS,
            1,
            Count::HALF_CPUS,
            "sender/receiver pairs; pair i runs on CPUs 2i and 2i+1",
        ),
        P::int(
            "messages",
            N(2000),
            1,
            N(100_000_000),
            "messages each sender sends",
        ),
        P::int(
            "blocks_per_message",
            N(4),
            1,
            N(100_000),
            "blocks allocated per message",
        ),
        P::int(
            "high_order_pct",
            N(25),
            0,
            N(100),
            "percent of blocks of order 1-3 (uniform), the rest order 0",
        ),
        P::int(
            "work_ns",
            N(2000),
            0,
            N(1_000_000_000),
            "time per message on each side besides the allocator",
        ),
        P::int(
            "mbps",
            N(0),
            0,
            N(10_000_000),
            "if not 0: the sender's time per message is its bytes at this many Mbit/s (instead of work_ns)",
        ),
        P::int(
            "recv_copy_mbps",
            N(0),
            0,
            N(100_000_000),
            "if not 0: the receiver copies each message's bytes out at this many Mbit/s before freeing its blocks",
        ),
        P::flag(
            "pingpong",
            false,
            "1: each side sends and waits in turn (AF_UNIX ping-pong); 0: one-way stream",
        ),
    ],
    build,
    nr_runs: None,
};

#[derive(Clone, Copy, Debug)]
struct StreamParams {
    messages: u32,
    blocks: u32,
    high_order_pct: u32,
    work_ns: u64,
    mbps: u64,
    recv_copy_mbps: u64,
    pingpong: bool,
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nr_cpus = m.nr_cpus();
    let pairs = a.int("pairs")? as u32;
    let sp = StreamParams {
        messages: a.int("messages")? as u32,
        blocks: a.int("blocks_per_message")? as u32,
        high_order_pct: a.int("high_order_pct")? as u32,
        work_ns: a.int("work_ns")? as u64,
        mbps: a.int("mbps")? as u64,
        recv_copy_mbps: a.int("recv_copy_mbps")? as u64,
        pingpong: a.flag("pingpong")?,
    };
    let mut tasks = Vec::new();
    for i in 0..pairs {
        let (a, b) = (2 * i, 2 * i + 1);
        tasks.push(TaskSpec::new(
            Box::new(Side::new(sp, a, b, true)),
            mm::VcpuId(a % nr_cpus),
        ));
        tasks.push(TaskSpec::new(
            Box::new(Side::new(sp, b, a, false)),
            mm::VcpuId(b % nr_cpus),
        ));
    }
    Ok(tasks)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Alloc,
    Work,
    Send,
    Recv,
    RecvCopy,
    Free,
}

/// Bytes of a message's blocks.
fn message_bytes(blocks: &[Block]) -> u64 {
    blocks.iter().map(|b| mm::PAGE_SIZE << b.1).sum()
}

/// One side of a pair.
struct Side {
    p: StreamParams,
    me: u32,
    peer: u32,
    sends: bool,
    receives: bool,
    sent: u32,
    received: u32,
    phase: Phase,
    order: u8,
    /// Allocations made for the message being built, failed ones included:
    /// a message goes with the blocks it got (counting only successes
    /// retried a failing allocation forever).
    nr_tried: u32,
    buf: Vec<Block>,
    rx: Vec<Block>,
}

impl Side {
    fn new(p: StreamParams, me: u32, peer: u32, first: bool) -> Side {
        // In a one-way stream the first side only sends and the second only
        // receives; in a ping-pong both do both, the first one starting.
        Side {
            p,
            me,
            peer,
            sends: first || p.pingpong,
            receives: !first || p.pingpong,
            sent: 0,
            received: 0,
            phase: if first { Phase::Alloc } else { Phase::Recv },
            order: 0,
            nr_tried: 0,
            buf: Vec::new(),
            rx: Vec::new(),
        }
    }

    fn finished(&self) -> bool {
        (!self.sends || self.sent == self.p.messages)
            && (!self.receives || self.received == self.p.messages)
    }
}

impl Program for Side {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        match last {
            OpResult::Alloc(Ok(pfn)) => self.buf.push((pfn, self.order)),
            OpResult::Received(b) => self.rx = b,
            _ => {}
        }
        loop {
            match self.phase {
                Phase::Alloc => {
                    if !self.sends || self.sent == self.p.messages {
                        if self.finished() {
                            return None;
                        }
                        self.phase = Phase::Recv;
                        continue;
                    }
                    if self.nr_tried < self.p.blocks {
                        self.nr_tried += 1;
                        self.order = if rng.percent(self.p.high_order_pct) {
                            1 + rng.below(3) as u8
                        } else {
                            0
                        };
                        // Socket buffers are unmovable kernel memory.
                        return Some(Op::AllocPages {
                            gfp: Gfp::KERNEL,
                            order: self.order,
                        });
                    }
                    self.phase = Phase::Work;
                }
                Phase::Work => {
                    self.phase = Phase::Send;
                    let ns = match self.p.mbps {
                        0 => self.p.work_ns,
                        mbps => message_bytes(&self.buf) * 8000 / mbps,
                    };
                    if ns > 0 {
                        return Some(Op::Compute { ns });
                    }
                }
                Phase::Send => {
                    self.sent += 1;
                    self.nr_tried = 0;
                    self.phase = if self.p.pingpong {
                        Phase::Recv
                    } else {
                        Phase::Alloc
                    };
                    return Some(Op::Send {
                        chan: self.peer,
                        blocks: std::mem::take(&mut self.buf),
                    });
                }
                Phase::Recv => {
                    if !self.receives || self.received == self.p.messages {
                        if self.finished() {
                            return None;
                        }
                        self.phase = Phase::Alloc;
                        continue;
                    }
                    self.phase = Phase::RecvCopy;
                    return Some(Op::Recv { chan: self.me });
                }
                Phase::RecvCopy => {
                    self.phase = Phase::Free;
                    let copy = (message_bytes(&self.rx) * 8000).checked_div(self.p.recv_copy_mbps);
                    if let Some(ns) = copy.filter(|&ns| ns > 0) {
                        return Some(Op::Compute { ns });
                    }
                }
                Phase::Free => {
                    if let Some(b) = self.rx.pop() {
                        return Some(Op::FreePages { block: b });
                    }
                    self.received += 1;
                    self.phase = if self.p.pingpong {
                        Phase::Alloc
                    } else {
                        Phase::Recv
                    };
                }
            }
        }
    }
}
