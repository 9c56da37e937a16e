//! `mmlab import`: a perf.data file into an mmlab trace, with the machine's
//! description that perf.data lacks (`--zoneinfo`, `--vmstat`, `--thp-dir`
//! or a `--snapshot` directory of all of them).

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use trace::event::{Counters, Knobs};
use trace::perf::ImportOptions;
use trace::sysinfo;

/// The text after `mmlab import --help`'s options.
pub const AFTER_HELP: &str = concat!(
    "Example: record everything mmlab can use (every tracepoint it replays, -d for the PERF_RECORD_MMAP2 of \
     data and anonymous mappings, -a for every process's allocator events, -m 128M so that a busy \
     machine loses no events), with a snapshot of the machine just before:\n\n",
    "  mkdir snap && cat /proc/zoneinfo >snap/zoneinfo && cat /proc/vmstat >snap/vmstat && \\\n",
    "    cp -r /sys/kernel/mm/transparent_hugepage snap/thp && \\\n",
    "    cat /proc/sys/vm/percpu_pagelist_high_fraction >snap/percpu_pagelist_high_fraction\n",
    "  perf record -a -d -m 128M -e kmem:mm_page_alloc -e kmem:mm_page_free -e kmem:mm_page_alloc_zone_locked \\\n",
    "    -e kmem:mm_page_pcpu_drain -e exceptions:page_fault_user -e exceptions:page_fault_kernel \\\n",
    "    -e syscalls:sys_enter_mmap -e syscalls:sys_exit_mmap -e syscalls:sys_enter_munmap \\\n",
    "    -e syscalls:sys_exit_munmap -e syscalls:sys_enter_brk -e syscalls:sys_exit_brk \\\n",
    "    -e syscalls:sys_enter_mremap -e syscalls:sys_exit_mremap -e syscalls:sys_enter_mprotect \\\n",
    "    -e syscalls:sys_exit_mprotect -e syscalls:sys_enter_madvise -e syscalls:sys_exit_madvise \\\n",
    "    -e sched:sched_process_fork -e sched:sched_process_exec -e sched:sched_process_exit \\\n",
    "    -e workqueue:workqueue_execute_start --filter 'function.function == vmstat_update' \\\n",
    "    -o perf.data -- CMD\n",
    "  cat /proc/vmstat >snap/vmstat-after && cp -r /sys/kernel/mm/transparent_hugepage snap/thp-after\n",
    "  mmlab import perf.data -o cmd.mmtrace --snapshot snap\n",
    "  mmlab validate cmd.mmtrace\n\n",
    "The workqueue event, filtered to the per-CPU vmstat work (Linux 6.3+ compares a function pointer \
     by name), gives the times at which each CPU's vmstat_update() ran: the replay runs the model's \
     decay_pcp_high() there instead of on its own one-second grid (the PCP drains follow it).\n\n",
    "With -a, only the command's process tree (perf's perf-exec child and its descendants) is replayed; \
     the other processes' allocator events are kept for the PCP counters. A perf.data of a perf that \
     was killed (its header never finished) is read to the end of the file, as perf report does.\n\n",
    "Fewer events work too: import says, per missing event, what the replay loses. --zoneinfo is what \
     `mmlab validate` needs (the zones, watermarks and each CPU's PCP count/high/batch); without it, \
     give `mmlab replay` the machine with --experiment.\n\n",
    "A zoneinfo taken before perf starts predates perf's own ring buffers (-m 128M: 32768 pages per \
     CPU, taken through the PCP lists, raising each list's high under auto-tuning), so validate's PCP \
     counters start from lists perf then changed; scripts/corpus.py perf-record takes it once perf has \
     mapped its buffers, while the command still waits to exec (comm perf-exec)."
);

/// `mmlab import`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The perf.data file.
    pub input: PathBuf,
    /// The mmlab trace to write (mode 0600; written whole or not at all).
    #[arg(
        short = 'o',
        long = "out",
        visible_alias = "output",
        value_name = "FILE"
    )]
    pub output: PathBuf,
    /// No summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// A snapshot directory: `zoneinfo` (required), and where present `vmstat`,
    /// `vmstat-after`, `thp/`, `thp-after/`, `percpu_pagelist_high_fraction`, `taken-at`
    /// (see below and --snapshot-at-exec).
    #[arg(long, value_name = "DIR")]
    pub snapshot: Option<PathBuf>,
    /// A copy of /proc/zoneinfo taken just before the recording: the machine's zones,
    /// watermarks and per-CPU pagesets (what validate needs).
    #[arg(long, value_name = "FILE")]
    pub zoneinfo: Option<PathBuf>,
    /// A copy of /proc/vmstat taken just before the recording.
    #[arg(long, value_name = "FILE")]
    pub vmstat: Option<PathBuf>,
    /// A copy of /proc/vmstat taken just after the recording (validate prints the deltas).
    #[arg(long, value_name = "FILE")]
    pub vmstat_after: Option<PathBuf>,
    /// A copy of /sys/kernel/mm/transparent_hugepage (`cp -r`): the THP and mTHP knobs
    /// in force, and the per-size statistics before the recording.
    #[arg(long, value_name = "DIR")]
    pub thp_dir: Option<PathBuf>,
    /// vm.percpu_pagelist_high_fraction during the recording.
    #[arg(long, value_name = "N")]
    pub percpu_pagelist_high_fraction: Option<u64>,
    /// Import as if this event had not been recorded (repeatable): a tracepoint
    /// (`exceptions:page_fault_kernel`), `perf:mmap`, `perf:mmap-data` (as without -d) or
    /// `perf:task`. To see what an event contributes.
    #[arg(long = "ignore-event", value_name = "EVENT")]
    pub ignore_events: Vec<String>,
    /// For a perf.data whose header perf never finished (killed: data size 0, no
    /// feature sections): a copy of tracefs's events/ directory (`cp -r
    /// /sys/kernel/tracing/events DIR`) of the host and boot it was recorded on, for the
    /// tracepoint formats the file lacks. Default: this host's tracefs.
    #[arg(long, value_name = "DIR")]
    pub tracefs_events: Option<PathBuf>,
    /// For a perf.data recorded without -d: do not complete each exec's layout (data
    /// segments, .bss) from the ELF files on this host.
    #[arg(long)]
    pub no_elf_layouts: bool,
    /// The zoneinfo was read when the command exec'd, perf's events already on (a
    /// --snapshot directory says so with a `taken-at` file reading `exec`): validate
    /// replays the allocator events from the command's exec on, since the snapshot
    /// already holds what the earlier ones did to the per-CPU lists.
    #[arg(long)]
    pub snapshot_at_exec: bool,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn vmstat_file(path: &Path) -> Result<std::collections::BTreeMap<String, u64>> {
    sysinfo::parse_vmstat_strict(&read(path)?).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// The snapshot files named by the arguments: explicit flags win over the
/// `--snapshot` directory's files; a directory's optional files are used
/// only where they exist.
struct Sources {
    zoneinfo: Option<PathBuf>,
    vmstat: Option<PathBuf>,
    vmstat_after: Option<PathBuf>,
    thp: Option<PathBuf>,
    thp_after: Option<PathBuf>,
    fraction: Option<PathBuf>,
}

fn sources(a: &ImportArgs) -> Result<Sources> {
    let dir = a.snapshot.as_deref();
    if let Some(d) = dir {
        if !d.is_dir() {
            bail!("--snapshot {}: not a directory", d.display());
        }
        if a.zoneinfo.is_none() && !d.join("zoneinfo").is_file() {
            bail!(
                "--snapshot {}: no zoneinfo file in it (cat /proc/zoneinfo >{}/zoneinfo)",
                d.display(),
                d.display()
            );
        }
    }
    let opt = |name: &str| dir.map(|d| d.join(name)).filter(|p| p.exists());
    Ok(Sources {
        zoneinfo: a.zoneinfo.clone().or_else(|| opt("zoneinfo")),
        vmstat: a.vmstat.clone().or_else(|| opt("vmstat")),
        vmstat_after: a.vmstat_after.clone().or_else(|| opt("vmstat-after")),
        thp: a.thp_dir.clone().or_else(|| opt("thp")),
        thp_after: opt("thp-after"),
        fraction: opt("percpu_pagelist_high_fraction"),
    })
}

/// Whether the snapshot was read at the command's exec: the flag, or a
/// `--snapshot` directory's `taken-at` file (`exec` or `start`; anything
/// else is an error naming the file), which speaks for the directory's own
/// zoneinfo only: not for one given with --zoneinfo.
fn snapshot_at_exec(a: &ImportArgs) -> Result<bool> {
    let dir_zoneinfo = a.zoneinfo.is_none();
    let Some(p) = a
        .snapshot
        .as_deref()
        .map(|d| d.join("taken-at"))
        .filter(|p| dir_zoneinfo && p.exists())
    else {
        return Ok(a.snapshot_at_exec);
    };
    match read(&p)?.trim() {
        "exec" => Ok(true),
        "start" => Ok(a.snapshot_at_exec),
        other => bail!(
            "{}: line 1: expected `exec` (read when the command exec'd) or `start` (before \
             the recording), found {other:?}",
            p.display()
        ),
    }
}

/// The import options of the arguments: every snapshot read and checked.
pub fn options(a: &ImportArgs) -> Result<ImportOptions> {
    let src = sources(a)?;
    let mut opts = ImportOptions {
        ignore_events: a.ignore_events.iter().cloned().collect(),
        tracefs_events: a.tracefs_events.clone(),
        no_elf_layouts: a.no_elf_layouts,
        snapshot_at_exec: snapshot_at_exec(a)?,
        ..ImportOptions::default()
    };
    opts.check().map_err(|e| anyhow!("--ignore-event: {e}"))?;
    if let Some(p) = &src.zoneinfo {
        let snap = sysinfo::parse_zoneinfo_strict(&read(p)?)
            .map_err(|e| anyhow!("{}: {e} (expected a copy of /proc/zoneinfo)", p.display()))?;
        opts.zoneinfo = Some((p.clone(), snap));
    }
    let mut knobs = Knobs::default();
    let mut before = Counters::default();
    let mut after = Counters::default();
    if let Some(d) = &src.thp {
        let (k, stats) = sysinfo::read_thp_dir(d).map_err(|e| anyhow!("{e}"))?;
        knobs = k;
        before.thp_stats = stats;
    }
    if let Some(d) = &src.thp_after {
        after.thp_stats = sysinfo::read_thp_dir(d).map_err(|e| anyhow!("{e}"))?.1;
    }
    knobs.percpu_pagelist_high_fraction = match (a.percpu_pagelist_high_fraction, &src.fraction) {
        (Some(v), _) => Some(v),
        (None, Some(p)) => Some(read(p)?.trim().parse().map_err(|_| {
            anyhow!(
                "{}: line 1: expected a number (vm.percpu_pagelist_high_fraction)",
                p.display()
            )
        })?),
        (None, None) => None,
    };
    if knobs != Knobs::default() {
        opts.knobs = Some(knobs);
    }
    if let Some(p) = &src.vmstat {
        before.vmstat = vmstat_file(p)?;
    }
    if let Some(p) = &src.vmstat_after {
        after.vmstat = vmstat_file(p)?;
    }
    opts.counters_before = (before != Counters::default()).then_some(before);
    opts.counters_after = (after != Counters::default()).then_some(after);
    Ok(opts)
}

/// `mmlab import`.
pub fn import_cmd(a: &ImportArgs) -> Result<()> {
    let opts = options(a)?;
    let sum = trace::perf::import_with(&a.input, &a.output, &opts)?;
    if a.quiet {
        return Ok(());
    }
    eprintln!(
        "mmlab import: {} events written to {}",
        sum.nr_events,
        a.output.display()
    );
    if !sum.entry_only_syscalls.is_empty() {
        eprintln!(
            "  recorded at their entry only (replayed with the model's result): {}; mmaps placed by their PERF_RECORD_MMAP2: {}",
            sum.entry_only_syscalls.join(", "),
            sum.nr_mmaps_placed_by_records
        );
    }
    if !sum.reduced_capability.is_empty() {
        eprintln!("  what this recording lacks, and what the replay loses or estimates for it:");
    }
    for line in sum.report() {
        eprintln!("  {line}");
    }
    if opts.zoneinfo.is_none() {
        eprintln!(
            "  no --zoneinfo: the trace has no zones, so `mmlab validate` cannot run on it and \
             `mmlab replay` needs --experiment (import again with --zoneinfo or --snapshot)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_perf_record_line_records_every_event_mmlab_replays() {
        for ev in trace::decode::RECORDED_EVENTS {
            assert!(
                AFTER_HELP.contains(&format!("-e {ev} ")),
                "{ev} missing from the perf record line"
            );
        }
        assert!(AFTER_HELP.contains("perf record -a -d -m 128M "));
    }
}
