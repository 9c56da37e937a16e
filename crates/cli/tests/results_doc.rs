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

mod scratch;
use scratch::Scratch;

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("run mmlab")
}

/// `mmlab reproduce` of every built-in experiment: (JSON Lines printed,
/// JSON written by --out, the --timeline file of every run). The files are
/// read into memory and their directory removed at once.
struct AllRuns {
    stdout: String,
    file: String,
    timeline: Vec<u8>,
}

fn reproduce_all_runs() -> &'static AllRuns {
    static RUN: OnceLock<AllRuns> = OnceLock::new();
    RUN.get_or_init(|| {
        let scratch = Scratch::new("results-doc");
        let out = scratch.join("all.json");
        let tl = scratch.join("all.pftrace");
        let o = mmlab(&[
            "reproduce",
            "--quiet",
            "--format",
            "jsonl",
            "--out",
            out.to_str().expect("utf-8"),
            "--timeline",
            tl.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        AllRuns {
            stdout: String::from_utf8(o.stdout).expect("utf-8"),
            file: std::fs::read_to_string(&out).expect("--out file"),
            timeline: std::fs::read(&tl).expect("--timeline file"),
        }
    })
}

/// (JSON Lines printed, JSON written by --out) of `reproduce_all_runs`.
fn reproduce_all() -> (&'static String, &'static String) {
    let r = reproduce_all_runs();
    (&r.stdout, &r.file)
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
    let scratch = Scratch::new("results-doc");
    let path = scratch.join("nasty.toml");
    std::fs::write(&path, NASTY).expect("write");
    let p = path.to_str().expect("utf-8");
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

mod perfetto_check;

#[test]
fn every_builtin_experiment_has_a_timeline_perfetto_decodes() {
    let (_, file) = reproduce_all();
    let doc = ResultsDoc::from_json(file).expect("doc");
    let s = perfetto_check::check_bytes(&reproduce_all_runs().timeline);
    let nr_runs: usize = doc.experiments.iter().map(|e| e.runs.len()).sum();
    let roots = s.tracks.values().filter(|t| t.parent.is_none()).count();
    assert_eq!(roots, nr_runs, "one root track per run");
    for e in &doc.experiments {
        let cpus: u32 = e.machine.nodes.iter().map(|n| n.cpus).sum();
        assert!(cpus > 0);
        assert!(
            s.tracks
                .values()
                .any(|t| t.parent.is_none() && t.name.starts_with(&format!("{}: ", e.name))),
            "no run of {}",
            e.name
        );
    }
}

#[test]
fn compare_works_on_every_builtin_experiment() {
    let scratch = Scratch::new("results-doc");
    let (_, file) = reproduce_all();
    let a = scratch.join("cmp-a.json");
    std::fs::write(&a, file).expect("write");
    let a = a.to_str().expect("utf-8");
    let o = mmlab(&["compare", a, a, "--format", "json", "--metrics", "all"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    let doc = ResultsDoc::from_json(file).expect("doc");
    let experiments: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r["experiment"].as_str().expect("name"))
        .collect();
    assert_eq!(experiments.len(), doc.experiments.len());
    for r in rows {
        assert_eq!(r["change"][0].as_f64(), Some(0.0), "{r}");
    }
    let md = mmlab(&["compare", a, a, "--format", "markdown"]);
    assert!(md.status.success());
}

/// A headless Chromium, or why there is none.
fn chromium() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(
        "no chromium, chromium-browser or google-chrome on PATH (.ci/run installs \
         Debian's chromium package)"
            .into(),
    )
}

/// Collects what a page would show in the DevTools console: console.error
/// and console.warn, uncaught exceptions and rejections, and resources
/// that failed to load. Injected first in <head>; the list ends up in a
/// <pre id="__mmlab_errors"> that --dump-dom prints.
const HOOK: &str = r#"<script>(function(){var errs=[];function rec(m){errs.push(String(m));var p=document.getElementById('__mmlab_errors');if(p)p.textContent=errs.join('\n');}
var ce=console.error,cw=console.warn;console.error=function(){rec('console.error: '+Array.prototype.join.call(arguments,' '));ce.apply(console,arguments)};console.warn=function(){rec('console.warn: '+Array.prototype.join.call(arguments,' '));cw.apply(console,arguments)};
window.addEventListener('error',function(e){var t=e.target;if(t&&t!==window&&(t.src||t.href)){rec('failed to load '+(t.src||t.href))}else{rec('error: '+e.message)}},true);
window.addEventListener('unhandledrejection',function(e){rec('unhandled rejection: '+e.reason)});
window.addEventListener('securitypolicyviolation',function(e){rec('CSP: '+e.violatedDirective)});
document.addEventListener('DOMContentLoaded',function(){var p=document.createElement('pre');p.id='__mmlab_errors';p.textContent=errs.join('\n');document.body.appendChild(p)});})();</script>"#;

/// Renders `html` in headless Chromium with no network; returns the DOM
/// after load and the errors the hook saw.
fn render(scratch: &Scratch, browser: &Path, html: &str, tag: &str) -> (String, Vec<String>) {
    let page = scratch.join(&format!("{tag}.html"));
    let hooked = html.replacen("<head>", &format!("<head>{HOOK}"), 1);
    assert_ne!(hooked, html, "the page has no <head>");
    std::fs::write(&page, hooked).expect("write page");
    let url = format!("file://{}", page.display());
    let profile = scratch.join(&format!("{tag}-profile"));
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=5000",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &url,
        ])
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = dom
        .find("<pre id=\"__mmlab_errors\">")
        .expect("the hook ran (its <pre> is in the DOM)");
    let body = &dom[start + "<pre id=\"__mmlab_errors\">".len()..];
    let errors = body[..body.find("</pre>").expect("</pre>")]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    (dom, errors)
}

#[test]
fn the_html_report_of_every_builtin_renders_in_chromium_without_errors() {
    let scratch = Scratch::new("results-doc");
    let (_, file) = reproduce_all();
    let json = scratch.join("report-src.json");
    std::fs::write(&json, file).expect("write");
    let html_path = scratch.join("report.html");
    let o = mmlab(&[
        "report",
        json.to_str().expect("utf-8"),
        "-o",
        html_path.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&html_path).expect("report");
    // Self-contained: nothing is fetched at view time.
    for bad in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "url(",
        "@import",
        "<script",
        "<link",
    ] {
        assert!(!html.contains(bad), "the report references {bad}");
    }
    let doc = ResultsDoc::from_json(file).expect("doc");
    for e in &doc.experiments {
        assert!(html.contains(&format!("<h2>{}</h2>", e.name)), "{}", e.name);
    }
    let browser = match chromium() {
        Ok(b) => b,
        Err(why) => {
            println!("SKIPPED (cannot run here): rendering in Chromium: {why}");
            return;
        }
    };
    // The checker sees errors where there are some...
    let bad = "<!DOCTYPE html><html><head><title>t</title></head><body>\
               <script>console.error('boom'); undefinedFunction();</script>\
               <img src=\"http://example.invalid/x.png\"></body></html>";
    let (_, errors) = render(&scratch, &browser, bad, "bad");
    assert!(errors.iter().any(|e| e.contains("boom")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("undefinedFunction")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("example.invalid")),
        "{errors:?}"
    );
    // ... and none in the report.
    let (dom, errors) = render(&scratch, &browser, &html, "report");
    assert!(errors.is_empty(), "the report logged: {errors:?}");
    let charts = dom.matches("<svg").count();
    assert!(
        charts >= 2 * doc.experiments.len(),
        "{charts} charts rendered for {} experiments",
        doc.experiments.len()
    );
    assert!(!dom.contains("chart not drawn"), "a chart failed to draw");
}

/// Perfetto's `trace_processor_shell`, or why there is none: the one
/// `MMLAB_TRACE_PROCESSOR` names, else one on PATH. Nothing installs it:
/// Perfetto ships it only from get.perfetto.dev (which the `perfetto`
/// Python package downloads it from), and no package registry has it.
fn trace_processor() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MMLAB_TRACE_PROCESSOR") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "MMLAB_TRACE_PROCESSOR={} is not a file",
                p.display()
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join("trace_processor_shell");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(
        "no trace_processor_shell on PATH and MMLAB_TRACE_PROCESSOR unset \
         (Perfetto's binary; see the README's Timelines section)"
            .into(),
    )
}

/// Runs `sql` in the trace processor on `trace`; the rows of its last
/// statement, each a list of fields (the shell prints CSV, quoting text).
fn tp_query(tp: &Path, scratch: &Scratch, trace: &Path, sql: &str) -> Vec<Vec<String>> {
    let q = scratch.join("query.sql");
    std::fs::write(&q, sql).expect("write query");
    let o = Command::new(tp)
        .arg("-q")
        .arg(&q)
        .arg(trace)
        .output()
        .expect("run trace_processor_shell");
    assert!(
        o.status.success(),
        "trace_processor_shell failed on {}: {}",
        trace.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8(o.stdout).expect("utf-8");
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().unwrap_or_default();
    assert!(!header.is_empty(), "no result from {sql}");
    lines.map(csv_fields).collect()
}

/// The fields of one CSV line: commas inside double quotes belong to the
/// field, a doubled quote is one quote.
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[test]
fn every_builtin_timeline_loads_in_perfettos_trace_processor() {
    let tp = match trace_processor() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED (cannot run here): {why}");
            return;
        }
    };
    let scratch = Scratch::new("results-doc");
    let trace = scratch.join("all.pftrace");
    let bytes = &reproduce_all_runs().timeline;
    std::fs::write(&trace, bytes).expect("write timeline");
    let ours = perfetto_check::check_bytes(bytes);
    // What the trace processor refused or lost while importing.
    let problems = tp_query(
        &tp,
        &scratch,
        &trace,
        "select name, idx, value from stats \
         where severity in ('error', 'data_loss') and value > 0;",
    );
    assert!(problems.is_empty(), "import problems: {problems:?}");
    // It holds every slice and counter value the file has (an instant
    // event is a slice of no duration there).
    let counts = tp_query(
        &tp,
        &scratch,
        &trace,
        "select (select count(*) from slice), (select count(*) from counter);",
    );
    let nr_slices = ours.slices.values().sum::<u64>() + ours.instants.len() as u64;
    assert_eq!(
        counts,
        vec![vec![nr_slices.to_string(), ours.counters.to_string()]],
        "slices and counter values: trace processor vs the file"
    );
    // Every run's root track is there by name.
    let names = tp_query(&tp, &scratch, &trace, "select distinct name from track;");
    let names: std::collections::BTreeSet<&str> = names.iter().map(|r| r[0].as_str()).collect();
    for t in ours.tracks.values().filter(|t| t.parent.is_none()) {
        assert!(names.contains(t.name.as_str()), "no track {:?}", t.name);
    }
}
