//! Snapshots of the live kernel's description and counters: `/proc/zoneinfo`,
//! `/proc/vmstat`, the THP knobs and per-size statistics, and
//! `vm.percpu_pagelist_high_fraction`.
//!
//! The parsers take text so that they are tested on fixed inputs; the
//! `read_*` functions read the live files. A file that is absent (a kernel
//! without mTHP, say) gives an empty or `None` value, never an error: the
//! snapshot describes what the kernel has.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::event::{Counters, Knobs, Machine, Pageset, Zone};

pub use host::live::selected_choice;
use host::live::THP_DIR;

/// Parses `/proc/vmstat` (`name value` lines); lines that are not a name and
/// an unsigned number are skipped.
pub fn parse_vmstat(text: &str) -> BTreeMap<String, u64> {
    host::live::parse_vmstat(text).0
}

/// Parses `/proc/zoneinfo` into zones with their watermarks and per-CPU
/// pagesets.
pub fn parse_zoneinfo(text: &str) -> Vec<Zone> {
    let mut zones: Vec<Zone> = Vec::new();
    let mut in_pagesets = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Node ") {
            // "Node 0, zone   Normal"
            let mut parts = rest.splitn(2, ',');
            let node = parts
                .next()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            let name = parts
                .next()
                .map(|z| z.trim().trim_start_matches("zone").trim())
                .unwrap_or("")
                .to_string();
            zones.push(Zone {
                node,
                name,
                ..Zone::default()
            });
            in_pagesets = false;
            continue;
        }
        let Some(zone) = zones.last_mut() else {
            continue;
        };
        if t == "pagesets" {
            in_pagesets = true;
            continue;
        }
        let mut it = t.split_whitespace();
        let (Some(key), value) = (it.next(), it.next()) else {
            continue;
        };
        let num = value.and_then(|v| v.parse::<u64>().ok());
        if in_pagesets {
            match (key, num) {
                ("cpu:", Some(cpu)) => zone.pagesets.push(Pageset {
                    cpu: cpu as u32,
                    ..Pageset::default()
                }),
                (k, Some(v)) => {
                    if let Some(ps) = zone.pagesets.last_mut() {
                        match k {
                            "count:" => ps.count = v,
                            "high:" => ps.high = v,
                            "batch:" => ps.batch = v,
                            "high_min:" => ps.high_min = Some(v),
                            "high_max:" => ps.high_max = Some(v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            if key == "node_unreclaimable:" {
                in_pagesets = false;
            }
            continue;
        }
        if let Some(v) = num {
            match key {
                "min" => zone.min = v,
                "low" => zone.low = v,
                "high" => zone.high = v,
                "spanned" => zone.spanned = v,
                "present" => zone.present = v,
                "managed" => zone.managed = v,
                _ => {}
            }
        }
    }
    zones
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The `hugepages-<size>` directories by name, sorted by name.
fn thp_size_dirs() -> Vec<(String, std::path::PathBuf)> {
    let mut dirs: Vec<_> = host::live::thp_size_dirs()
        .into_iter()
        .map(|(size_kb, path)| (format!("hugepages-{size_kb}kB"), path))
        .collect();
    dirs.sort();
    dirs
}

/// The machine as the live kernel describes it.
pub fn read_machine() -> Machine {
    let nr_cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    // `available_parallelism` honours affinity; the ring buffer has one
    // per possible CPU, so prefer the kernel's online count.
    let nr_cpus = read_trim(Path::new("/sys/devices/system/cpu/online"))
        .and_then(|s| count_cpu_list(&s))
        .unwrap_or(nr_cpus);
    let zones = fs::read_to_string("/proc/zoneinfo")
        .map(|t| parse_zoneinfo(&t))
        .unwrap_or_default();
    Machine { nr_cpus, zones }
}

/// Counts the CPUs in a list like `0-3,8,10-11`.
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<u32>().ok()?;
                n += 1;
            }
        }
    }
    Some(n)
}

/// The memory-management knobs in force now.
pub fn read_knobs() -> Knobs {
    let thp_enabled = read_trim(&Path::new(THP_DIR).join("enabled")).map(|s| selected_choice(&s));
    let thp_sizes_enabled = thp_size_dirs()
        .into_iter()
        .filter_map(|(name, path)| {
            Some((name, selected_choice(&read_trim(&path.join("enabled"))?)))
        })
        .collect();
    let percpu_pagelist_high_fraction =
        read_trim(Path::new("/proc/sys/vm/percpu_pagelist_high_fraction"))
            .and_then(|s| s.parse().ok());
    Knobs {
        thp_enabled,
        thp_sizes_enabled,
        percpu_pagelist_high_fraction,
    }
}

/// The kernel's counters now.
pub fn read_counters() -> Counters {
    let vmstat = fs::read_to_string(host::live::PROC_VMSTAT)
        .map(|t| parse_vmstat(&t))
        .unwrap_or_default();
    let mut thp_stats = BTreeMap::new();
    for (name, path) in thp_size_dirs() {
        let mut stats = BTreeMap::new();
        let mut entries: Vec<_> = fs::read_dir(path.join("stats"))
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if let Some(v) = read_trim(&e.path()).and_then(|s| s.parse::<u64>().ok()) {
                stats.insert(e.file_name().to_string_lossy().into_owned(), v);
            }
        }
        thp_stats.insert(name, stats);
    }
    Counters { vmstat, thp_stats }
}

/// `uname -r`.
pub fn read_kernel_release() -> Option<String> {
    read_trim(Path::new("/proc/sys/kernel/osrelease"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONEINFO: &str = "Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 5723
  pages free     3840
        boost    0
        min      45
        low      56
        high     67
        spanned  4095
        present  3998
        managed  3840
        protection: (0, 3018, 5578, 5578, 5578)
      nr_free_pages 3840
  pagesets
    cpu: 0
              count:    0
              high:     0
              batch:    1
              high_min: 28
              high_max: 240
  vm stats threshold: 4
    cpu: 1
              count:    7
              high:     9
              batch:    1
  vm stats threshold: 4
  node_unreclaimable:  0
  start_pfn:           1
Node 0, zone   Normal
  pages free     100
        min      10
        low      20
        high     30
        spanned  400
        present  300
        managed  200
";

    #[test]
    fn zoneinfo_gives_watermarks_and_pagesets() {
        let zones = parse_zoneinfo(ZONEINFO);
        assert_eq!(zones.len(), 2);
        let dma = &zones[0];
        assert_eq!(
            (dma.name.as_str(), dma.min, dma.low, dma.high),
            ("DMA", 45, 56, 67)
        );
        assert_eq!((dma.spanned, dma.present, dma.managed), (4095, 3998, 3840));
        assert_eq!(dma.pagesets.len(), 2);
        assert_eq!(dma.pagesets[0].high_max, Some(240));
        assert_eq!(
            (
                dma.pagesets[1].count,
                dma.pagesets[1].high,
                dma.pagesets[1].high_min
            ),
            (7, 9, None)
        );
        assert_eq!(
            (zones[1].name.as_str(), zones[1].managed, zones[1].high),
            ("Normal", 200, 30)
        );
    }

    #[test]
    fn choices_lists_and_vmstat() {
        assert_eq!(selected_choice("always [madvise] never\n"), "madvise");
        assert_eq!(selected_choice("5\n"), "5");
        assert_eq!(count_cpu_list("0-3,8,10-11\n"), Some(7));
        assert_eq!(count_cpu_list("x"), None);
        let v = parse_vmstat("pgfault 12\nnr_free_pages 3\nbad line\n");
        assert_eq!(v.get("pgfault"), Some(&12));
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn live_snapshot_has_vmstat_when_procfs_is_there() {
        if !Path::new("/proc/vmstat").exists() {
            println!("SKIPPED: /proc/vmstat is missing (not Linux, or no procfs)");
            return;
        }
        let c = read_counters();
        assert!(c.vmstat.contains_key("pgfault"), "vmstat has no pgfault");
        assert!(read_machine().nr_cpus >= 1);
    }
}
