//! Seed 004's Speedometer memory as the series' author sampled it: a
//! renderer heap whose anonymous memory sits in 64K, 32K, 16K and 4K
//! folio "buckets" under v1's order selection in given shares, the 64K
//! part static and the rest unmapped and re-faulted run after run.
//!
//! # What the seed says, and how its mix is read
//!
//! The v2 cover letter (seed 004) says that under v1 "significant
//! quantities of memory" could not go in the 64K bucket and went to the
//! 32K and 16K buckets, that under the simple order "that memory ended up
//! using the 4K bucket, so page faults increased by 2.75x compared to the
//! v1 patch", and that the simple order's faults were "still a bit lower
//! than the baseline" because of the 64K bucket. The mix itself (64K 25 %,
//! 32K 15 %, 16K 15 %, 4K 45 %) is in the author's reply in the same thread
//! (Ryan Roberts, 4 July 2023, Message-ID
//! `<467afd30-c85a-8b9d-97b9-a9ef9d0983af@arm.com>`, quoted in full in Yin
//! Fengwei's answer `<449183bd-76ef-2a3a-c3f5-0478a7c574ef@intel.com>`):
//! "I've sampled the memory in each bucket (once per second) while
//! running". In the same message he suspects "Chromium is doing mmap/munmap
//! in ways that mean when we fault, order-4 is often too big to fit in the
//! VMA", that "there is lots of mmap/unmap for the smaller sizes and the
//! 64K contents is more static".
//!
//! The mix is therefore read as **bytes resident, sampled over time** — the
//! author's words are "the memory in each bucket", sampled once a second,
//! which is a snapshot of what is mapped, not a count of faults — and this
//! workload keeps those shares resident. Read that way, how many faults each
//! bucket makes depends on how often its memory is unmapped and faulted
//! again, which the seed describes only in words: the 64K memory is "more
//! static" and the smaller sizes see "lots of mmap/unmap". The seed's own
//! "still a bit lower than the baseline" agrees with this reading and not
//! with a count reading: counted as faults, the mix would put 64 % of the
//! bytes in 64K folios and the simple order at 40 % of the baseline's
//! faults, not "a bit lower"; read as resident bytes with the 64K memory
//! static, the simple order makes about as many faults as the baseline.
//! (The 2.75× is the headline this workload is judged by, so it was not
//! used to choose the reading.)
//!
//! The count reading is run too, as a companion that is not the headline
//! (`experiments/large-anon-folios-order-mix.toml`, workload
//! `speedometer-mix-as-fault-counts`): each bucket's bytes are its share
//! times its folio size (64 / 19 / 10 / 7 % of bytes for 25 / 15 / 15 /
//! 45 % of v1's faults) and nothing is re-faulted. It gives the simple
//! order 2.52× v1's faults and the 4 KiB baseline 6.3×, which is the
//! contradiction with "a bit lower than the baseline" above.
//!
//! # What it models
//!
//! One renderer process reserves an arena (`mmap`, over-mapped and trimmed
//! to 64 KiB alignment, then `PROT_NONE`, as PartitionAlloc and V8 reserve
//! address space inaccessible and commit it with `mprotect()`), and commits
//! regions in it, each its own VMA so that v1's order selection puts it in
//! one bucket, which is how the author's "order-4 is often too big to fit
//! in the VMA" comes about:
//!
//! ```text
//!  64K bucket: |RRRRRRRRRRRRRRRR|RRRR...   64 KiB regions, 64 KiB aligned
//!  32K bucket: |--------RRRRRRRR|          32 KiB region in a 64 KiB slot
//!  16K bucket: |----RRRR|                  16 KiB region in a 32 KiB slot
//!   4K bucket: |-R|                        one page in an 8 KiB slot
//!              (R: committed read-write, -: PROT_NONE; one char 4 KiB)
//! ```
//!
//! Each region is written in full when committed, followed by
//! `work_per_page_ns` per page. Between runs a random `churn_pct` of the
//! 32K, 16K and 4K regions (and `churn_64k_pct` of the 64K ones) are
//! decommitted — `MADV_DONTNEED` and `PROT_NONE`, as PartitionAlloc's
//! `DecommitSystemPages()` — and committed and written again in the next
//! run.
//!
//! # Where the parameters come from
//!
//! - `mix_64k_pct` … `mix_4k_pct` (25 / 15 / 15 / 45): the author's sample,
//!   read as resident bytes (above).
//! - `churn_64k_pct` = 0: the author's "the 64K contents is more static".
//!   With the other buckets churned at one rate, the simple order's fault
//!   ratio to v1 is 1.47× (64K churned as often as the rest) to 1.48× (64K
//!   never churned): the figure hardly depends on it.
//! - `churn_pct` = 50 (estimate; the `speedometer` workload's "half freed
//!   per run"): one rate for the 32K, 16K and 4K buckets, as nothing in the
//!   seed tells them apart. Over many runs the fault ratio does not depend
//!   on it; only the first run's faults dilute it.
//! - `heap_kib` = 16 MiB resident (estimate; a renderer holds more, but the
//!   ratios do not depend on the size) and `runs` = 20.
//! - `work_per_page_ns` = 49 µs, as `speedometer` (an estimate; it sets
//!   user time only).
//!
//! Deviations: each bucket's memory is one region size (32 KiB, 16 KiB,
//! 4 KiB) where Chromium's regions are of many sizes whose pieces fall in
//! those buckets; the heap's other threads and processes are not modelled.

use crate::params::{Args, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::mprotect::Prot;
use mm::types::PAGE_SIZE;
use mm::vma::{Advice, MapFlags};
use sim::{Op, OpResult, Program, Rng, TaskSpec};
use std::collections::VecDeque;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "folio-buckets",
    summary:
        "seed 004's Speedometer memory as its author sampled it: resident shares in 64K/32K/16K/4K \
              buckets under v1, the 64K part static, the rest decommitted and re-faulted each run",
    params: &[
        P::int(
            "mix_64k_pct",
            N(25),
            0,
            N(100),
            "resident bytes in 64 KiB regions, %",
        ),
        P::int(
            "mix_32k_pct",
            N(15),
            0,
            N(100),
            "resident bytes in 32 KiB regions, %",
        ),
        P::int(
            "mix_16k_pct",
            N(15),
            0,
            N(100),
            "resident bytes in 16 KiB regions, %",
        ),
        P::int(
            "mix_4k_pct",
            N(45),
            0,
            N(100),
            "resident bytes in 4 KiB regions, %",
        ),
        P::int(
            "churn_pct",
            N(50),
            0,
            N(100),
            "32K, 16K and 4K regions decommitted and re-faulted per run, % (estimate)",
        ),
        P::int(
            "churn_64k_pct",
            N(0),
            0,
            N(100),
            "64K regions decommitted and re-faulted per run, % (seed: \"more static\")",
        ),
        P::int(
            "heap_kib",
            N(16 << 10),
            64,
            N(1 << 24),
            "resident heap, KiB (estimate)",
        ),
        P::int("runs", N(20), 1, N(100_000), "benchmark runs"),
        P::int(
            "work_per_page_ns",
            N(49_000),
            0,
            N(1_000_000_000),
            "computation per page written (estimate, as speedometer)",
        ),
    ],
    build,
    nr_runs: Some(nr_runs),
};

/// The buckets: region size and the slot it sits in (the slot's head is
/// left `PROT_NONE`, so the region is a VMA of its own at an alignment
/// that allows no larger folio).
const BUCKETS: [(&str, u64, u64); 4] = [
    ("mix_64k_pct", 64 << 10, 64 << 10),
    ("mix_32k_pct", 32 << 10, 64 << 10),
    ("mix_16k_pct", 16 << 10, 32 << 10),
    ("mix_4k_pct", 4 << 10, 8 << 10),
];
const ALIGN: u64 = 64 << 10;

#[derive(Clone, Copy, Debug)]
struct Config {
    /// Regions per bucket.
    nr: [u64; 4],
    churn_pct: u32,
    churn_64k_pct: u32,
    runs: u32,
    work_per_page_ns: u64,
}

fn config(a: &Args) -> Result<Config, ParamError> {
    let mut pct = [0u64; 4];
    for (i, (name, _, _)) in BUCKETS.iter().enumerate() {
        pct[i] = a.int(name)? as u64;
    }
    let sum: u64 = pct.iter().sum();
    if sum != 100 {
        return Err(ParamError::Invalid {
            name: "mix_4k_pct",
            expected: format!("mix_64k_pct .. mix_4k_pct summing to 100 (they sum to {sum})"),
        });
    }
    let heap = a.int("heap_kib")? as u64 * 1024;
    let mut nr = [0u64; 4];
    for (i, &(_, size, _)) in BUCKETS.iter().enumerate() {
        nr[i] = heap * pct[i] / 100 / size;
    }
    Ok(Config {
        nr,
        churn_pct: a.int("churn_pct")? as u32,
        churn_64k_pct: a.int("churn_64k_pct")? as u32,
        runs: a.int("runs")? as u32,
        work_per_page_ns: a.int("work_per_page_ns")? as u64,
    })
}

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let c = config(a)?;
    Ok(vec![TaskSpec::new(
        Box::new(Buckets::new(c)),
        mm::VcpuId(0),
    )])
}

fn nr_runs(a: &Args) -> Result<u64, ParamError> {
    Ok(a.int("runs")? as u64)
}

/// One committed region: address, length, bucket index.
#[derive(Clone, Copy, Debug)]
struct Region {
    addr: u64,
    len: u64,
    bucket: usize,
}

/// The renderer.
pub struct Buckets {
    c: Config,
    /// Every region; `committed[i]` says whether region i is read-write now.
    regions: Vec<Region>,
    committed: Vec<bool>,
    run: u32,
    pending: VecDeque<Op>,
    reserved: bool,
    laid_out: bool,
    done: bool,
}

impl Buckets {
    fn new(c: Config) -> Buckets {
        Buckets {
            c,
            regions: Vec::new(),
            committed: Vec::new(),
            run: 0,
            pending: VecDeque::new(),
            reserved: false,
            laid_out: false,
            done: false,
        }
    }

    /// Bytes the arena spans: every bucket's slots.
    fn arena_len(&self) -> u64 {
        BUCKETS
            .iter()
            .zip(self.c.nr)
            .map(|(&(_, _, slot), n)| n * slot)
            .sum::<u64>()
            .next_multiple_of(ALIGN)
    }

    /// Lays the regions out in the arena at `base` (64 KiB aligned): each
    /// region at the end of its slot.
    fn lay_out(&mut self, base: u64) {
        let mut at = base;
        for (b, &(_, size, slot)) in BUCKETS.iter().enumerate() {
            for _ in 0..self.c.nr[b] {
                self.regions.push(Region {
                    addr: at + slot - size,
                    len: size,
                    bucket: b,
                });
                at += slot;
            }
        }
        self.committed = vec![false; self.regions.len()];
    }

    /// `mprotect(RW)` and a write of every page of region `i`.
    fn commit(&mut self, i: usize) {
        let r = self.regions[i];
        self.committed[i] = true;
        self.pending.push_back(Op::Mprotect {
            addr: r.addr,
            len: r.len,
            prot: Prot::RW,
        });
        self.pending.push_back(Op::Touch {
            bytes: 1,
            addr: r.addr,
            len: r.len,
            stride: PAGE_SIZE,
            write: true,
        });
        if self.c.work_per_page_ns > 0 {
            self.pending.push_back(Op::Compute {
                ns: r.len / PAGE_SIZE * self.c.work_per_page_ns,
            });
        }
    }

    /// `MADV_DONTNEED` and `PROT_NONE` on region `i`.
    fn decommit(&mut self, i: usize) {
        let r = self.regions[i];
        self.committed[i] = false;
        self.pending.push_back(Op::Madvise {
            addr: r.addr,
            len: r.len,
            advice: Advice::DontNeed,
        });
        self.pending.push_back(Op::Mprotect {
            addr: r.addr,
            len: r.len,
            prot: Prot::NONE,
        });
    }

    /// The end of a run: the churned regions decommitted; then the next
    /// run commits and writes every region that is not committed.
    fn next_run(&mut self, rng: &mut Rng) {
        for i in 0..self.regions.len() {
            let pct = if self.regions[i].bucket == 0 {
                self.c.churn_64k_pct
            } else {
                self.c.churn_pct
            };
            if rng.percent(pct) {
                self.decommit(i);
            }
        }
        for i in 0..self.regions.len() {
            if !self.committed[i] {
                self.commit(i);
            }
        }
    }
}

impl Program for Buckets {
    fn next(&mut self, last: OpResult, rng: &mut Rng) -> Option<Op> {
        if !self.reserved {
            self.reserved = true;
            return Some(Op::Mmap {
                len: self.arena_len() + ALIGN - PAGE_SIZE,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            });
        }
        if !self.laid_out {
            self.laid_out = true;
            let OpResult::Mapped(Ok(a)) = last else {
                self.done = true;
                return Some(Op::Exit);
            };
            let len = self.arena_len();
            let base = a.next_multiple_of(ALIGN);
            let end = a + len + ALIGN - PAGE_SIZE;
            if base > a {
                self.pending.push_back(Op::Munmap {
                    addr: a,
                    len: base - a,
                });
            }
            if base + len < end {
                self.pending.push_back(Op::Munmap {
                    addr: base + len,
                    len: end - base - len,
                });
            }
            self.pending.push_back(Op::Mprotect {
                addr: base,
                len,
                prot: Prot::NONE,
            });
            self.lay_out(base);
            for i in 0..self.regions.len() {
                self.commit(i);
            }
        }
        loop {
            if let Some(op) = self.pending.pop_front() {
                return Some(op);
            }
            if self.done {
                return None;
            }
            self.run += 1;
            if self.run >= self.c.runs {
                self.done = true;
                return Some(Op::Exit);
            }
            self.next_run(rng);
        }
    }
}
