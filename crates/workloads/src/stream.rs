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
//!   writes (`pingpong = 0`, `unix_write` = 64 KiB: each message's blocks
//!   are the ones Linux 6.6 allocates for such a write, see
//!   [`unix_stream_write_orders`]); `pingpong = 1` is `lat_unix`, where each
//!   side sends a buffer and waits for the other's, so high-order buffer
//!   pages bounce between two CPUs.
//!
//! The receiver frees a message's blocks in the order the sender allocated
//! them (`skb_release_data()` walks each skb's fragments in index order).
//! Pairs run on CPUs `2i`, `2i + 1` (`placement = packed`), or dealt to the
//! nodes in turn (`spread`), as a load balancer that keeps the busy tasks
//! even across nodes places a few pairs.
//!
//! Deviation: the network stack itself (protocol processing, copies) is a
//! time per message (`work_ns`, or the time the message's bytes take at
//! `mbps`), not modelled; only the page allocations and frees are. Without
//! `unix_write` the sizes are synthetic. With `unix_write` in a one-way
//! stream the writer sleeps while the socket's send buffer is full
//! ([`SndBuf`]); otherwise the sender never blocks.
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
use std::cell::Cell;
use std::rc::Rc;

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
        P::opt_size(
            "unix_write",
            1,
            1 << 30,
            "if set: each message is one write() of this many bytes to an AF_UNIX stream socket, its pages those Linux 6.6 unix_stream_sendmsg() and alloc_skb_with_frags() allocate (blocks_per_message and high_order_pct unused)",
        ),
        P::choice(
            "placement",
            "packed",
            &["packed", "spread"],
            "packed: pair i on CPUs 2i and 2i+1; spread: pairs dealt round-robin to the nodes, each pair on two CPUs of its node",
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

/// Bytes of a page.
const PAGE: u64 = mm::PAGE_SIZE;
/// Linux 6.6 `SKB_MAX_HEAD(0)`: the linear part an skb's head keeps in one
/// page, a page less the cache-aligned `struct skb_shared_info` (320 bytes
/// on x86-64 with `MAX_SKB_FRAGS` = 17). That part is `kmalloc()`ed (slab),
/// not taken from the page allocator.
const SKB_MAX_HEAD0: u64 = PAGE - 320;
/// Linux 6.6 `UNIX_SKB_FRAGS_SZ` (`PAGE_SIZE << get_order(32768)`): the
/// most page-fragment bytes one AF_UNIX stream skb carries.
const UNIX_SKB_FRAGS_SZ: u64 = 32 * 1024;
/// `sk_sndbuf` of a socket nobody resized: `net.core.wmem_default`, 212 992
/// on x86-64 (this host's `/proc/sys/net/core/wmem_default`); lmbench3's
/// `bw_unix` does not set `SO_SNDBUF`.
const SK_SNDBUF: u64 = 212_992;

/// The orders of the page allocations one `write()` of `len` bytes makes
/// on an AF_UNIX stream socket, in the order they are made (and freed:
/// `skb_release_data()` puts the fragments in index order, skb by skb).
///
/// Models Linux 6.6 `unix_stream_sendmsg()`: the write is cut into skbs of
/// at most half the send buffer and at most `SKB_MAX_HEAD(0)` +
/// `UNIX_SKB_FRAGS_SZ` bytes; what does not fit the head goes into page
/// fragments, page-aligned, which `alloc_skb_with_frags()` (after 6.6's
/// 09c2c90705bb) takes with `max_page_order` = `get_order(UNIX_SKB_FRAGS_SZ)`
/// = 3: each fragment of the largest order not above what is left. A
/// 64 KiB write (lmbench3's `XFERSIZE`) is then one order-3 fragment and
/// one each of orders 2, 1 and 0. Deviation: a failed high-order attempt's
/// retry one order lower is not modelled (the workload goes on without
/// the block).
pub fn unix_stream_write_orders(len: u64) -> Vec<u8> {
    let max_size = unix_stream_max_skb();
    let max_order = (UNIX_SKB_FRAGS_SZ / PAGE).trailing_zeros() as u8;
    let mut orders = Vec::new();
    let mut sent = 0;
    while sent < len {
        let size = (len - sent).min(max_size);
        let mut data_len = size
            .saturating_sub(SKB_MAX_HEAD0)
            .next_multiple_of(PAGE)
            .min(size);
        let mut order = max_order;
        while data_len > 0 {
            while order > 0 && data_len.next_multiple_of(PAGE) < PAGE << order {
                order -= 1;
            }
            orders.push(order);
            data_len -= data_len.min(PAGE << order);
        }
        sent += size;
    }
    orders
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
    let unix_write = a.opt_size("unix_write")?;
    let layout: Option<Vec<u8>> = unix_write.map(unix_stream_write_orders);
    let truesize = unix_write.map_or(0, unix_stream_truesize);
    let spread = a.choice("placement")? == "spread";
    let mut tasks = Vec::new();
    for i in 0..pairs {
        let (a, b) = pair_cpus(m, i, spread);
        // A one-way AF_UNIX stream: the send buffer bounds what is in flight.
        let sndbuf = (unix_write.is_some() && !sp.pingpong).then(|| {
            Rc::new(SndBuf {
                wmem: Cell::new(0),
                waiting: Cell::new(false),
            })
        });
        let sock = Sock {
            layout: layout.clone(),
            sndbuf,
            truesize,
        };
        tasks.push(TaskSpec::new(
            Box::new(Side::new(sp, sock.clone(), a, b, true)),
            mm::VcpuId(a % nr_cpus),
        ));
        tasks.push(TaskSpec::new(
            Box::new(Side::new(sp, sock, b, a, false)),
            mm::VcpuId(b % nr_cpus),
        ));
    }
    Ok(tasks)
}

/// The CPUs of pair `i`: `2i` and `2i + 1`, or with `spread` the next two
/// CPUs of node `i mod nodes` (CPUs are numbered node by node).
fn pair_cpus(m: &sim::Machine, i: u32, spread: bool) -> (u32, u32) {
    if !spread {
        return (2 * i, 2 * i + 1);
    }
    let node = i as usize % m.nodes.len();
    let first: u32 = m.nodes[..node].iter().map(|n| n.cpus).sum();
    let per = m.nodes[node].cpus.max(2);
    let k = i / m.nodes.len() as u32;
    (first + (2 * k) % per, first + (2 * k + 1) % per)
}

/// The most bytes one skb of `unix_stream_sendmsg()` carries.
fn unix_stream_max_skb() -> u64 {
    (SK_SNDBUF / 2 - 64).min(SKB_MAX_HEAD0 + UNIX_SKB_FRAGS_SZ)
}

/// `SKB_TRUESIZE()` of an skb whose head is a 4 KiB `kmalloc()`: the head's
/// `SKB_MAX_HEAD(0)` bytes, the aligned `struct sk_buff` (256 bytes) and
/// `struct skb_shared_info` (320).
const SKB_TRUESIZE_HEAD: u64 = SKB_MAX_HEAD0 + 256 + 320;

/// What one `write()` of `len` bytes charges to the socket's
/// `sk_wmem_alloc`: its fragment pages and each skb's head truesize (every
/// head counted as a 4 KiB one: an upper bound; a short last skb's head is
/// a smaller `kmalloc()`).
pub fn unix_stream_truesize(len: u64) -> u64 {
    let pages: u64 = unix_stream_write_orders(len)
        .iter()
        .map(|&o| PAGE << o)
        .sum();
    pages + len.div_ceil(unix_stream_max_skb()) * SKB_TRUESIZE_HEAD
}

/// An AF_UNIX stream socket's send-buffer accounting, shared by a pair's
/// writer and reader: `sock_alloc_send_pskb()` makes the writer sleep while
/// `sk_wmem_alloc` is at `sk_sndbuf` or above, and the reader's frees wake
/// it (`sock_wfree()` → `unix_write_space()`) only once a quarter of the
/// buffer or less is still in flight (`unix_writable()`). Deviation: the
/// writer checks before each write, not before each skb, and its wake-up
/// costs no time.
struct SndBuf {
    /// `sk_wmem_alloc`: truesize of the writes sent and not yet freed.
    wmem: Cell<u64>,
    /// The writer sleeps for buffer space.
    waiting: Cell<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The writer sleeps until the reader frees enough of the send buffer.
    WaitSpace,
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

/// With `unix_write`: what a pair's socket adds to its messages.
#[derive(Clone)]
struct Sock {
    /// The orders of each message's blocks.
    layout: Option<Vec<u8>>,
    /// The send buffer (a one-way stream only).
    sndbuf: Option<Rc<SndBuf>>,
    /// A message's `sk_wmem_alloc` charge.
    truesize: u64,
}

/// One side of a pair.
struct Side {
    p: StreamParams,
    sock: Sock,
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
    fn new(p: StreamParams, sock: Sock, me: u32, peer: u32, first: bool) -> Side {
        // In a one-way stream the first side only sends and the second only
        // receives; in a ping-pong both do both, the first one starting.
        Side {
            p,
            sock,
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

    /// The order of the message's next block, or `None` when it has all
    /// its blocks: the `unix_write` layout's, or `blocks_per_message`
    /// blocks of order 0 or (`high_order_pct` %) 1-3.
    fn next_order(&self, rng: &mut Rng) -> Option<u8> {
        let i = self.nr_tried as usize;
        if let Some(layout) = &self.sock.layout {
            return layout.get(i).copied();
        }
        if self.nr_tried == self.p.blocks {
            return None;
        }
        Some(if rng.percent(self.p.high_order_pct) {
            1 + rng.below(3) as u8
        } else {
            0
        })
    }

    /// The writer, about to build a message: sleeps (waits on its own
    /// channel) if the send buffer is full.
    fn wait_for_space(&mut self) -> Option<Op> {
        let sb = self.sock.sndbuf.as_ref()?;
        if self.nr_tried > 0 || sb.wmem.get() < SK_SNDBUF {
            return None;
        }
        sb.waiting.set(true);
        self.phase = Phase::WaitSpace;
        Some(Op::Recv { chan: self.me })
    }

    /// The reader, having freed a message: its truesize leaves the send
    /// buffer, and a sleeping writer is woken once a quarter of the buffer
    /// or less is in flight (an empty message on the writer's channel).
    fn release_space(&mut self) -> Option<Op> {
        let sb = self.sock.sndbuf.as_ref()?;
        sb.wmem
            .set(sb.wmem.get().saturating_sub(self.sock.truesize));
        if !sb.waiting.get() || sb.wmem.get() * 4 > SK_SNDBUF {
            return None;
        }
        sb.waiting.set(false);
        Some(Op::Send {
            chan: self.peer,
            blocks: Vec::new(),
        })
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
            OpResult::Received(b) => {
                // Freed in the order they were allocated (skb by skb, each
                // skb's fragments in index order): popped from the end.
                self.rx = b;
                self.rx.reverse();
            }
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
                    if let Some(op) = self.wait_for_space() {
                        return Some(op);
                    }
                    if let Some(order) = self.next_order(rng) {
                        self.nr_tried += 1;
                        self.order = order;
                        // Socket buffers are unmovable kernel memory.
                        return Some(Op::AllocPages {
                            gfp: Gfp::KERNEL,
                            order,
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
                Phase::WaitSpace => self.phase = Phase::Alloc,
                Phase::Send => {
                    if let Some(sb) = &self.sock.sndbuf {
                        sb.wmem.set(sb.wmem.get() + self.sock.truesize);
                    }
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
                    if let Some(op) = self.release_space() {
                        return Some(op);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_machine as machine;
    use sim::Rng;

    /// lmbench3's 64 KiB write: a 35.7 KiB skb (3 776 bytes in its head,
    /// one order-3 fragment) and a 28.3 KiB one (28 KiB of fragments:
    /// orders 2, 1 and 0), 15 pages in all.
    #[test]
    fn a_64k_unix_write_is_one_block_of_each_order_3_to_0() {
        assert_eq!(unix_stream_write_orders(64 * 1024), vec![3, 2, 1, 0]);
    }

    /// What fits in an skb's head takes no page: a write of up to 3 776
    /// bytes allocates nothing, one a page larger takes one page.
    #[test]
    fn a_small_unix_write_stays_in_the_skb_head() {
        assert!(unix_stream_write_orders(SKB_MAX_HEAD0).is_empty());
        assert_eq!(unix_stream_write_orders(SKB_MAX_HEAD0 + PAGE), vec![0]);
        // Two full skbs: an order-3 fragment each.
        let two = 2 * (SKB_MAX_HEAD0 + UNIX_SKB_FRAGS_SZ);
        assert_eq!(unix_stream_write_orders(two), vec![3, 3]);
    }

    /// A 64 KiB write charges its 15 pages and two skb heads.
    #[test]
    fn a_64k_unix_write_charges_its_pages_and_two_heads() {
        assert_eq!(unix_stream_truesize(64 * 1024), 15 * PAGE + 2 * 4352);
    }

    /// Runs `side` until it asks for something other than an allocation,
    /// answering each allocation with a fresh pfn.
    fn until_not_alloc(side: &mut Side, mut last: OpResult, rng: &mut Rng) -> Option<Op> {
        let mut pfn = 0;
        loop {
            match side.next(last, rng) {
                Some(Op::AllocPages { order, .. }) => {
                    pfn += 1 << order;
                    last = OpResult::Alloc(Ok(mm::Pfn(pfn)));
                }
                op => return op,
            }
        }
    }

    /// The writer of a one-way 64 KiB stream sends four writes (70 144
    /// bytes of truesize each: the fourth starts at 210 432, under the
    /// 212 992-byte buffer) and then sleeps; the reader wakes it only when
    /// it has freed all four (three leave 70 144 in flight, above a
    /// quarter of the buffer).
    #[test]
    fn a_full_send_buffer_puts_the_writer_to_sleep_until_the_reader_frees() {
        let p = StreamParams {
            messages: 10,
            blocks: 4,
            high_order_pct: 0,
            work_ns: 0,
            mbps: 0,
            recv_copy_mbps: 0,
            pingpong: false,
        };
        let sock = Sock {
            layout: Some(unix_stream_write_orders(64 * 1024)),
            sndbuf: Some(Rc::new(SndBuf {
                wmem: Cell::new(0),
                waiting: Cell::new(false),
            })),
            truesize: unix_stream_truesize(64 * 1024),
        };
        let mut rng = Rng::stream(1, 0);
        let mut writer = Side::new(p, sock.clone(), 0, 1, true);
        let mut reader = Side::new(p, sock, 1, 0, false);
        let mut sent = Vec::new();
        let mut last = OpResult::Start;
        let sleep = loop {
            match until_not_alloc(&mut writer, last, &mut rng) {
                Some(Op::Send { chan: 1, blocks }) => sent.push(blocks),
                op => break op,
            }
            last = OpResult::Done;
        };
        assert_eq!(sent.len(), 4);
        assert!(matches!(sleep, Some(Op::Recv { chan: 0 })), "{sleep:?}");
        assert!(matches!(
            reader.next(OpResult::Start, &mut rng),
            Some(Op::Recv { chan: 1 })
        ));
        for (i, msg) in sent.into_iter().enumerate() {
            let mut op = reader.next(OpResult::Received(msg), &mut rng);
            while let Some(Op::FreePages { .. }) = op {
                op = reader.next(OpResult::Done, &mut rng);
            }
            if i < 3 {
                assert!(matches!(op, Some(Op::Recv { chan: 1 })), "{i}: {op:?}");
            } else {
                let wake =
                    matches!(op, Some(Op::Send { chan: 0, ref blocks }) if blocks.is_empty());
                assert!(wake, "{op:?}");
            }
        }
    }

    /// `packed` fills node 0 first; `spread` deals the pairs to the nodes
    /// in turn, each pair's two CPUs on one node.
    #[test]
    fn spread_pairs_alternate_nodes() {
        let m = machine(2, 8);
        let packed: Vec<_> = (0..4).map(|i| pair_cpus(&m, i, false)).collect();
        assert_eq!(packed, vec![(0, 1), (2, 3), (4, 5), (6, 7)]);
        let spread: Vec<_> = (0..4).map(|i| pair_cpus(&m, i, true)).collect();
        assert_eq!(spread, vec![(0, 1), (8, 9), (2, 3), (10, 11)]);
    }
}
