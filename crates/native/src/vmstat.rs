//! Snapshots and deltas of the kernel's memory-management counters.
//!
//! Two sources, named as the kernel names them:
//! - `/proc/vmstat` (`mm/vmstat.c`): `pgfault`, `thp_fault_alloc`,
//!   `thp_fault_fallback`, `thp_split_pmd`, ... System-wide: a delta includes every
//!   other process that ran meanwhile.
//! - `transparent_hugepage/hugepages-<size>kB/stats/` (6.8+): `anon_fault_alloc`,
//!   `anon_fault_fallback` per mTHP size. Also system-wide.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::NativeError;
use crate::knobs::{mthp_sizes_kb, THP_DIR};

/// The `/proc/vmstat` counters a fault-pattern report lists (others are kept too).
pub const FAULT_COUNTERS: [&str; 7] = [
    "pgfault",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_split_pmd",
    "thp_deferred_split_page",
    "thp_zero_page_alloc",
    "pgmajfault",
];

/// The per-size stats a fault-pattern report lists.
pub const SIZE_COUNTERS: [&str; 2] = ["anon_fault_alloc", "anon_fault_fallback"];

/// Counter values at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every `/proc/vmstat` counter by name.
    pub vmstat: BTreeMap<String, u64>,
    /// `(size_kb, counter)` → value for the [`SIZE_COUNTERS`] of every mTHP size.
    pub per_size: BTreeMap<(u32, String), u64>,
}

impl Snapshot {
    /// Reads all counters now.
    pub fn take() -> Result<Snapshot, NativeError> {
        let path = Path::new(host::live::PROC_VMSTAT);
        let text = std::fs::read_to_string(path).map_err(|e| NativeError::io("read", path, e))?;
        let (vmstat, bad) = host::live::parse_vmstat(&text);
        if let Some(line) = bad.into_iter().next() {
            return Err(NativeError::Parse {
                path: path.into(),
                content: line,
                expected: "<name> <unsigned value>",
            });
        }
        let mut per_size = BTreeMap::new();
        for s in mthp_sizes_kb() {
            for c in SIZE_COUNTERS {
                let p: PathBuf = Path::new(THP_DIR)
                    .join(format!("hugepages-{s}kB"))
                    .join("stats")
                    .join(c);
                if !p.exists() {
                    continue;
                }
                let text =
                    std::fs::read_to_string(&p).map_err(|e| NativeError::io("read", &p, e))?;
                let v = text.trim().parse().map_err(|_| NativeError::Parse {
                    path: p.clone(),
                    content: text.clone(),
                    expected: "an unsigned integer",
                })?;
                per_size.insert((s, c.to_string()), v);
            }
        }
        Ok(Snapshot { vmstat, per_size })
    }

    /// `later − self` for every counter present in both (counters only grow; a
    /// counter that went down reads as 0).
    pub fn delta_to(&self, later: &Snapshot) -> Delta {
        let vmstat = later
            .vmstat
            .iter()
            .filter_map(|(k, &v)| Some((k.clone(), v.saturating_sub(*self.vmstat.get(k)?))))
            .collect();
        let per_size = later
            .per_size
            .iter()
            .filter_map(|(k, &v)| Some((k.clone(), v.saturating_sub(*self.per_size.get(k)?))))
            .collect();
        Delta { vmstat, per_size }
    }
}

/// Counter increments between two [`Snapshot`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// `/proc/vmstat` increments by name.
    pub vmstat: BTreeMap<String, u64>,
    /// Per-size stat increments by `(size_kb, counter)`.
    pub per_size: BTreeMap<(u32, String), u64>,
}

impl Delta {
    /// A `/proc/vmstat` increment (0 if the kernel has no such counter).
    pub fn vm(&self, name: &str) -> u64 {
        self.vmstat.get(name).copied().unwrap_or(0)
    }

    /// `anon_fault_alloc` of one size.
    pub fn anon_fault_alloc(&self, size_kb: u32) -> u64 {
        self.size(size_kb, "anon_fault_alloc")
    }

    /// `anon_fault_fallback` of one size.
    pub fn anon_fault_fallback(&self, size_kb: u32) -> u64 {
        self.size(size_kb, "anon_fault_fallback")
    }

    /// A per-size stat increment (0 if absent).
    pub fn size(&self, size_kb: u32, counter: &str) -> u64 {
        self.per_size
            .get(&(size_kb, counter.to_string()))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_pgfault_and_deltas_grow() {
        let a = Snapshot::take().unwrap();
        assert!(a.vmstat.contains_key("pgfault"));
        // Fault in a fresh page of our own so pgfault must move.
        let v = vec![1u8; 1 << 20];
        std::hint::black_box(&v);
        let b = Snapshot::take().unwrap();
        let d = a.delta_to(&b);
        assert!(d.vm("pgfault") > 0);
        assert_eq!(d.vm("no_such_counter"), 0);
    }
}
