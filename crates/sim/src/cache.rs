//! A cache model: one shared last-level cache per socket and an optional
//! private L2 per CPU, fed line by line by the kernel's clearing and copying
//! of pages and by user touches.
//!
//! It exists to show the hardware effect that the kernel's choices are about:
//! why clearing or copying the target sub-page of a huge page last
//! (`process_huge_page()`, mm/memory.c, Linux 4.14+/4.18+, seed 000) keeps the
//! lines the faulting task touches next in the cache. It models hardware, not
//! a kernel file, so it lives in `sim` beside the cost model; the kernel
//! functions whose memory traffic it receives are named where they are
//! modeled ([`CacheModel::clear_page`], [`CacheModel::copy_page`]).
//!
//! # Geometry
//!
//! Each cache is set-associative with `ways` ways of `line_bytes`-byte lines.
//! A physical address maps to line `phys / line_bytes`, and the line to set
//! `line % nr_sets` with tag `line / nr_sets`: the textbook modulo index.
//! `nr_sets` need not be a power of two (a 45 MiB, 20-way LLC has 36,864
//! sets).
//!
//! # Replacement: true LRU, age ranks
//!
//! Each way of a set has a tag (`u32`) and an age (`u8`): its rank in
//! recency order, 0 for the most recently used up to `ways - 1`. A hit on a
//! line of age `a` ages every younger line by one and makes the line 0; a
//! miss replaces the line of age `ways - 1`. That is exact LRU, kept in one
//! byte per way, packed eight to a 64-bit word and updated a word at a time
//! (see `SetAssoc`'s layout), so a 45 MiB, 20-way LLC's state is 2.9 MiB of
//! tags and 1.7 MiB of ages and one-byte tag fingerprints (plus 5.9 MiB of
//! sharer masks when the L2s are inclusive).
//! Empty ways hold [`INVALID_TAG`] and are always older than every valid
//! way, so they fill first. The state is plain integers: no floating point,
//! nothing random, so a run is reproducible byte for byte.
//!
//! # Inclusion
//!
//! The default ([`LlcInclusion::Inclusive`]) is Intel's inclusive LLC, as on
//! the Haswell-EP Xeon E5-2699 v3 on which the seeds were measured: every
//! line in an L2 is also in its socket's LLC, and when the LLC evicts a line
//! it back-invalidates the copies in the L2s. As Intel's "core valid" bits do,
//! each LLC way keeps a mask of the CPUs whose L2 may hold the line, so that
//! the back-invalidation looks only in those L2s. The mask is conservative
//! (an L2 evicts clean lines silently and the bit stays set), which is what
//! the hardware does too. [`LlcInclusion::NonInclusive`] drops the
//! back-invalidation: a miss fills both levels and each level evicts on its
//! own (the "non-inclusive, non-exclusive" policy of Skylake-SP and later).
//! Inclusion matters for this model because an LLC under pressure from other
//! CPUs evicts lines that are still hot in a CPU's L2, and the next touch of
//! such a line is a miss.
//!
//! # Deviations
//!
//! - Deviation: real Intel LLCs are split into slices (one per core) and a
//!   physical address is hashed to a slice by an undocumented function; this
//!   model has one flat set-associative cache per socket indexed by modulo.
//!   Sequential physical ranges spread over sets the same way in both, but
//!   adversarial strides that alias under modulo would not alias under the
//!   hash.
//! - Deviation: replacement is true LRU. Haswell's LLC uses an adaptive
//!   pseudo-LRU (with insertion-position dueling that resists streaming);
//!   under a pure stream our LRU evicts more than the hardware would.
//! - Deviation: hits in an L2 do not refresh the line's recency in the LLC,
//!   which is also true of the hardware (the LLC does not see them), but the
//!   hardware's hints that soften the resulting inclusion victims are not
//!   modeled.
//! - Deviation: the L2 is private per logical CPU; on Haswell the two
//!   hyperthreads of a core share one L2. There is no L1: the L1 is small
//!   enough that it does not change which lines reach the LLC in the page
//!   clearing and copying this model is for.
//! - Deviation: the caches are write-allocate and write-back, and a write is
//!   looked up and filled exactly like a read: [`AccessKind`] is only
//!   counted. Dirty lines, write-backs, non-temporal stores, hardware
//!   prefetching and coherence between sockets (a line may be cached in two
//!   sockets' LLCs at once, as if always shared-clean) are not modeled.
//! - Deviation: freeing a page does not flush it from a real cache, and the
//!   simulator should not call [`CacheModel::invalidate_page`] when the
//!   kernel model frees one; it exists for tests and for explicit flushes
//!   (`clflush`, device DMA).

use std::fmt;
use std::ops::AddAssign;

use mm::{Pfn, VcpuId, PAGE_SHIFT, PAGE_SIZE};

/// The tag stored in an empty way. A line whose tag would equal it cannot be
/// cached; [`CacheModel`] panics on such an address (for a 45 MiB LLC that is
/// beyond 10 PiB of physical memory).
pub const INVALID_TAG: u32 = u32::MAX;

/// The largest associativity the model supports: a set's ways are searched
/// with a bit mask of one `u64`.
pub const MAX_WAYS: u32 = 64;

/// Whether the LLC holds every line that the L2s below it hold.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub enum LlcInclusion {
    /// Intel client and server parts up to Broadwell (and so Haswell-EP, the
    /// seeds' machine): an LLC eviction back-invalidates the L2 copies.
    #[default]
    Inclusive,
    /// Each level evicts independently (Skylake-SP and later Intel server
    /// parts).
    NonInclusive,
}

/// The shape of the cache hierarchy of a machine.
///
/// Invariants (checked by [`CacheConfig::validate`]): sizes are whole
/// numbers of sets, `line_bytes` is a power of two, ways are in
/// `1..=MAX_WAYS`, and with an inclusive L2 `cpus_per_socket <= 64` (one bit
/// per CPU in a line's sharer mask).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CacheConfig {
    /// Capacity of each socket's shared last-level cache.
    pub llc_size_bytes: u64,
    /// Associativity of the LLC.
    pub llc_ways: u32,
    /// Bytes in a cache line, at every level.
    pub line_bytes: u32,
    /// `(size_bytes, ways)` of each CPU's private L2, or `None` for an
    /// LLC-only model.
    pub l2: Option<(u64, u32)>,
    /// Sockets, each with its own LLC.
    pub sockets: u32,
    /// CPUs per socket; CPU `c` is on socket `c / cpus_per_socket`.
    pub cpus_per_socket: u32,
    /// Inclusion of the L2s in the LLC (ignored without an L2).
    pub inclusion: LlcInclusion,
}

impl CacheConfig {
    /// 2 × Xeon E5-2699 v3 (Haswell-EP), the machine of seed 000: 18 cores
    /// and 36 threads per socket, a 45 MiB 20-way inclusive LLC per socket,
    /// 256 KiB 8-way L2 per core, 64-byte lines (Intel ARK for the E5-2699
    /// v3; Intel 64 and IA-32 Architectures Optimization Reference Manual,
    /// §2.3 "Haswell microarchitecture", cache parameters table).
    pub fn haswell_e5_2699_v3() -> CacheConfig {
        CacheConfig {
            llc_size_bytes: 45 << 20,
            llc_ways: 20,
            line_bytes: 64,
            l2: Some((256 << 10, 8)),
            sockets: 2,
            cpus_per_socket: 36,
            inclusion: LlcInclusion::Inclusive,
        }
    }

    /// The same machine with no L2 in the model: every access goes to the
    /// LLC. This is the configuration the throughput target is set for.
    pub fn haswell_e5_2699_v3_llc_only() -> CacheConfig {
        CacheConfig {
            l2: None,
            ..CacheConfig::haswell_e5_2699_v3()
        }
    }

    /// Checks the invariants listed on the type.
    pub fn validate(&self) -> Result<(), CacheConfigError> {
        if !self.line_bytes.is_power_of_two() {
            return Err(CacheConfigError::LineNotPowerOfTwo(self.line_bytes));
        }
        if self.sockets == 0 || self.cpus_per_socket == 0 {
            return Err(CacheConfigError::NoCpus);
        }
        nr_sets("LLC", self.llc_size_bytes, self.llc_ways, self.line_bytes)?;
        if let Some((size, ways)) = self.l2 {
            nr_sets("L2", size, ways, self.line_bytes)?;
            if self.inclusion == LlcInclusion::Inclusive && self.cpus_per_socket > 64 {
                return Err(CacheConfigError::TooManyCpusForSharerMask(
                    self.cpus_per_socket,
                ));
            }
        }
        Ok(())
    }

    /// Sets in each LLC.
    pub fn llc_nr_sets(&self) -> u32 {
        (self.llc_size_bytes / (self.llc_ways as u64 * self.line_bytes as u64)) as u32
    }

    /// CPUs in the machine.
    pub fn nr_cpus(&self) -> u32 {
        self.sockets * self.cpus_per_socket
    }
}

fn nr_sets(level: &'static str, size: u64, ways: u32, line: u32) -> Result<u32, CacheConfigError> {
    if ways == 0 || ways > MAX_WAYS {
        return Err(CacheConfigError::BadWays { level, ways });
    }
    let set_bytes = ways as u64 * line as u64;
    if size == 0 || size / set_bytes * set_bytes != size || size / set_bytes > u32::MAX as u64 {
        return Err(CacheConfigError::SizeNotWholeSets {
            level,
            size_bytes: size,
            set_bytes,
        });
    }
    Ok((size / set_bytes) as u32)
}

/// What is wrong with a [`CacheConfig`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CacheConfigError {
    /// The line size must be a power of two.
    LineNotPowerOfTwo(u32),
    /// A machine needs at least one socket with at least one CPU.
    NoCpus,
    /// Associativity must be in `1..=MAX_WAYS`.
    BadWays { level: &'static str, ways: u32 },
    /// The size must be a positive whole number of sets (`ways * line_bytes`).
    SizeNotWholeSets {
        level: &'static str,
        size_bytes: u64,
        set_bytes: u64,
    },
    /// An inclusive LLC keeps one sharer bit per CPU of its socket in a `u64`.
    TooManyCpusForSharerMask(u32),
}

impl fmt::Display for CacheConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheConfigError::LineNotPowerOfTwo(b) => {
                write!(f, "cache line of {b} bytes is not a power of two")
            }
            CacheConfigError::NoCpus => write!(f, "a machine needs a socket and a CPU"),
            CacheConfigError::BadWays { level, ways } => {
                write!(f, "{level} associativity {ways} is outside 1..={MAX_WAYS}")
            }
            CacheConfigError::SizeNotWholeSets {
                level,
                size_bytes,
                set_bytes,
            } => write!(
                f,
                "{level} size {size_bytes} bytes is not a positive whole number of \
                 {set_bytes}-byte sets"
            ),
            CacheConfigError::TooManyCpusForSharerMask(n) => write!(
                f,
                "an inclusive LLC tracks at most 64 CPUs per socket, not {n}"
            ),
        }
    }
}

impl std::error::Error for CacheConfigError {}

/// What one line access costs, by where it was served from, for an engine
/// that plays memory traffic through a [`CacheModel`]: picoseconds per
/// 64-byte line of a *streaming* access (page clearing, copying and a
/// program's sequential writes keep many lines in flight, so these are
/// bandwidth figures, not load-to-use latencies). Values come from the cost
/// profile's `[cache]` section, each with its source.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CacheCosts {
    /// A line served by the CPU's private L2.
    pub l2_hit_line_ps: u64,
    /// A line served by the socket's LLC.
    pub llc_hit_line_ps: u64,
    /// A line that missed every level and came from (or went to) DRAM, as
    /// one core streams alone.
    pub dram_line_ps: u64,
    /// The time one line occupies its socket's memory channels: line bytes
    /// over the socket's sustained DRAM bandwidth. When many cores stream at
    /// once, misses queue for the channels at this rate (0: no limit).
    pub dram_socket_line_ps: u64,
    /// The core's own work per line of a *user* access, added to the
    /// level's cost (Intel cores do not overlap the stores' issue with the
    /// line transfers, as the ECM model of Haswell assumes): a program that
    /// writes every word issues eight 8-byte stores per line.
    pub user_line_ps: u64,
}

impl CacheCosts {
    /// Picoseconds for the accesses counted in `st` on a core that has the
    /// memory channels to itself.
    pub fn ps(&self, st: &CacheStats) -> u64 {
        st.l2_hits * self.l2_hit_line_ps
            + st.llc_hits * self.llc_hit_line_ps
            + st.llc_misses * self.dram_line_ps
    }
}

/// A load or a store. Both look up and fill the same way (write-allocate);
/// the kind is counted so that loads and stores can be reported apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessKind {
    Read,
    Write,
}

/// Where an access was served from.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Level {
    /// A hit in the CPU's private L2.
    L2,
    /// A hit in the socket's LLC.
    Llc,
    /// A miss in every level: the line came from memory.
    Memory,
}

/// Line accesses counted by level.
///
/// Invariant: `reads + writes` is the number of line accesses; with an L2,
/// `l2_hits + l2_misses` equals it and `llc_hits + llc_misses == l2_misses`;
/// without one, the L2 counters stay 0 and every access is an LLC reference.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CacheStats {
    pub reads: u64,
    pub writes: u64,
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub llc_hits: u64,
    pub llc_misses: u64,
}

impl CacheStats {
    /// Line accesses of either kind.
    pub fn accesses(&self) -> u64 {
        self.reads + self.writes
    }

    /// Accesses that reached the LLC (perf's `cache-references`).
    pub fn llc_references(&self) -> u64 {
        self.llc_hits + self.llc_misses
    }

    /// LLC misses per 100 LLC references, as perf reports
    /// `cache-misses / cache-references`; 0 when there were none. Floating
    /// point only here, for printing: the counters are integers.
    pub fn miss_rate_pct(&self) -> f64 {
        let refs = self.llc_references();
        if refs == 0 {
            0.0
        } else {
            self.llc_misses as f64 * 100.0 / refs as f64
        }
    }
}

impl AddAssign for CacheStats {
    fn add_assign(&mut self, o: CacheStats) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.l2_hits += o.l2_hits;
        self.l2_misses += o.l2_misses;
        self.llc_hits += o.llc_hits;
        self.llc_misses += o.llc_misses;
    }
}

/// A line's place in one cache.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Pos {
    set: u32,
    tag: u32,
}

impl Pos {
    /// The position of the next line, without a division: consecutive lines
    /// fall in consecutive sets, and the tag goes up when the set wraps.
    #[inline(always)]
    fn advance(&mut self, nr_sets: u32) {
        self.set += 1;
        if self.set == nr_sets {
            self.set = 0;
            self.tag += 1;
        }
    }
}

/// Ways per 64-bit word of a set's packed bytes (ages, tag fingerprints).
const WAYS_PER_WORD: usize = 8;

/// The low bit of every byte of a word.
const LO: u64 = 0x0101_0101_0101_0101;

/// The high bit of every byte of a word.
const HI: u64 = 0x8080_8080_8080_8080;

/// The age of a padding byte (the last word's bytes past `ways`): above
/// every real age (at most `MAX_WAYS - 1`), so never the oldest and never
/// aged, and below 0x80, which the byte-wise arithmetic needs.
const PAD_AGE: u8 = 0x7f;

/// `b` in every byte of a word.
#[inline(always)]
fn splat(b: u8) -> u64 {
    b as u64 * LO
}

/// The high bit of each byte of `x` that is zero, and maybe of bytes above
/// one that is (a borrow); the lowest set bit is always exact, and a word
/// with no zero byte gives 0.
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(LO) & !x & HI
}

/// The high bit of each byte of `a` below `age`, for bytes and `age`
/// all below 0x80 (no byte borrows from its neighbour).
#[inline(always)]
fn bytes_below(a: u64, age: u8) -> u64 {
    !((a | HI) - splat(age)) & HI
}

/// One set-associative cache with true-LRU sets kept as age ranks.
///
/// Each way of a set has an age: its rank in recency order, 0 for the most
/// recently used up to `ways - 1` for the least. The ages of a set are always
/// a permutation of `0..ways`, and every empty way is older than every valid
/// one, so a miss fills an empty way while there is one and otherwise evicts
/// the least recently used line: exact LRU. A hit on a line of age `a` makes
/// every younger line one older and the line 0.
///
/// # Layout
///
/// A set's ages are bytes packed eight to a `u64` word, and so is a one-byte
/// fingerprint of each way's tag (its low byte); the two arrays of a set sit
/// side by side in one block of `meta` (fingerprints, then ages: 48 bytes
/// for a 20-way set), so that a lookup and the update that follows touch one
/// or two host cache lines. The ages are updated a word at a time with
/// byte-wise arithmetic (SWAR): ageing the lines younger than `a` is a
/// subtract, a mask and an add per word, and the oldest way is found by a
/// zero-byte test. A lookup compares the fingerprints a word at a time and
/// checks the full tag (in `tags`) only of the ways whose fingerprint
/// matches, usually none or one. This is the same LRU as an array of ages
/// searched way by way, several times faster; the differential test against
/// a naive model checks every access's outcome and every set's order.
#[derive(Clone, Debug)]
struct SetAssoc {
    nr_sets: u32,
    /// `Some(log2(nr_sets))` when `nr_sets` is a power of two, so that the
    /// set and tag of a line are a mask and a shift rather than divisions.
    sets_shift: Option<u32>,
    ways: usize,
    /// Words per set of fingerprints, and of ages: `ways / 8` rounded up.
    words: usize,
    /// `nr_sets * ways` tags; empty ways hold `INVALID_TAG`, which no
    /// lookup searches for.
    tags: Vec<u32>,
    /// `nr_sets * 2 * words` words: each set's fingerprints then its ages
    /// (padding bytes `PAD_AGE`).
    meta: Vec<u64>,
    /// Parallel to `tags`: the CPUs (bit = CPU index within the socket)
    /// whose L2 may hold the line. Empty when sharers are not tracked.
    sharers: Vec<u64>,
}

impl SetAssoc {
    fn new(nr_sets: u32, ways: u32, track_sharers: bool) -> SetAssoc {
        let ways = ways as usize;
        let words = ways.div_ceil(WAYS_PER_WORD);
        let mut block = vec![0u64; 2 * words];
        for w in 0..words * WAYS_PER_WORD {
            let age = if w < ways { w as u8 } else { PAD_AGE };
            block[words + w / WAYS_PER_WORD] |= (age as u64) << (8 * (w % WAYS_PER_WORD));
        }
        let n = nr_sets as usize * ways;
        SetAssoc {
            nr_sets,
            sets_shift: nr_sets.is_power_of_two().then(|| nr_sets.trailing_zeros()),
            ways,
            words,
            tags: vec![INVALID_TAG; n],
            meta: block.repeat(nr_sets as usize),
            sharers: if track_sharers {
                vec![0; n]
            } else {
                Vec::new()
            },
        }
    }

    #[inline(always)]
    fn pos(&self, line: u64) -> Pos {
        let (set, tag) = match self.sets_shift {
            Some(shift) => (line & (self.nr_sets as u64 - 1), line >> shift),
            None => (line % self.nr_sets as u64, line / self.nr_sets as u64),
        };
        assert!(
            tag < INVALID_TAG as u64,
            "line {line:#x} is beyond the physical range the cache model can tag"
        );
        Pos {
            set: set as u32,
            tag: tag as u32,
        }
    }

    fn line(&self, p: Pos) -> u64 {
        p.tag as u64 * self.nr_sets as u64 + p.set as u64
    }

    /// The age of `way` in `set`.
    fn age(&self, set: u32, way: usize) -> u8 {
        let w = self.meta[set as usize * 2 * self.words + self.words + way / WAYS_PER_WORD];
        (w >> (8 * (way % WAYS_PER_WORD))) as u8
    }

    /// The way holding `tag` in `set`, if any: the fingerprints a word at a
    /// time, then the full tag of each way whose fingerprint matches
    /// (usually none on a miss, the one on a hit). Padding bytes never
    /// match a real way.
    #[inline(always)]
    fn find(&self, set: u32, tag: u32) -> Option<usize> {
        debug_assert_ne!(tag, INVALID_TAG);
        let base = set as usize * 2 * self.words;
        let fps = &self.meta[base..base + self.words];
        let tags = &self.tags[set as usize * self.ways..][..self.ways];
        let f = splat(tag as u8);
        for (k, &word) in fps.iter().enumerate() {
            let mut z = zero_bytes(word ^ f);
            while z != 0 {
                let way = k * WAYS_PER_WORD + z.trailing_zeros() as usize / 8;
                if way < self.ways && tags[way] == tag {
                    return Some(way);
                }
                z &= z - 1;
            }
        }
        None
    }

    /// Makes `way` of `set` the most recently used: every line younger than
    /// it ages by one.
    #[inline(always)]
    fn make_mru(&mut self, set: u32, way: usize) {
        let age = self.age(set, way);
        let base = set as usize * 2 * self.words + self.words;
        let ages = &mut self.meta[base..base + self.words];
        for a in ages.iter_mut() {
            *a += bytes_below(*a, age) >> 7;
        }
        ages[way / WAYS_PER_WORD] &= !(0xff << (8 * (way % WAYS_PER_WORD)));
    }

    /// Evicts the least recently used way of `set` (an empty one while any
    /// is) and makes it the most recently used, in one pass over the ages:
    /// the oldest way is the one of age `ways - 1`; every other way ages by
    /// one and it becomes 0. Returns the way.
    #[inline(always)]
    fn evict_lru(&mut self, set: u32) -> usize {
        let oldest = (self.ways - 1) as u8;
        let base = set as usize * 2 * self.words + self.words;
        let ages = &mut self.meta[base..base + self.words];
        let mut victim = usize::MAX;
        for (k, a) in ages.iter_mut().enumerate() {
            // Exactly one way has age `oldest`: the lowest flagged byte of
            // the first word that has one.
            let z = zero_bytes(*a ^ splat(oldest));
            let inc = bytes_below(*a, oldest) >> 7;
            if z != 0 && victim == usize::MAX {
                let byte = z.trailing_zeros() as usize / 8;
                victim = k * WAYS_PER_WORD + byte;
                *a &= !(0xff << (8 * byte));
            }
            *a += inc;
        }
        assert!(victim != usize::MAX, "set {set} had no way of age {oldest}");
        victim
    }

    /// Looks the line up; on a hit makes it the most recently used and adds
    /// `sharer` to its sharer mask. Returns whether it hit.
    #[inline(always)]
    fn touch(&mut self, p: Pos, sharer: u64) -> bool {
        let Some(way) = self.find(p.set, p.tag) else {
            return false;
        };
        self.make_mru(p.set, way);
        if !self.sharers.is_empty() {
            self.sharers[p.set as usize * self.ways + way] |= sharer;
        }
        true
    }

    /// Inserts a line known to be absent as the most recently used, evicting
    /// the least recently used. Returns the victim's tag ([`INVALID_TAG`] if
    /// the way was empty) and sharer mask.
    #[inline(always)]
    fn fill(&mut self, p: Pos, sharer: u64) -> (u32, u64) {
        let way = self.evict_lru(p.set);
        let fp = &mut self.meta[p.set as usize * 2 * self.words + way / WAYS_PER_WORD];
        let shift = 8 * (way % WAYS_PER_WORD);
        *fp = (*fp & !(0xff << shift)) | ((p.tag as u8 as u64) << shift);
        let victim = std::mem::replace(&mut self.tags[p.set as usize * self.ways + way], p.tag);
        let mut victim_sharers = 0;
        if !self.sharers.is_empty() {
            let i = p.set as usize * self.ways + way;
            victim_sharers = std::mem::replace(&mut self.sharers[i], sharer);
        }
        (victim, victim_sharers)
    }

    /// Drops the line if present: its way becomes empty and the oldest.
    #[inline(always)]
    fn remove(&mut self, p: Pos) -> bool {
        let Some(way) = self.find(p.set, p.tag) else {
            return false;
        };
        self.remove_way(p, way);
        true
    }

    /// Empties `way` of `set`, which holds `p`: it becomes the oldest.
    #[cold]
    fn remove_way(&mut self, p: Pos, way: usize) {
        self.tags[p.set as usize * self.ways + way] = INVALID_TAG;
        if !self.sharers.is_empty() {
            self.sharers[p.set as usize * self.ways + way] = 0;
        }
        let age = self.age(p.set, way);
        let mut ages = self.ages_of(p.set);
        for a in &mut ages[..self.ways] {
            if *a > age {
                *a -= 1;
            }
        }
        ages[way] = (self.ways - 1) as u8;
        self.set_ages(p.set, &ages);
    }

    /// The ages of `set`, one byte per way, padding included.
    fn ages_of(&self, set: u32) -> [u8; MAX_WAYS as usize] {
        let mut out = [0u8; MAX_WAYS as usize];
        let base = set as usize * 2 * self.words + self.words;
        for (k, w) in self.meta[base..base + self.words].iter().enumerate() {
            out[k * WAYS_PER_WORD..][..WAYS_PER_WORD].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Writes back ages read by [`SetAssoc::ages_of`].
    fn set_ages(&mut self, set: u32, ages: &[u8; MAX_WAYS as usize]) {
        let base = set as usize * 2 * self.words + self.words;
        for (k, w) in self.meta[base..base + self.words].iter_mut().enumerate() {
            let bytes: [u8; WAYS_PER_WORD] = ages[k * WAYS_PER_WORD..][..WAYS_PER_WORD]
                .try_into()
                .expect("a word of ages");
            *w = u64::from_le_bytes(bytes);
        }
    }

    fn flush(&mut self) {
        *self = SetAssoc::new(self.nr_sets, self.ways as u32, !self.sharers.is_empty());
    }

    /// The lines of a set, most recently used first.
    fn set_lines(&self, set: u32) -> Vec<u64> {
        let tags = &self.tags[set as usize * self.ways..][..self.ways];
        let ages = self.ages_of(set);
        let mut ways: Vec<usize> = (0..self.ways).filter(|&w| tags[w] != INVALID_TAG).collect();
        ways.sort_unstable_by_key(|&w| ages[w]);
        ways.into_iter()
            .map(|w| self.line(Pos { set, tag: tags[w] }))
            .collect()
    }

    fn sharers_of(&self, p: Pos) -> Option<u64> {
        let way = self.find(p.set, p.tag)?;
        Some(
            self.sharers
                .get(p.set as usize * self.ways + way)
                .copied()
                .unwrap_or(0),
        )
    }

    fn check_invariants(&self, what: &str) {
        for set in 0..self.nr_sets {
            let tags = &self.tags[set as usize * self.ways..][..self.ways];
            let all_ages = self.ages_of(set);
            assert!(
                all_ages[self.ways..self.words * WAYS_PER_WORD]
                    .iter()
                    .all(|&a| a == PAD_AGE),
                "{what}: set {set} padding ages were written"
            );
            let ages = &all_ages[..self.ways];
            let fps = &self.meta[set as usize * 2 * self.words..][..self.words];
            for (w, &t) in tags.iter().enumerate() {
                let fp = (fps[w / WAYS_PER_WORD] >> (8 * (w % WAYS_PER_WORD))) as u8;
                assert!(
                    t == INVALID_TAG || fp == t as u8,
                    "{what}: set {set} way {w}: fingerprint {fp:#x} of tag {t:#x}"
                );
            }
            let mut seen = [false; MAX_WAYS as usize];
            for &a in &ages[..self.ways] {
                assert!(
                    (a as usize) < self.ways && !seen[a as usize],
                    "{what}: set {set} ages {:?} are not a permutation",
                    &ages[..self.ways]
                );
                seen[a as usize] = true;
            }
            let nr_valid = tags.iter().filter(|&&t| t != INVALID_TAG).count();
            for w in 0..self.ways {
                let valid = tags[w] != INVALID_TAG;
                assert_eq!(
                    valid,
                    (ages[w] as usize) < nr_valid,
                    "{what}: set {set} way {w}: an empty way is younger than a valid one"
                );
                if valid {
                    assert!(
                        !tags[w + 1..].contains(&tags[w]),
                        "{what}: set {set} holds tag {:#x} twice",
                        tags[w]
                    );
                } else if !self.sharers.is_empty() {
                    assert_eq!(
                        self.sharers[set as usize * self.ways + w],
                        0,
                        "{what}: set {set} empty way {w} has sharers"
                    );
                }
            }
        }
    }
}

/// The position of one line in the L2 and the LLC, advanced line by line
/// through a range.
#[derive(Clone, Copy)]
struct Cursor {
    l2: Pos,
    llc: Pos,
}

/// The caches of a whole machine. See the module documentation.
#[derive(Clone, Debug)]
pub struct CacheModel {
    cfg: CacheConfig,
    line_shift: u32,
    /// One per socket.
    llc: Vec<SetAssoc>,
    /// One per CPU; empty without an L2.
    l2: Vec<SetAssoc>,
    /// One per CPU.
    stats: Vec<CacheStats>,
}

impl CacheModel {
    /// An empty (cold) cache hierarchy of shape `cfg`.
    pub fn new(cfg: CacheConfig) -> Result<CacheModel, CacheConfigError> {
        cfg.validate()?;
        let track_sharers = cfg.l2.is_some() && cfg.inclusion == LlcInclusion::Inclusive;
        let llc_sets = cfg.llc_nr_sets();
        let llc = (0..cfg.sockets)
            .map(|_| SetAssoc::new(llc_sets, cfg.llc_ways, track_sharers))
            .collect();
        let l2 = match cfg.l2 {
            Some((size, ways)) => {
                let sets = (size / (ways as u64 * cfg.line_bytes as u64)) as u32;
                (0..cfg.nr_cpus())
                    .map(|_| SetAssoc::new(sets, ways, false))
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(CacheModel {
            line_shift: cfg.line_bytes.trailing_zeros(),
            llc,
            l2,
            stats: vec![CacheStats::default(); cfg.nr_cpus() as usize],
            cfg,
        })
    }

    /// The shape this model was built with.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// Counters of one CPU since the last [`CacheModel::reset_stats`].
    pub fn stats(&self, cpu: VcpuId) -> &CacheStats {
        &self.stats[cpu.idx()]
    }

    /// Counters of all CPUs together.
    pub fn total_stats(&self) -> CacheStats {
        let mut t = CacheStats::default();
        for s in &self.stats {
            t += *s;
        }
        t
    }

    /// Zeroes every CPU's counters; the cache contents stay.
    pub fn reset_stats(&mut self) {
        self.stats.fill(CacheStats::default());
    }

    /// The CPU's index, its socket and its bit in the socket's sharer masks,
    /// panicking on a CPU the machine lacks.
    #[inline(always)]
    fn cpu_socket(&self, cpu: VcpuId) -> (usize, usize, u64) {
        let c = cpu.idx();
        assert!(
            c < self.stats.len(),
            "{cpu:?} is not one of the machine's {} CPUs",
            self.stats.len()
        );
        let cps = self.cfg.cpus_per_socket as usize;
        (c, c / cps, 1u64 << (c % cps))
    }

    fn cursor(&self, line: u64) -> Cursor {
        Cursor {
            l2: self
                .l2
                .first()
                .map_or(Pos { set: 0, tag: 0 }, |c| c.pos(line)),
            llc: self.llc[0].pos(line),
        }
    }

    #[inline(always)]
    fn advance(&self, cur: &mut Cursor) {
        if let Some(l2) = self.l2.first() {
            cur.l2.advance(l2.nr_sets);
        }
        cur.llc.advance(self.llc[0].nr_sets);
    }

    /// One line access by `cpu` on `socket`. The hot path: no division
    /// unless an eviction back-invalidates L2 copies.
    #[inline(always)]
    fn access_line(
        &mut self,
        cpu: usize,
        socket: usize,
        sharer: u64,
        cur: Cursor,
        st: &mut CacheStats,
    ) -> Level {
        let has_l2 = !self.l2.is_empty();
        if has_l2 {
            if self.l2[cpu].touch(cur.l2, 0) {
                st.l2_hits += 1;
                return Level::L2;
            }
            st.l2_misses += 1;
        }
        let llc = &mut self.llc[socket];
        let level = if llc.touch(cur.llc, sharer) {
            st.llc_hits += 1;
            Level::Llc
        } else {
            st.llc_misses += 1;
            let (victim, victim_sharers) = llc.fill(cur.llc, sharer);
            if victim_sharers != 0 {
                let line = llc.line(Pos {
                    set: cur.llc.set,
                    tag: victim,
                });
                self.back_invalidate(socket, line, victim_sharers);
            }
            Level::Memory
        };
        if has_l2 {
            // The L2's own victim leaves silently: its sharer bit in the LLC
            // stays set, as Intel's core-valid bits do.
            self.l2[cpu].fill(cur.l2, 0);
        }
        level
    }

    /// Removes `line`, just evicted from `socket`'s inclusive LLC, from the
    /// L2s of the CPUs in `sharers`. Under a stream nearly every LLC victim
    /// has a sharer bit set (the mask is conservative), so this is a hot path:
    /// usually one L2 lookup that misses.
    #[inline(always)]
    fn back_invalidate(&mut self, socket: usize, line: u64, mut sharers: u64) {
        let first_cpu = socket * self.cfg.cpus_per_socket as usize;
        while sharers != 0 {
            let c = first_cpu + sharers.trailing_zeros() as usize;
            sharers &= sharers - 1;
            let l2 = &mut self.l2[c];
            let p = l2.pos(line);
            l2.remove(p);
        }
    }

    /// One access by `cpu` to the line holding physical address `phys`.
    /// Updates the CPU's counters and returns where the line was found.
    pub fn access(&mut self, cpu: VcpuId, phys: u64, kind: AccessKind) -> Level {
        let (c, socket, sharer) = self.cpu_socket(cpu);
        let cur = self.cursor(phys >> self.line_shift);
        let mut st = count_kind(kind, 1);
        let level = self.access_line(c, socket, sharer, cur, &mut st);
        self.stats[c] += st;
        level
    }

    /// Accesses by `cpu` to every line overlapping `[start_phys, start_phys +
    /// len_bytes)`, in ascending order. Adds the counts to the CPU's counters
    /// and to `stats`.
    pub fn access_range(
        &mut self,
        cpu: VcpuId,
        start_phys: u64,
        len_bytes: u64,
        kind: AccessKind,
        stats: &mut CacheStats,
    ) {
        if len_bytes == 0 {
            return;
        }
        let (c, socket, sharer) = self.cpu_socket(cpu);
        let first = start_phys >> self.line_shift;
        let last = (start_phys + len_bytes - 1) >> self.line_shift;
        // Checks that the last line can be tagged, so the loop need not.
        self.cursor(last);
        let mut cur = self.cursor(first);
        let mut st = count_kind(kind, last - first + 1);
        for _ in first..=last {
            self.access_line(c, socket, sharer, cur, &mut st);
            self.advance(&mut cur);
        }
        self.stats[c] += st;
        *stats += st;
    }

    /// A copy by `cpu` of `len_bytes` from `src_phys` to `dst_phys`, line by
    /// line: each source line is read and then the destination line written,
    /// as a `rep movs` copy interleaves them. Both ranges must be aligned to
    /// `line_bytes` (pages always are).
    pub fn copy_range(
        &mut self,
        cpu: VcpuId,
        dst_phys: u64,
        src_phys: u64,
        len_bytes: u64,
        stats: &mut CacheStats,
    ) {
        let line_mask = self.cfg.line_bytes as u64 - 1;
        assert!(
            (dst_phys | src_phys | len_bytes) & line_mask == 0,
            "copy_range needs line-aligned ranges: dst {dst_phys:#x} src {src_phys:#x} \
             len {len_bytes:#x}"
        );
        if len_bytes == 0 {
            return;
        }
        let (c, socket, sharer) = self.cpu_socket(cpu);
        let nr = len_bytes >> self.line_shift;
        self.cursor((src_phys >> self.line_shift) + nr - 1);
        self.cursor((dst_phys >> self.line_shift) + nr - 1);
        let mut src = self.cursor(src_phys >> self.line_shift);
        let mut dst = self.cursor(dst_phys >> self.line_shift);
        let mut st = CacheStats {
            reads: nr,
            writes: nr,
            ..CacheStats::default()
        };
        for _ in 0..nr {
            self.access_line(c, socket, sharer, src, &mut st);
            self.access_line(c, socket, sharer, dst, &mut st);
            self.advance(&mut src);
            self.advance(&mut dst);
        }
        self.stats[c] += st;
        *stats += st;
    }

    /// The cache traffic of the kernel's `clear_page()` (x86-64
    /// `clear_page_erms`, a `rep stosb` over one base page): a write to each
    /// line of `pfn`.
    pub fn clear_page(&mut self, cpu: VcpuId, pfn: Pfn, stats: &mut CacheStats) {
        self.access_range(
            cpu,
            pfn.0 << PAGE_SHIFT,
            PAGE_SIZE,
            AccessKind::Write,
            stats,
        );
    }

    /// The cache traffic of the kernel's `copy_page()` (x86-64, one base
    /// page): each line of `src` read, then the same line of `dst` written.
    pub fn copy_page(&mut self, cpu: VcpuId, dst: Pfn, src: Pfn, stats: &mut CacheStats) {
        self.copy_range(
            cpu,
            dst.0 << PAGE_SHIFT,
            src.0 << PAGE_SHIFT,
            PAGE_SIZE,
            stats,
        );
    }

    /// Drops every line of the base page `pfn` from every cache. A real
    /// cache keeps a freed page's lines (see the module's deviations); this
    /// is for tests and explicit flushes.
    pub fn invalidate_page(&mut self, pfn: Pfn) {
        let first = (pfn.0 << PAGE_SHIFT) >> self.line_shift;
        let nr = PAGE_SIZE >> self.line_shift;
        for line in first..first + nr {
            for llc in &mut self.llc {
                let p = llc.pos(line);
                llc.remove(p);
            }
            for l2 in &mut self.l2 {
                let p = l2.pos(line);
                l2.remove(p);
            }
        }
    }

    /// Empties every cache; the counters stay.
    pub fn flush(&mut self) {
        for c in self.llc.iter_mut().chain(self.l2.iter_mut()) {
            c.flush();
        }
    }

    /// Whether the line holding `phys` is in `socket`'s LLC.
    pub fn llc_contains(&self, socket: u32, phys: u64) -> bool {
        let llc = &self.llc[socket as usize];
        llc.sharers_of(llc.pos(phys >> self.line_shift)).is_some()
    }

    /// Whether the line holding `phys` is in `cpu`'s L2 (false without one).
    pub fn l2_contains(&self, cpu: VcpuId, phys: u64) -> bool {
        self.l2.get(cpu.idx()).is_some_and(|l2| {
            let p = l2.pos(phys >> self.line_shift);
            l2.find(p.set, p.tag).is_some()
        })
    }

    /// The lines (line addresses, `phys / line_bytes`) in set `set` of
    /// `socket`'s LLC, most recently used first.
    pub fn llc_set_lines(&self, socket: u32, set: u32) -> Vec<u64> {
        self.llc[socket as usize].set_lines(set)
    }

    /// The lines in set `set` of `cpu`'s L2, most recently used first.
    pub fn l2_set_lines(&self, cpu: VcpuId, set: u32) -> Vec<u64> {
        self.l2[cpu.idx()].set_lines(set)
    }

    /// Panics with a message naming the broken invariant, if one is: each set
    /// holds a line at most once with empty ways at its back, and with an
    /// inclusive LLC every L2 line is in the LLC with the CPU's sharer bit.
    pub fn check_invariants(&self) {
        for (s, llc) in self.llc.iter().enumerate() {
            llc.check_invariants(&format!("LLC of socket {s}"));
        }
        for (c, l2) in self.l2.iter().enumerate() {
            l2.check_invariants(&format!("L2 of cpu {c}"));
            if self.cfg.inclusion != LlcInclusion::Inclusive {
                continue;
            }
            let cps = self.cfg.cpus_per_socket as usize;
            let llc = &self.llc[c / cps];
            for set in 0..l2.nr_sets {
                for line in l2.set_lines(set) {
                    let sharers = llc.sharers_of(llc.pos(line));
                    assert!(
                        sharers.is_some_and(|m| m & (1 << (c % cps)) != 0),
                        "inclusion: line {line:#x} is in the L2 of cpu {c} but not in \
                         its LLC with the cpu's sharer bit ({sharers:?})"
                    );
                }
            }
        }
    }
}

fn count_kind(kind: AccessKind, nr: u64) -> CacheStats {
    match kind {
        AccessKind::Read => CacheStats {
            reads: nr,
            ..CacheStats::default()
        },
        AccessKind::Write => CacheStats {
            writes: nr,
            ..CacheStats::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mm::memory::huge_order::{process_huge_page_order, HugeOrderPolicy};

    use mm::rng::SplitMix64;

    /// The trivially correct model: per set a `Vec` of line addresses, most
    /// recently used first, searched linearly; inclusion enforced by
    /// searching every L2 of the socket on each LLC eviction.
    struct NaiveModel {
        cfg: CacheConfig,
        llc: Vec<Vec<Vec<u64>>>,
        l2: Vec<Vec<Vec<u64>>>,
        l2_sets: u64,
        l2_ways: usize,
    }

    impl NaiveModel {
        fn new(cfg: CacheConfig) -> NaiveModel {
            let (l2_sets, l2_ways) = match cfg.l2 {
                Some((size, ways)) => (size / (ways as u64 * cfg.line_bytes as u64), ways),
                None => (0, 0),
            };
            NaiveModel {
                llc: vec![vec![Vec::new(); cfg.llc_nr_sets() as usize]; cfg.sockets as usize],
                l2: if cfg.l2.is_some() {
                    vec![vec![Vec::new(); l2_sets as usize]; cfg.nr_cpus() as usize]
                } else {
                    Vec::new()
                },
                l2_sets,
                l2_ways: l2_ways as usize,
                cfg,
            }
        }

        /// Moves `line` to the front of `list` if present; returns whether.
        fn hit(list: &mut Vec<u64>, line: u64) -> bool {
            match list.iter().position(|&l| l == line) {
                Some(i) => {
                    list.remove(i);
                    list.insert(0, line);
                    true
                }
                None => false,
            }
        }

        /// Inserts `line` at the front; returns the line pushed out, if any.
        fn insert(list: &mut Vec<u64>, line: u64, ways: usize) -> Option<u64> {
            list.insert(0, line);
            if list.len() > ways {
                list.pop()
            } else {
                None
            }
        }

        fn access(&mut self, cpu: usize, phys: u64) -> Level {
            let line = phys / self.cfg.line_bytes as u64;
            let socket = cpu / self.cfg.cpus_per_socket as usize;
            let l2_set = if self.l2_sets > 0 {
                (line % self.l2_sets) as usize
            } else {
                0
            };
            if !self.l2.is_empty() && Self::hit(&mut self.l2[cpu][l2_set], line) {
                return Level::L2;
            }
            let nr_sets = self.cfg.llc_nr_sets() as u64;
            let set = &mut self.llc[socket][(line % nr_sets) as usize];
            let level = if Self::hit(set, line) {
                Level::Llc
            } else {
                let victim = Self::insert(set, line, self.cfg.llc_ways as usize);
                if let (Some(v), LlcInclusion::Inclusive) = (victim, self.cfg.inclusion) {
                    let cps = self.cfg.cpus_per_socket as usize;
                    for c in socket * cps..(socket + 1) * cps {
                        if let Some(l2) = self.l2.get_mut(c) {
                            l2[(v % self.l2_sets) as usize].retain(|&l| l != v);
                        }
                    }
                }
                Level::Memory
            };
            if !self.l2.is_empty() {
                Self::insert(&mut self.l2[cpu][l2_set], line, self.l2_ways);
            }
            level
        }

        fn invalidate_line(&mut self, line: u64) {
            let nr_sets = self.cfg.llc_nr_sets() as u64;
            for llc in &mut self.llc {
                llc[(line % nr_sets) as usize].retain(|&l| l != line);
            }
            for l2 in &mut self.l2 {
                l2[(line % self.l2_sets) as usize].retain(|&l| l != line);
            }
        }
    }

    fn count(level: Level, st: &mut CacheStats, has_l2: bool) {
        match level {
            Level::L2 => st.l2_hits += 1,
            Level::Llc => st.llc_hits += 1,
            Level::Memory => st.llc_misses += 1,
        }
        if has_l2 && level != Level::L2 {
            st.l2_misses += 1;
        }
    }

    /// Small shapes that exercise every path: power-of-two and other set
    /// counts, an L2 inclusive or not, one socket or two.
    fn differential_configs() -> Vec<CacheConfig> {
        let base = CacheConfig {
            llc_size_bytes: 64 * 8 * 16,
            llc_ways: 8,
            line_bytes: 64,
            l2: None,
            sockets: 1,
            cpus_per_socket: 2,
            inclusion: LlcInclusion::Inclusive,
        };
        vec![
            base.clone(),
            // 12 sets of 5 ways: modulo indexing that is not a mask.
            CacheConfig {
                llc_size_bytes: 64 * 5 * 12,
                llc_ways: 5,
                ..base.clone()
            },
            CacheConfig {
                l2: Some((64 * 2 * 4, 2)),
                sockets: 2,
                cpus_per_socket: 3,
                ..base.clone()
            },
            CacheConfig {
                llc_size_bytes: 64 * 6 * 10,
                llc_ways: 6,
                l2: Some((64 * 4 * 2, 4)),
                cpus_per_socket: 4,
                inclusion: LlcInclusion::NonInclusive,
                ..base.clone()
            },
            CacheConfig {
                llc_size_bytes: 64 * 20 * 6,
                llc_ways: 20,
                l2: Some((64 * 3 * 2, 3)),
                cpus_per_socket: 4,
                ..base.clone()
            },
            // Ages and fingerprints over several words, the last one full
            // (64 ways) or with one way (33).
            CacheConfig {
                llc_size_bytes: 64 * 64 * 4,
                llc_ways: 64,
                l2: Some((64 * 33 * 2, 33)),
                cpus_per_socket: 3,
                ..base
            },
        ]
    }

    /// The fast model and the naive one see the same seeded stream of single
    /// accesses, ranges, copies and invalidations and must agree on every
    /// access's level, on the counters and on the content and LRU order of
    /// every set.
    #[test]
    fn matches_naive_model_on_random_streams() {
        for (i, cfg) in differential_configs().into_iter().enumerate() {
            for seed in 0..4u64 {
                let mut rng = SplitMix64(seed * 1000 + i as u64);
                let mut fast = CacheModel::new(cfg.clone()).unwrap();
                let mut naive = NaiveModel::new(cfg.clone());
                let has_l2 = cfg.l2.is_some();
                // A physical range a few times the LLC, so that lines are
                // both reused and evicted.
                let span = cfg.llc_size_bytes * cfg.sockets as u64 * 3;
                let line = cfg.line_bytes as u64;
                let mut want = CacheStats::default();
                for step in 0..4000 {
                    let cpu = rng.below(cfg.nr_cpus() as u64) as usize;
                    let vcpu = VcpuId(cpu as u32);
                    let addr = rng.below(span);
                    let kind = if rng.below(2) == 0 {
                        AccessKind::Read
                    } else {
                        AccessKind::Write
                    };
                    match rng.below(10) {
                        0..=5 => {
                            let got = fast.access(vcpu, addr, kind);
                            let exp = naive.access(cpu, addr);
                            assert_eq!(got, exp, "cfg {i} seed {seed} step {step} addr {addr:#x}");
                            count(exp, &mut want, has_l2);
                        }
                        6..=7 => {
                            let len = rng.below(40 * line);
                            let mut st = CacheStats::default();
                            fast.access_range(vcpu, addr, len, kind, &mut st);
                            let mut exp = CacheStats::default();
                            if len > 0 {
                                for l in addr / line..=(addr + len - 1) / line {
                                    count(naive.access(cpu, l * line), &mut exp, has_l2);
                                }
                            }
                            assert_eq!(
                                (st.l2_hits, st.l2_misses, st.llc_hits, st.llc_misses),
                                (exp.l2_hits, exp.l2_misses, exp.llc_hits, exp.llc_misses),
                                "cfg {i} seed {seed} step {step}: range"
                            );
                            want += exp;
                        }
                        8 => {
                            let nr = rng.below(30);
                            let src = addr / line * line;
                            let dst = rng.below(span) / line * line;
                            let mut st = CacheStats::default();
                            fast.copy_range(vcpu, dst, src, nr * line, &mut st);
                            let mut exp = CacheStats::default();
                            for k in 0..nr {
                                count(naive.access(cpu, src + k * line), &mut exp, has_l2);
                                count(naive.access(cpu, dst + k * line), &mut exp, has_l2);
                            }
                            assert_eq!(
                                (st.l2_hits, st.llc_hits, st.llc_misses),
                                (exp.l2_hits, exp.llc_hits, exp.llc_misses),
                                "cfg {i} seed {seed} step {step}: copy"
                            );
                            want += exp;
                        }
                        _ => {
                            let pfn = addr >> PAGE_SHIFT;
                            fast.invalidate_page(Pfn(pfn));
                            let first = (pfn << PAGE_SHIFT) / line;
                            for l in first..first + PAGE_SIZE / line {
                                naive.invalidate_line(l);
                            }
                        }
                    }
                    if step % 500 == 0 {
                        fast.check_invariants();
                    }
                }
                fast.check_invariants();
                let got = fast.total_stats();
                assert_eq!(
                    (got.l2_hits, got.l2_misses, got.llc_hits, got.llc_misses),
                    (want.l2_hits, want.l2_misses, want.llc_hits, want.llc_misses),
                    "cfg {i} seed {seed}: totals"
                );
                for s in 0..cfg.sockets {
                    for set in 0..cfg.llc_nr_sets() {
                        assert_eq!(
                            fast.llc_set_lines(s, set),
                            naive.llc[s as usize][set as usize],
                            "cfg {i} seed {seed}: LLC socket {s} set {set}"
                        );
                    }
                }
                for c in 0..naive.l2.len() {
                    for set in 0..naive.l2_sets as u32 {
                        assert_eq!(
                            fast.l2_set_lines(VcpuId(c as u32), set),
                            naive.l2[c][set as usize],
                            "cfg {i} seed {seed}: L2 of cpu {c} set {set}"
                        );
                    }
                }
            }
        }
    }

    fn llc_only(size: u64, ways: u32) -> CacheModel {
        CacheModel::new(CacheConfig {
            llc_size_bytes: size,
            llc_ways: ways,
            line_bytes: 64,
            l2: None,
            sockets: 1,
            cpus_per_socket: 2,
            inclusion: LlcInclusion::Inclusive,
        })
        .unwrap()
    }

    #[test]
    fn working_set_smaller_than_cache_hits_after_warm_up() {
        let mut cache = llc_only(256 << 10, 16);
        let mut warm = CacheStats::default();
        cache.access_range(VcpuId(0), 0, 128 << 10, AccessKind::Write, &mut warm);
        assert_eq!(warm.llc_misses, 2048, "a cold cache misses on every line");
        for _ in 0..5 {
            let mut st = CacheStats::default();
            cache.access_range(VcpuId(1), 0, 128 << 10, AccessKind::Read, &mut st);
            assert_eq!((st.llc_hits, st.llc_misses), (2048, 0));
        }
        assert_eq!(
            cache.total_stats().miss_rate_pct(),
            2048.0 * 100.0 / (6.0 * 2048.0)
        );
    }

    /// LRU's pathological case: a cyclic sweep over twice the capacity
    /// evicts every line just before it is used again.
    #[test]
    fn cyclic_sweep_over_twice_the_cache_always_misses() {
        let mut cache = llc_only(256 << 10, 16);
        let mut st = CacheStats::default();
        for _ in 0..4 {
            cache.access_range(VcpuId(0), 0, 512 << 10, AccessKind::Read, &mut st);
        }
        assert_eq!(st.llc_hits, 0);
        assert_eq!(st.llc_misses, 4 * 8192);
        assert_eq!(st.miss_rate_pct(), 100.0);
    }

    /// With an inclusive LLC, another CPU's stream that evicts a line from
    /// the LLC also takes it out of the L2 that still held it; without
    /// inclusion the L2 keeps it.
    #[test]
    fn inclusive_llc_back_invalidates_l2() {
        for (inclusion, l2_keeps) in [
            (LlcInclusion::Inclusive, false),
            (LlcInclusion::NonInclusive, true),
        ] {
            let mut cache = CacheModel::new(CacheConfig {
                llc_size_bytes: 64 << 10,
                llc_ways: 8,
                line_bytes: 64,
                l2: Some((16 << 10, 4)),
                sockets: 1,
                cpus_per_socket: 2,
                inclusion,
            })
            .unwrap();
            assert_eq!(
                cache.access(VcpuId(0), 0x1000, AccessKind::Read),
                Level::Memory
            );
            assert_eq!(cache.access(VcpuId(0), 0x1000, AccessKind::Read), Level::L2);
            let mut st = CacheStats::default();
            cache.access_range(VcpuId(1), 1 << 20, 256 << 10, AccessKind::Read, &mut st);
            cache.check_invariants();
            assert!(!cache.llc_contains(0, 0x1000));
            assert_eq!(
                cache.l2_contains(VcpuId(0), 0x1000),
                l2_keeps,
                "{inclusion:?}"
            );
            let want = if l2_keeps { Level::L2 } else { Level::Memory };
            assert_eq!(cache.access(VcpuId(0), 0x1000, AccessKind::Read), want);
        }
    }

    #[test]
    fn sockets_have_separate_llcs() {
        let mut cache = CacheModel::new(CacheConfig {
            sockets: 2,
            ..CacheConfig::haswell_e5_2699_v3_llc_only()
        })
        .unwrap();
        assert_eq!(
            cache.access(VcpuId(0), 0x40, AccessKind::Read),
            Level::Memory
        );
        assert_eq!(cache.access(VcpuId(35), 0x40, AccessKind::Read), Level::Llc);
        assert_eq!(
            cache.access(VcpuId(36), 0x40, AccessKind::Read),
            Level::Memory
        );
        assert_eq!(cache.stats(VcpuId(35)).llc_hits, 1);
        assert_eq!(cache.total_stats().llc_references(), 3);
    }

    #[test]
    fn flush_and_invalidate_empty_the_caches() {
        let mut cache = CacheModel::new(CacheConfig::haswell_e5_2699_v3()).unwrap();
        let mut st = CacheStats::default();
        cache.clear_page(VcpuId(3), Pfn(7), &mut st);
        assert_eq!((st.writes, st.llc_misses), (64, 64));
        assert!(cache.llc_contains(0, 7 << PAGE_SHIFT));
        cache.invalidate_page(Pfn(7));
        assert!(!cache.llc_contains(0, 7 << PAGE_SHIFT));
        assert!(!cache.l2_contains(VcpuId(3), 7 << PAGE_SHIFT));
        cache.copy_page(VcpuId(3), Pfn(9), Pfn(8), &mut st);
        cache.flush();
        cache.check_invariants();
        assert_eq!(
            cache.access(VcpuId(3), 9 << PAGE_SHIFT, AccessKind::Read),
            Level::Memory
        );
    }

    #[test]
    fn bad_configs_are_rejected() {
        let good = CacheConfig::haswell_e5_2699_v3();
        assert_eq!(good.validate(), Ok(()));
        assert_eq!(good.llc_nr_sets(), 36864);
        let bad = CacheConfig {
            llc_size_bytes: 1000,
            ..good.clone()
        };
        assert!(matches!(
            CacheModel::new(bad),
            Err(CacheConfigError::SizeNotWholeSets { level: "LLC", .. })
        ));
        let bad = CacheConfig {
            line_bytes: 48,
            ..good.clone()
        };
        assert_eq!(bad.validate(), Err(CacheConfigError::LineNotPowerOfTwo(48)));
        let bad = CacheConfig {
            cpus_per_socket: 65,
            ..good
        };
        assert_eq!(
            bad.validate(),
            Err(CacheConfigError::TooManyCpusForSharerMask(65))
        );
    }

    /// Seed 000 in miniature: CPU 0 copies a 2 MiB huge page sub-page by
    /// sub-page while CPU 1 streams through unrelated memory, then reads the
    /// target sub-page of the copy. Copying the target last leaves its lines
    /// in the LLC; copying in address order lets the later sub-pages and the
    /// other CPU's stream evict them.
    #[test]
    fn target_last_copy_keeps_the_target_hot() {
        const NR: u32 = 512;
        let src = 64u64 << 20;
        let dst = 128u64 << 20;
        let noise = 256u64 << 20;
        for target in [0, 1, 200, 511] {
            let mut target_hits = [0u64; 2];
            for (k, policy) in [HugeOrderPolicy::Sequential, HugeOrderPolicy::TargetLast]
                .into_iter()
                .enumerate()
            {
                // 1 MiB, 16-way LLC shared by the two CPUs: the copy alone
                // (4 MiB of traffic) is four times the cache.
                let mut cache = llc_only(1 << 20, 16);
                let mut st = CacheStats::default();
                for (i, sub) in process_huge_page_order(policy, NR, target).enumerate() {
                    let off = sub as u64 * PAGE_SIZE;
                    cache.copy_range(VcpuId(0), dst + off, src + off, PAGE_SIZE, &mut st);
                    let n = noise + (i as u64 % 256) * PAGE_SIZE;
                    cache.access_range(VcpuId(1), n, PAGE_SIZE, AccessKind::Read, &mut st);
                }
                let mut touch = CacheStats::default();
                let t = dst + target as u64 * PAGE_SIZE;
                cache.access_range(VcpuId(0), t, PAGE_SIZE, AccessKind::Write, &mut touch);
                target_hits[k] = touch.llc_hits;
            }
            assert_eq!(
                target_hits[1], 64,
                "target-last copy, target {target}: all hot"
            );
            // A target at the very end is last in address order too.
            let seq_want = if target == NR - 1 { 64 } else { 0 };
            assert_eq!(target_hits[0], seq_want, "sequential copy, target {target}");
        }
    }
}
