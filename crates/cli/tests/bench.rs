//! `mmlab bench scale` and `mmlab bench replay` run and print their tables
//! (smoke tests on small inputs: the figures themselves are benchmarks).

use std::path::Path;
use std::process::{Command, Output};

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("run mmlab")
}

#[test]
fn bench_scale_prints_a_row_per_machine_and_the_limit() {
    let o = mmlab(&[
        "bench",
        "scale",
        "--scale-memory",
        "64GiB,16TiB",
        "--scale-cpus",
        "8",
        "--churn-iterations",
        "1",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("64.0 GiB") || l.starts_with("16.0 TiB"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(out.contains("PCP churn on 1.0 TiB"), "{out}");
    assert!(
        out.contains("largest machine the model accepts: 4.0 PiB"),
        "{out}"
    );
}

#[test]
fn bench_scale_rejects_cpus_that_do_not_split_into_nodes() {
    let o = mmlab(&["bench", "scale", "--scale-cpus", "1001"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("1001 CPUs: expected a positive multiple of 8 nodes"),
        "{e}"
    );
}

#[test]
fn bench_replay_times_a_recording() {
    let t = Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/cc-c.mmtrace");
    let o = mmlab(&[
        "bench",
        "replay",
        "--trace",
        t.to_str().expect("utf-8"),
        "--replay-runs",
        "1",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("cc-c.mmtrace"))
        .unwrap_or_else(|| panic!("{out}"));
    let events: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(events > 0, "{row}");
}
