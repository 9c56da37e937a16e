//! Bounded work for every accepted input (issue 15): inputs that used to
//! panic, spin or grow memory with simulated time are either refused with
//! the limit the machine allows, or run in time and memory that grow with
//! what happens.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use trace::event::{Machine, Zone};
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("mmlab runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory of its own for one test, removed at the end.
struct Scratch(host::scratch::ScratchDir);

impl Scratch {
    /// A private directory (0700, an unpredictable name), removed with its
    /// contents when dropped, also when the test fails.
    fn new(tag: &str) -> Scratch {
        Scratch(host::scratch::ScratchDir::new(&format!("bounded-{tag}")).expect("scratch dir"))
    }

    fn write(&self, name: &str, body: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// An experiment on one node of `cpus` CPUs and `memory`, kernel `preset`
/// with `knobs`, workload `kind` with `params`.
fn experiment(
    nodes: u32,
    cpus: u32,
    memory: &str,
    preset: &str,
    knobs: &str,
    kind: &str,
    params: &str,
) -> String {
    format!(
        "name = \"bounded\"\ndescription = \"x\"\nprofile = \"host-epyc-zen3\"\n\
         [machine]\nname = \"m\"\nnodes = {nodes}\ncpus_per_node = {cpus}\nmemory_per_node = \"{memory}\"\n\
         [[kernel]]\nname = \"k\"\npreset = \"{preset}\"\nknobs = {{ {knobs} }}\n\
         [[workload]]\nname = \"w\"\ntype = \"{kind}\"\nparams = {{ {params} }}\n"
    )
}

const CHURN: &str = "iterations = 2, burst = 20, think_ns = 1000";

#[test]
fn watermarks_above_an_eighth_of_a_zone_are_refused_with_the_machines_limits() {
    let s = Scratch::new("wmark");
    for (knob, culprit) in [
        (
            "\"vm.watermark_scale_factor\" = 3000",
            "vm.watermark_scale_factor at most 1211",
        ),
        (
            "\"vm.min_free_kbytes\" = 500000",
            "vm.min_free_kbytes at most",
        ),
    ] {
        let e = s.write(
            "e.toml",
            &experiment(1, 2, "1GiB", "linux-6.18", knob, "page-churn", CHURN),
        );
        for cmd in ["run", "zoneinfo"] {
            let o = mmlab(&[cmd, &e]);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{cmd} {knob}: {err}");
            assert!(!err.contains("panicked"), "{err}");
            assert!(err.contains("kernel \"k\" on machine \"m\""), "{err}");
            assert!(err.contains("high_min") && err.contains(culprit), "{err}");
        }
    }
    // Without auto-tuning (linux-6.6) or with a fraction, the same values run.
    for (preset, knobs) in [
        ("linux-6.6", "\"vm.watermark_scale_factor\" = 3000"),
        (
            "linux-6.18",
            "\"vm.watermark_scale_factor\" = 3000, \"vm.percpu_pagelist_high_fraction\" = 8",
        ),
        ("linux-6.18", "\"vm.watermark_scale_factor\" = 1211"),
    ] {
        let e = s.write(
            "ok.toml",
            &experiment(1, 2, "1GiB", preset, knobs, "page-churn", CHURN),
        );
        let o = mmlab(&["run", &e, "--quiet"]);
        assert!(o.status.success(), "{preset} {knobs}: {}", text(&o.stderr));
    }
}

#[test]
fn tiering_promote_fits_a_small_near_node() {
    let s = Scratch::new("tiering");
    let e = s.write(
        "t.toml",
        &experiment(
            2,
            2,
            "512MiB",
            "linux-6.18",
            "",
            "tiering-promote",
            "rounds = 2, chunk_mib = 4, passes = 1",
        ),
    );
    let o = mmlab(&["run", &e, "--quiet"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // More threads than the near node has CPUs is a parameter error.
    let e = s.write(
        "t3.toml",
        &experiment(
            2,
            2,
            "512MiB",
            "linux-6.18",
            "",
            "tiering-promote",
            "threads = 3",
        ),
    );
    let o = mmlab(&["run", &e, "--quiet"]);
    assert!(
        text(&o.stderr).contains("parameter \"threads\""),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn kbuild_refuses_a_slab_share_that_never_finishes_a_job() {
    let s = Scratch::new("kbuild");
    let params =
        |pct: u32| format!("jobs = 1, pages_per_job = 64, work_per_page_ns = 0, slab_pct = {pct}");
    let e = s.write(
        "k.toml",
        &experiment(1, 2, "256MiB", "linux-6.6", "", "kbuild", &params(100)),
    );
    let o = mmlab(&["run", &e, "--quiet"]);
    assert!(text(&o.stderr).contains("slab_pct"), "{}", text(&o.stderr));
    let e = s.write(
        "k99.toml",
        &experiment(1, 2, "256MiB", "linux-6.6", "", "kbuild", &params(99)),
    );
    let o = mmlab(&["run", &e, "--quiet"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn an_idle_tail_longer_than_an_hour_is_refused() {
    let s = Scratch::new("tail");
    let e = s.write(
        "e.toml",
        &format!(
            "idle_tail_s = 3601\n{}",
            experiment(1, 2, "256MiB", "linux-6.18", "", "page-churn", CHURN)
        ),
    );
    let o = mmlab(&["run", &e, "--quiet"]);
    assert!(
        text(&o.stderr).contains("idle_tail_s = 3601"),
        "{}",
        text(&o.stderr)
    );
}

/// A trace whose CPU 0 allocates, then nothing happens for eleven days (a
/// damaged timestamp), then it frees. The vmstat timer used to sample every
/// CPU every simulated second of the gap: 1.8 GB.
fn gap_trace(path: &std::path::Path, gap_ns: u64) {
    let mut h = Header::synthetic("gap");
    h.machine = Machine {
        nr_cpus: 2,
        zones: vec![Zone {
            node: 0,
            name: "Normal".into(),
            managed: 1 << 18,
            present: 1 << 18,
            spanned: 1 << 18,
            min: 256,
            low: 320,
            high: 384,
            start_pfn: None,
            pagesets: Vec::new(),
        }],
    };
    h.knobs.percpu_pagelist_high_fraction = Some(0);
    let mut w = TraceWriter::create(path, &h).unwrap();
    let ev = |ts_ns, cpu, kind| Event {
        ts_ns,
        cpu,
        pid: 1,
        tid: 1,
        kind,
    };
    for (i, ts) in [0, 100, gap_ns, gap_ns + 100].into_iter().enumerate() {
        let pfn = 4096 + 16 * (i as u64 / 2);
        let kind = if i % 2 == 0 {
            EventKind::PageAlloc {
                pfn,
                order: 0,
                migratetype: 1,
                gfp_flags: 0x140cca,
            }
        } else {
            EventKind::PageFree { pfn, order: 0 }
        };
        w.write(&ev(ts, (i % 2) as u32, kind)).unwrap();
    }
    w.finish(&Trailer::default()).unwrap();
}

#[test]
fn a_gap_of_eleven_days_in_a_trace_costs_samples_per_event_not_per_second() {
    let s = Scratch::new("gap");
    let t = s.0.join("gap.mmtrace");
    let eleven_days = 11 * 86_400 * 1_000_000_000u64;
    gap_trace(&t, eleven_days);
    let start = Instant::now();
    let o = mmlab(&[
        "replay",
        t.to_str().unwrap(),
        "--mode",
        "alloc",
        "--format",
        "json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let run = &doc["experiments"][0]["runs"][0];
    let rows = run["pcp_series"]["rows"].as_array().unwrap().len();
    // Two CPUs, one zone: a few samples around each event, not 950 400 each.
    assert!(rows < 1000, "{rows} PCP samples for 4 events");
    assert!(run["metrics"]["runtime_ns"].as_u64().unwrap() >= eleven_days);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn replaying_on_fewer_cpus_than_recorded_says_so() {
    let s = Scratch::new("fold");
    let t = s.0.join("t.mmtrace");
    gap_trace(&t, 1000);
    let e = s.write(
        "one.toml",
        &experiment(1, 1, "256MiB", "linux-6.18", "", "page-churn", CHURN),
    );
    let o = mmlab(&[
        "replay",
        t.to_str().unwrap(),
        "--experiment",
        &e,
        "--mode",
        "alloc",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("recorded on 2 CPUs"),
        "{}",
        text(&o.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = doc["experiments"][0]["warnings"].as_array().unwrap();
    assert!(
        w.iter().any(|w| w.as_str().unwrap().contains("c % 1")),
        "{w:?}"
    );
}

#[test]
fn reproduce_takes_whole_names_and_lists_the_ones_a_prefix_starts() {
    let o = mmlab(&["reproduce", "page", "--quiet"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("page-churn, page-fault1") && err.contains("whole name"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "something ran: {}", text(&o.stdout));
}

/// Memory past the model's limit (4 PiB since the sparse memmap; 16 TiB
/// before) is refused with a message that gives the limit.
#[test]
fn memory_past_the_limit_is_refused_with_a_limit_that_says_so() {
    let s = Scratch::new("8p");
    let e = s.write(
        "e.toml",
        &experiment(1, 2, "8192TiB", "linux-6.18", "", "page-churn", CHURN),
    );
    let o = mmlab(&["run", &e, "--quiet"]);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("the model addresses at most 4.0 PiB"), "{err}");
}

/// A hugetlb pool asked for beyond a 48 TiB machine (fuzz experiment input
/// 1650 of `--seed 5000000` at cefc8ab): the boot took every 2 MiB page it
/// could and materialised all their `struct page`s, aborting on memory under
/// a 4 GiB `ulimit -v`. Now refused before the run with the largest pool
/// that fits.
#[test]
fn a_hugetlb_pool_larger_than_the_host_holds_is_refused() {
    let s = Scratch::new("hugetlb-pool");
    let e = s.write(
        "e.toml",
        &experiment(
            3,
            6,
            "16TiB",
            "linux-6.8",
            "\"hugepages/hugepages-2048kB/nr_hugepages\" = 9223372036854775806",
            "small-vmas",
            "pages = 8, vmas = 1",
        ),
    );
    let o = Command::new("sh")
        .args(["-c", "ulimit -v 4194304; exec \"$0\" run \"$1\" --quiet"])
        .arg(env!("CARGO_BIN_EXE_mmlab"))
        .arg(&e)
        .output()
        .expect("sh runs");
    let err = text(&o.stderr);
    assert!(
        o.status.code().is_some_and(|c| c != 0),
        "{:?}: {err}",
        o.status
    );
    assert!(
        err.contains("e.toml") && err.contains("nr_hugepages = 9223372036854775806 would take"),
        "{err}"
    );
}
