//! `mmlab native ... --format json`: the live measurements as JSON, read
//! from the reports' public fields (the `native` crate stays free of serde).

use native::stats::Summary;
use serde_json::{json, Value};

fn summary(s: &Summary) -> Value {
    json!({
        "samples": s.nr_samples, "min": s.min, "p10": s.p10,
        "median": s.median, "p90": s.p90, "max": s.max,
    })
}

/// `mmlab native copy-order`.
pub fn copy_order(r: &native::copy_order::Report) -> Value {
    let rows: Vec<Value> = r
        .rows
        .iter()
        .map(|x| {
            json!({
                "order": x.order.name(),
                "pressure": x.pressure,
                "copy_ns": summary(&x.copy_ns),
                "copy_gbps": summary(&x.copy_gbps),
                "target_read_ns_per_line": summary(&x.target_read_ns_per_line),
                "neighbour_read_ns_per_line": summary(&x.neighbour_read_ns_per_line),
                "bandwidth_vs_baseline": x.bandwidth_vs_baseline,
                "bandwidth_vs_baseline_p10_p90": [x.bandwidth_vs_baseline_p10_p90.0, x.bandwidth_vs_baseline_p10_p90.1],
                "bandwidth_vs_baseline_by_half": [x.bandwidth_vs_baseline_by_half.0, x.bandwidth_vs_baseline_by_half.1],
            })
        })
        .collect();
    json!({
        "trials": r.config.nr_trials,
        "seed": r.config.seed,
        "method": r.config.method.name(),
        "repeats": r.config.repeats,
        "thp_backed_bytes": [r.thp_backed_bytes.0, r.thp_backed_bytes.1],
        "cpu": r.cpus.0,
        "pressure_cpu": r.cpus.1,
        "rows": rows,
    })
}

/// `mmlab native parallel-copy`.
pub fn parallel_copy(r: &native::parallel_copy::Report) -> Value {
    let rows: Vec<Value> = r
        .rows
        .iter()
        .map(|x| {
            json!({
                "job": x.job.name(),
                "method": x.method.name(),
                "threads": x.nr_threads,
                "cpus": x.cpus,
                "copy_ns": summary(&x.copy_ns),
                "gbps": summary(&x.gbps),
                "speedup_vs_1": x.speedup_vs_1,
                "fraction_of_best": x.fraction_of_best,
            })
        })
        .collect();
    json!({
        "thp_backed_bytes": [r.thp_backed_bytes.0, r.thp_backed_bytes.1],
        "rows": rows,
    })
}

/// `mmlab native faults`: one entry per reference pattern.
pub fn faults(runs: &[(native::faults::FaultReport, u64)]) -> Value {
    let phase = |p: &native::faults::PhaseFaults| json!({ "minflt": p.nr_minflt, "majflt": p.nr_majflt, "elapsed_ns": p.elapsed_ns, "cpu_ns": p.cpu_ns });
    let v: Vec<Value> = runs
        .iter()
        .map(|(r, expected)| {
            let per_size: Vec<Value> = r
                .counters
                .per_size
                .iter()
                .map(|((kb, name), n)| json!({ "size_kb": kb, "counter": name, "value": n }))
                .collect();
            json!({
                "pattern": r.pattern.name,
                "expected_faults": expected,
                "touch": phase(&r.touch),
                "steps": r.steps.iter().map(phase).collect::<Vec<_>>(),
                "child_total_minflt": r.child_total_minflt,
                "vmstat_delta": r.counters.vmstat,
                "mthp_delta": per_size,
            })
        })
        .collect();
    Value::Array(v)
}
