//! The bad cases of issue 16's "Consistency" list, each run as a user would:
//! closed pipes, one size parser, `--warm-pcp` on replay and validate, the
//! machine-readable forms of the informational commands, `-o/--out` on
//! record/import, completions and man pages, `compare` and `report`, and a
//! README that installs the binary and links nothing outside the repository.

mod scratch;
use scratch::Scratch;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mmlab")
}

fn mmlab(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run mmlab")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "mmlab failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .to_str()
        .expect("utf-8")
        .to_string()
}

/// Runs mmlab with its stdout a pipe whose reader is already gone, as in
/// `mmlab ... | head` once head has exited: every write fails with EPIPE.
fn with_closed_stdout(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    (child.wait().expect("wait"), err)
}

#[test]
fn a_closed_pipe_ends_quietly_with_status_0() {
    let trace = repo("crates/trace/tests/fixtures/cc-c.mmtrace");
    let small = fixture("small.toml");
    let cases: Vec<Vec<&str>> = vec![
        vec!["zoneinfo", &small],
        vec!["trace-stats", trace.to_str().expect("utf-8")],
        vec!["reproduce", "page-fault1", "--quiet"],
        vec!["run", &small, "--quiet", "--format", "csv"],
        vec!["list"],
        vec!["list", "--format", "json"],
        vec!["completions", "bash"],
        vec!["man"],
    ];
    for args in cases {
        let (status, err) = with_closed_stdout(&args);
        assert!(
            status.success() && err.is_empty(),
            "mmlab {args:?} | (closed): status {status}, stderr: {err}"
        );
    }
}

#[test]
fn one_size_parser_for_machines_and_workloads() {
    let scratch = Scratch::new("consistency");
    let text = std::fs::read_to_string(fixture("small.toml")).expect("fixture");
    // 16GB in a machine was accepted and in a workload refused; both take
    // it now (and mean 16 GiB).
    let t = text
        .replace("memory_per_node = \"256MiB\"", "memory_per_node = \"1GB\"")
        .replace(
            "type = \"page-churn\"\nparams = { iterations = 20, burst = 200, think_ns = 1000 }",
            "type = \"anon-w-seq\"\nparams = { size = \"16MB\", tasks = 1 }",
        )
        .replace("\"pgfree\"]", "\"pgfault\"]");
    let p = scratch.join("sizes.toml");
    std::fs::write(&p, t).expect("write");
    let o = mmlab(&[
        "run",
        p.to_str().expect("utf-8"),
        "--quiet",
        "--format",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&ok(&o)).expect("json");
    let e = &doc["experiments"][0];
    assert_eq!(e["machine"]["nodes"][0]["memory_bytes"], 1u64 << 30);
    // 16 MiB written once: 4096 faults of 4 KiB pages, or 8 of 2 MiB THPs.
    let faults = e["runs"][0]["vmstat"]["pgfault"].as_u64().expect("pgfault");
    assert!(faults == 4096 || faults == 8, "{faults}");
}

/// A recorded trace with allocator and fault events (`dd | gzip`).
fn kmem_trace() -> PathBuf {
    repo("crates/trace/tests/fixtures/dd-gzip.mmtrace")
}

#[test]
fn import_takes_out_and_its_old_spelling_output() {
    let scratch = Scratch::new("consistency");
    let perf = repo("crates/trace/tests/fixtures/kmem.perf.data");
    for (i, flag) in ["-o", "--out", "--output"].iter().enumerate() {
        let t = scratch.join(&format!("kmem-{i}.mmtrace"));
        ok(&mmlab(&[
            "import",
            perf.to_str().expect("utf-8"),
            flag,
            t.to_str().expect("utf-8"),
            "--quiet",
        ]));
        assert!(t.exists(), "{flag}");
    }
}

#[test]
fn warm_pcp_is_spelled_the_same_on_replay_and_validate() {
    let t = kmem_trace();
    let t = t.to_str().expect("utf-8");
    let warm = |args: &[&str]| -> bool {
        let o = mmlab(args);
        let v: serde_json::Value = serde_json::from_str(&ok(&o)).expect("json");
        v["alloc"]["warm_pcp"].as_bool().expect("warm_pcp")
    };
    assert!(
        warm(&["validate", t, "--format", "json"]),
        "validate: on by default"
    );
    assert!(!warm(&[
        "validate",
        t,
        "--warm-pcp=false",
        "--format",
        "json"
    ]));
    assert!(warm(&["validate", t, "--warm-pcp", "--format", "json"]));
    for flag in [
        vec![],
        vec!["--warm-pcp"],
        vec!["--warm-pcp=true"],
        vec!["--warm-pcp=false"],
    ] {
        let mut args = vec!["replay", t, "--quiet", "--format", "json"];
        args.extend(flag.iter().copied());
        let o = mmlab(&args);
        assert!(
            o.status.success(),
            "replay {flag:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The space-separated value is not taken as the trace's name.
    let o = mmlab(&["replay", "--warm-pcp", t, "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn informational_commands_have_json() {
    let small = fixture("small.toml");
    let trace = repo("crates/trace/tests/fixtures/cc-c.mmtrace");
    let json = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&ok(&mmlab(args))).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    let z = json(&["zoneinfo", &small, "--format", "json"]);
    assert_eq!(z["kernels"][0]["kernel"], "base");
    assert!(
        z["kernels"][0]["zones"][0]["managed"]
            .as_u64()
            .expect("managed")
            > 0
    );
    let l = json(&["list", "--format", "json"]);
    let m = l["metrics"].as_array().expect("metrics");
    assert!(m
        .iter()
        .any(|x| x["name"] == "zone_lock_pct" && x["unit"] == "%"));
    assert!(l["experiments"].as_array().expect("experiments").len() >= 15);
    let t = json(&[
        "trace-stats",
        trace.to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    assert!(t["events_by_kind"].as_object().expect("kinds").len() > 1);
    let v = json(&[
        "validate",
        kmem_trace().to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    let counters = v["alloc"]["counters"].as_array().expect("counters");
    assert_eq!(counters.len(), 4);
    assert!(counters[0]["recorded"].as_u64().is_some());
}

#[test]
fn completions_and_man_pages_come_from_the_cli_definition() {
    let scratch = Scratch::new("consistency");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let s = ok(&mmlab(&["completions", shell]));
        assert!(s.contains("reproduce") && s.contains("compare"), "{shell}");
    }
    let man = ok(&mmlab(&["man"]));
    assert!(
        man.contains(".TH mmlab 1"),
        "{}",
        &man[..200.min(man.len())]
    );
    let dir = scratch.join("man");
    ok(&mmlab(&["man", "-o", dir.to_str().expect("utf-8")]));
    for page in [
        "mmlab.1",
        "mmlab-run.1",
        "mmlab-compare.1",
        "mmlab-report.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap_or_else(|_| panic!("{page}"));
        assert!(text.contains(".SH"), "{page}");
    }
}

#[test]
fn stale_help_summaries_are_gone() {
    let top = ok(&mmlab(&["--help"]));
    assert!(
        !top.contains("mode a)"),
        "replay's summary still says only mode a"
    );
    assert!(
        !top.contains("speed (PCP fast path)"),
        "bench's summary still says only PCP"
    );
    for sub in ["run", "reproduce", "replay", "validate"] {
        let h = ok(&mmlab(&[sub, "--help"]));
        for flag in ["--format", "--out", "--seed"] {
            assert!(h.contains(flag), "`{sub} --help` lacks {flag}");
        }
    }
    for sub in ["run", "reproduce"] {
        let h = ok(&mmlab(&[sub, "--help"]));
        for flag in ["--quiet", "--jobs", "-o, --out"] {
            assert!(h.contains(flag), "`{sub} --help` lacks {flag}");
        }
    }
}

#[test]
fn the_readme_installs_the_binary_and_links_only_inside_the_repository() {
    let readme = std::fs::read_to_string(repo("README.md")).expect("README");
    assert!(readme.contains("cargo install --path crates/cli"));
    assert!(
        !readme.contains("../"),
        "README names a path outside the repository"
    );
    let root = repo("").canonicalize().expect("repo root");
    for (i, _) in readme.match_indices("](") {
        let rest = &readme[i + 2..];
        let target = &rest[..rest.find(')').expect("closing paren")];
        assert!(
            !target.contains("://"),
            "README links outside the repository: {target}"
        );
        let path = target.split('#').next().unwrap_or("");
        if path.is_empty() {
            continue;
        }
        let full = repo(path)
            .canonicalize()
            .unwrap_or_else(|_| panic!("README links to a missing file: {target}"));
        assert!(
            full.starts_with(&root),
            "README links outside the repository: {target}"
        );
    }
}

#[test]
fn compare_shows_changes_and_flags_only_changes_beyond_the_spread() {
    let scratch = Scratch::new("consistency");
    let small = fixture("small.toml");
    let a = scratch.join("a.json");
    let b = scratch.join("b.json");
    let c = scratch.join("c.json");
    let (a, b, c) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        c.to_str().unwrap(),
    );
    ok(&mmlab(&[
        "run", &small, "--quiet", "--seeds", "1-3", "-o", a,
    ]));
    ok(&mmlab(&[
        "run", &small, "--quiet", "--seeds", "1-3", "-o", b,
    ]));
    // Fewer pages per burst: a different workload under the same names.
    let text = std::fs::read_to_string(&small)
        .expect("fixture")
        .replace("burst = 200", "burst = 20");
    let p = scratch.join("small-burst20.toml");
    std::fs::write(&p, text).expect("write");
    ok(&mmlab(&[
        "run",
        p.to_str().unwrap(),
        "--quiet",
        "--seeds",
        "4-6",
        "-o",
        c,
    ]));
    let same = ok(&mmlab(&["compare", a, b, "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&same).expect("json");
    for r in v["rows"].as_array().expect("rows") {
        assert_eq!(r["change"][0].as_f64(), Some(0.0), "{r}");
        assert_eq!(r["beyond_spread"][0], false, "{r}");
    }
    let diff = ok(&mmlab(&["compare", a, c, "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&diff).expect("json");
    let pgfree = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["metric"] == "pgfree" && r["kernel"] == "base")
        .expect("pgfree row");
    // Ten times fewer pages freed, every seed: beyond any spread.
    assert!(
        pgfree["change"][0].as_f64().expect("change") < -80.0,
        "{pgfree}"
    );
    assert_eq!(pgfree["beyond_spread"][0], true);
    assert_eq!(pgfree["cells"][0]["n"], 3);
    let md = ok(&mmlab(&["compare", a, c, "--format", "markdown"]));
    assert!(md.contains("| kernel | metric |"), "{md}");
    assert!(md.contains(" *"), "no flagged change in:\n{md}");
    let csv = ok(&mmlab(&["compare", a, c, "--format", "csv"]));
    assert!(csv.starts_with("experiment,workload,kernel,metric,unit,document,mean"));
    // A file that is not a results document is named with what it is.
    let e = mmlab(&["compare", a, &small]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("small.toml"));
}

#[test]
fn report_prints_the_runs_tables_from_the_document() {
    let scratch = Scratch::new("consistency");
    let small = fixture("small.toml");
    let doc = scratch.join("r.json");
    let d = doc.to_str().unwrap();
    let run = ok(&mmlab(&["run", &small, "--quiet", "-o", d]));
    assert_eq!(ok(&mmlab(&["report", d, "--format", "text"])), run);
    let md_run = ok(&mmlab(&["run", &small, "--quiet", "--format", "markdown"]));
    assert_eq!(ok(&mmlab(&["report", d, "--format", "markdown"])), md_run);
    // --out by extension: the same document as JSON Lines, CSV, HTML.
    for ext in ["jsonl", "csv", "html"] {
        let p = scratch.join(&format!("r.{ext}"));
        ok(&mmlab(&[
            "run",
            &small,
            "--quiet",
            "-o",
            p.to_str().unwrap(),
        ]));
        let got = std::fs::read_to_string(&p).expect("written");
        let want = ok(&mmlab(&["report", d, "--format", ext]));
        if ext == "html" {
            assert!(got.starts_with("<!DOCTYPE html>") && got.contains("<svg"));
        } else {
            assert_eq!(got, want, "{ext}");
        }
    }
}
