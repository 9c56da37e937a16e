//! Outputs appear whole or not at all (issue 15): an output that cannot be
//! written fails before any work, a rejected input never touches an existing
//! file, no temporary file is left behind, traces are owner-only, and a
//! symlink planted at an output is replaced, never followed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("mmlab runs")
}

fn small() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.toml")
}

fn trace_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/fixtures")
        .join(name)
}

/// A directory of its own for one test, removed at the end.
struct Scratch(host::scratch::ScratchDir);

impl Scratch {
    /// A private directory (0700, an unpredictable name), removed with its
    /// contents when dropped, also when the test fails.
    fn new(tag: &str) -> Scratch {
        Scratch(host::scratch::ScratchDir::new(&format!("outputs-{tag}")).expect("scratch dir"))
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().expect("utf-8").to_string()
    }

    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.0.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn out_to_a_directory_or_a_missing_directory_fails_before_the_run() {
    let s = Scratch::new("dir");
    let exp = small();
    for (out, expect) in [
        (s.path(""), "is a directory"),
        (s.path("no/such/dir/r.json"), "no/such/dir"),
    ] {
        let o = mmlab(&["run", exp.to_str().unwrap(), "--out", &out]);
        assert!(!o.status.success());
        let err = text(&o.stderr);
        assert!(err.contains(expect), "{err}");
        // Nothing ran: no table, no progress.
        assert!(
            o.stdout.is_empty(),
            "the run went ahead: {}",
            text(&o.stdout)
        );
    }
    assert!(s.names().is_empty(), "{:?}", s.names());
}

#[test]
fn results_replace_an_existing_file_whole_and_leave_no_temporary() {
    let s = Scratch::new("results");
    let out = s.path("r.json");
    std::fs::write(&out, b"old").unwrap();
    let o = mmlab(&["run", small().to_str().unwrap(), "--quiet", "--out", &out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("whole JSON");
    assert!(doc.get("experiments").is_some());
    assert_eq!(s.names(), vec!["r.json".to_string()]);
}

#[test]
fn results_replace_a_planted_symlink_without_following_it() {
    let s = Scratch::new("symlink");
    let victim = s.0.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let out = s.path("r.json");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    let o = mmlab(&["run", small().to_str().unwrap(), "--quiet", "--out", &out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_rejected_import_leaves_the_existing_trace_untouched() {
    let s = Scratch::new("import");
    let existing = s.path("existing.mmtrace");
    std::fs::copy(trace_fixture("cc-c.mmtrace"), &existing).unwrap();
    let before = std::fs::read(&existing).unwrap();
    // Not a perf.data file at all (rejected at the magic check), then a
    // perf.data file cut in half (rejected part-way).
    let bad_magic = s.path("bad.data");
    std::fs::write(&bad_magic, b"this is not perf data").unwrap();
    let half = s.path("half.data");
    let good = std::fs::read(trace_fixture("kmem.perf.data")).unwrap();
    std::fs::write(&half, &good[..good.len() / 2]).unwrap();
    for input in [&bad_magic, &half] {
        let o = mmlab(&["import", input, "-o", &existing]);
        assert!(!o.status.success(), "{input} was accepted");
        assert_eq!(
            std::fs::read(&existing).unwrap(),
            before,
            "{input} clobbered the trace"
        );
    }
    let mut names = s.names();
    names.sort();
    assert_eq!(names, vec!["bad.data", "existing.mmtrace", "half.data"]);
}

#[test]
fn an_imported_trace_is_owner_only_and_an_import_into_a_directory_fails() {
    let s = Scratch::new("mode");
    let out = s.path("t.mmtrace");
    let input = trace_fixture("kmem.perf.data");
    let o = mmlab(&["import", input.to_str().unwrap(), "-o", &out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let o = mmlab(&["import", input.to_str().unwrap(), "-o", &s.path("")]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("is a directory"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(s.names(), vec!["t.mmtrace".to_string()]);
}
