//! Who last wrote the cache lines that `zone->lock` protects, and what it
//! costs another CPU to read them.
//!
//! # Why
//!
//! Work done under a contended `zone->lock` is dominated not by its
//! instructions but by the cache lines it touches: the free list heads and
//! `nr_free` of `struct zone`'s `free_area[]`, and the `struct page`s of the
//! blocks taken off or put on the lists (and of their list neighbours, whose
//! `lru` pointers change). When the previous holder ran on another core,
//! each of those lines was last written there, and this CPU's read waits for
//! a core-to-core transfer: tens of nanoseconds within a socket, over a
//! hundred across sockets. A refill of 63 pages is then tens of such
//! transfers, the lock is held that much longer, and on a machine with a
//! hundred CPUs allocating the lock saturates. That is what seed 003's
//! kbuild measured (43.6 % of cycles in the zone lock) and what a model that
//! charges a fixed instruction count per list operation cannot produce.
//!
//! # What is modelled
//!
//! Not a coherence simulator: one last-writer record per line that matters
//! ([`LineOwners`]), `0` for a line nobody has written since boot (it comes
//! from DRAM). A touch by CPU `c` of a line last written by `o` costs the
//! profile's transfer latency for the distance between `o` and `c`
//! ([`CpuTopology::class`], [`transfer_ns`]); then `c` owns it. Touches
//! within one locked section are serial (each `struct page` is found through
//! the previous one's list pointer), so their costs add.
//!
//! With the machine's LLC size known ([`LlcClocks`]), a line also leaves
//! the cache: each LLC counts the lines it takes in (lines of `struct
//! page`s that missed, and the pages cleared or copied), each record keeps
//! that count at its last touch, and a line whose LLC has taken in a whole
//! cache's worth since costs a DRAM access, local or remote by the memory's
//! node, instead of a transfer. The same records serve the `struct page`
//! loads outside the zone lock that the fault paths make (the old page of
//! a copy-on-write fault, [`crate::memory::do_wp_page`]), with or without
//! a topology; fork, a PMD split, allocation and free write lines without
//! charging for them (their fitted costs hold those stores).
//!
//! With each core's private L2 size known ([`LlcClocks::set_l2`]), a line
//! also leaves its last toucher's L2 after that core has taken in a whole
//! L2's worth of lines, and is then an LLC hit for a core of that LLC (the
//! seeds' Intel LLCs are non-inclusive and take the L2's victims): a line a
//! CPU wrote itself long ago is no longer free, and one another core wrote
//! long ago comes from the LLC rather than from that core.
//!
//! Deviations: reads do not leave shared copies (a read makes the reader the
//! owner, which is what the next writer in the list code does anyway); the
//! eviction is an LRU rule over the lines the model sees, counted as
//! [`LlcClocks`] says (a lower bound on the misses: user accesses, page
//! tables and slab objects are not counted, nor hits that reorder the LRU
//! stack); the lines are updated when an operation starts, not
//! when the engine plays it (the engine grants the lock in the same global
//! time order, so the two orders differ only where operations overlap).

use crate::cost::{Cost, CostTable};
use crate::types::VcpuId;

/// How a machine's CPUs share cores, last-level caches and sockets, for the
/// distance of a cache-line transfer.
///
/// CPUs are numbered as the model numbers them (and Linux on Intel servers):
/// node by node, and within a node the first thread of every core first,
/// their SMT siblings after, so node-local CPU `i` is on core
/// `i % cores_per_node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTopology {
    /// Logical CPUs per node (socket); the same on every node.
    pub cpus_per_node: u32,
    /// Hardware threads per core.
    pub threads_per_core: u32,
    /// Cores sharing one last-level cache (a whole socket on Intel servers
    /// and on Ampere Altra's system-level cache, a CCX on AMD).
    pub cores_per_llc: u32,
}

/// The distance between the writer of a line and its reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LineClass {
    /// The same CPU: the line is in its own L1/L2.
    Same,
    /// The SMT sibling.
    Smt,
    /// Another core sharing the LLC.
    SameLlc,
    /// Another LLC of the same socket.
    OtherLlc,
    /// Another socket.
    OtherSocket,
}

impl CpuTopology {
    fn cores_per_node(&self) -> u32 {
        (self.cpus_per_node / self.threads_per_core.max(1)).max(1)
    }

    /// Node and core of `cpu`.
    fn place(&self, cpu: u32) -> (u32, u32) {
        let per = self.cpus_per_node.max(1);
        (cpu / per, (cpu % per) % self.cores_per_node())
    }

    /// The distance between `writer` and `reader`.
    pub fn class(&self, writer: u32, reader: u32) -> LineClass {
        if writer == reader {
            return LineClass::Same;
        }
        let ((wn, wc), (rn, rc)) = (self.place(writer), self.place(reader));
        if wn != rn {
            LineClass::OtherSocket
        } else if wc == rc {
            LineClass::Smt
        } else if wc / self.cores_per_llc.max(1) == rc / self.cores_per_llc.max(1) {
            LineClass::SameLlc
        } else {
            LineClass::OtherLlc
        }
    }

    /// The node of `cpu`.
    pub fn node_of(&self, cpu: u32) -> u32 {
        self.place(cpu).0
    }
}

/// Nanoseconds for a line from DRAM, the reader's node's or another's.
#[inline]
fn dram_ns(costs: &CostTable, local: bool) -> u64 {
    costs.get(if local {
        Cost::DramLocal
    } else {
        Cost::DramRemote
    })
}

/// Nanoseconds for a CPU to read a line of `class` (0 for its own line).
pub fn transfer_ns(costs: &CostTable, class: LineClass) -> u64 {
    match class {
        LineClass::Same => 0,
        LineClass::Smt => costs.get(Cost::C2cSmt),
        LineClass::SameLlc => costs.get(Cost::C2cSameLlc),
        LineClass::OtherLlc => costs.get(Cost::C2cOtherLlc),
        LineClass::OtherSocket => costs.get(Cost::C2cOtherSocket),
    }
}

/// How many distinct lines each last-level cache has taken in, for the
/// eviction of lines nobody touched for a whole cache's worth of traffic.
///
/// A line is taken to have left an LLC once that LLC has taken in
/// `capacity` lines (its size ÷ 64 B) since the line's last touch there: an
/// LRU cache's rule, with two approximations. The count is of lines taken
/// in (misses: a line from DRAM or another LLC, and every line of a page
/// cleared or copied that was not itself cached there), not of every
/// distinct line touched: a hit on a line older than this one also pushes
/// it down an LRU stack but is not counted, so evictions come a little
/// late (a bound from below on the misses). And only the traffic the model
/// sees is counted: the lines of the `struct page`s it follows, and each
/// page cleared or copied (64 lines written; 64 read and 64 written for a
/// copy); user loads and stores, page tables, slab objects and kernel text
/// are not (also too few misses).
///
/// Deterministic: the counts are a function of the operations in the order
/// the model runs them.
#[derive(Clone, Debug)]
pub struct LlcClocks {
    /// Lines each LLC has taken in so far (by LLC index, grown on use).
    now: Vec<u64>,
    /// Lines one LLC holds.
    capacity: u64,
    topo: Option<CpuTopology>,
    /// Per CPU: its LLC, node and core (precomputed: a division per touch
    /// was a tenth of the model's time).
    llc: Vec<u32>,
    place: Vec<(u32, u32)>,
    /// The private L2s, if the profile gives their size ([`L2Clocks`]).
    l2: Option<L2Clocks>,
}

/// How many lines each core's private L2 has taken in, for the lines a
/// core wrote long ago and has since pushed out to the LLC.
///
/// The same LRU rule as [`LlcClocks`], per core (the SMT siblings share
/// it): a line the core last touched is in its L2 until the core has taken
/// in `capacity` lines since. What is counted is what the L2 takes in:
/// every line a touch did not find in the core's own L2 and every line of
/// a page the core clears or copies ([`LlcClocks::stream_page`]); user
/// loads and stores are not, so this too is a bound from below on the
/// misses. On the Intel servers of the seeds the LLC is non-inclusive and
/// takes the L2's victims, so a line pushed out of an L2 is an LLC hit
/// (`hit_ns`) for any core of that LLC until the LLC pushes it out too.
#[derive(Clone, Debug)]
struct L2Clocks {
    /// Lines each core's L2 has taken in so far (by core index).
    now: Vec<u64>,
    /// Lines one L2 holds.
    capacity: u64,
    /// Nanoseconds for a line found in the LLC (load to use).
    hit_ns: u64,
    /// Per CPU: its core's index.
    core: Vec<u32>,
}

impl LlcClocks {
    /// Clocks for LLCs of `llc_bytes` each on a machine of `nr_cpus` CPUs,
    /// shared by CPUs as `topo` says (without one, every CPU shares one
    /// LLC).
    pub fn new(llc_bytes: u64, topo: Option<CpuTopology>, nr_cpus: u32) -> LlcClocks {
        let place: Vec<(u32, u32)> = (0..nr_cpus)
            .map(|c| topo.map_or((0, c), |t| t.place(c)))
            .collect();
        let llc = place
            .iter()
            .map(|&(node, core)| match &topo {
                None => 0,
                Some(t) => {
                    let per_llc = t.cores_per_llc.max(1);
                    node * t.cores_per_node().div_ceil(per_llc) + core / per_llc
                }
            })
            .collect();
        LlcClocks {
            now: vec![0],
            capacity: (llc_bytes / LINE_BYTES).max(1),
            topo,
            llc,
            place,
            l2: None,
        }
    }

    /// Turns on the private-L2 model: each core has `l2_bytes` of L2, and
    /// a line that has left it but not the LLC costs `llc_hit_ns`. Needs a
    /// topology (which CPUs share a core); without one it does nothing.
    pub fn set_l2(&mut self, l2_bytes: u64, llc_hit_ns: u64) {
        let Some(t) = self.topo else {
            return;
        };
        let per_node = t.cores_per_node();
        let core: Vec<u32> = self.place.iter().map(|&(n, c)| n * per_node + c).collect();
        let cores = core.iter().max().map_or(0, |&c| c as usize + 1);
        self.l2 = Some(L2Clocks {
            now: vec![0; cores],
            capacity: (l2_bytes / LINE_BYTES).max(1),
            hit_ns: llc_hit_ns,
            core,
        });
    }

    /// Whether the private-L2 model is on.
    pub fn has_l2(&self) -> bool {
        self.l2.is_some()
    }

    /// Lines the L2 of `cpu`'s core has taken in so far (0 without the
    /// L2 model).
    pub fn l2_now(&self, cpu: u32) -> u64 {
        self.l2.as_ref().map_or(0, |l| {
            l.core.get(cpu as usize).map_or(0, |&c| l.now[c as usize])
        })
    }

    /// The distance between `writer` and `reader` ([`CpuTopology::class`]
    /// from the precomputed places; [`LineClass::Same`] or
    /// [`LineClass::SameLlc`] without a topology).
    #[inline]
    pub fn class(&self, writer: u32, reader: u32) -> LineClass {
        if writer == reader {
            return LineClass::Same;
        }
        let (Some(&(wn, wc)), Some(&(rn, rc))) = (
            self.place.get(writer as usize),
            self.place.get(reader as usize),
        ) else {
            return self
                .topo
                .map_or(LineClass::SameLlc, |t| t.class(writer, reader));
        };
        if self.topo.is_none() {
            LineClass::SameLlc
        } else if wn != rn {
            LineClass::OtherSocket
        } else if wc == rc {
            LineClass::Smt
        } else if self.llc_of(writer) == self.llc_of(reader) {
            LineClass::SameLlc
        } else {
            LineClass::OtherLlc
        }
    }

    /// Lines one LLC holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The LLC of `cpu`: node by node, then the node's cores in groups of
    /// `cores_per_llc`.
    #[inline]
    pub fn llc_of(&self, cpu: u32) -> usize {
        match self.llc.get(cpu as usize) {
            Some(&l) => l as usize,
            None => match &self.topo {
                None => 0,
                Some(t) => {
                    let (node, core) = t.place(cpu);
                    let per_llc = t.cores_per_llc.max(1);
                    (node * t.cores_per_node().div_ceil(per_llc) + core / per_llc) as usize
                }
            },
        }
    }

    /// Lines LLC `llc` has taken in so far.
    #[inline]
    pub fn now(&self, llc: usize) -> u64 {
        self.now.get(llc).copied().unwrap_or(0)
    }

    /// LLC `llc` takes in `lines` more lines.
    #[inline]
    pub fn advance(&mut self, llc: usize, lines: u64) {
        if llc >= self.now.len() {
            self.now.resize(llc + 1, 0);
        }
        self.now[llc] += lines;
    }

    /// True if a line LLC `llc` last took in or touched at `stamp` has
    /// been pushed out since.
    #[inline]
    pub fn evicted(&self, llc: usize, stamp: u64) -> bool {
        self.now(llc).saturating_sub(stamp) >= self.capacity
    }

    /// A page (64 lines) is cleared or copied by `cpu`: if its lines were
    /// not still in the CPU's LLC by `record` (see [`PageData`]), they are
    /// taken in. Updates `record`.
    #[inline]
    pub fn stream_page(&mut self, cpu: u32, record: &mut u64) {
        let llc = self.llc_of(cpu);
        let (was, stamp) = unpack(*record);
        if was == 0 || was as usize - 1 != llc || self.evicted(llc, stamp) {
            self.advance(llc, LINES_PER_PAGE);
        }
        *record = pack(llc as u32 + 1, self.now(llc));
        self.l2_advance(cpu, LINES_PER_PAGE);
    }

    /// The L2 of `cpu`'s core takes in `lines` more lines (nothing without
    /// the L2 model).
    #[inline]
    fn l2_advance(&mut self, cpu: u32, lines: u64) {
        if let Some(l) = self.l2.as_mut() {
            if let Some(&c) = l.core.get(cpu as usize) {
                l.now[c as usize] += lines;
            }
        }
    }

    /// Whether the line `owner` last touched when its core's L2 clock read
    /// `stamp` is still in that L2 (always, without the L2 model).
    #[inline]
    fn in_l2(&self, owner: u32, stamp: u64) -> bool {
        self.l2.as_ref().is_none_or(|l| {
            l.core
                .get(owner as usize)
                .is_none_or(|&c| l.now[c as usize].saturating_sub(stamp) < l.capacity)
        })
    }

    /// Whether `a` and `b` share a core (and so an L2).
    #[inline]
    fn same_core(&self, a: u32, b: u32) -> bool {
        self.l2.as_ref().is_some_and(|l| {
            l.core.get(a as usize).is_some() && l.core.get(a as usize) == l.core.get(b as usize)
        })
    }
}

/// Bytes per cache line.
pub const LINE_BYTES: u64 = 64;
/// Lines per 4 KiB page.
pub const LINES_PER_PAGE: u64 = 4096 / LINE_BYTES;

/// A record: 16 bits of CPU (or LLC) + 1, 0 for none, and a 48-bit stamp of
/// the LLC's clock (2^48 lines are 16 EiB of traffic: it never wraps).
#[inline]
fn pack(who: u32, stamp: u64) -> u64 {
    (stamp << 16) | (who as u64 & 0xffff)
}

#[inline]
fn unpack(r: u64) -> (u32, u64) {
    ((r & 0xffff) as u32, r >> 16)
}

/// Per page, the LLC (+ 1) that last cleared or copied its data and that
/// LLC's clock then (`0`: never), packed as [`LineOwners`]' records.
pub type PageData = u64;

/// One record per line: its last writer (`0` for a line nobody has written
/// since boot, else the writer's CPU number + 1) and, when the LLC model is
/// on ([`LlcClocks`]), the clock of the writer's LLC at that touch.
///
/// Invariant: every writer is `0` or a CPU of the topology it was used with.
#[derive(Clone, Debug, Default)]
pub struct LineOwners {
    rec: Vec<u64>,
    /// With the private-L2 model on: per line, the clock of its last
    /// toucher's L2 at that touch (allocated zeroed on first use).
    l2: Vec<u64>,
}

impl LineOwners {
    /// Records for `n` lines, none written yet. The vector is allocated
    /// zeroed, so records of lines never touched cost no host memory.
    pub fn new(n: usize) -> LineOwners {
        LineOwners {
            rec: vec![0; n],
            l2: Vec::new(),
        }
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.rec.len()
    }

    /// True if there are no lines.
    pub fn is_empty(&self) -> bool {
        self.rec.is_empty()
    }

    /// The CPU that last wrote line `i`, if any.
    pub fn owner(&self, i: usize) -> Option<VcpuId> {
        match unpack(self.rec[i]).0 {
            0 => None,
            o => Some(VcpuId(o - 1)),
        }
    }

    /// CPU `cpu` reads and writes line `i`, whose memory is on node `home`:
    /// returns the nanoseconds the read waits, and makes `cpu` the owner.
    ///
    /// The wait is a transfer from the last writer by distance (none
    /// without a topology: every CPU is taken to share one cache), or a
    /// DRAM access, local or remote, for a line nobody wrote or one the
    /// writer's LLC has since pushed out (`clocks`). A line that comes
    /// from DRAM or from another LLC is taken into the reader's LLC.
    pub fn touch(
        &mut self,
        i: usize,
        cpu: VcpuId,
        home: u32,
        topo: Option<&CpuTopology>,
        clocks: Option<&mut LlcClocks>,
        costs: &CostTable,
    ) -> u64 {
        let (owner, stamp) = unpack(self.rec[i]);
        let (ns, stamp_now) = match clocks {
            None => {
                let ns = match (owner, topo) {
                    (0, _) => dram_ns(costs, topo.map_or(home, |t| t.node_of(cpu.0)) == home),
                    (_, Some(t)) => transfer_ns(costs, t.class(owner - 1, cpu.0)),
                    (_, None) => 0,
                };
                (ns, 0)
            }
            Some(c) if c.has_l2() => return self.touch_l2(i, cpu, home, c, costs),
            Some(c) => {
                let mine = c.llc_of(cpu.0);
                let theirs = (owner != 0).then(|| c.llc_of(owner - 1));
                let cached = theirs.is_some_and(|l| !c.evicted(l, stamp));
                if !cached || theirs != Some(mine) {
                    c.advance(mine, 1);
                }
                let ns = if !cached {
                    let node = c.place.get(cpu.idx()).map_or(home, |p| p.0);
                    dram_ns(costs, c.topo.is_none() || node == home)
                } else if c.topo.is_some() {
                    transfer_ns(costs, c.class(owner - 1, cpu.0))
                } else {
                    0
                };
                (ns, c.now(mine))
            }
        };
        self.rec[i] = pack(cpu.0 + 1, stamp_now);
        ns
    }

    /// [`LineOwners::touch`] with the private-L2 model on: a line still in
    /// its last toucher's L2 costs what it costs without the model (nothing
    /// on the same CPU, a transfer by distance from another), one that has
    /// left that L2 but not the LLC an LLC hit for a core of that LLC (a
    /// core of another LLC still pays the transfer: the remote LLC answers
    /// in about the time the remote core would), and one that has left the
    /// LLC a DRAM access. Every line not found in the reader's own core's
    /// L2 is taken into it.
    fn touch_l2(
        &mut self,
        i: usize,
        cpu: VcpuId,
        home: u32,
        c: &mut LlcClocks,
        costs: &CostTable,
    ) -> u64 {
        if self.l2.len() < self.rec.len() {
            self.l2 = vec![0; self.rec.len()];
        }
        let (owner, stamp) = unpack(self.rec[i]);
        let mine = c.llc_of(cpu.0);
        let theirs = (owner != 0).then(|| c.llc_of(owner - 1));
        let cached = theirs.is_some_and(|l| !c.evicted(l, stamp));
        let in_l2 = cached && c.in_l2(owner - 1, self.l2[i]);
        if !cached || theirs != Some(mine) {
            c.advance(mine, 1);
        }
        let ns = if !cached {
            let node = c.place.get(cpu.idx()).map_or(home, |p| p.0);
            dram_ns(costs, node == home)
        } else if in_l2 || theirs != Some(mine) {
            transfer_ns(costs, c.class(owner - 1, cpu.0))
        } else {
            c.l2.as_ref().map_or(0, |l| l.hit_ns)
        };
        if !(in_l2 && c.same_core(owner - 1, cpu.0)) {
            c.l2_advance(cpu.0, 1);
        }
        self.rec[i] = pack(cpu.0 + 1, c.now(mine));
        self.l2[i] = c.l2_now(cpu.0);
        ns
    }
}

/// The misses of one `zone->lock` hold, overlapped as an out-of-order
/// core overlaps loads whose addresses it already has.
///
/// # Why
///
/// The loops under the lock (`rmqueue_bulk()`, `free_pcppages_bulk()`,
/// 6.6) do not wait for each line in turn. The address of a buddy's
/// `struct page` is computed from the pfn of the page being freed (the pfn
/// comes from the CPU's own per-CPU list), the halves that `expand()`
/// splits off are at computed offsets from the block, and the
/// `free_area[]` heads are at fixed offsets in `struct zone`: the core
/// issues those loads as soon as it reaches them, while earlier misses are
/// still outstanding, up to its L1 line fill buffers. Only a line whose
/// address is a pointer in a line still in flight waits for that line:
/// the successor on a free list (`list_del()` writes `next->prev`), the
/// list neighbours of a merged buddy, the old first entry of a list a
/// block is added to. So a hold's memory time is the longer of its longest
/// chain of such dependent misses and its misses' total latency divided
/// by the misses in flight.
///
/// # What is modelled
///
/// Each touch under the lock ([`MissWindow::miss`]) gives its latency and
/// the time, from the start of the hold, at which its address was known
/// (`after`: 0 for a computed address, else the time the line holding the
/// pointer arrived, [`MissWindow::ready`]); the line is ready at the later
/// of `after` plus its latency and any earlier arrival of the same line in
/// this hold. [`MissWindow::finish`] gives `max(longest ready, ⌈total ÷
/// mlp⌉)`. With `mlp` = 1 that is the total: every miss serial, the
/// charge the model made before it had this window.
///
/// Deviations: the instructions between the misses are charged apart and
/// in full (no overlap of work with misses, which overstates a hold); the
/// issue of an independent miss is not delayed by the front end or by the
/// reorder buffer's size beyond what `mlp` says (the profile's band for it
/// covers that); hardware prefetchers are not modelled; the arrival times
/// of only the last [`MissWindow::RECENT`] lines are remembered (a chain
/// that returns to an older line finds its data present: its ready time is
/// forgotten, never invented); stores are treated as the loads they
/// start (a read for ownership), and the lock's release waits for them.
#[derive(Clone, Debug)]
pub struct MissWindow {
    /// Misses the core keeps in flight (≥ 1).
    mlp: u32,
    /// The latencies of this hold's misses, summed.
    sum_ns: u64,
    /// The latest time a line of this hold is ready.
    crit_ns: u64,
    /// The last lines that arrived with a time above 0: (key, ready).
    recent: [(u64, u64); MissWindow::RECENT],
    next: usize,
}

impl MissWindow {
    /// Arrival times kept (the chains under the lock are two or three
    /// lines deep; a refill's list walk needs only the previous step's).
    pub const RECENT: usize = 16;

    /// A window for a core that keeps `mlp` misses in flight (0 is taken
    /// as 1).
    pub fn new(mlp: u32) -> MissWindow {
        MissWindow {
            mlp: mlp.max(1),
            sum_ns: 0,
            crit_ns: 0,
            recent: [(u64::MAX, 0); MissWindow::RECENT],
            next: 0,
        }
    }

    /// Misses in flight.
    pub fn mlp(&self) -> u32 {
        self.mlp
    }

    /// When the line `key` arrived in this hold (0: not touched in it, or
    /// its data was there from the start).
    #[inline]
    pub fn ready(&self, key: u64) -> u64 {
        self.recent
            .iter()
            .find(|&&(k, _)| k == key)
            .map_or(0, |&(_, r)| r)
    }

    /// The line `key`, whose address was known at `after`, costs `ns`:
    /// returns the time it is ready.
    #[inline]
    pub fn miss(&mut self, key: u64, ns: u64, after: u64) -> u64 {
        self.sum_ns += ns;
        let seen = self.recent.iter().position(|e| e.0 == key);
        let earlier = seen.map_or(0, |i| self.recent[i].1);
        let ready = (after + ns).max(earlier);
        if ready > 0 {
            let i = seen.unwrap_or_else(|| {
                let i = self.next;
                self.next = (self.next + 1) % MissWindow::RECENT;
                i
            });
            self.recent[i] = (key, ready);
            self.crit_ns = self.crit_ns.max(ready);
        }
        ready
    }

    /// The hold's memory time, `max(longest ready, ⌈total ÷ mlp⌉)`; clears
    /// the window for the next hold.
    pub fn finish(&mut self) -> u64 {
        let ns = self.crit_ns.max(self.sum_ns.div_ceil(self.mlp as u64));
        *self = MissWindow::new(self.mlp);
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sockets of 4 cores x 2 threads, two LLCs of 2 cores per socket:
    /// node 0 is CPUs 0..8 (cores 0-3, then siblings 4-7).
    const TOPO: CpuTopology = CpuTopology {
        cpus_per_node: 8,
        threads_per_core: 2,
        cores_per_llc: 2,
    };

    #[test]
    fn classes_follow_the_numbering() {
        assert_eq!(TOPO.class(1, 1), LineClass::Same);
        assert_eq!(TOPO.class(1, 5), LineClass::Smt);
        assert_eq!(TOPO.class(0, 1), LineClass::SameLlc);
        assert_eq!(TOPO.class(0, 5), LineClass::SameLlc);
        assert_eq!(TOPO.class(0, 2), LineClass::OtherLlc);
        assert_eq!(TOPO.class(0, 8), LineClass::OtherSocket);
        assert_eq!(TOPO.node_of(9), 1);
    }

    #[test]
    fn a_touch_costs_the_transfer_from_the_last_writer_and_takes_the_line() {
        let costs = costs();
        let mut l = LineOwners::new(4);
        // Nobody wrote line 0: DRAM, local to CPU 0, remote for CPU 8.
        assert_eq!(l.touch(0, VcpuId(0), 0, Some(&TOPO), None, &costs), 90);
        assert_eq!(l.touch(1, VcpuId(8), 0, Some(&TOPO), None, &costs), 140);
        // Again on the same CPU: its own line.
        assert_eq!(l.touch(0, VcpuId(0), 0, Some(&TOPO), None, &costs), 0);
        assert_eq!(l.touch(0, VcpuId(4), 0, Some(&TOPO), None, &costs), 8);
        assert_eq!(l.touch(0, VcpuId(1), 0, Some(&TOPO), None, &costs), 40);
        assert_eq!(l.touch(0, VcpuId(3), 0, Some(&TOPO), None, &costs), 70);
        assert_eq!(l.touch(0, VcpuId(12), 0, Some(&TOPO), None, &costs), 120);
        assert_eq!(l.owner(0), Some(VcpuId(12)));
    }

    fn costs() -> CostTable {
        let mut costs = CostTable::uniform(0);
        for (c, ns) in [
            (Cost::C2cSmt, 8),
            (Cost::C2cSameLlc, 40),
            (Cost::C2cOtherLlc, 70),
            (Cost::C2cOtherSocket, 120),
            (Cost::DramLocal, 90),
            (Cost::DramRemote, 140),
        ] {
            costs.set(c, ns);
        }
        costs
    }

    #[test]
    fn the_clocks_places_agree_with_the_topology() {
        let c = LlcClocks::new(1 << 20, Some(TOPO), 16);
        for w in 0..16 {
            for r in 0..16 {
                assert_eq!(c.class(w, r), TOPO.class(w, r), "{w} -> {r}");
            }
        }
        // Node 0: cores 0-1 (and siblings 4-5) in LLC 0, cores 2-3 in LLC 1.
        assert_eq!(
            [0, 1, 4, 5, 2, 3, 8, 10].map(|c2| c.llc_of(c2)),
            [0, 0, 0, 0, 1, 1, 2, 3]
        );
    }

    #[test]
    fn a_line_leaves_its_llc_after_a_cache_worth_of_new_lines() {
        let costs = costs();
        // 64 lines of LLC.
        let mut c = LlcClocks::new(64 * LINE_BYTES, Some(TOPO), 16);
        let mut l = LineOwners::new(2);
        assert_eq!(
            l.touch(0, VcpuId(0), 0, Some(&TOPO), Some(&mut c), &costs),
            90
        );
        // Another core of the LLC takes it: a transfer, no new line there.
        assert_eq!(
            l.touch(0, VcpuId(1), 0, Some(&TOPO), Some(&mut c), &costs),
            40
        );
        assert_eq!(c.now(0), 1);
        // 62 more lines: still there.
        c.advance(0, 62);
        assert_eq!(
            l.touch(0, VcpuId(0), 0, Some(&TOPO), Some(&mut c), &costs),
            40
        );
        // A full LLC's worth after that touch: gone, from DRAM (remote for
        // a CPU of the other socket).
        c.advance(0, 64);
        assert_eq!(
            l.touch(0, VcpuId(0), 0, Some(&TOPO), Some(&mut c), &costs),
            90
        );
        c.advance(0, 64);
        assert_eq!(
            l.touch(0, VcpuId(8), 0, Some(&TOPO), Some(&mut c), &costs),
            140
        );
        // Another LLC's traffic does not push line 1 out of LLC 0.
        assert_eq!(
            l.touch(1, VcpuId(0), 0, Some(&TOPO), Some(&mut c), &costs),
            90
        );
        c.advance(1, 1000);
        assert_eq!(
            l.touch(1, VcpuId(1), 0, Some(&TOPO), Some(&mut c), &costs),
            40
        );
    }

    #[test]
    fn a_line_pushed_out_of_a_private_l2_is_an_llc_hit() {
        let costs = costs();
        // A large LLC, 64 lines of L2 per core, LLC hits at 20 ns. CPU 0
        // and CPU 4 are one core's two threads; CPU 1 another core of the
        // same LLC; CPU 2 a core of the socket's other LLC.
        let mut c = LlcClocks::new(1 << 20, Some(TOPO), 16);
        c.set_l2(64 * LINE_BYTES, 20);
        let mut l = LineOwners::new(1);
        let mut touch =
            |cpu: u32, c: &mut LlcClocks| l.touch(0, VcpuId(cpu), 0, Some(&TOPO), Some(c), &costs);
        assert_eq!(touch(0, &mut c), 90);
        assert_eq!(touch(0, &mut c), 0);
        // CPU 0 clears a page: 64 lines through its core's L2, and the
        // line it wrote has left for the LLC.
        c.stream_page(0, &mut 0);
        assert_eq!(touch(0, &mut c), 20);
        assert_eq!(touch(0, &mut c), 0);
        // Its SMT sibling's page pushes it out of the same L2.
        c.stream_page(4, &mut 0);
        assert_eq!(touch(0, &mut c), 20);
        // Still in CPU 0's L2: the sibling and another core pay the
        // transfer, as without the L2 model.
        assert_eq!(touch(4, &mut c), 8);
        assert_eq!(touch(1, &mut c), 40);
        // Out of CPU 1's L2: an LLC hit for CPU 0 instead of a transfer; a
        // core of the other LLC still pays its transfer.
        c.stream_page(1, &mut 0);
        assert_eq!(touch(0, &mut c), 20);
        c.stream_page(0, &mut 0);
        assert_eq!(touch(2, &mut c), 70);
        // Another core's traffic leaves CPU 2's L2 alone.
        c.stream_page(3, &mut 0);
        assert_eq!(touch(2, &mut c), 0);
        assert_eq!(c.l2_now(2), 1);
    }

    #[test]
    fn a_window_of_one_miss_charges_every_miss_in_turn() {
        let mut w = MissWindow::new(1);
        let a = w.miss(1, 60, 0);
        w.miss(2, 60, a);
        w.miss(3, 100, 0);
        assert_eq!(w.finish(), 220);
        // Cleared for the next hold.
        assert_eq!(w.finish(), 0);
    }

    #[test]
    fn independent_misses_overlap_and_chains_do_not() {
        // Sixteen buddies at computed addresses: 16 x 60 ns over 16 in
        // flight is one latency.
        let mut w = MissWindow::new(16);
        for k in 0..16 {
            assert_eq!(w.miss(k, 60, 0), 60);
        }
        assert_eq!(w.finish(), 60);
        // A list walk: each successor's address is in the previous line.
        let mut ready = 0;
        for k in 0..16 {
            ready = w.miss(k, 60, ready);
        }
        assert_eq!(ready, 960);
        assert_eq!(w.finish(), 960);
        // Twelve in flight: 13 independent misses of 60 ns, 780 ns of
        // latency over 12 in flight.
        let mut w = MissWindow::new(12);
        for k in 0..13 {
            w.miss(k, 60, 0);
        }
        assert_eq!(w.finish(), 65);
    }

    #[test]
    fn a_line_touched_again_is_ready_when_it_first_arrived() {
        let mut w = MissWindow::new(8);
        // The successor of one step is the head of the next: touched again
        // at no cost, it is still only ready when it arrived, and the next
        // successor waits for it.
        let r = w.miss(7, 80, 40);
        assert_eq!(r, 120);
        assert_eq!(w.ready(7), 120);
        assert_eq!(w.miss(7, 0, 0), 120);
        assert_eq!(w.miss(8, 80, w.ready(7)), 200);
        assert_eq!(w.ready(99), 0);
        assert_eq!(w.finish(), 200);
    }

    #[test]
    fn a_page_cached_in_the_llc_is_not_taken_in_twice() {
        let mut c = LlcClocks::new(256 * LINE_BYTES, None, 2);
        let mut rec: PageData = 0;
        c.stream_page(0, &mut rec);
        assert_eq!(c.now(0), LINES_PER_PAGE);
        // Again, from the other CPU sharing the LLC: still cached.
        c.stream_page(1, &mut rec);
        assert_eq!(c.now(0), LINES_PER_PAGE);
        // After 256 more lines it has left.
        c.advance(0, 256);
        c.stream_page(0, &mut rec);
        assert_eq!(c.now(0), 256 + 2 * LINES_PER_PAGE);
    }
}
