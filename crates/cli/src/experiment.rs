//! Experiment files (TOML): the machine, the cost profile, the kernels, the
//! workloads, and what the report shows.

use anyhow::{anyhow, bail, Context, Result};
use mm::knobs::{KernelConfig, KnobValue, Preset};
use serde::Deserialize;
use sim::cache::{CacheConfig, CacheCosts, LlcInclusion};
use sim::profile::{CacheProfile, CostEntry, NumaProfile, Profile, TopologyProfile};
use sim::{Machine, NodeSpec};
use std::collections::BTreeMap;
use std::path::Path;

/// An experiment as written in its file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    pub machine: MachineFile,
    pub profile: String,
    #[serde(rename = "kernel")]
    pub kernels: Vec<KernelFile>,
    /// Required by `mmlab run`; a replay's experiment may leave it out (the
    /// trace is the workload).
    #[serde(rename = "workload", default)]
    pub workloads: Vec<WorkloadFile>,
    #[serde(default)]
    pub report: ReportFile,
    /// The seed's published table, printed beside the model's.
    #[serde(default)]
    pub published: Option<PublishedFile>,
    /// Seconds the machine stays up, idle, after the last task ends, so that
    /// periodic kernel work (PCP `high` decay) shows its effect.
    #[serde(default)]
    pub idle_tail_s: u64,
}

fn default_seed() -> u64 {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineFile {
    pub name: String,
    pub nodes: u32,
    pub cpus_per_node: u32,
    pub memory_per_node: Size,
    #[serde(default)]
    pub llc_per_node: Option<Size>,
    #[serde(default)]
    pub dma32: Option<Size>,
    #[serde(default)]
    pub source: String,
    /// Plays memory traffic through a cache model of the machine (LLC per
    /// node of `llc_per_node`, the rest from the profile's `[cache]`).
    #[serde(default)]
    pub cache_model: bool,
}

impl MachineFile {
    /// The machine this section describes, checked against the host's
    /// memory; `origin` names the experiment in errors.
    fn to_machine(&self, origin: &str) -> Result<Machine> {
        if self.nodes == 0 {
            bail!("{origin}: machine.nodes = 0: a machine needs at least one node");
        }
        // Checked before the nodes are built: 2^31 of them asked for 32 GiB.
        if self.nodes > MAX_NUMNODES {
            bail!(
                "{origin}: machine.nodes = {}: at most {MAX_NUMNODES} (MAX_NUMNODES with \
                 CONFIG_NODES_SHIFT = 10, the largest x86-64 Linux allows)",
                self.nodes
            );
        }
        let machine = Machine {
            name: self.name.clone(),
            nodes: (0..self.nodes)
                .map(|_| NodeSpec {
                    cpus: self.cpus_per_node,
                    memory_bytes: self.memory_per_node.0,
                })
                .collect(),
            llc_bytes: self.llc_per_node.map_or(0, |s| s.0),
            dma32_bytes: self
                .dma32
                .map_or(4 << 30, |s| s.0)
                .min(self.memory_per_node.0),
        };
        machine
            .validate(host_memory_bytes())
            .map_err(|e| anyhow!("{origin}: machine \"{}\": {e}", self.name))?;
        Ok(machine)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelFile {
    pub name: String,
    pub preset: String,
    #[serde(default)]
    pub knobs: BTreeMap<String, toml::Value>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    /// The kernels this workload runs on (by name); all of them if absent.
    #[serde(default)]
    pub kernels: Option<Vec<String>>,
    /// The baseline of this workload's table, instead of `report.baseline`.
    #[serde(default)]
    pub baseline: Option<String>,
    /// Estimated integer parameters with their plausible range, which
    /// `reproduce --bands` moves as it moves a profile's banded costs.
    #[serde(default)]
    pub bands: BTreeMap<String, ParamBandFile>,
}

/// An estimated workload parameter's range and where it comes from.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamBandFile {
    /// Low and high ends.
    pub band: [u64; 2],
    /// Where the range comes from.
    pub source: String,
}

/// How values are shown.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The values themselves.
    #[default]
    Absolute,
    /// Relative to the baseline kernel, which is 100.0.
    Relative,
    /// Percent change from the baseline kernel.
    Change,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    #[serde(default = "default_metrics")]
    pub metrics: Vec<String>,
    #[serde(default)]
    pub baseline: Option<String>,
    #[serde(default)]
    pub mode: Mode,
}

impl Default for ReportFile {
    fn default() -> Self {
        ReportFile {
            metrics: default_metrics(),
            baseline: None,
            mode: Mode::Absolute,
        }
    }
}

fn default_metrics() -> Vec<String> {
    ["runtime_ns", "zone_lock_pct", "alloc_zone", "pcpu_drain"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedFile {
    pub source: String,
    pub columns: Vec<String>,
    /// Values per row; `nan` where the publication has no figure (printed `-`).
    pub rows: BTreeMap<String, Vec<f64>>,
    /// Decimals printed; by default as many as each figure was published
    /// with (one to three).
    #[serde(default)]
    pub precision: Option<usize>,
    /// The unit of each column (for the results document and the tidy
    /// CSV), where they are worth stating.
    #[serde(default)]
    pub units: Option<Vec<String>>,
}

impl PublishedFile {
    /// Every row and the units have one value per column.
    fn check(&self) -> std::result::Result<(), String> {
        let n = self.columns.len();
        for (label, row) in &self.rows {
            if row.len() != n {
                return Err(format!(
                    "published.rows.\"{label}\": {} values for {n} columns",
                    row.len()
                ));
            }
        }
        match &self.units {
            Some(u) if u.len() != n => Err(format!(
                "published.units: {} units for {n} columns",
                u.len()
            )),
            _ => Ok(()),
        }
    }
}

/// A size such as `64GiB`, `45 MiB` or a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses a size: `mm::types::parse_size`, the one size parser (machines
/// and workload parameters alike).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    mm::types::parse_size(s)
}

/// A kernel to run: its name and configuration.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub name: String,
    pub config: KernelConfig,
    /// The knobs as written, for the results document.
    pub knobs: Vec<(String, KnobValue)>,
}

/// A workload to run.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: String,
    pub kind: String,
    pub params: workloads::Params,
    /// The names of the kernels it runs on, in the experiment's kernel
    /// order; `None`: all of them.
    pub kernels: Option<Vec<String>>,
    /// Its table's baseline kernel, if not `report.baseline`.
    pub baseline: Option<String>,
    /// Banded integer parameters: (name, low, high), in name order.
    pub bands: Vec<(String, u64, u64)>,
}

impl Workload {
    /// True if this workload runs on kernel `name`.
    pub fn runs_on(&self, name: &str) -> bool {
        self.kernels
            .as_ref()
            .is_none_or(|ks| ks.iter().any(|k| k == name))
    }
}

impl Experiment {
    /// The (kernel, workload) pairs to run: each workload on its kernels,
    /// workloads in file order, kernels in the experiment's order.
    pub fn pairs(&self) -> Vec<(&Kernel, &Workload)> {
        self.workloads
            .iter()
            .flat_map(|w| {
                self.kernels
                    .iter()
                    .filter(|k| w.runs_on(&k.name))
                    .map(move |k| (k, w))
            })
            .collect()
    }

    /// The baseline kernel of workload `w`'s table: its own, else
    /// `report.baseline`.
    pub fn baseline_of<'a>(&'a self, w: &'a Workload) -> Option<&'a String> {
        w.baseline.as_ref().or(self.report.baseline.as_ref())
    }
}

/// A validated experiment, ready to run.
#[derive(Debug)]
pub struct Experiment {
    pub name: String,
    pub description: String,
    pub seed: u64,
    pub machine: Machine,
    /// Where the machine's figures come from.
    pub machine_source: String,
    pub profile: Profile,
    pub kernels: Vec<Kernel>,
    pub workloads: Vec<Workload>,
    pub report: ReportFile,
    pub published: Option<PublishedFile>,
    pub idle_tail_s: u64,
    /// The cache model's shape and costs, when `machine.cache_model` is on.
    pub cache: Option<(CacheConfig, CacheCosts)>,
}

/// The built-in cost profiles, embedded so that `mmlab` runs from anywhere.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    (
        "host-epyc-zen3",
        include_str!("../../../profiles/host-epyc-zen3.toml"),
    ),
    (
        "haswell-ep",
        include_str!("../../../profiles/haswell-ep.toml"),
    ),
    (
        "e5-2640v3",
        include_str!("../../../profiles/e5-2640v3.toml"),
    ),
    (
        "spr-2s-224",
        include_str!("../../../profiles/spr-2s-224.toml"),
    ),
    (
        "icx-2s-128",
        include_str!("../../../profiles/icx-2s-128.toml"),
    ),
    ("altra-80", include_str!("../../../profiles/altra-80.toml")),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    description: String,
    costs: BTreeMap<String, CostFile>,
    #[serde(default)]
    cache: Option<CacheFile>,
    numa: Option<NumaFile>,
    #[serde(default)]
    topology: Option<TopologyFile>,
}

/// A value of the `[numa]` or `[topology]` section with its source (and,
/// for an estimate or a bound, its plausible range).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sourced<T> {
    value: T,
    source: String,
    #[serde(default)]
    band: Option<[u64; 2]>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    threads_per_core: Sourced<u32>,
    cores_per_llc: Sourced<u32>,
    #[serde(default)]
    l2_per_core: Option<Sourced<Size>>,
    #[serde(default)]
    llc_hit_ns: Option<Sourced<u64>>,
    #[serde(default)]
    line_fill_buffers: Option<Sourced<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NumaFile {
    distance: Sourced<Vec<Vec<u32>>>,
    threads_per_core: Sourced<u32>,
    smt_pair_pct: Sourced<u64>,
    node_mbps: Sourced<u64>,
    link_mbps: Sourced<u64>,
    dma_channels: Sourced<u32>,
    dma_channel_mbps: Sourced<u64>,
    #[serde(default)]
    line_fill_buffers: Option<Sourced<u32>>,
    #[serde(default)]
    link_data_flits: Option<Sourced<u32>>,
    #[serde(default)]
    link_snoop_flits: Option<Sourced<u32>>,
    #[serde(default)]
    package_idle_exit_ns: Option<Sourced<u64>>,
    #[serde(default)]
    package_idle_residency_ns: Option<Sourced<u64>>,
}

/// A profile's `[cache]` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    llc_ways: u32,
    line_bytes: u32,
    #[serde(default)]
    l2_per_cpu: Option<Size>,
    #[serde(default)]
    l2_ways: Option<u32>,
    llc_inclusive: bool,
    geometry_source: String,
    l2_hit_line_ps: PsFile,
    llc_hit_line_ps: PsFile,
    dram_line_ps: PsFile,
    dram_socket_line_ps: PsFile,
    user_line_ps: PsFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PsFile {
    ps: u64,
    source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CostFile {
    ns: u64,
    source: String,
    #[serde(default)]
    band: Option<[u64; 2]>,
}

/// An optional `[numa]` value: its source and band noted under `key`.
fn optional<T>(
    note: &mut impl FnMut(&str, String, Option<[u64; 2]>),
    key: &str,
    f: Option<Sourced<T>>,
) -> Option<T> {
    f.map(|f| {
        note(key, f.source, f.band);
        f.value
    })
}

/// The `[numa]` section as the model's [`NumaProfile`].
fn numa_profile(n: NumaFile) -> NumaProfile {
    let mut sources = BTreeMap::new();
    let mut bands = BTreeMap::new();
    let mut note = |k: &str, source: String, band: Option<[u64; 2]>| {
        sources.insert(k.to_string(), source);
        if let Some([lo, hi]) = band {
            bands.insert(k.to_string(), (lo, hi));
        }
    };
    note("distance", n.distance.source, n.distance.band);
    note(
        "threads_per_core",
        n.threads_per_core.source,
        n.threads_per_core.band,
    );
    note("smt_pair_pct", n.smt_pair_pct.source, n.smt_pair_pct.band);
    note("node_mbps", n.node_mbps.source, n.node_mbps.band);
    note("link_mbps", n.link_mbps.source, n.link_mbps.band);
    note("dma_channels", n.dma_channels.source, n.dma_channels.band);
    note(
        "dma_channel_mbps",
        n.dma_channel_mbps.source,
        n.dma_channel_mbps.band,
    );
    let lfb = optional(&mut note, "line_fill_buffers", n.line_fill_buffers);
    let link_data_flits = optional(&mut note, "link_data_flits", n.link_data_flits);
    let link_snoop_flits = optional(&mut note, "link_snoop_flits", n.link_snoop_flits);
    let package_idle_exit_ns = optional(&mut note, "package_idle_exit_ns", n.package_idle_exit_ns);
    let package_idle_residency_ns = optional(
        &mut note,
        "package_idle_residency_ns",
        n.package_idle_residency_ns,
    );
    NumaProfile {
        distance: n.distance.value,
        threads_per_core: n.threads_per_core.value,
        smt_pair_pct: n.smt_pair_pct.value,
        node_mbps: n.node_mbps.value,
        link_mbps: n.link_mbps.value,
        dma_channels: n.dma_channels.value,
        dma_channel_mbps: n.dma_channel_mbps.value,
        line_fill_buffers: lfb,
        link_data_flits,
        link_snoop_flits,
        package_idle_exit_ns,
        package_idle_residency_ns,
        sources,
        bands,
    }
}

/// The profile's `[topology]` section: the private-L2 model needs both of
/// its values or neither, and only the LLC hit may be an estimate with a
/// band that contains it.
fn topology_profile(t: TopologyFile) -> Result<TopologyProfile> {
    let mut sources: BTreeMap<String, String> = [
        ("threads_per_core".to_string(), t.threads_per_core.source),
        ("cores_per_llc".to_string(), t.cores_per_llc.source),
    ]
    .into_iter()
    .collect();
    let mut bands = BTreeMap::new();
    let l2 = match (t.l2_per_core, t.llc_hit_ns) {
        (None, None) => None,
        (Some(size), Some(hit)) => {
            if let Some([lo, hi]) = hit.band {
                if lo > hit.value || hit.value > hi {
                    bail!(
                        "[topology]: llc_hit_ns: band [{lo}, {hi}] must contain {}",
                        hit.value
                    );
                }
                bands.insert("llc_hit_ns".to_string(), (lo, hi));
            }
            if size.band.is_some() {
                bail!("[topology]: l2_per_core is a published size: no band");
            }
            sources.insert("l2_per_core".to_string(), size.source);
            sources.insert("llc_hit_ns".to_string(), hit.source);
            Some((size.value.0, hit.value))
        }
        _ => bail!(
            "[topology]: give both l2_per_core and llc_hit_ns, or neither (no private-L2 model)"
        ),
    };
    let line_fill_buffers = match t.line_fill_buffers {
        None => None,
        Some(lfb) => {
            if lfb.value == 0 {
                bail!("[topology]: line_fill_buffers must be at least 1");
            }
            if let Some([lo, hi]) = lfb.band {
                if lo == 0 || lo > lfb.value as u64 || lfb.value as u64 > hi {
                    bail!(
                        "[topology]: line_fill_buffers: band [{lo}, {hi}] must be at least 1 and contain {}",
                        lfb.value
                    );
                }
                bands.insert("line_fill_buffers".to_string(), (lo, hi));
            }
            sources.insert("line_fill_buffers".to_string(), lfb.source);
            Some(lfb.value)
        }
    };
    Ok(TopologyProfile {
        threads_per_core: t.threads_per_core.value,
        cores_per_llc: t.cores_per_llc.value,
        l2,
        line_fill_buffers,
        sources,
        bands,
    })
}

/// Parses a profile file's text.
pub fn parse_profile(text: &str, origin: &str) -> Result<Profile> {
    let f: ProfileFile = toml::from_str(text).map_err(|e| anyhow!("{origin}: {e}"))?;
    let cache = match f.cache {
        None => None,
        Some(c) => {
            let l2 = match (c.l2_per_cpu, c.l2_ways) {
                (Some(size), Some(ways)) => Some((size.0, ways)),
                (None, None) => None,
                _ => bail!(
                    "{origin}: [cache]: give both l2_per_cpu and l2_ways, or neither (no L2 in the model)"
                ),
            };
            let sources = [
                &c.l2_hit_line_ps,
                &c.llc_hit_line_ps,
                &c.dram_line_ps,
                &c.dram_socket_line_ps,
                &c.user_line_ps,
            ];
            Some(CacheProfile {
                llc_ways: c.llc_ways,
                line_bytes: c.line_bytes,
                l2,
                inclusion: if c.llc_inclusive {
                    LlcInclusion::Inclusive
                } else {
                    LlcInclusion::NonInclusive
                },
                geometry_source: c.geometry_source,
                costs: CacheCosts {
                    l2_hit_line_ps: c.l2_hit_line_ps.ps,
                    llc_hit_line_ps: c.llc_hit_line_ps.ps,
                    dram_line_ps: c.dram_line_ps.ps,
                    dram_socket_line_ps: c.dram_socket_line_ps.ps,
                    user_line_ps: c.user_line_ps.ps,
                },
                cost_sources: CacheProfile::COST_KEYS
                    .iter()
                    .zip(sources)
                    .map(|(k, p)| (k.to_string(), p.source.clone()))
                    .collect(),
            })
        }
    };
    let p = Profile {
        name: f.name,
        description: f.description,
        entries: f
            .costs
            .into_iter()
            .map(|(k, c)| {
                (
                    k,
                    CostEntry {
                        ns: c.ns,
                        source: c.source,
                        band: c.band.map(|[lo, hi]| (lo, hi)),
                    },
                )
            })
            .collect(),
        cache,
        numa: f.numa.map(numa_profile),
        topology: f
            .topology
            .map(topology_profile)
            .transpose()
            .map_err(|e| anyhow!("{origin}: {e}"))?,
    };
    for (k, e) in &p.entries {
        if let Some((lo, hi)) = e.band {
            if lo > e.ns || e.ns > hi {
                bail!(
                    "{origin}: cost \"{k}\": band [{lo}, {hi}] must contain ns = {}",
                    e.ns
                );
            }
        }
    }
    p.validate().map_err(|e| anyhow!("{origin}: {e}"))?;
    Ok(p)
}

fn load_profile(name: &str, base: &Path) -> Result<Profile> {
    if let Some((_, text)) = BUILTIN_PROFILES.iter().find(|(n, _)| *n == name) {
        return parse_profile(text, &format!("built-in profile {name}"));
    }
    let path = base.join(name);
    if path.extension().is_some_and(|e| e == "toml") && path.exists() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading profile {}", path.display()))?;
        return parse_profile(&text, &path.display().to_string());
    }
    let names: Vec<_> = BUILTIN_PROFILES.iter().map(|(n, _)| *n).collect();
    bail!("unknown profile \"{name}\": expected a built-in profile ({}) or a path to a .toml profile relative to the experiment file", names.join(", "))
}

fn knob_value(v: &toml::Value) -> Option<KnobValue> {
    match v {
        toml::Value::Integer(i) => Some(KnobValue::Int(*i)),
        toml::Value::String(s) => Some(KnobValue::Str(s.clone())),
        toml::Value::Boolean(b) => Some(KnobValue::Int(*b as i64)),
        _ => None,
    }
}

/// The most NUMA nodes a machine may have: Linux's `MAX_NUMNODES` at the
/// largest `CONFIG_NODES_SHIFT` x86-64 accepts (10, `arch/x86/Kconfig`).
pub const MAX_NUMNODES: u32 = 1 << 10;

/// The longest idle tail accepted: an hour.
pub const MAX_IDLE_TAIL_S: u64 = 3600;

/// A smaller host to check machines against, when set (the fuzzer's memory
/// budget); 0: the real host.
static HOST_MEMORY_OVERRIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Makes [`host_memory_bytes`] report `bytes` (0: the real host again), so
/// that validation refuses machines that would not fit a fuzzer's budget.
pub fn set_host_memory_override(bytes: u64) {
    HOST_MEMORY_OVERRIDE.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// Host memory in bytes (from /proc/meminfo; 16 GiB if unreadable).
pub fn host_memory_bytes() -> u64 {
    let o = HOST_MEMORY_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed);
    if o > 0 {
        return o;
    }
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(16 << 30)
}

/// Refuses a boot-time hugetlb pool whose pages' `struct page`s do not fit
/// half the host with the machine's own metadata. The kernel (and the
/// model's `set_max_huge_pages()`) takes as many 2 MiB pages as memory
/// allows, so `nr_hugepages` far beyond the machine is accepted and means
/// "all of it"; the sparse memmap makes a 48 TiB machine cheap to boot, but
/// a pool of all its memory materialises every page (fuzz experiment input
/// 1650 of `--seed 5000000` at cefc8ab aborted allocating 4 GiB).
fn check_hugetlb_pool_fits(machine: &Machine, config: &mm::knobs::KernelConfig) -> Result<()> {
    const PAGES_PER_HUGE_PAGE: u64 = 512;
    let machine_pages = machine.memory_bytes() / mm::types::PAGE_SIZE;
    let pool_pages = config
        .mm
        .nr_hugepages
        .saturating_mul(PAGES_PER_HUGE_PAGE)
        .min(machine_pages);
    let needed = machine
        .metadata_bytes()
        .saturating_add(pool_pages.saturating_mul(mm::page::MemMap::BYTES_PER_PAGE as u64));
    let allowed = host_memory_bytes() / 2;
    if needed > allowed {
        bail!(
            "nr_hugepages = {} would take {} MiB of the machine's memory at boot, about {} MiB of \
             page structures for the model; at most {} MiB fit in half of this host's memory: ask \
             for at most {} huge pages, or a smaller machine",
            config.mm.nr_hugepages,
            (pool_pages * mm::types::PAGE_SIZE) >> 20,
            needed >> 20,
            allowed >> 20,
            allowed.saturating_sub(machine.metadata_bytes())
                / (mm::page::MemMap::BYTES_PER_PAGE as u64 * PAGES_PER_HUGE_PAGE)
        );
    }
    Ok(())
}

/// Refuses a kernel configuration the model cannot run on `machine`, with
/// the limits of its knobs on that machine: a low watermark above an eighth
/// of a zone under PCP auto-tuning (`mm::pcp::check_pageset_bounds`).
pub fn check_fits_machine(machine: &Machine, config: &mm::knobs::KernelConfig) -> Result<()> {
    check_hugetlb_pool_fits(machine, config)?;
    let layout = machine.memory_layout();
    let fits = |sysctl: &mm::page_alloc::VmSysctl| {
        mm::pcp::check_pageset_bounds(&layout, sysctl, config.pcp).is_ok()
    };
    let Err(e) = mm::pcp::check_pageset_bounds(&layout, &config.sysctl, config.pcp) else {
        return Ok(());
    };
    // The largest value of each knob that fits, the other knobs as given
    // (fits() is monotone: a larger value only raises the watermarks).
    let largest = |lo: u64, hi: u64, with: &dyn Fn(u64) -> mm::page_alloc::VmSysctl| {
        if !fits(&with(lo)) {
            return None;
        }
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(&with(mid)) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    };
    let base = config.sysctl;
    let mfk_now = base
        .min_free_kbytes
        .unwrap_or_else(|| mm::page_alloc::calculate_min_free_kbytes(layout.total_pages()));
    let wsf = largest(1, 3000, &|v| mm::page_alloc::VmSysctl {
        watermark_scale_factor: v,
        ..base
    });
    let mfk = largest(0, mfk_now, &|v| mm::page_alloc::VmSysctl {
        min_free_kbytes: Some(v),
        ..base
    });
    let mut fixes: Vec<String> = [
        ("vm.watermark_scale_factor", wsf),
        ("vm.min_free_kbytes", mfk),
    ]
    .iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k} at most {v}")))
    .collect();
    fixes.push("a vm.percpu_pagelist_high_fraction (which turns auto-tuning off)".to_string());
    bail!(
        "{e}. Linux 6.7+ accepts this and its PCP high then alternates between the two bounds; \
         the model keeps high_min <= high <= high_max and refuses it. On this machine, with the \
         kernel's other knobs as given, use {}",
        fixes.join(", or ")
    )
}

impl Experiment {
    /// Reads and validates an experiment file.
    pub fn load(path: &Path) -> Result<Experiment> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read experiment {}", path.display()))?;
        Experiment::parse(&text, path)
    }

    /// Reads and validates the experiment of `mmlab replay --experiment`:
    /// its machine, profile and kernels; `[[workload]]` may be left out
    /// (the trace stands for it).
    pub fn load_for_replay(path: &Path) -> Result<Experiment> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read experiment {}", path.display()))?;
        Experiment::parse_inner(&text, path, true)
    }

    /// Parses and validates an experiment's text; `path` names it in errors
    /// and locates relative profile paths.
    pub fn parse(text: &str, path: &Path) -> Result<Experiment> {
        Experiment::parse_inner(text, path, false)
    }

    fn parse_inner(text: &str, path: &Path, for_replay: bool) -> Result<Experiment> {
        let origin = path.display().to_string();
        let f: ExperimentFile = toml::from_str(text).map_err(|e| anyhow!("{origin}: {e}"))?;
        Experiment::from_file(f, path, for_replay)
    }

    /// Validates an experiment already parsed (from TOML, or from any serde
    /// source such as a Python dict); `path` names it in errors and
    /// locates relative profile paths.
    pub fn from_file(f: ExperimentFile, path: &Path, for_replay: bool) -> Result<Experiment> {
        let origin = path.display().to_string();
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(p) = &f.published {
            p.check().map_err(|e| anyhow!("{origin}: {e}"))?;
        }
        let m = &f.machine;
        let machine = m.to_machine(&origin)?;
        let profile =
            load_profile(&f.profile, base).map_err(|e| anyhow!("{origin}: profile: {e}"))?;
        let cache = if m.cache_model {
            let c = profile.cache.as_ref().ok_or_else(|| {
                anyhow!(
                    "{origin}: machine.cache_model = true, but profile \"{}\" has no [cache] section \
                     (the cache's geometry and per-line costs); use a profile that has one, such as haswell-ep",
                    profile.name
                )
            })?;
            let cfg = c
                .config(&machine)
                .map_err(|e| anyhow!("{origin}: machine \"{}\": {e}", m.name))?;
            Some((cfg, c.costs))
        } else {
            None
        };
        if let Some(n) = &profile.numa {
            let cpus: Vec<u32> = machine.nodes.iter().map(|n| n.cpus).collect();
            n.check(&cpus).map_err(|e| {
                anyhow!(
                    "{origin}: profile \"{}\" does not fit machine \"{}\": {e}",
                    profile.name,
                    m.name
                )
            })?;
        }
        if f.kernels.is_empty() {
            bail!("{origin}: no [[kernel]] given; expected at least one");
        }
        if f.workloads.is_empty() && !for_replay {
            bail!("{origin}: no [[workload]] given; expected at least one");
        }
        let kernels = kernels_of(&f.kernels, &origin, &machine)?;
        let wls = workloads_of(&f, &origin, &machine, &kernels)?;
        if let Some(b) = &f.report.baseline {
            if !kernels.iter().any(|k| &k.name == b) {
                bail!("{origin}: report.baseline = \"{b}\" names no kernel of this experiment");
            }
        }
        for metric in &f.report.metrics {
            if !crate::metrics::is_metric(metric) {
                bail!(
                    "{origin}: report.metrics: unknown metric \"{metric}\"; valid metrics: {}",
                    crate::metrics::metric_names().join(", ")
                );
            }
        }
        if f.idle_tail_s > MAX_IDLE_TAIL_S {
            bail!(
                "{origin}: idle_tail_s = {}: expected at most {MAX_IDLE_TAIL_S} (the vmstat timer \
                 samples every CPU each second of it; PCP high has decayed within a minute)",
                f.idle_tail_s
            );
        }
        Ok(Experiment {
            name: f.name,
            description: f.description,
            seed: f.seed,
            machine,
            machine_source: m.source.clone(),
            profile,
            kernels,
            workloads: wls,
            report: f.report,
            published: f.published,
            idle_tail_s: f.idle_tail_s,
            cache,
        })
    }
}

/// The experiment's kernels: each preset with its knobs set, checked to
/// fit `machine`; names must be distinct.
fn kernels_of(files: &[KernelFile], origin: &str, machine: &Machine) -> Result<Vec<Kernel>> {
    let mut kernels = Vec::new();
    for k in files {
        let preset = Preset::from_name(&k.preset).ok_or_else(|| {
            let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
            anyhow!(
                "{origin}: kernel \"{}\": unknown preset \"{}\"; valid presets: {}",
                k.name,
                k.preset,
                names.join(", ")
            )
        })?;
        let mut config = preset.config();
        let mut knobs = Vec::new();
        for (name, v) in &k.knobs {
            let kv = knob_value(v).ok_or_else(|| anyhow!("{origin}: kernel \"{}\": knob {name}: expected an integer or a string, found {v}", k.name))?;
            config
                .set_knob(name, &kv)
                .map_err(|e| anyhow!("{origin}: kernel \"{}\": {e}", k.name))?;
            knobs.push((name.clone(), kv));
        }
        if kernels.iter().any(|x: &Kernel| x.name == k.name) {
            bail!("{origin}: two kernels are named \"{}\"", k.name);
        }
        check_fits_machine(machine, &config).map_err(|e| {
            anyhow!(
                "{origin}: kernel \"{}\" on machine \"{}\": {e}",
                k.name,
                machine.name
            )
        })?;
        kernels.push(Kernel {
            name: k.name.clone(),
            config,
            knobs,
        });
    }
    Ok(kernels)
}

/// The experiment's workloads, each built once so that bad parameters fail
/// before anything runs, with their kernels and baselines checked against
/// `kernels`.
fn workloads_of(
    f: &ExperimentFile,
    origin: &str,
    machine: &Machine,
    kernels: &[Kernel],
) -> Result<Vec<Workload>> {
    let mut wls = Vec::new();
    for w in &f.workloads {
        let mut params = workloads::Params::default();
        for (k, v) in &w.params {
            let pv = match v {
                toml::Value::Integer(i) => workloads::ParamValue::Int(*i),
                toml::Value::String(s) => workloads::ParamValue::Str(s.clone()),
                other => bail!("{origin}: workload \"{}\": parameter {k}: expected an integer or a string, found {other}", w.name),
            };
            params.0.insert(k.clone(), pv);
        }
        // Build once now so that bad parameters fail before anything runs.
        workloads::build(&w.kind, &params, machine)
            .map_err(|e| anyhow!("{origin}: workload \"{}\": {e}", w.name))?;
        if wls.iter().any(|x: &Workload| x.name == w.name) {
            bail!("{origin}: two workloads are named \"{}\"", w.name);
        }
        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        if let Some(ks) = &w.kernels {
            if ks.is_empty() {
                bail!("{origin}: workload \"{}\": kernels = []: expected at least one kernel name (or no kernels key: all kernels)", w.name);
            }
            for k in ks {
                if !names.contains(&k.as_str()) {
                    bail!(
                        "{origin}: workload \"{}\": kernels: \"{k}\" names no kernel of this experiment; expected one of {}",
                        w.name,
                        names.join(", ")
                    );
                }
            }
        }
        let bands = param_bands(w, origin, &params, machine)?;
        let wl = Workload {
            name: w.name.clone(),
            kind: w.kind.clone(),
            params,
            kernels: w.kernels.clone(),
            baseline: w.baseline.clone(),
            bands,
        };
        if let Some(b) = &w.baseline {
            if !wl.runs_on(b) {
                bail!(
                    "{origin}: workload \"{}\": baseline = \"{b}\" is not one of the kernels it runs on",
                    w.name
                );
            }
        } else if let Some(b) = &f.report.baseline {
            if names.contains(&b.as_str()) && !wl.runs_on(b) {
                bail!(
                    "{origin}: workload \"{}\" does not run on report.baseline \"{b}\"; give it its own baseline (one of its kernels)",
                    w.name
                );
            }
        }
        wls.push(wl);
    }
    Ok(wls)
}

/// Workload `w`'s banded parameters, checked: each names an integer
/// parameter given in `params`, its band holds the value, and the workload
/// builds at both ends.
fn param_bands(
    w: &WorkloadFile,
    origin: &str,
    params: &workloads::Params,
    machine: &Machine,
) -> Result<Vec<(String, u64, u64)>> {
    let mut out = Vec::new();
    for (k, b) in &w.bands {
        let ctx = format!("{origin}: workload \"{}\": bands.{k}", w.name);
        let Some(workloads::ParamValue::Int(v)) = params.0.get(k) else {
            bail!("{ctx}: expected an integer parameter given in params");
        };
        let [lo, hi] = b.band;
        if !(lo as i128 <= *v as i128 && *v as i128 <= hi as i128) {
            bail!("{ctx}: band [{lo}, {hi}] must hold the value {v}");
        }
        if b.source.trim().is_empty() {
            bail!("{ctx}: source is empty; expected where the range comes from");
        }
        for end in [lo, hi] {
            let mut p = params.clone();
            p.0.insert(k.clone(), workloads::ParamValue::Int(end as i64));
            workloads::build(&w.kind, &p, machine).map_err(|e| anyhow!("{ctx}: at {end}: {e}"))?;
        }
        out.push((k.clone(), lo, hi));
    }
    Ok(out)
}
