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
        if key == "start_pfn:" {
            zone.start_pfn = num;
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

/// A snapshot file that does not read as what it should be: the line
/// (1-based; 0 for the file as a whole) and what was expected there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotError {
    pub line: usize,
    pub what: String,
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.what)
        } else {
            write!(f, "line {}: {}", self.line, self.what)
        }
    }
}

fn snap_err(line: usize, what: impl Into<String>) -> SnapshotError {
    SnapshotError {
        line,
        what: what.into(),
    }
}

/// A `/proc/zoneinfo` read strictly ([`parse_zoneinfo_strict`]), with the
/// lines that the checks against a recording name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneinfoSnapshot {
    pub zones: Vec<Zone>,
    /// The line of each zone's `Node N, zone NAME`, in the order of `zones`.
    pub zone_lines: Vec<usize>,
    /// The line of the first `cpu:` of a pageset (0 if none).
    pub first_cpu_line: usize,
}

impl ZoneinfoSnapshot {
    /// The CPUs the pagesets list (the kernel prints one per possible CPU).
    pub fn nr_cpus(&self) -> u32 {
        self.zones
            .iter()
            .flat_map(|z| &z.pagesets)
            .map(|p| p.cpu + 1)
            .max()
            .unwrap_or(0)
    }

    /// Whether the pagesets show PCP high auto-tuning (`high_min` and
    /// `high_max`: Linux 6.7 and later).
    pub fn has_high_min(&self) -> bool {
        self.zones
            .iter()
            .flat_map(|z| &z.pagesets)
            .any(|p| p.high_min.is_some())
    }

    /// The zones' present memory, in KiB.
    pub fn present_kib(&self) -> u64 {
        self.zones.iter().map(|z| z.present).sum::<u64>() * 4
    }
}

/// What one zone of a strict parse has seen so far.
#[derive(Default)]
struct ZoneSeen {
    line: usize,
    /// min, low, high, spanned, present, managed.
    fields: [bool; 6],
    /// Per pageset: its `cpu:` line and whether count, high, batch came.
    cpus: Vec<(usize, [bool; 3])>,
}

const ZONE_FIELDS: [&str; 6] = ["min", "low", "high", "spanned", "present", "managed"];

/// Parses `/proc/zoneinfo` and rejects anything that is not one: every
/// zone must give its watermarks and sizes, every pageset its `count`,
/// `high` and `batch`, every value where a number belongs must be one, and
/// the pagesets of the populated zones must list the same CPUs. The error
/// names the line and what was expected there.
pub fn parse_zoneinfo_strict(text: &str) -> Result<ZoneinfoSnapshot, SnapshotError> {
    let mut snap = ZoneinfoSnapshot::default();
    let mut seen: Vec<ZoneSeen> = Vec::new();
    let mut in_pagesets = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix("Node ") {
            let (node, name) = zone_header(rest).ok_or_else(|| {
                snap_err(
                    n,
                    format!("expected `Node <number>, zone <name>`, found {t:?}"),
                )
            })?;
            snap.zones.push(Zone {
                node,
                name,
                ..Zone::default()
            });
            snap.zone_lines.push(n);
            seen.push(ZoneSeen {
                line: n,
                ..ZoneSeen::default()
            });
            in_pagesets = false;
            continue;
        }
        let (Some(zone), Some(zs)) = (snap.zones.last_mut(), seen.last_mut()) else {
            return Err(snap_err(
                n,
                format!("expected `Node <number>, zone <name>` (the first line of /proc/zoneinfo), found {t:?}"),
            ));
        };
        if t == "pagesets" {
            in_pagesets = true;
            continue;
        }
        if in_pagesets {
            in_pagesets = pageset_line(t, n, zone, zs, &mut snap.first_cpu_line)?;
            if in_pagesets {
                continue;
            }
        }
        zone_line(t, n, zone, zs)?;
    }
    check_zones(&snap, &seen)?;
    Ok(snap)
}

/// `0, zone   Normal` → (0, "Normal").
fn zone_header(rest: &str) -> Option<(u32, String)> {
    let (node, zone) = rest.split_once(',')?;
    let name = zone.trim().strip_prefix("zone")?.trim();
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    Some((node.trim().parse().ok()?, name.to_string())).filter(|_| ok)
}

fn number(v: &str, n: usize, key: &str) -> Result<u64, SnapshotError> {
    v.parse().map_err(|_| {
        snap_err(
            n,
            format!("`{key}` must be followed by a number, found {v:?}"),
        )
    })
}

/// One line inside `pagesets`; false when the line ends the pagesets
/// (`node_unreclaimable:`, `start_pfn:` or another zone-level line).
fn pageset_line(
    t: &str,
    n: usize,
    zone: &mut Zone,
    zs: &mut ZoneSeen,
    first_cpu_line: &mut usize,
) -> Result<bool, SnapshotError> {
    let mut it = t.split_whitespace();
    let (key, value) = (it.next().unwrap_or(""), it.next());
    let slot = match key {
        "cpu:" => {
            let cpu = number(value.unwrap_or(""), n, "cpu:")?;
            let cpu = u32::try_from(cpu).map_err(|_| snap_err(n, "cpu number too large"))?;
            zone.pagesets.push(Pageset {
                cpu,
                ..Pageset::default()
            });
            zs.cpus.push((n, [false; 3]));
            if *first_cpu_line == 0 {
                *first_cpu_line = n;
            }
            return Ok(true);
        }
        "count:" => Some(0),
        "high:" => Some(1),
        "batch:" => Some(2),
        "high_min:" | "high_max:" => None,
        "vm" => return Ok(true),
        _ => return Ok(false),
    };
    let v = number(value.unwrap_or(""), n, key)?;
    let (Some(ps), Some(cs)) = (zone.pagesets.last_mut(), zs.cpus.last_mut()) else {
        return Err(snap_err(
            n,
            format!("`{key}` before the first `cpu:` of the pagesets"),
        ));
    };
    match key {
        "count:" => ps.count = v,
        "high:" => ps.high = v,
        "batch:" => ps.batch = v,
        "high_min:" => ps.high_min = Some(v),
        _ => ps.high_max = Some(v),
    }
    if let Some(i) = slot {
        cs.1[i] = true;
    }
    Ok(true)
}

/// A zone-level line: a watermark or size, or any other `name value...`
/// statistic whose values are numbers (`protection: (0, 3018, ...)`).
fn zone_line(t: &str, n: usize, zone: &mut Zone, zs: &mut ZoneSeen) -> Result<(), SnapshotError> {
    let tokens: Vec<&str> = t.split_whitespace().collect();
    let (key, value) = (tokens[0], tokens.get(1).copied());
    if key == "start_pfn:" {
        zone.start_pfn = Some(number(value.unwrap_or(""), n, key)?);
        return Ok(());
    }
    if let Some(i) = ZONE_FIELDS.iter().position(|f| *f == key) {
        let v = number(value.unwrap_or(""), n, key)?;
        match i {
            0 => zone.min = v,
            1 => zone.low = v,
            2 => zone.high = v,
            3 => zone.spanned = v,
            4 => zone.present = v,
            _ => zone.managed = v,
        }
        zs.fields[i] = true;
        return Ok(());
    }
    let numeric = |s: &str| {
        s.trim_matches(|c| c == '(' || c == ')' || c == ',')
            .parse::<i64>()
            .is_ok()
    };
    let ok = match tokens.len() {
        1 => key == "per-node",
        _ => tokens.last().is_some_and(|v| numeric(v)) || t == "per-node stats",
    };
    if !ok {
        return Err(snap_err(
            n,
            format!("expected `name value` with a number, found {t:?}"),
        ));
    }
    Ok(())
}

/// After the last line: every zone complete, the populated zones' pagesets
/// alike.
fn check_zones(snap: &ZoneinfoSnapshot, seen: &[ZoneSeen]) -> Result<(), SnapshotError> {
    if snap.zones.is_empty() {
        return Err(snap_err(
            0,
            "no `Node N, zone NAME` line: not a /proc/zoneinfo",
        ));
    }
    let mut cpus: Option<(usize, Vec<u32>)> = None;
    for (z, zs) in snap.zones.iter().zip(seen) {
        if let Some(i) = zs.fields.iter().position(|f| !f) {
            return Err(snap_err(
                zs.line,
                format!(
                    "zone {} has no `{}` line (the file is cut short or not a /proc/zoneinfo)",
                    z.name, ZONE_FIELDS[i]
                ),
            ));
        }
        for (line, got) in &zs.cpus {
            if let Some(i) = got.iter().position(|g| !g) {
                return Err(snap_err(
                    *line,
                    format!(
                        "pageset without its `{}:` line",
                        ["count", "high", "batch"][i]
                    ),
                ));
            }
        }
        if z.managed == 0 {
            continue;
        }
        if z.pagesets.is_empty() {
            return Err(snap_err(
                zs.line,
                format!("populated zone {} has no pagesets", z.name),
            ));
        }
        let these: Vec<u32> = z.pagesets.iter().map(|p| p.cpu).collect();
        match &cpus {
            None => cpus = Some((zs.line, these)),
            Some((l, c)) if *c != these => {
                return Err(snap_err(
                    zs.line,
                    format!(
                        "zone {} lists pagesets of CPUs {these:?}, the zone at line {l} of {c:?}",
                        z.name
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Parses `/proc/vmstat` strictly: every line a counter name and an
/// unsigned number.
pub fn parse_vmstat_strict(text: &str) -> Result<BTreeMap<String, u64>, SnapshotError> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (name, value, extra) = (it.next(), it.next(), it.next());
        let ok = name.is_some_and(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        match (ok, value.and_then(|v| v.parse::<u64>().ok()), extra) {
            (true, Some(v), None) => {
                out.insert(name.unwrap_or_default().to_string(), v);
            }
            _ => {
                return Err(snap_err(
                    i + 1,
                    format!("expected `counter_name number` (/proc/vmstat), found {line:?}"),
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(snap_err(0, "no counters: not a /proc/vmstat"));
    }
    Ok(out)
}

/// `hugepages-<size>/stats/*`: per size directory, per counter.
pub type ThpStats = BTreeMap<String, BTreeMap<String, u64>>;

/// Reads a copy of `/sys/kernel/mm/transparent_hugepage` (`cp -r`): the
/// knobs (`enabled`, each `hugepages-<size>/enabled`) and the per-size
/// statistics. `enabled` must be there and be a sysfs choice.
pub fn read_thp_dir(dir: &Path) -> Result<(Knobs, ThpStats), String> {
    let enabled = dir.join("enabled");
    let text = fs::read_to_string(&enabled).map_err(|e| {
        format!(
            "{}: {e} (expected a copy of /sys/kernel/mm/transparent_hugepage)",
            enabled.display()
        )
    })?;
    let choice = |path: &Path, text: &str| -> Result<String, String> {
        let v = selected_choice(text);
        if text.contains('[')
            && [
                "always",
                "madvise",
                "never",
                "inherit",
                "within_size",
                "advise",
                "deny",
                "force",
            ]
            .contains(&v.as_str())
        {
            Ok(v)
        } else {
            Err(format!(
                "{}: line 1: expected a sysfs choice like `always [madvise] never`, found {:?}",
                path.display(),
                text.trim()
            ))
        }
    };
    let mut knobs = Knobs {
        thp_enabled: Some(choice(&enabled, &text)?),
        ..Knobs::default()
    };
    let mut stats = BTreeMap::new();
    let mut dirs: Vec<_> = fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("hugepages-"))
        .collect();
    dirs.sort_by_key(|e| e.file_name());
    for d in dirs {
        let name = d.file_name().to_string_lossy().into_owned();
        let p = d.path().join("enabled");
        if let Ok(t) = fs::read_to_string(&p) {
            knobs
                .thp_sizes_enabled
                .insert(name.clone(), choice(&p, &t)?);
        }
        let mut per = BTreeMap::new();
        let mut files: Vec<_> = fs::read_dir(d.path().join("stats"))
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        files.sort_by_key(|e| e.file_name());
        for f in files {
            let t =
                fs::read_to_string(f.path()).map_err(|e| format!("{}: {e}", f.path().display()))?;
            let v = t.trim().parse::<u64>().map_err(|_| {
                format!(
                    "{}: line 1: expected a number, found {:?}",
                    f.path().display(),
                    t.trim()
                )
            })?;
            per.insert(f.file_name().to_string_lossy().into_owned(), v);
        }
        if !per.is_empty() {
            stats.insert(name, per);
        }
    }
    Ok((knobs, stats))
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

    fn strict(text: &str) -> Result<ZoneinfoSnapshot, SnapshotError> {
        parse_zoneinfo_strict(text)
    }

    #[test]
    fn a_real_zoneinfo_parses_strictly() {
        let text = include_str!("../tests/fixtures/zoneinfo-2cpu-6.18.txt");
        let snap = strict(text).expect("this host's /proc/zoneinfo");
        let names: Vec<&str> = snap.zones.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(names, ["DMA", "DMA32", "Normal", "Movable", "Device"]);
        assert_eq!(snap.nr_cpus(), 2);
        assert!(snap.has_high_min());
        assert_eq!(
            snap.zones,
            parse_zoneinfo(text),
            "the lenient parser agrees"
        );
        assert_eq!(snap.zone_lines[0], 1);
        assert!(snap.first_cpu_line > 1);
    }

    #[test]
    fn a_damaged_zoneinfo_is_an_error_naming_the_line() {
        let text = include_str!("../tests/fixtures/zoneinfo-2cpu-6.18.txt");
        let lines: Vec<&str> = text.lines().collect();
        let at = |pat: &str| lines.iter().position(|l| l.contains(pat)).expect("line") + 1;
        let with = |line: usize, new: &str| {
            let mut l = lines.clone();
            l[line - 1] = new;
            l.join("\n")
        };
        // A number that is not one.
        let e = strict(&with(at("managed"), "        managed  4x2")).unwrap_err();
        assert_eq!(e.line, at("managed"));
        assert!(
            e.what.contains("`managed` must be followed by a number"),
            "{e}"
        );
        // Cut short inside a zone: the zone's line is named.
        let cut = lines[..at("spanned") - 1].join("\n");
        let e = strict(&cut).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.what.contains("zone DMA has no `spanned` line"), "{e}");
        // A pageset without its batch.
        let batch = at("batch:");
        let e = strict(&with(batch, "              bogus")).unwrap_err();
        assert!(
            e.what.contains("`name value`") || e.what.contains("batch"),
            "{e}"
        );
        // Another file altogether.
        let e = strict("MemTotal:       24684084 kB\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.what.contains("Node <number>, zone <name>"), "{e}");
        let e = strict("").unwrap_err();
        assert!(e.what.contains("not a /proc/zoneinfo"), "{e}");
        // A garbled zone header.
        let e = strict(&with(1, "Node x, zone DMA")).unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn zones_listing_different_cpus_are_refused() {
        let text = include_str!("../tests/fixtures/zoneinfo-2cpu-6.18.txt");
        // Renumber the Normal zone's second CPU.
        let normal = text.find("zone   Normal").expect("Normal");
        let (head, tail) = text.split_at(normal);
        let tail = tail.replacen("    cpu: 1", "    cpu: 5", 1);
        let e = strict(&format!("{head}{tail}")).unwrap_err();
        assert!(e.what.contains("lists pagesets of CPUs"), "{e}");
    }

    #[test]
    fn vmstat_is_read_strictly() {
        let v = parse_vmstat_strict("pgfault 12\nnr_free_pages 3\n").expect("vmstat");
        assert_eq!(v.get("pgfault"), Some(&12));
        let e = parse_vmstat_strict("pgfault 12\npgalloc_normal -3\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_vmstat_strict("pgfault 12 13\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse_vmstat_strict("\n").is_err());
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
