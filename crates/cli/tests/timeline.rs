//! `--timeline FILE`: the file is decoded with Perfetto's own protos (the
//! `perfetto_protos` crate, generated from Perfetto's `.proto` files) with
//! no field left unknown, and checked against what Perfetto's trace
//! processor requires of TrackEvent traces: every event on a declared
//! track, slices balanced and nested per track in time order, counters only
//! on counter tracks. What is not checked here: the trace processor itself
//! (its `trace_processor_shell` is downloaded at run time by the `perfetto`
//! Python package, which this machine cannot do).

mod perfetto_check;

mod scratch;
use perfetto_check::{check, Summary, Track};
use scratch::Scratch;
use std::path::Path;
use std::process::{Command, Output};

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("run mmlab")
}

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "mmlab failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .to_str()
        .expect("utf-8")
        .to_string()
}

fn has_slice(s: &Summary, prefix: &str) -> bool {
    s.slices.keys().any(|k| k.starts_with(prefix))
}

#[test]
fn a_run_timeline_decodes_with_perfettos_protos_and_leaves_results_alone() {
    let scratch = Scratch::new("timeline");
    let small = fixture("small.toml");
    let tl = scratch.join("small.pftrace");
    let with = ok(mmlab(&[
        "run",
        &small,
        "--quiet",
        "--format",
        "json",
        "--timeline",
        tl.to_str().unwrap(),
    ]));
    let without = ok(mmlab(&["run", &small, "--quiet", "--format", "json"]));
    assert_eq!(
        with.stdout, without.stdout,
        "a timeline changed the results"
    );
    let s = check(&tl);
    // One root per run (two kernels), four vCPU tracks under each.
    let roots: Vec<&Track> = s.tracks.values().filter(|t| t.parent.is_none()).collect();
    assert_eq!(roots.len(), 2, "{roots:?}");
    for cpu in 0..4 {
        let n = s
            .tracks
            .values()
            .filter(|t| t.name == format!("vCPU {cpu}"))
            .count();
        assert_eq!(n, 2, "vCPU {cpu}");
    }
    for name in ["alloc_pages", "free_pages", "zone->lock", "wait zone->lock"] {
        assert!(
            has_slice(&s, name),
            "no {name} slice in {:?}",
            s.slices.keys()
        );
    }
    assert!(has_slice(&s, "zone->lock: rmqueue_bulk (PCP refill)"));
    assert!(has_slice(&s, "zone->lock: free_pcppages_bulk (PCP drain)"));
    let counters: Vec<&str> = s
        .tracks
        .values()
        .filter(|t| t.counter)
        .map(|t| t.name.as_str())
        .collect();
    assert!(
        counters.iter().any(|n| n.contains("PCP high")),
        "{counters:?}"
    );
    assert!(
        counters.iter().any(|n| n.contains("PCP count")),
        "{counters:?}"
    );
    assert!(
        counters.iter().any(|n| n.starts_with("free pages")),
        "{counters:?}"
    );
    assert!(s.counters > 0 && s.instants.is_empty());
}

#[test]
fn faults_copies_and_a_window_and_a_record_limit() {
    let scratch = Scratch::new("timeline");
    // anon-cow-seq with the cache model: faults, THP clears and copies.
    let text = r#"
name = "cow"
profile = "haswell-ep"
[machine]
name = "m"
nodes = 1
cpus_per_node = 2
memory_per_node = "512MiB"
llc_per_node = "10MiB"
cache_model = true
[[kernel]]
name = "4.18"
preset = "linux-4.18"
knobs = { "transparent_hugepage/enabled" = "always" }
[[workload]]
name = "cow"
type = "anon-cow-seq"
params = { size = "8MiB", children = 1 }
"#;
    let exp = scratch.join("cow.toml");
    std::fs::write(&exp, text).expect("write");
    let e = exp.to_str().unwrap();
    let tl = scratch.join("cow.pftrace");
    ok(mmlab(&[
        "run",
        e,
        "--quiet",
        "--timeline",
        tl.to_str().unwrap(),
    ]));
    let s = check(&tl);
    assert!(has_slice(&s, "page fault"), "{:?}", s.slices.keys());
    assert!(has_slice(&s, "clear_page ×"), "{:?}", s.slices.keys());
    assert!(has_slice(&s, "copy_page ×"), "{:?}", s.slices.keys());
    // A window keeps what overlaps it.
    let w = scratch.join("cow-window.pftrace");
    ok(mmlab(&[
        "run",
        e,
        "--quiet",
        "--timeline",
        w.to_str().unwrap(),
        "--timeline-window",
        "1ms..2ms",
    ]));
    let sw = check(&w);
    assert!(sw.slices.values().sum::<u64>() < s.slices.values().sum::<u64>());
    assert!(
        sw.last_ts >= 1_000_000 && sw.first_ts < 2_000_000,
        "{} {}",
        sw.first_ts,
        sw.last_ts
    );
    // A record limit cuts the timeline and says so on it.
    let cut = scratch.join("cow-cut.pftrace");
    let o = ok(mmlab(&[
        "run",
        e,
        "--timeline",
        cut.to_str().unwrap(),
        "--timeline-max",
        "1000",
    ]));
    let sc = check(&cut);
    assert!(
        sc.instants.iter().any(|i| i.contains("truncated")),
        "{:?}",
        sc.instants
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("cut at the record limit"));
    assert!(
        std::fs::metadata(&cut).expect("file").len() < std::fs::metadata(&tl).expect("file").len()
    );
}

#[test]
fn replay_writes_a_timeline_of_each_kernel() {
    let scratch = Scratch::new("timeline");
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/dd-gzip.mmtrace");
    let tl = scratch.join("replay.pftrace");
    ok(mmlab(&[
        "replay",
        trace.to_str().unwrap(),
        "--quiet",
        "--mode",
        "alloc",
        "--timeline",
        tl.to_str().unwrap(),
    ]));
    let s = check(&tl);
    assert!(
        s.tracks.values().any(|t| t.name.starts_with("replay")),
        "{:?}",
        s.tracks
    );
    assert!(has_slice(&s, "alloc_pages") && has_slice(&s, "free_pages"));
}
