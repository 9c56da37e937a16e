//! The `mmlab` binary as a user runs it: tables, the results document,
//! determinism, and a clear error for every kind of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod scratch;
use scratch::Scratch;

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("mmlab runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Compares `actual` with the snapshot file; `UPDATE_SNAPSHOTS=1` rewrites it.
fn snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing snapshot {}; run with UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "output differs from snapshot {}",
        path.display()
    );
}

/// Writes an experiment variant to a temporary file and runs it.
fn run_text(name: &str, text: &str) -> Output {
    let dir = Scratch::new("cli-test");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write experiment");
    mmlab(&["run", path.to_str().expect("utf-8 path"), "--quiet"])
}

fn small() -> String {
    std::fs::read_to_string(fixture("small.toml")).expect("fixture")
}

#[test]
fn table_snapshot_text_markdown_csv() {
    let f = fixture("small.toml");
    for (fmt, snap) in [
        ("text", "small.txt"),
        ("markdown", "small.md"),
        ("csv", "small.csv"),
    ] {
        let o = mmlab(&["run", f.to_str().unwrap(), "--quiet", "--format", fmt]);
        assert!(o.status.success(), "{}", stderr(&o));
        snapshot(snap, &stdout(&o));
    }
}

#[test]
fn json_is_byte_identical_across_runs_and_has_the_documented_shape() {
    let f = fixture("small.toml");
    let dir = Scratch::new("json");
    let out = dir.join("r.json");
    let a = mmlab(&[
        "run",
        f.to_str().unwrap(),
        "--quiet",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let b = mmlab(&[
        "run",
        f.to_str().unwrap(),
        "--quiet",
        "--format",
        "json",
        "--jobs",
        "1",
    ]);
    assert!(
        a.status.success() && b.status.success(),
        "{}{}",
        stderr(&a),
        stderr(&b)
    );
    assert_eq!(
        a.stdout, b.stdout,
        "same experiment and seed must give byte-identical JSON"
    );
    let file = std::fs::read_to_string(&out).unwrap();
    assert_eq!(file, stdout(&a), "--out writes the same document");
    let v: serde_json::Value = serde_json::from_str(&file).unwrap();
    for key in [
        "schema",
        "schema_version",
        "mmlab_version",
        "units",
        "experiments",
    ] {
        assert!(v.get(key).is_some(), "results document lacks \"{key}\"");
    }
    let e = &v["experiments"][0];
    for key in [
        "name",
        "seeds",
        "profile",
        "machine",
        "kernels",
        "runs",
        "published",
    ] {
        assert!(e.get(key).is_some(), "experiment lacks \"{key}\"");
    }
    let r = &e["runs"][0];
    assert_eq!(r["kernel"], "base");
    assert_eq!(r["workload"], "churn");
    assert!(r["metrics"]["zone_lock_pct"].is_number());
    assert!(r["vmstat"]["pgfree"].as_u64().unwrap() > 0);
    // Another seed gives another run.
    let c = mmlab(&[
        "run",
        f.to_str().unwrap(),
        "--quiet",
        "--format",
        "json",
        "--seed",
        "99",
    ]);
    assert_ne!(a.stdout, c.stdout);
}

#[test]
fn malformed_toml_names_file_line_and_column() {
    let o = run_text("bad.toml", "name = \"x\"\nseed = \n");
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("bad.toml") && e.contains("line 2"), "{e}");
}

#[test]
fn unknown_knob_lists_the_valid_ones() {
    let t = small().replace(
        "\"vm.percpu_pagelist_high_fraction\" = 8",
        "\"vm.no_such_knob\" = 8",
    );
    let e = stderr(&run_text("knob.toml", &t));
    assert!(
        e.contains("kernel \"big-high\": unknown knob \"vm.no_such_knob\""),
        "{e}"
    );
    assert!(
        e.contains("valid knobs: vm.percpu_pagelist_high_fraction"),
        "{e}"
    );
}

#[test]
fn knob_out_of_the_kernels_range_is_rejected() {
    let t = small().replace(
        "\"vm.percpu_pagelist_high_fraction\" = 8",
        "\"vm.percpu_pagelist_high_fraction\" = 3",
    );
    let e = stderr(&run_text("range.toml", &t));
    assert!(
        e.contains("invalid value 3 for vm.percpu_pagelist_high_fraction"),
        "{e}"
    );
    assert!(e.contains("0, or an integer from 8"), "{e}");
}

#[test]
fn size_with_a_bad_unit_is_rejected() {
    let t = small().replace("\"256MiB\"", "\"256 parsecs\"");
    let e = stderr(&run_text("size.toml", &t));
    assert!(
        e.contains("unknown unit \"parsecs\"") && e.contains("line 11"),
        "{e}"
    );
}

#[test]
fn machine_with_no_cpus_is_rejected() {
    let t = small().replace("cpus_per_node = 4", "cpus_per_node = 0");
    let e = stderr(&run_text("cpus.toml", &t));
    assert!(e.contains("node 0 has 0 CPUs"), "{e}");
}

#[test]
fn machine_beyond_the_physical_address_space_says_the_limit() {
    let t = small().replace("\"256MiB\"", "\"8192TiB\"");
    let e = stderr(&run_text("huge.toml", &t));
    assert!(
        e.contains("8.0 PiB of memory; the model addresses at most 4.0 PiB"),
        "{e}"
    );
}

/// Sparse memory: a 64 TiB machine boots and runs the small workload
/// (memory it never touches costs no page metadata).
#[test]
fn a_64_tib_machine_runs() {
    let t = small().replace("\"256MiB\"", "\"64TiB\"");
    let o = run_text("64t.toml", &t);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn unknown_metric_workload_and_parameter_are_named() {
    let e = stderr(&run_text(
        "m.toml",
        &small().replace("\"pgfree\"", "\"pgfreeeee\""),
    ));
    assert!(e.contains("unknown metric \"pgfreeeee\""), "{e}");
    let e = stderr(&run_text(
        "w.toml",
        &small().replace("type = \"page-churn\"", "type = \"page-chrun\""),
    ));
    assert!(
        e.contains(
            "unknown workload \"page-chrun\"; valid workloads: \
             anon-cow-seq, anon-w-seq, ebizzy, folio-buckets, hugetlb-cow, kbuild, kernel-compile, \
             malloc-dontneed, page-churn, page-fault1, small-vmas, speedometer, stream, \
             thp-migration-bench, tiering-promote"
        ),
        "{e}"
    );
    let e = stderr(&run_text(
        "p.toml",
        &small().replace("burst = 200", "brust = 200"),
    ));
    assert!(e.contains("unknown parameter \"brust\""), "{e}");
}

#[test]
fn workload_larger_than_memory_counts_failed_allocations() {
    // 4 tasks x 20000 blocks of up to order 3 cannot fit in 256 MiB.
    let t = small()
        .replace("burst = 200", "burst = 20000, high_order_pct = 50")
        .replace("\"pgfree\"", "\"alloc_fail\"")
        .replace("mode = \"relative\"", "mode = \"absolute\"");
    let o = run_text("oom.toml", &t);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("base"))
        .expect("a base row");
    let fails: u64 = line.split_whitespace().last().unwrap().parse().unwrap();
    assert!(fails > 0, "expected failed allocations, got: {out}");
}

/// Seed 001's reproduction: THPs move whole, the seed's copy_page_mt is
/// faster than the single-threaded copy, and the published table prints.
#[test]
fn thp_migration_reproduces_with_the_seeds_table_beside() {
    let o = mmlab(&["reproduce", "thp-migration", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("seed 2016 (4.9)") && out.contains("8.58"),
        "{out}"
    );
    // `reproduce thp-migration` runs its companion too.
    assert!(out.contains("thp-migration-tiering / 2M"), "{out}");
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../experiments/thp-migration.toml"
    );
    let o = mmlab(&["run", file, "--quiet", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let gbps = |k: &str, w: &str| {
        v["experiments"][0]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kernel"] == k && r["workload"] == w)
            .unwrap()["metrics"]["migrate_gbps"]
            .as_f64()
            .unwrap()
    };
    let single = gbps("4.x single", "1x2M");
    assert!(single > 0.0);
    assert!(gbps("mt-2", "1x2M") > single);
    assert!(gbps("mt-8", "1x2M") > gbps("mt-4", "1x2M"));
    // Base pages never use copy_page_mt.
    assert_eq!(gbps("mt-8", "512x4K"), gbps("4.x single", "512x4K"));
    let r = v["experiments"][0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kernel"] == "6.18 single" && r["workload"] == "16x2M")
        .unwrap();
    assert_eq!(r["vmstat"]["thp_migration_success"], 16);
    assert_eq!(r["vmstat"]["pgmigrate_fail"], 0);
}

/// The tiering experiment: promotion under load. Every hot THP reported
/// is promoted or forgotten (none fails); the seed's copy_page_mt takes
/// the application's CPUs and slows it, the adaptive engine promotes
/// faster than the single-threaded copy without taking them.
#[test]
fn thp_migration_tiering_shows_promotion_against_application_throughput() {
    let o = mmlab(&[
        "reproduce",
        "thp-migration-tiering",
        "--quiet",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let r = |k: &str, w: &str| -> serde_json::Value {
        v["experiments"][0]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kernel"] == k && r["workload"] == w)
            .unwrap()
            .clone()
    };
    let m = |k: &str, w: &str, name: &str| r(k, w)["metrics"][name].as_f64().unwrap();
    let c = |k: &str, w: &str, name: &str| r(k, w)["vmstat"][name].as_u64().unwrap();
    for k in ["6.18 single", "mt-4", "adaptive", "batched-4", "dma"] {
        for w in ["2M", "4K"] {
            assert_eq!(c(k, w, "pgmigrate_fail"), 0, "{k} {w}");
            assert!(c(k, w, "pgmigrate_success") > 0, "{k} {w}");
        }
    }
    assert_eq!(c("6.18 single", "2M", "migrate_copy_helper_ns"), 0);
    assert_eq!(c("dma", "2M", "migrate_copy_helper_ns"), 0);
    assert!(c("mt-4", "2M", "migrate_copy_helper_ns") > 0);
    assert!(m("mt-4", "2M", "throughput") < m("6.18 single", "2M", "throughput"));
    assert!(m("adaptive", "2M", "migrate_gbps") > m("6.18 single", "2M", "migrate_gbps"));
    assert!(m("adaptive", "2M", "throughput") > m("mt-4", "2M", "throughput"));
}

#[test]
fn a_numa_profile_must_fit_the_machine() {
    let t = small().replace("profile = \"host-epyc-zen3\"", "profile = \"e5-2640v3\"");
    let e = stderr(&run_text("numa.toml", &t));
    assert!(
        e.contains("profile \"e5-2640v3\" does not fit machine")
            && e.contains("numa.distance must be a"),
        "{e}"
    );
}

#[test]
fn fault_bench_needs_at_least_one_run() {
    let o = mmlab(&["bench", "faults", "--no-live", "--fault-runs", "0"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("invalid value '0' for '--fault-runs <FAULT_RUNS>'") && e.contains("1.."),
        "{e}"
    );
}

#[test]
fn reproduce_names_unknown_experiments_and_list_shows_knobs() {
    let e = stderr(&mmlab(&["reproduce", "nope"]));
    assert!(
        e.contains(
            "no built-in experiment \"nope\"; built-in experiments: \
             anon-cow-seq, huge-copy-order, large-anon-folios, large-anon-folios-j80, \
             large-anon-folios-order-mix, large-anon-folios-page-fault, \
             large-anon-folios-speedometer, page-churn, page-fault1, pcp-autotune, \
             pcp-autotune-lmbench, pcp-autotune-netperf, thp-migration, \
             thp-migration-tiering, vmacache"
        ),
        "{e}"
    );
    let l = stdout(&mmlab(&["list"]));
    assert!(
        l.contains("vm.percpu_pagelist_high_fraction")
            && l.contains("page-churn")
            && l.contains("page-fault1")
            && l.contains("anon-cow-seq")
            && l.contains("transparent_hugepage/enabled")
            && l.contains("zone_lock_pct"),
        "{l}"
    );
}

#[test]
fn large_folio_table_shows_times_rates_and_published_gaps() {
    let t = r#"
name = "laf-small"
profile = "host-epyc-zen3"
[machine]
name = "m"
nodes = 1
cpus_per_node = 4
memory_per_node = "512MiB"
[[kernel]]
name = "base"
preset = "linux-6.6"
[[kernel]]
name = "v2"
preset = "linux-6.6"
knobs = { "mmlab.anon_folio_policy" = "v2" }
[[workload]]
name = "sp"
type = "speedometer"
params = { runs = 2, objects = 40 }
[report]
metrics = ["runs_per_min", "sys_ns", "user_ns", "mix_64k_pct", "bloat_pct"]
baseline = "base"
mode = "change"
[published]
source = "test"
columns = ["runs_per_min", "other"]
rows = { "base" = [0.0, nan], "v2" = [0.5, 1.0] }
"#;
    let o = run_text("laf.toml", t);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let row = |name: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // The model's table: runs per minute up, user time up a little (the
    // first access to each other page of a 64K folio pays
    // fresh_pte_touch_ns), some 64K.
    let v2 = row("v2");
    assert!(v2[1].starts_with('+') && v2[1] != "+0.0%", "{out}");
    let user: f64 = v2[3].trim_end_matches('%').parse().unwrap();
    assert!(user > 0.0 && user < 5.0, "{out}");
    assert!(v2[4].parse::<f64>().unwrap() > 0.0, "{out}");
    // The published table: a figure the seed does not give is "-".
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["base", "0.0", "-"]),
        "{out}"
    );
}

#[test]
fn cache_model_needs_a_profile_cache_section_and_an_llc_size() {
    let on = small().replace("dma32 = \"64MiB\"", "dma32 = \"64MiB\"\ncache_model = true");
    let e = stderr(&run_text("cache.toml", &on));
    assert!(
        e.contains(
            "machine.cache_model = true, but profile \"host-epyc-zen3\" has no [cache] section"
        ),
        "{e}"
    );
    let e = stderr(&run_text(
        "cache-llc.toml",
        &on.replace("profile = \"host-epyc-zen3\"", "profile = \"haswell-ep\""),
    ));
    assert!(e.contains("set machine.llc_per_node"), "{e}");
    let ok = on
        .replace("profile = \"host-epyc-zen3\"", "profile = \"haswell-ep\"")
        .replace(
            "dma32 = \"64MiB\"",
            "dma32 = \"64MiB\"\nllc_per_node = \"10MiB\"",
        );
    let o = run_text("cache-ok.toml", &ok);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `kernels` on a workload runs it on those kernels only (its table has
/// their rows), `baseline` on a workload is its table's baseline, and bad
/// names in either are errors that say what was expected.
#[test]
fn a_workload_runs_on_its_kernels_against_its_own_baseline() {
    let two = small().replace(
        "[report]",
        "[[kernel]]\nname = \"other\"\npreset = \"linux-6.18\"\n\n\
         [[workload]]\nname = \"churn-618\"\ntype = \"page-churn\"\n\
         kernels = [\"other\", \"big-high\"]\nbaseline = \"other\"\n\
         params = { iterations = 5, burst = 100, think_ns = 1000 }\n\n[report]",
    );
    let two = two.replace(
        "type = \"page-churn\"\nparams = { iterations = 20",
        "type = \"page-churn\"\nkernels = [\"base\", \"big-high\"]\nparams = { iterations = 20",
    );
    let o = run_text("kernels.toml", &two);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let tables: Vec<&str> = out.split("small-churn / ").skip(1).collect();
    assert_eq!(tables.len(), 2, "{out}");
    let rows = |t: &str| -> Vec<String> {
        t.lines()
            .skip_while(|l| !l.starts_with("---"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(rows(tables[0]), ["base", "big-high"], "{out}");
    assert!(tables[0].contains("relative to base = 100.0"), "{out}");
    // The experiment's kernel order, whatever the list's.
    assert_eq!(rows(tables[1]), ["big-high", "other"], "{out}");
    assert!(tables[1].contains("relative to other = 100.0"), "{out}");
    let e = stderr(&run_text(
        "kernels-bad.toml",
        &two.replace("[\"other\", \"big-high\"]", "[\"othre\"]"),
    ));
    assert!(
        e.contains(
            "workload \"churn-618\": kernels: \"othre\" names no kernel of this experiment; \
             expected one of base, big-high, other"
        ),
        "{e}"
    );
    let e = stderr(&run_text(
        "kernels-base.toml",
        &two.replace("baseline = \"other\"\n", ""),
    ));
    assert!(
        e.contains("workload \"churn-618\" does not run on report.baseline \"base\""),
        "{e}"
    );
    let e = stderr(&run_text(
        "kernels-own-base.toml",
        &two.replace("baseline = \"other\"", "baseline = \"base\""),
    ));
    assert!(
        e.contains(
            "workload \"churn-618\": baseline = \"base\" is not one of the kernels it runs on"
        ),
        "{e}"
    );
}
