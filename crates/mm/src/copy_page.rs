//! Copying a migrating folio's data: the seed's `mm/copy_page.c` (Zi Yan,
//! "Parallel hugepage migration optimization", 2016, never merged) and the
//! copy engines that followed it, as a bandwidth model.
//!
//! # The engines
//!
//! - [`CopyEngine::Single`]: `folio_copy()` of every kernel since 4.x, one
//!   `copy_page()` per base page on the migrating CPU. The baseline.
//! - [`CopyEngine::Mt`]: the seed's `copy_page_mt()`. `N = min(limit, CPUs
//!   of the destination node)` rounded down to an even number; the folio is
//!   cut into `N` contiguous byte ranges and one work item per range is
//!   queued on a high-priority workqueue bound to the first `N` CPUs of the
//!   destination node; the caller waits for all of them. With `N = 0` (a
//!   node of one CPU) it falls back to the single-threaded copy. Only huge
//!   pages use it (the seed measured no gain for base pages). `limit` is
//!   `vm.limit_mt_num` of the 2019 follow-up (default 4, the seed's
//!   hard-coded value).
//! - [`CopyEngine::Adaptive`]: beyond the seed, an answer to its two open
//!   questions (a fixed thread count; threads landing on SMT siblings): the
//!   thread count is chosen per copy by minimizing this module's own cost
//!   prediction over the destination node's *idle* CPUs, taking distinct
//!   physical cores first and their SMT siblings only after.
//! - [`CopyEngine::Batched`]: the 2024–25 series (Shivank Garg et al.,
//!   `folios_mc_copy()` with the `mtcopy` migrator): the move phase first
//!   moves every folio's metadata, then copies the whole batch at once with
//!   `limit` threads, so the dispatch and wake-up costs are paid once per
//!   batch rather than once per folio; then the mappings are restored.
//! - [`CopyEngine::Dma`]: the same batch handed to a DMA engine (the 2019
//!   RFC's IOAT copy, the 2025 series' `dcbm` migrator): one descriptor per
//!   folio (a folio is split over the channels when the batch has fewer
//!   folios than channels), a submission cost per descriptor on the CPU,
//!   the channels' bandwidth, and a completion cost. A machine without DMA
//!   channels falls back to the CPU copy.
//!
//! # The bandwidth model
//!
//! One thread copying from node `s` to node `d` on a CPU of node `c` is bound
//! by the memory-level parallelism of one core: with the profile's
//! `line_fill_buffers` it keeps that many misses in flight, and each 64 bytes
//! copied are two misses (the source line, and the destination line read for
//! ownership), one at each node's measured latency from `c`
//! (`dram_local_ns`, `dram_remote_ns`), so it runs at
//! `lfb × 64 / (lat(c, s) + lat(c, d))`. A profile without line fill buffers
//! falls back to `thread_copy_mbps × 10 / max(distance(c, s), distance(c, d))`
//! (the ACPI SLIT distance as a latency ratio, local = 10). Two
//! threads on one physical core share it: together they reach
//! `smt_pair_pct` % of one thread. Several threads together are capped by
//! the interconnect (`link_mbps`, when `s != d`) and by each node's memory
//! bandwidth (`node_mbps`; a copy within one node reads and writes it).
//! The bytes are split evenly, so the slowest thread sets the time.
//!
//! # The link's traffic
//!
//! `link_mbps` is the sustained rate of one node reading another's memory
//! (a measured remote-read bandwidth): each 64-byte line crosses the link
//! as one data packet of `link_data_flits` flits. A copy puts more on the
//! link than the lines it reads remotely: with the profile's
//! `link_data_flits` and `link_snoop_flits` given, every line copied by a
//! thread on node `c` costs, per direction of each link,
//!
//! - a source line on another node: a data packet `s -> c`;
//! - a destination line on another node: its read-for-ownership, a data
//!   packet `d -> c`, and its later write-back, a data packet `c -> d`;
//! - a line homed on `c` itself (the source read of a copy on the source
//!   node, the destination of a copy on the destination node): under a
//!   source-snooping protocol (Intel's Early Snoop) the miss is snooped on
//!   every other node, whose response (`link_snoop_flits`) crosses back to
//!   `c`; with a home-snooping directory protocol that finds no remote
//!   copy, nothing (`link_snoop_flits = 0`).
//!
//! The busiest direction sets the time: its flits over a read stream's
//! `link_data_flits` per line, at `link_mbps`. Without the two keys the
//! link carries the copied bytes alone, as before.
//!
//! # Dispatch and wake-up
//!
//! A multi-threaded copy queues one work item per helper (`queue_work_on()`,
//! `workqueue_queue_ns` each), waits for the helpers to leave their idle
//! state, and is itself woken when the last item is done
//! (`workqueue_wakeup_ns`). An idle helper leaves a core idle state in
//! `workqueue_wakeup_ns`; but when every CPU of its package has idled past
//! the deepest state's target residency (`package_idle_residency_ns`; the
//! engine tells from the CPUs' last work, see `sim`'s
//! `Engine::packages_asleep`), the idle governor has put the package in
//! that state (package C6 on Intel), and the helpers wait for its exit
//! latency (`package_idle_exit_ns`) instead: the seed's `copy_page_mt()`
//! queues its work on the destination node, a socket with nothing else to
//! do. The helpers leave the state together, so the copy waits once; the
//! package is awake for the next copy of the same migration.
//!
//! Every parameter comes from the cost profile (its `[numa]` section and
//! its `*_ns` costs), with a source.
//!
//! # Deviations
//!
//! - The migrating vCPU is charged the whole latency (dispatch, the
//!   slowest thread, the waits) as busy time, as the time `move_pages()`
//!   takes, where the kernel sleeps in `flush_work()`. Each helper CPU
//!   gets its share of the copy as work of its own ([`CopyCost::helpers`],
//!   recorded with [`crate::cost::Cx::helper_work`]; the engine plays it
//!   there like a kworker, taking the CPU from whatever task runs on it at
//!   its next operation), but the caller's latency assumes that a busy
//!   helper CPU runs the work at once.
//! - No cache effects: every copy runs at memory speed.

use crate::cost::{Cost, CostTable};
use crate::page_alloc::PageAlloc;
use crate::types::{NodeId, VcpuId, PAGE_SIZE};
use std::fmt;

/// Which copy engine migration uses when the multi-threaded mode is on
/// (model knob `mmlab.migrate_copy_engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CopyEngine {
    /// One `copy_page()` per base page on the migrating CPU (mainline).
    Single,
    /// The seed's `copy_page_mt()`.
    Mt,
    /// Thread count and placement chosen per copy from the size, the idle
    /// CPUs and the node's bandwidth, on distinct physical cores first.
    Adaptive,
    /// The 2025 series' batched copy of a whole batch of folios.
    Batched,
    /// A DMA engine with channels, a set-up cost and a CPU fallback.
    Dma,
}

impl CopyEngine {
    /// Every engine.
    pub const ALL: &'static [CopyEngine] = &[
        CopyEngine::Single,
        CopyEngine::Mt,
        CopyEngine::Adaptive,
        CopyEngine::Batched,
        CopyEngine::Dma,
    ];

    /// The knob value.
    pub fn name(self) -> &'static str {
        match self {
            CopyEngine::Single => "single",
            CopyEngine::Mt => "mt",
            CopyEngine::Adaptive => "adaptive",
            CopyEngine::Batched => "batched",
            CopyEngine::Dma => "dma",
        }
    }

    /// The engine whose knob value is `s`.
    pub fn parse(s: &str) -> Option<CopyEngine> {
        CopyEngine::ALL.iter().copied().find(|e| e.name() == s)
    }

    /// True for the engines that copy a whole batch at once.
    pub fn is_batch(self) -> bool {
        matches!(self, CopyEngine::Batched | CopyEngine::Dma)
    }
}

impl fmt::Display for CopyEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The machine's memory system as the copy model sees it. Bandwidths in
/// MB/s (10^6 bytes per second); integers so the model keeps no floats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaHw {
    /// Copy rate of one thread within its own node.
    pub thread_copy_mbps: u64,
    /// Hardware threads per physical core (SMT).
    pub threads_per_core: u32,
    /// Two SMT siblings copying together, in % of one thread alone.
    pub smt_pair_pct: u64,
    /// Memory bandwidth of one node.
    pub node_mbps: u64,
    /// Bandwidth between two nodes, one direction.
    pub link_mbps: u64,
    /// DMA channels usable for copies (0: none, CPU fallback).
    pub dma_channels: u32,
    /// Copy rate of one DMA channel.
    pub dma_channel_mbps: u64,
    /// Line fill buffers of one core (0: not given; the thread rate is then
    /// `thread_copy_mbps` scaled by the SLIT distance).
    pub line_fill_buffers: u32,
    /// Flits of one line's data packet on the link (0: not given; the link
    /// then carries the copied bytes alone).
    pub link_data_flits: u32,
    /// Flits of the snoop response a miss on a line homed on the copying
    /// CPU's own node sends back over the link (0: home snooping with a
    /// directory, or not given).
    pub link_snoop_flits: u32,
    /// Exit latency of the idle state a package whose every CPU has been
    /// idle reaches (package C6 on Intel), paid by the first work item
    /// queued there (0: not given; every wake-up then costs
    /// `workqueue_wakeup_ns`).
    pub package_idle_exit_ns: u64,
    /// How long every CPU of a package must have been idle for it to be in
    /// that state: the state's target residency, which the idle governor
    /// requires before it picks the state.
    pub package_idle_residency_ns: u64,
}

impl NumaHw {
    /// A machine described only by its cost table: the thread rate from
    /// `copy_page_ns`, no SMT, no bandwidth caps, no DMA.
    pub fn from_costs(costs: &CostTable) -> NumaHw {
        NumaHw {
            thread_copy_mbps: mbps_of_copy_page(costs.get(Cost::CopyPage)),
            threads_per_core: 1,
            smt_pair_pct: 100,
            node_mbps: u64::MAX / 4096,
            link_mbps: u64::MAX / 4096,
            dma_channels: 0,
            dma_channel_mbps: 0,
            line_fill_buffers: 0,
            link_data_flits: 0,
            link_snoop_flits: 0,
            package_idle_exit_ns: 0,
            package_idle_residency_ns: 0,
        }
    }
}

/// The copy rate, in MB/s, of a thread that copies 4 KiB in `ns`.
pub fn mbps_of_copy_page(ns: u64) -> u64 {
    (PAGE_SIZE * 1000 / ns.max(1)).max(1)
}

/// Nanoseconds to move `bytes` at `mbps`.
#[inline]
pub fn ns_at(bytes: u64, mbps: u64) -> u64 {
    (bytes * 1000).div_ceil(mbps.max(1))
}

/// One folio's copy: how many bytes, from which node to which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyJob {
    /// Bytes to copy.
    pub bytes: u64,
    /// Node of the source folio.
    pub src: NodeId,
    /// Node of the destination folio.
    pub dst: NodeId,
}

/// What a copy cost and how it was done.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CopyCost {
    /// Nanoseconds on the migrating CPU's clock.
    pub ns: u64,
    /// Threads that copied (1: the migrating CPU alone; 0: DMA).
    pub threads: u32,
    /// True if a DMA engine copied.
    pub dma: bool,
    /// The CPUs whose work items copied (empty when the migrating CPU
    /// copied alone, or a DMA engine did).
    pub helpers: Vec<u32>,
    /// How long each helper was busy copying: the parallel copy phase
    /// (the bytes are split evenly, so all finish about together).
    pub helper_ns: u64,
}

/// The copy model over one machine: its topology (from the allocator),
/// its memory system, the costs, and which CPUs are idle.
pub struct CopyModel<'a> {
    /// The allocator (node distances, CPUs per node).
    pub pa: &'a PageAlloc,
    /// The memory system.
    pub hw: &'a NumaHw,
    /// The cost table.
    pub costs: &'a CostTable,
    /// Per CPU, true if it runs nothing (used by the adaptive engine).
    pub idle: &'a [bool],
    /// Per node, true if its package is in its deep idle state
    /// ([`NumaHw::package_idle_exit_ns`]): work queued there waits for it
    /// to leave that state.
    pub asleep: &'a [bool],
}

impl CopyModel<'_> {
    fn node_of(&self, cpu: u32) -> NodeId {
        self.pa.cpu_to_node(VcpuId(cpu))
    }

    /// The physical core of `cpu` within its node: CPUs are enumerated as
    /// Linux does on Intel servers, the first thread of every core first and
    /// the SMT siblings after, so node-local CPU `i` is on core
    /// `i % cores_per_node`.
    pub fn core_of(&self, cpu: u32) -> (NodeId, u32) {
        let node = self.node_of(cpu);
        let first = self.pa.node_first_cpu(node);
        let n = self.pa.node_nr_cpus(node);
        let cores = (n / self.hw.threads_per_core.max(1)).max(1);
        (node, (cpu - first) % cores)
    }

    /// The copy rate of one thread alone on a core of `cpu`, for `job`.
    ///
    /// With the core's line fill buffers given, by Little's law: a copy
    /// reads each source line and reads-for-ownership the destination line
    /// (ordinary stores allocate), so every 64 bytes copied are two misses,
    /// one at the source node's latency and one at the destination's
    /// (`dram_local_ns` or `dram_remote_ns` seen from `cpu`), and the core
    /// keeps `line_fill_buffers` misses in flight:
    /// `lfb × 64 B ÷ (lat_src + lat_dst)`. Without them, `copy_page_ns`'s
    /// rate scaled by the SLIT distance (the firmware's latency ratio).
    pub fn thread_mbps(&self, cpu: u32, job: &CopyJob) -> u64 {
        let c = self.node_of(cpu);
        if self.hw.line_fill_buffers > 0 {
            let lat = |n: NodeId| {
                self.costs.get(if n == c {
                    Cost::DramLocal
                } else {
                    Cost::DramRemote
                })
            };
            let ns = (lat(job.src) + lat(job.dst)).max(1);
            return (self.hw.line_fill_buffers as u64 * 64 * 1000 / ns).max(1);
        }
        let d = self
            .pa
            .node_distance(c, job.src)
            .max(self.pa.node_distance(c, job.dst));
        (self.hw.thread_copy_mbps * 10 / d.max(10) as u64).max(1)
    }

    /// Nanoseconds for `threads` to copy `bytes` of `job`'s kind split
    /// evenly: the slowest thread, or the bandwidth caps, whichever binds.
    pub fn parallel_ns(&self, threads: &[u32], bytes: u64, job: &CopyJob) -> u64 {
        let n = threads.len().max(1) as u64;
        let chunk = bytes.div_ceil(n);
        let mut slowest = 0;
        for &t in threads {
            let core = self.core_of(t);
            let sharing = threads.iter().filter(|&&o| self.core_of(o) == core).count() as u64;
            let alone = self.thread_mbps(t, job);
            // k threads on one core reach 1 + (k-1)(pct-100)/100 of one.
            let core_mbps =
                alone * (100 + (sharing - 1) * self.hw.smt_pair_pct.saturating_sub(100)) / 100;
            let mine = (core_mbps / sharing).max(1);
            slowest = slowest.max(ns_at(chunk, mine));
        }
        let copier = threads.first().map(|&t| self.node_of(t));
        slowest.max(self.caps_ns(bytes, job, copier))
    }

    /// The time the interconnect and the nodes' memory need for `bytes`
    /// copied by CPUs of node `copier` (`None`: a DMA engine, whose reads
    /// and writes go to the two nodes directly).
    fn caps_ns(&self, bytes: u64, job: &CopyJob, copier: Option<NodeId>) -> u64 {
        if job.src == job.dst {
            return ns_at(2 * bytes, self.hw.node_mbps);
        }
        let node = ns_at(bytes, self.hw.node_mbps);
        match copier {
            Some(c) if self.hw.link_data_flits > 0 => {
                let flits = self.busiest_link_flits(c, job) as u64;
                let link_bytes = bytes * flits / self.hw.link_data_flits as u64;
                ns_at(link_bytes, self.hw.link_mbps).max(node)
            }
            _ => ns_at(bytes, self.hw.link_mbps).max(node),
        }
    }

    /// Flits per line copied on the busiest direction of any link, for a
    /// copy of `job` by a CPU of node `c` (see "The link's traffic").
    pub fn busiest_link_flits(&self, c: NodeId, job: &CopyJob) -> u32 {
        let data = self.hw.link_data_flits;
        let snoop = self.hw.link_snoop_flits;
        // (from, to) -> flits per line; a handful of entries.
        let mut dirs: Vec<((NodeId, NodeId), u32)> = Vec::new();
        let mut add = |from: NodeId, to: NodeId, f: u32| match dirs
            .iter_mut()
            .find(|(k, _)| *k == (from, to))
        {
            Some((_, v)) => *v += f,
            None => dirs.push(((from, to), f)),
        };
        let others: Vec<NodeId> = (0..self.pa.nr_nodes())
            .map(|n| NodeId(n as u16))
            .filter(|&n| n != c)
            .collect();
        for (home, is_dst) in [(job.src, false), (job.dst, true)] {
            if home != c {
                add(home, c, data);
                if is_dst {
                    add(c, home, data);
                }
            } else {
                for &o in &others {
                    add(o, c, snoop);
                }
            }
        }
        dirs.iter().map(|&(_, f)| f).max().unwrap_or(data).max(1)
    }

    /// Models `folio_copy()`: one `copy_page()` after another on `cpu`.
    pub fn copy_single(&self, cpu: VcpuId, job: &CopyJob) -> CopyCost {
        CopyCost {
            ns: self.parallel_ns(&[cpu.0], job.bytes, job),
            threads: 1,
            ..CopyCost::default()
        }
    }

    /// Dispatch to `threads` work items, the copy, and the waits: the
    /// caller's latency, with the helpers and their busy time.
    fn dispatched(&self, threads: &[u32], bytes: u64, job: &CopyJob) -> CopyCost {
        let n = threads.len() as u64;
        let copy = self.parallel_ns(threads, bytes, job);
        let wake = self.costs.get(Cost::WorkqueueWakeup);
        CopyCost {
            ns: n * self.costs.get(Cost::WorkqueueQueue)
                + self.helpers_wakeup_ns(threads)
                + wake
                + copy,
            threads: threads.len() as u32,
            dma: false,
            helpers: threads.to_vec(),
            helper_ns: copy,
        }
    }

    /// How long the slowest of `cpus` takes to start the work item queued
    /// on it: `workqueue_wakeup_ns` for a CPU that left a core idle state,
    /// or the package's exit latency when its whole package was asleep
    /// (the helpers wake together, so the slowest one counts).
    pub fn helpers_wakeup_ns(&self, cpus: &[u32]) -> u64 {
        let wake = self.costs.get(Cost::WorkqueueWakeup);
        let asleep = cpus
            .iter()
            .any(|&c| self.asleep.get(self.node_of(c).0 as usize) == Some(&true));
        if asleep && self.hw.package_idle_exit_ns > 0 {
            wake.max(self.hw.package_idle_exit_ns)
        } else {
            wake
        }
    }

    /// Models the seed's `copy_page_mt()`: `N = min(limit, CPUs of the
    /// destination node)` rounded down to even, on the first `N` CPUs of
    /// that node; falls back to [`CopyModel::copy_single`] when `N` is 0.
    pub fn copy_page_mt(&self, cpu: VcpuId, job: &CopyJob, limit_mt_num: u32) -> CopyCost {
        let node_cpus = self.pa.node_nr_cpus(job.dst);
        let n = limit_mt_num.min(node_cpus) / 2 * 2;
        if n == 0 {
            return self.copy_single(cpu, job);
        }
        let first = self.pa.node_first_cpu(job.dst);
        let threads: Vec<u32> = (first..first + n).collect();
        self.dispatched(&threads, job.bytes, job)
    }

    /// The destination node's idle CPUs other than `cpu`, distinct physical
    /// cores first (one thread of each), then their SMT siblings.
    pub fn idle_cpus_by_core(&self, cpu: VcpuId, node: NodeId) -> Vec<u32> {
        let first = self.pa.node_first_cpu(node);
        let n = self.pa.node_nr_cpus(node);
        let mut seen_cores: Vec<u32> = Vec::new();
        let (mut primary, mut siblings) = (Vec::new(), Vec::new());
        for c in first..first + n {
            if c == cpu.0 || !self.idle.get(c as usize).copied().unwrap_or(true) {
                continue;
            }
            let core = self.core_of(c).1;
            if seen_cores.contains(&core) {
                siblings.push(c);
            } else {
                seen_cores.push(core);
                primary.push(c);
            }
        }
        primary.extend(siblings);
        primary
    }

    /// The adaptive engine: for `bytes` of `job`, every thread count from 1
    /// (the migrating CPU alone, no dispatch) to all idle CPUs of the
    /// destination node is predicted with this model, and the fastest wins
    /// (the smallest count on a tie).
    pub fn copy_adaptive(&self, cpu: VcpuId, job: &CopyJob) -> CopyCost {
        let mut best = self.copy_single(cpu, job);
        let cands = self.idle_cpus_by_core(cpu, job.dst);
        for n in 2..=cands.len() {
            let c = self.dispatched(&cands[..n], job.bytes, job);
            if c.ns < best.ns {
                best = c;
            }
        }
        best
    }

    /// The 2025 series' batched copy with `mtcopy`: all of `jobs` at once
    /// on the first `min(limit, node CPUs)` CPUs of the destination node;
    /// with one thread, the single-threaded copy of each.
    pub fn copy_batch_mt(&self, cpu: VcpuId, jobs: &[CopyJob], limit_mt_num: u32) -> CopyCost {
        let Some(first_job) = jobs.first() else {
            return CopyCost::default();
        };
        let bytes: u64 = jobs.iter().map(|j| j.bytes).sum();
        let n = limit_mt_num.min(self.pa.node_nr_cpus(first_job.dst));
        if n <= 1 {
            let ns = jobs.iter().map(|j| self.copy_single(cpu, j).ns).sum();
            return CopyCost {
                ns,
                threads: 1,
                ..CopyCost::default()
            };
        }
        let first = self.pa.node_first_cpu(first_job.dst);
        let threads: Vec<u32> = (first..first + n).collect();
        self.dispatched(&threads, bytes, first_job)
    }

    /// A DMA engine copying all of `jobs`: one descriptor per folio (or
    /// per channel when there are fewer folios than channels), submitted
    /// one after another on the CPU, then the channels in parallel within
    /// the memory system's caps, then the completion. Without channels,
    /// the CPU copies ([`CopyModel::copy_single`] per folio).
    pub fn copy_dma(&self, cpu: VcpuId, jobs: &[CopyJob]) -> CopyCost {
        let Some(first_job) = jobs.first() else {
            return CopyCost::default();
        };
        if self.hw.dma_channels == 0 || self.hw.dma_channel_mbps == 0 {
            let ns = jobs.iter().map(|j| self.copy_single(cpu, j).ns).sum();
            return CopyCost {
                ns,
                threads: 1,
                ..CopyCost::default()
            };
        }
        let bytes: u64 = jobs.iter().map(|j| j.bytes).sum();
        let pages = bytes.div_ceil(PAGE_SIZE);
        let ch = (self.hw.dma_channels as u64).min(pages).max(1);
        let descs = (jobs.len() as u64).max(ch);
        let xfer =
            ns_at(bytes, self.hw.dma_channel_mbps * ch).max(self.caps_ns(bytes, first_job, None));
        CopyCost {
            ns: descs * self.costs.get(Cost::DmaSubmit)
                + xfer
                + self.costs.get(Cost::DmaCompletion),
            threads: 0,
            dma: true,
            ..CopyCost::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::{MemoryLayout, NodeLayout, VmSysctl};

    /// Two nodes of `cpus` CPUs (2 threads per core), distance 21.
    fn machine(cpus: u32) -> PageAlloc {
        let layout = MemoryLayout {
            nodes: vec![
                NodeLayout {
                    nr_cpus: cpus,
                    nr_pages: 16 << 8,
                };
                2
            ],
            dma32_pages: 0,
        };
        let mut pa = PageAlloc::new(
            &layout,
            VmSysctl::default(),
            crate::pcp::PcpPolicy::default(),
        );
        pa.set_node_distance(&[10, 21, 21, 10]);
        pa
    }

    fn hw() -> NumaHw {
        NumaHw {
            thread_copy_mbps: 5000,
            threads_per_core: 2,
            smt_pair_pct: 110,
            node_mbps: 50_000,
            link_mbps: 20_000,
            dma_channels: 4,
            dma_channel_mbps: 1000,
            line_fill_buffers: 0,
            link_data_flits: 0,
            link_snoop_flits: 0,
            package_idle_exit_ns: 0,
            package_idle_residency_ns: 0,
        }
    }

    const THP: CopyJob = CopyJob {
        bytes: 2 << 20,
        src: NodeId(0),
        dst: NodeId(1),
    };

    #[test]
    fn remote_threads_run_at_the_latency_ratio_and_siblings_share_a_core() {
        let pa = machine(8);
        let (hw, costs) = (hw(), CostTable::uniform(0));
        let idle = vec![true; 16];
        let m = CopyModel {
            pa: &pa,
            hw: &hw,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        // 5000 MB/s x 10 / 21.
        assert_eq!(m.thread_mbps(0, &THP), 2380);
        // Node 1 is CPUs 8..16: cores 0..4, then their siblings 12..16.
        assert_eq!(m.core_of(9), (NodeId(1), 1));
        assert_eq!(m.core_of(13), (NodeId(1), 1));
        let alone = m.parallel_ns(&[9], THP.bytes, &THP);
        let pair = m.parallel_ns(&[9, 13], THP.bytes, &THP);
        let two_cores = m.parallel_ns(&[9, 10], THP.bytes, &THP);
        assert!(two_cores < pair && pair < alone);
        // Four cores, two threads each: 4 x 2380 x 1.1 MB/s; the 20 GB/s
        // link does not bind. With a 5 GB/s link it does.
        let all: Vec<u32> = (8..16).collect();
        assert_eq!(
            m.parallel_ns(&all, THP.bytes, &THP),
            ns_at(THP.bytes / 8, 2380 * 110 / 100 / 2)
        );
        let slow = NumaHw {
            link_mbps: 5000,
            ..hw.clone()
        };
        let m = CopyModel { hw: &slow, ..m };
        assert_eq!(m.parallel_ns(&all, THP.bytes, &THP), ns_at(THP.bytes, 5000));
    }

    /// The link's traffic per line copied node 0 -> node 1, by where the
    /// copying CPU is, with a snoop response of one flit (source snooping)
    /// and without (a home-snooping directory).
    ///
    /// ```text
    ///  copier on node 1 (copy_page_mt's helpers): 0 -> 1: data 9 + snoop 1
    ///  copier on node 0 (the migrating CPU):      1 -> 0: RFO data 9 + snoop 1
    ///                                             0 -> 1: write-back 9
    /// ```
    #[test]
    fn the_link_carries_data_packets_and_snoop_responses() {
        let costs = CostTable::uniform(1);
        let pa = machine(8);
        let idle = vec![true; 16];
        let early = NumaHw {
            link_data_flits: 9,
            link_snoop_flits: 1,
            link_mbps: 9000,
            ..hw()
        };
        let m = CopyModel {
            pa: &pa,
            hw: &early,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        assert_eq!(m.busiest_link_flits(NodeId(1), &THP), 10);
        assert_eq!(m.busiest_link_flits(NodeId(0), &THP), 10);
        // The link binds eight helpers on node 1: 10/9 of the bytes at 9 GB/s.
        let all: Vec<u32> = (8..16).collect();
        assert_eq!(
            m.parallel_ns(&all, THP.bytes, &THP),
            ns_at(THP.bytes * 10 / 9, 9000)
        );
        let home = NumaHw {
            link_snoop_flits: 0,
            ..early.clone()
        };
        let m = CopyModel { hw: &home, ..m };
        assert_eq!(m.busiest_link_flits(NodeId(1), &THP), 9);
        assert_eq!(m.busiest_link_flits(NodeId(0), &THP), 9);
        assert_eq!(m.parallel_ns(&all, THP.bytes, &THP), ns_at(THP.bytes, 9000));
        // Without the flit counts the link carries the bytes alone.
        let plain = NumaHw {
            link_data_flits: 0,
            ..early.clone()
        };
        let m = CopyModel { hw: &plain, ..m };
        assert_eq!(m.parallel_ns(&all, THP.bytes, &THP), ns_at(THP.bytes, 9000));
    }

    #[test]
    fn copy_page_mt_rounds_down_to_even_and_falls_back_on_one_cpu() {
        let (hw, costs) = (hw(), CostTable::uniform(1));
        let pa = machine(8);
        let idle = vec![true; 16];
        let m = CopyModel {
            pa: &pa,
            hw: &hw,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        assert_eq!(m.copy_page_mt(VcpuId(0), &THP, 5).threads, 4);
        assert_eq!(m.copy_page_mt(VcpuId(0), &THP, 32).threads, 8);
        assert_eq!(
            m.copy_page_mt(VcpuId(0), &THP, 1),
            m.copy_single(VcpuId(0), &THP)
        );
        let one = machine(1);
        let m = CopyModel {
            pa: &one,
            hw: &hw,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        assert_eq!(
            m.copy_page_mt(VcpuId(0), &THP, 4).threads,
            1,
            "N = 0: fallback"
        );
    }

    #[test]
    fn adaptive_uses_idle_distinct_cores_and_stays_single_for_small_copies() {
        let pa = machine(8);
        let mut costs = CostTable::uniform(0);
        costs.set(Cost::WorkqueueQueue, 500);
        costs.set(Cost::WorkqueueWakeup, 10_000);
        let hw = hw();
        let mut idle = vec![true; 16];
        idle[10] = false;
        let m = CopyModel {
            pa: &pa,
            hw: &hw,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        // Distinct cores first (CPU 10 is busy, so its sibling 14 stands in
        // for core 2 after the others), then siblings.
        assert_eq!(
            m.idle_cpus_by_core(VcpuId(0), NodeId(1)),
            vec![8, 9, 11, 14, 12, 13, 15]
        );
        let small = CopyJob { bytes: 4096, ..THP };
        assert_eq!(m.copy_adaptive(VcpuId(0), &small).threads, 1);
        let big = m.copy_adaptive(VcpuId(0), &THP);
        assert!(big.threads > 1 && big.ns < m.copy_single(VcpuId(0), &THP).ns);
    }

    /// Node 1's package asleep: the seed's copy waits for it to leave its
    /// idle state once (the helpers wake together), and the waiter's own
    /// wake-up is the ordinary one. Node 0 asleep does not matter to
    /// helpers on node 1; without the exit latency given, nothing changes.
    #[test]
    fn helpers_on_an_asleep_package_wait_for_its_exit_once() {
        let pa = machine(8);
        let mut costs = CostTable::uniform(0);
        costs.set(Cost::WorkqueueQueue, 500);
        costs.set(Cost::WorkqueueWakeup, 10_000);
        let mut hw = hw();
        hw.package_idle_exit_ns = 133_000;
        let idle = vec![true; 16];
        let model = |asleep: &'static [bool], hw: &NumaHw| {
            let m = CopyModel {
                pa: &pa,
                hw,
                costs: &costs,
                idle: &idle,
                asleep,
            };
            m.copy_page_mt(VcpuId(0), &THP, 4).ns
        };
        let awake = model(&[false, false], &hw);
        assert_eq!(model(&[false, true], &hw), awake + 123_000);
        assert_eq!(model(&[true, false], &hw), awake);
        hw.package_idle_exit_ns = 0;
        assert_eq!(model(&[false, true], &hw), awake);
    }

    #[test]
    fn dma_without_channels_falls_back_to_the_cpu() {
        let pa = machine(8);
        let costs = CostTable::uniform(1);
        let idle = vec![true; 16];
        let mut hw = hw();
        let m = CopyModel {
            pa: &pa,
            hw: &hw,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        assert!(m.copy_dma(VcpuId(0), &[THP]).dma);
        hw.dma_channels = 0;
        let m = CopyModel {
            pa: &pa,
            hw: &hw,
            costs: &costs,
            idle: &idle,
            asleep: &[],
        };
        let c = m.copy_dma(VcpuId(0), &[THP]);
        assert!(!c.dma);
        assert_eq!(c, m.copy_single(VcpuId(0), &THP));
    }
}
