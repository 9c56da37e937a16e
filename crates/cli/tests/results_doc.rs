//! The results document of every built-in experiment against
//! `docs/results-schema.json`, its JSON Lines and CSV forms, and the bad
//! cases of issue 16 (several documents back to back, unquoted CSV, values
//! as strings, missing published tables).
//!
//! Every built-in experiment runs once for the whole file (`reproduce
//! --format jsonl --out FILE`, about two minutes of CPU in a debug build);
//! the tests below share that run.

use mmlab::results::{ResultsDoc, TIDY_COLUMNS};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("run mmlab")
}

/// A file in a directory of its own, removed with the directory when the
/// guard drops (also when the test fails).
struct Scratch {
    dir: PathBuf,
    path: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scratch(name: &str) -> Scratch {
    static NR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nr = NR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mmlab-results-doc-{}-{nr}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    Scratch { dir, path }
}

/// `mmlab reproduce` of every built-in experiment: (JSON Lines printed,
/// JSON written by --out).
fn reproduce_all() -> &'static (String, String) {
    static RUN: OnceLock<(String, String)> = OnceLock::new();
    RUN.get_or_init(|| {
        let out = scratch("all.json");
        let o = mmlab(&[
            "reproduce",
            "--quiet",
            "--format",
            "jsonl",
            "--out",
            out.path.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let file = std::fs::read_to_string(&out.path).expect("--out file");
        (String::from_utf8(o.stdout).expect("utf-8"), file)
    })
}

fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results-schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("schema file")).expect("json");
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

fn schema_errors(v: &Value) -> Vec<String> {
    validator()
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn every_builtin_experiment_validates_against_the_json_schema() {
    let (_, file) = reproduce_all();
    let doc: Value = serde_json::from_str(file).expect("one JSON document");
    let errors = schema_errors(&doc);
    assert!(errors.is_empty(), "schema errors: {errors:#?}");
    let names: Vec<&str> = doc["experiments"]
        .as_array()
        .expect("experiments")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, mmlab::api::builtin_names());
    // The typed reader agrees, and writing it back gives the same bytes.
    let typed = ResultsDoc::from_json(file).expect("reads back");
    assert_eq!(mmlab::results::to_json_pretty(&typed) + "\n", *file);
}

#[test]
fn the_schema_rejects_what_it_should() {
    let (_, file) = reproduce_all();
    let good: Value = serde_json::from_str(file).expect("json");
    let mut bad = good.clone();
    bad["schema_version"] = Value::from(2);
    assert!(
        !schema_errors(&bad).is_empty(),
        "a version 2 document passed"
    );
    let mut bad = good.clone();
    bad["experiments"][0]["runs"][0]["metrics"]["runtime_ns"] = Value::from("+6.6%");
    assert!(
        !schema_errors(&bad).is_empty(),
        "a value as a string passed"
    );
    let mut bad = good;
    bad["experiments"][0]
        .as_object_mut()
        .expect("object")
        .remove("published");
    assert!(
        !schema_errors(&bad).is_empty(),
        "a missing published list passed"
    );
}

#[test]
fn the_jsonl_stream_is_the_json_document() {
    let (lines, file) = reproduce_all();
    let from_lines = ResultsDoc::from_jsonl(lines).expect("jsonl");
    let from_file = ResultsDoc::from_json(file).expect("json");
    assert_eq!(from_lines, from_file);
    let n = lines.lines().count();
    for (i, l) in lines.lines().enumerate() {
        let v: Value = serde_json::from_str(l).expect("each line is JSON");
        // The seeds' headlines, when the run has them, come last.
        let want = match i {
            0 => "header",
            _ if i + 1 == n && !from_file.headlines.is_empty() => "headlines",
            _ => "experiment",
        };
        assert_eq!(v["record"], want, "line {}", i + 1);
    }
}

#[test]
fn tidy_csv_of_every_builtin_has_numbers_units_and_the_published_tables() {
    let (_, file) = reproduce_all();
    let doc = ResultsDoc::from_json(file).expect("json");
    let mut bytes = Vec::new();
    mmlab::csv_out::write_tidy(&doc, &mut bytes).expect("csv");
    let mut r = csv::ReaderBuilder::new().from_reader(bytes.as_slice());
    let header: Vec<String> = r
        .headers()
        .expect("header")
        .iter()
        .map(String::from)
        .collect();
    assert_eq!(header, TIDY_COLUMNS);
    let mut published = std::collections::BTreeSet::new();
    let mut n = 0;
    for rec in r.records() {
        let rec = rec.expect("a well-formed record");
        assert_eq!(rec.len(), TIDY_COLUMNS.len());
        let value = &rec[5];
        assert!(
            value.parse::<f64>().is_ok(),
            "not a number: {value:?} in {rec:?}"
        );
        if &rec[7] == "published" {
            published.insert(rec[0].to_string());
        } else {
            assert!(!rec[6].is_empty(), "a model value without unit: {rec:?}");
            assert!(rec[3].parse::<u64>().is_ok(), "seed: {rec:?}");
        }
        n += 1;
    }
    assert_eq!(n, doc.tidy_rows().len());
    // Every experiment with a [published] table has its figures in the CSV.
    for e in &doc.experiments {
        assert_eq!(
            published.contains(&e.name),
            !e.published.is_empty(),
            "{}",
            e.name
        );
    }
    assert!(published.contains("pcp-autotune"));
}

#[test]
fn reproduce_of_several_experiments_prints_one_json_document() {
    // thp-migration runs its companion thp-migration-tiering too.
    let o = mmlab(&["reproduce", "thp-migration", "--quiet", "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).expect("utf-8");
    // One value: serde_json refuses trailing data after the first one.
    let doc: Value = serde_json::from_str(&text).expect("exactly one JSON document");
    let names: Vec<&str> = doc["experiments"]
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["thp-migration", "thp-migration-tiering"]);
    assert!(schema_errors(&doc).is_empty());
}

const NASTY: &str = r#"
name = "quoting"
profile = "host-epyc-zen3"
[machine]
name = "tiny, \"small\""
nodes = 1
cpus_per_node = 2
memory_per_node = "256MiB"
[[kernel]]
name = "base"
preset = "linux-6.6"
[[kernel]]
name = 'frac,64 "big"'
preset = "linux-6.6"
knobs = { "vm.percpu_pagelist_high_fraction" = 64 }
[[workload]]
name = "churn, again"
type = "page-churn"
params = { iterations = 5, burst = 50, think_ns = 1000 }
[report]
metrics = ["runtime_ns", "zone_lock_pct"]
baseline = "base"
mode = "change"
[published]
source = "made up, to test quoting"
columns = ["a,b", "c\"d"]
units = ["%", "ns"]
rows = { "base" = [1.5, nan], 'frac,64 "big"' = [-2.0, 3.0] }
"#;

#[test]
fn csv_quotes_names_with_commas_and_quotes_and_keeps_numbers_numbers() {
    let nasty = scratch("nasty.toml");
    std::fs::write(&nasty.path, NASTY).expect("write");
    let p = nasty.path.to_str().expect("utf-8");
    let o = mmlab(&["run", p, "--quiet", "--format", "csv"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).expect("utf-8");
    assert!(text.contains("\r\n"), "RFC 4180 line ends");
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
    let big: Vec<_> = rows.iter().filter(|x| &x[2] == "frac,64 \"big\"").collect();
    assert!(!big.is_empty(), "the kernel's name came back whole");
    for x in &rows {
        assert_eq!(x.len(), 8, "{x:?}");
        assert!(x[5].parse::<f64>().is_ok(), "{x:?}");
    }
    let zl = big
        .iter()
        .find(|x| &x[4] == "zone_lock_pct" && &x[7] == "model")
        .expect("zone_lock_pct row");
    assert_eq!(&zl[1], "churn, again");
    assert_eq!(&zl[6], "%");
    let published: Vec<_> = rows.iter().filter(|x| &x[7] == "published").collect();
    // Three figures: the `nan` is not a row.
    assert_eq!(published.len(), 3, "{published:?}");
    assert!(published
        .iter()
        .any(|x| &x[4] == "c\"d" && &x[5] == "3.0" && &x[6] == "ns"));
    // The wide form: one row per run and per published row.
    let o = mmlab(&["run", p, "--quiet", "--format", "csv-wide"]);
    assert!(o.status.success());
    let mut r = csv::Reader::from_reader(o.stdout.as_slice());
    let head: Vec<String> = r
        .headers()
        .expect("header")
        .iter()
        .map(String::from)
        .collect();
    assert_eq!(
        head,
        [
            "source",
            "experiment",
            "workload",
            "kernel",
            "seed",
            "runtime_ns",
            "zone_lock_pct",
            "a,b",
            "c\"d"
        ]
    );
    assert_eq!(r.records().count(), 4);
}
