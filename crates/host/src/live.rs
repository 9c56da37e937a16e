//! Where the live kernel keeps its memory-management knobs and counters, and
//! how their text reads: one place for `native` (which changes knobs and
//! measures deltas) and `trace` (which snapshots them around a recording).
//!
//! The parsers take text, so that they are tested on fixed inputs; the
//! `read_*` functions read the live files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The THP sysfs directory (`mm/huge_memory.c`'s `hugepage_attr_group`).
pub const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";
/// Where tracefs is mounted, in the order it is looked for: its own mount
/// point since 4.1, then the old place under debugfs.
pub const TRACEFS_PATHS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
/// The kernel's counters, `name value` per line (`mm/vmstat.c`).
pub const PROC_VMSTAT: &str = "/proc/vmstat";
/// `vm.percpu_pagelist_high_fraction`: PCP high tuning (0 = auto-tuned).
pub const PERCPU_PAGELIST_HIGH_FRACTION: &str = "/proc/sys/vm/percpu_pagelist_high_fraction";
/// `vm.nr_hugepages`: the persistent 2 MiB hugetlb pool.
pub const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// The selected word of a sysfs choice list (`always [madvise] never` →
/// `madvise`), or the trimmed text of a file that is not one (`0\n` → `0`).
pub fn selected_choice(text: &str) -> String {
    let text = text.trim();
    match (text.find('['), text.find(']')) {
        (Some(open), Some(close)) if open < close => text[open + 1..close].to_string(),
        _ => text.to_string(),
    }
}

/// Reads a knob's current value with [`selected_choice`].
pub fn read_choice(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path).map(|t| selected_choice(&t))
}

/// `/proc/vmstat` text as counters by name, and the lines that are not a
/// name and an unsigned number (a caller that must trust every counter
/// treats them as an error; a snapshot skips them).
pub fn parse_vmstat(text: &str) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut counters = BTreeMap::new();
    let mut bad = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        match (it.next(), it.next().map(str::parse::<u64>), it.next()) {
            (Some(name), Some(Ok(v)), None) => {
                counters.insert(name.to_string(), v);
            }
            _ => bad.push(line.to_string()),
        }
    }
    (counters, bad)
}

/// The `hugepages-<size>kB` directories under [`THP_DIR`] as
/// `(size_kb, path)`, by size. Includes sizes with only `shmem_enabled`.
pub fn thp_size_dirs() -> Vec<(u32, PathBuf)> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir(THP_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let size = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            Some((size, e.path()))
        })
        .collect();
    dirs.sort();
    dirs
}

/// The anonymous mTHP sizes (KiB) this kernel has an `enabled` knob for,
/// ascending. A `hugepages-<size>kB` directory with only `shmem_enabled`
/// (6.18 has one for 8 KiB: order 1 is allowed for shmem and tmpfs but not
/// for anonymous memory) is not an anonymous size and is left out.
pub fn mthp_sizes_kb() -> Vec<u32> {
    thp_size_dirs()
        .into_iter()
        .filter(|(_, p)| p.join("enabled").exists())
        .map(|(s, _)| s)
        .collect()
}

/// `transparent_hugepage/enabled`.
pub fn top_knob_path() -> PathBuf {
    Path::new(THP_DIR).join("enabled")
}

/// `transparent_hugepage/hugepages-<size_kb>kB/enabled`.
pub fn size_knob_path(size_kb: u32) -> PathBuf {
    Path::new(THP_DIR)
        .join(format!("hugepages-{size_kb}kB"))
        .join("enabled")
}

/// The first of [`TRACEFS_PATHS`] where tracefs is mounted (it has an
/// `instances` directory).
pub fn find_tracefs() -> Option<PathBuf> {
    TRACEFS_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("instances").is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_lists() {
        assert_eq!(selected_choice("always [madvise] never\n"), "madvise");
        assert_eq!(selected_choice("always inherit madvise [never]"), "never");
        assert_eq!(selected_choice("0\n"), "0");
        assert_eq!(selected_choice("] odd [\n"), "] odd [");
    }

    #[test]
    fn vmstat_lines() {
        let (v, bad) = parse_vmstat("pgfault 12\nnr_free_pages 3\nbad line\nx -1\n");
        assert_eq!(v.get("pgfault"), Some(&12));
        assert_eq!(v.len(), 2);
        assert_eq!(bad, vec!["bad line".to_string(), "x -1".to_string()]);
    }

    #[test]
    fn thp_paths() {
        assert_eq!(
            size_knob_path(64),
            Path::new("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled")
        );
        // On a kernel with mTHP the sizes are ascending and each has a knob.
        let sizes = mthp_sizes_kb();
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert!(sizes.iter().all(|&s| size_knob_path(s).exists()));
    }
}
