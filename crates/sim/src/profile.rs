//! Cost profiles: nanoseconds for each named kernel step, each with its source.
//!
//! A profile is data, read from a file by the CLI (profiles/*.toml); this
//! module checks it is complete and turns it into the table the model uses.

use crate::cache::{CacheConfig, CacheCosts, LlcInclusion};
use crate::machine::Machine;
use mm::cost::{Cost, CostTable};
use std::collections::BTreeMap;
use std::fmt;

/// One cost with its provenance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostEntry {
    /// Nanoseconds.
    pub ns: u64,
    /// Where the figure comes from: a publication, a datasheet, or the
    /// command that measured it.
    pub source: String,
    /// The plausible range `(low, high)` of a figure that is an estimate
    /// or a bound, if the profile gives one; `reproduce --bands` moves the
    /// figure across it.
    pub band: Option<(u64, u64)>,
}

/// A complete cost profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name (printed with every result).
    pub name: String,
    /// What machine it describes.
    pub description: String,
    /// Every cost, by key.
    pub entries: BTreeMap<String, CostEntry>,
    /// The cache hierarchy, for experiments that turn the cache model on.
    pub cache: Option<CacheProfile>,
    /// The machine's NUMA topology and memory system (the profile's
    /// `[numa]` section), if given.
    pub numa: Option<NumaProfile>,
    /// How CPUs share cores and last-level caches (the profile's
    /// `[topology]` section), if given: the cache-line ownership model of
    /// the zone lock's lines ([`mm::cacheline`]) runs only with it.
    pub topology: Option<TopologyProfile>,
}

/// The profile's `[topology]` section, each value with its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyProfile {
    /// Hardware threads per core.
    pub threads_per_core: u32,
    /// Cores sharing one last-level cache.
    pub cores_per_llc: u32,
    /// Each core's private L2 in bytes and the load-to-use latency of a
    /// line found in the LLC, in ns: the private-L2 model of the line
    /// records ([`mm::cacheline::LlcClocks::set_l2`]), if both are given.
    pub l2: Option<(u64, u64)>,
    /// Misses one core keeps in flight (its L1 line fill buffers), for the
    /// overlap of the lines a `zone->lock` hold touches
    /// ([`mm::cacheline::MissWindow`]); `None`: every line in turn.
    pub line_fill_buffers: Option<u32>,
    /// Where each value comes from, by key.
    pub sources: BTreeMap<String, String>,
    /// The plausible range of each value that is an estimate, by key
    /// (`llc_hit_ns`).
    pub bands: BTreeMap<String, (u64, u64)>,
}

impl TopologyProfile {
    /// The keys of the section, each of which needs a source.
    pub const KEYS: &'static [&'static str] = &["threads_per_core", "cores_per_llc"];

    /// The topology of `machine` (every node the same size, as the
    /// ownership model assumes), or why it does not fit.
    pub fn for_machine(&self, machine: &Machine) -> Result<mm::cacheline::CpuTopology, String> {
        let cpus = machine.nodes.first().map_or(0, |n| n.cpus);
        if machine.nodes.iter().any(|n| n.cpus != cpus) {
            return Err("the cache-line model needs the same number of CPUs on every node".into());
        }
        if self.threads_per_core == 0
            || self.cores_per_llc == 0
            || !cpus.is_multiple_of(self.threads_per_core)
        {
            return Err(format!(
                "topology: threads_per_core = {} and cores_per_llc = {} must be positive and divide the node's {cpus} CPUs",
                self.threads_per_core, self.cores_per_llc
            ));
        }
        for k in Self::KEYS {
            if self.sources.get(*k).is_none_or(|s| s.trim().is_empty()) {
                return Err(format!(
                    "topology.{k} has no source; every value must say where it comes from"
                ));
            }
        }
        Ok(mm::cacheline::CpuTopology {
            cpus_per_node: cpus,
            threads_per_core: self.threads_per_core,
            cores_per_llc: self.cores_per_llc,
        })
    }
}

/// A machine's NUMA topology and memory bandwidths, each value with its
/// source (the profile's `[numa]` section). Bandwidths in MB/s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaProfile {
    /// `node_distance()` (the ACPI SLIT), one row per node; 10 is local.
    pub distance: Vec<Vec<u32>>,
    /// Hardware threads per physical core.
    pub threads_per_core: u32,
    /// Two SMT siblings copying together, % of one thread alone.
    pub smt_pair_pct: u64,
    /// Memory bandwidth of one node.
    pub node_mbps: u64,
    /// Bandwidth between two nodes, one direction.
    pub link_mbps: u64,
    /// DMA channels usable for memory copies.
    pub dma_channels: u32,
    /// Copy bandwidth of one DMA channel.
    pub dma_channel_mbps: u64,
    /// Cache misses one core keeps in flight (its L1D line fill buffers),
    /// if given: a copy thread's bandwidth is then this many lines per
    /// source-plus-destination latency (`dram_local_ns`/`dram_remote_ns`)
    /// instead of the single rate of `copy_page_ns` scaled by the SLIT.
    pub line_fill_buffers: Option<u32>,
    /// Flits of one 64-byte line's data packet on the link, if given: the
    /// copy model then counts the link's traffic per direction, snoops
    /// included (`mm::copy_page`, "The link's traffic").
    pub link_data_flits: Option<u32>,
    /// Flits of the snoop response a local miss sends back over the link
    /// (source snooping; 0 for a home-snooping directory), if given.
    pub link_snoop_flits: Option<u32>,
    /// Exit latency of the idle state a package reaches when every CPU of
    /// it has idled, if given (package C6 on Intel): work queued on an
    /// asleep package waits for it (`mm::copy_page::NumaHw`).
    pub package_idle_exit_ns: Option<u64>,
    /// That state's target residency: how long the package's CPUs must
    /// have idled for the idle governor to pick it (needed with the exit
    /// latency).
    pub package_idle_residency_ns: Option<u64>,
    /// Where each value comes from, by key.
    pub sources: BTreeMap<String, String>,
    /// The plausible range of values that are estimates or bounds, by key.
    pub bands: BTreeMap<String, (u64, u64)>,
}

impl NumaProfile {
    /// The keys of the `[numa]` section, each of which needs a source.
    pub const KEYS: &'static [&'static str] = &[
        "distance",
        "threads_per_core",
        "smt_pair_pct",
        "node_mbps",
        "link_mbps",
        "dma_channels",
        "dma_channel_mbps",
    ];

    /// Checks the section against a machine of `nodes` nodes with
    /// `cpus[i]` CPUs each: a square distance matrix, each node nearest to
    /// itself (10), CPUs a multiple of the SMT width, positive bandwidths.
    pub fn check(&self, cpus: &[u32]) -> Result<(), String> {
        let n = cpus.len();
        if self.distance.len() != n || self.distance.iter().any(|r| r.len() != n) {
            return Err(format!(
                "numa.distance must be a {n} x {n} matrix for a machine of {n} node{}",
                if n == 1 { "" } else { "s" }
            ));
        }
        for (a, row) in self.distance.iter().enumerate() {
            if row[a] != 10 || row.iter().any(|&d| d < 10) {
                return Err(format!(
                    "numa.distance row {a}: a node's distance to itself is 10 and no distance is smaller"
                ));
            }
        }
        if self.threads_per_core == 0 || cpus.iter().any(|c| c % self.threads_per_core != 0) {
            return Err(format!(
                "numa.threads_per_core = {}: every node's CPU count must be a positive multiple of it",
                self.threads_per_core
            ));
        }
        if self.node_mbps == 0 || self.link_mbps == 0 || self.smt_pair_pct == 0 {
            return Err("numa: node_mbps, link_mbps and smt_pair_pct must be positive".into());
        }
        if self.package_idle_exit_ns.is_some() != self.package_idle_residency_ns.is_some() {
            return Err(
                "numa: package_idle_exit_ns and package_idle_residency_ns go together (the state's exit latency and its target residency)"
                    .into(),
            );
        }
        for k in Self::KEYS {
            if self.sources.get(*k).is_none_or(|s| s.trim().is_empty()) {
                return Err(format!(
                    "numa.{k} has no source; every value must say where it comes from"
                ));
            }
        }
        Ok(())
    }

    /// The distance matrix, row-major.
    pub fn distance_flat(&self) -> Vec<u32> {
        self.distance.iter().flatten().copied().collect()
    }
}

/// The profile's `[cache]` section: the shape of the caches below the LLC's
/// size (which is the machine's, `llc_per_node`), and what a line costs from
/// each level. Every figure has a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheProfile {
    /// LLC associativity.
    pub llc_ways: u32,
    /// Bytes per line.
    pub line_bytes: u32,
    /// `(size_bytes, ways)` of each CPU's private L2, if modeled.
    pub l2: Option<(u64, u32)>,
    /// Whether the LLC includes the L2s.
    pub inclusion: LlcInclusion,
    /// Where the geometry comes from.
    pub geometry_source: String,
    /// Per-line costs by level.
    pub costs: CacheCosts,
    /// Where each per-line cost comes from, by key (`l2_hit_line_ps`, ...).
    pub cost_sources: BTreeMap<String, String>,
}

impl CacheProfile {
    /// The keys of the per-line costs, in the order of [`CacheCosts`].
    pub const COST_KEYS: [&'static str; 5] = [
        "l2_hit_line_ps",
        "llc_hit_line_ps",
        "dram_line_ps",
        "dram_socket_line_ps",
        "user_line_ps",
    ];

    /// The cache model's configuration for `machine`: one LLC of
    /// `machine.llc_bytes` per node, shared by the node's CPUs.
    pub fn config(&self, machine: &Machine) -> Result<CacheConfig, String> {
        if machine.llc_bytes == 0 {
            return Err("the cache model needs the LLC size: set machine.llc_per_node".into());
        }
        let cpus = machine.nodes.first().map_or(0, |n| n.cpus);
        if machine.nodes.iter().any(|n| n.cpus != cpus) {
            return Err("the cache model needs the same number of CPUs on every node".into());
        }
        let cfg = CacheConfig {
            llc_size_bytes: machine.llc_bytes,
            llc_ways: self.llc_ways,
            line_bytes: self.line_bytes,
            l2: self.l2,
            sockets: machine.nodes.len() as u32,
            cpus_per_socket: cpus,
            inclusion: self.inclusion,
        };
        cfg.validate().map_err(|e| format!("cache model: {e}"))?;
        Ok(cfg)
    }
}

/// What is wrong with a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileError {
    /// A key that names no cost.
    UnknownCost(String),
    /// Costs the profile does not give.
    Missing(Vec<&'static str>),
    /// A cost without a source.
    NoSource(String),
    /// A bad `[cache]` section.
    Cache(String),
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::UnknownCost(k) => {
                write!(f, "unknown cost \"{k}\"; valid costs: ")?;
                let keys: Vec<_> = Cost::ALL.iter().map(|c| c.key()).collect();
                write!(f, "{}", keys.join(", "))
            }
            ProfileError::Missing(ks) => write!(f, "missing costs: {}", ks.join(", ")),
            ProfileError::NoSource(k) => write!(
                f,
                "cost \"{k}\" has no source; every cost must say where its figure comes from"
            ),
            ProfileError::Cache(e) => write!(f, "[cache]: {e}"),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Checks that every cost is given, known and sourced.
    pub fn validate(&self) -> Result<(), ProfileError> {
        for (k, e) in &self.entries {
            if Cost::from_key(k).is_none() {
                return Err(ProfileError::UnknownCost(k.clone()));
            }
            if e.source.trim().is_empty() {
                return Err(ProfileError::NoSource(k.clone()));
            }
        }
        let missing: Vec<_> = Cost::ALL
            .iter()
            .map(|c| c.key())
            .filter(|k| !self.entries.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            return Err(ProfileError::Missing(missing));
        }
        if let Some(c) = &self.cache {
            if c.geometry_source.trim().is_empty() {
                return Err(ProfileError::Cache(
                    "the geometry has no source (geometry_source)".into(),
                ));
            }
            for k in CacheProfile::COST_KEYS {
                if c.cost_sources.get(k).is_none_or(|s| s.trim().is_empty()) {
                    return Err(ProfileError::Cache(format!(
                        "{k} has no source; every cost must say where its figure comes from"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The memory system the copy model uses: the profile's `[numa]`
    /// section, or (without one) the thread rate of `copy_page_ns` alone.
    pub fn numa_hw(&self) -> mm::copy_page::NumaHw {
        let table = self.table();
        let mut hw = mm::copy_page::NumaHw::from_costs(&table);
        if let Some(n) = &self.numa {
            hw.threads_per_core = n.threads_per_core;
            hw.smt_pair_pct = n.smt_pair_pct;
            hw.node_mbps = n.node_mbps;
            hw.link_mbps = n.link_mbps;
            hw.dma_channels = n.dma_channels;
            hw.dma_channel_mbps = n.dma_channel_mbps;
            hw.line_fill_buffers = n.line_fill_buffers.unwrap_or(0);
            hw.link_data_flits = n.link_data_flits.unwrap_or(0);
            hw.link_snoop_flits = n.link_snoop_flits.unwrap_or(0);
            hw.package_idle_exit_ns = n.package_idle_exit_ns.unwrap_or(0);
            hw.package_idle_residency_ns = n.package_idle_residency_ns.unwrap_or(0);
        }
        hw
    }

    /// The table the model uses. Call [`Profile::validate`] first.
    pub fn table(&self) -> CostTable {
        let mut t = CostTable::uniform(0);
        for (k, e) in &self.entries {
            if let Some(c) = Cost::from_key(k) {
                t.set(c, e.ns);
            }
        }
        t
    }
}
