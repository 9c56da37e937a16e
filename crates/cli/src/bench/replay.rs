//! `mmlab bench replay`: replay mode (b) throughput on recordings, one
//! kernel (the recorded one), as `mmlab replay T --mode aspace` runs it:
//! reading the trace and replaying its address-space stream through the
//! model's fault path. Rates per wall-clock second and per CPU-second of
//! the benchmark thread (the steadier figure on a shared host).

use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the validation corpus of `scripts/corpus.py` keeps this host's
/// `mmlab record` recordings, relative to the repository.
const CORPUS_RECORDINGS: &str = "scripts/corpus/recordings-noaslr";

/// The real recordings committed with the project (the validation corpus of
/// `scripts/corpus.py`, [`CORPUS_RECORDINGS`]), used when no trace is named.
pub fn default_traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(CORPUS_RECORDINGS);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "mmtrace"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One trace's rates over `runs` runs: (events, wall rates, CPU rates).
fn time_trace(trace: &Path, runs: u32) -> Result<(u64, Vec<f64>, Vec<f64>)> {
    let header = trace::TraceReader::open(trace)
        .map_err(|e| anyhow!("{}: {e}", trace.display()))?
        .header()
        .clone();
    let exp = crate::replay::replay_experiment(trace, &header, 1, None)?;
    let (mut wall, mut cpu, mut events) = (Vec::new(), Vec::new(), 0);
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let c = native::sys::thread_cpu_ns();
        let a = crate::aspace::run(trace, &exp, true)?
            .ok_or_else(|| anyhow!("{}: no address-space events", trace.display()))?;
        let cpu_ns = native::sys::thread_cpu_ns().saturating_sub(c).max(1);
        let wall_ns = t.elapsed().as_nanos().max(1) as f64;
        events = a.recorded.nr_events;
        wall.push(events as f64 / wall_ns * 1e3);
        cpu.push(events as f64 / cpu_ns as f64 * 1e3);
    }
    Ok((events, wall, cpu))
}

/// `mmlab bench replay [--trace T ...]`.
pub fn replay(traces: &[PathBuf], runs: u32) -> Result<()> {
    let traces = if traces.is_empty() {
        default_traces()
    } else {
        traces.to_vec()
    };
    if traces.is_empty() {
        bail!("no trace to replay: name one with --trace (no corpus recordings in {CORPUS_RECORDINGS})");
    }
    println!(
        "replay mode (b), one kernel (the recorded one): reading + replaying the address-space stream; best of {} run(s)",
        runs.max(1)
    );
    let mut rows = vec![[
        "trace",
        "events",
        "M events/s",
        "M events/CPU-s",
        "per run (CPU)",
    ]
    .map(String::from)
    .to_vec()];
    let (mut all_events, mut all_cpu_s) = (0u64, 0f64);
    for t in &traces {
        let (events, wall, cpu) = time_trace(t, runs)?;
        let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        all_events += events;
        all_cpu_s += events as f64 / best(&cpu) / 1e6;
        rows.push(vec![
            t.file_name().map_or_else(
                || t.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            events.to_string(),
            format!("{:.2}", best(&wall)),
            format!("{:.2}", best(&cpu)),
            cpu.iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    print!("{}", native::table::format(&rows));
    println!(
        "all traces: {all_events} events, {:.2} M events/CPU-s (best runs)",
        all_events as f64 / all_cpu_s.max(1e-9) / 1e6
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mmlab bench replay` with no `--trace` finds the committed corpus
    /// (it broke once when the corpus moved its recordings).
    #[test]
    fn the_default_traces_are_the_committed_corpus_recordings() {
        let traces = default_traces();
        assert!(traces.len() >= 4, "{traces:?}");
        assert!(traces
            .iter()
            .all(|t| t.is_file() && t.parent().is_some_and(|d| d.ends_with(CORPUS_RECORDINGS))));
    }
}
