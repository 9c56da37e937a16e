//! `mmlab replay` and `mmlab validate` as a user runs them.

use std::path::Path;
use std::process::{Command, Output};

use host::scratch::ScratchFile;
use trace::event::{Machine, Zone};
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

fn mmlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(args)
        .output()
        .expect("mmlab runs")
}

/// `name` in a private scratch directory, removed when dropped (also when
/// the test fails).
fn tmp(name: &str) -> ScratchFile {
    ScratchFile::new("replay-cli", name).expect("scratch dir")
}

fn header() -> Header {
    let mut h = Header::synthetic("replay cli test");
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
    h
}

fn synthetic(path: &Path, with_allocs: bool) {
    let mut w = TraceWriter::create(path, &header()).expect("create");
    let mut n = 0;
    let mut put = |w: &mut TraceWriter<_>, ts, cpu, kind| {
        n += 1;
        w.write(&Event {
            ts_ns: ts,
            cpu,
            pid: 1,
            tid: 1,
            kind,
        })
        .expect("write");
    };
    for r in 0..2000u64 {
        if !with_allocs {
            put(
                &mut w,
                r,
                0,
                EventKind::PageFaultUser {
                    address: r << 12,
                    ip: 0,
                    error_code: 6,
                },
            );
            continue;
        }
        let order = (r % 4) as u32;
        let pfn = 4096 + r * 16;
        put(
            &mut w,
            r * 100,
            (r % 2) as u32,
            EventKind::PageAlloc {
                pfn,
                order,
                migratetype: 1,
                gfp_flags: 0x140cca,
            },
        );
        put(
            &mut w,
            r * 100 + 50,
            ((r + 1) % 2) as u32,
            EventKind::PageFree { pfn, order },
        );
        if r.is_multiple_of(64) {
            put(
                &mut w,
                r * 100 + 60,
                0,
                EventKind::PageAllocZoneLocked {
                    pfn,
                    order: 0,
                    migratetype: 1,
                    percpu_refill: true,
                },
            );
        }
    }
    w.finish(&Trailer {
        nr_events: n,
        ..Trailer::default()
    })
    .expect("finish");
}

#[test]
fn replay_json_is_byte_identical_across_runs() {
    let t = tmp("det.mmtrace");
    synthetic(&t, true);
    let ts = t.to_str().expect("utf-8");
    let a = mmlab(&["replay", ts, "--format", "json", "--quiet"]);
    let b = mmlab(&["replay", ts, "--format", "json", "--quiet", "--seed", "1"]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    let doc: serde_json::Value = serde_json::from_slice(&a.stdout).expect("json");
    assert_eq!(
        doc["experiments"][0]["replay"]["recorded"]["mm_page_alloc"],
        2000
    );
    assert_eq!(
        doc["experiments"][0]["replay"]["model"]["recorded"]["allocs"],
        2000
    );
    assert_eq!(
        doc["experiments"][0]["replay"]["model"]["recorded"]["frees"],
        2000
    );
    let text = mmlab(&["replay", ts]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("alloc_zone") && out.contains("recorded"),
        "{out}"
    );
    assert!(
        String::from_utf8_lossy(&text.stderr).contains("events/s"),
        "the timing line"
    );
}

#[test]
fn validate_prints_recorded_model_and_error() {
    let t = tmp("validate.mmtrace");
    synthetic(&t, true);
    let o = mmlab(&["validate", t.to_str().expect("utf-8")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for want in [
        "recorded",
        "model",
        "error",
        "mm_page_alloc)",
        "mm_page_free)",
        "mm_page_alloc_zone_locked",
        "mm_page_pcpu_drain",
        "+0.0%",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
}

#[test]
fn replay_errors_name_the_file_and_what_is_missing() {
    let t = tmp("noalloc.mmtrace");
    synthetic(&t, false);
    let o = mmlab(&["validate", t.to_str().expect("utf-8"), "--mode", "alloc"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("kmem:mm_page_alloc") && err.contains("mm_page_free"),
        "{err}"
    );
    let o = mmlab(&["replay", "/nonexistent/x.mmtrace"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/x.mmtrace"));
}

#[test]
fn replay_with_an_experiment_runs_its_kernels() {
    let t = tmp("exp.mmtrace");
    synthetic(&t, true);
    let exp = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/page-churn.toml");
    let o = mmlab(&[
        "replay",
        t.to_str().expect("utf-8"),
        "--experiment",
        exp.to_str().expect("utf-8"),
        "--quiet",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let model = doc["experiments"][0]["replay"]["model"]
        .as_object()
        .expect("per kernel");
    assert!(model.len() >= 2, "{model:?}");
    for (_, m) in model {
        assert_eq!(m["allocs"], 2000);
    }
}

#[test]
fn replay_out_writes_the_results_document() {
    let t = tmp("out.mmtrace");
    let out = tmp("out.json");
    synthetic(&t, true);
    let o = mmlab(&[
        "replay",
        t.to_str().expect("utf-8"),
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).expect("the document");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        doc["experiments"][0]["replay"]["recorded"]["mm_page_free"],
        2000
    );
    assert!(o.stderr.is_empty(), "--quiet prints nothing on stderr");
}

#[test]
fn validate_of_a_fault_trace_runs_mode_b() {
    let t = tmp("faults.mmtrace");
    synthetic(&t, false);
    let ts = t.to_str().expect("utf-8");
    let o = mmlab(&["validate", ts]);
    let j = mmlab(&["replay", ts, "--format", "json", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "replay b",
        "page faults in the trace",
        "ru_minflt",
        "2000       2000    +0.0%",
        "outside every recorded mapping",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    // Every fault is outside a recorded mapping: the warning says so.
    assert!(String::from_utf8_lossy(&o.stderr).contains("carried over"));
    assert!(j.status.success(), "{}", String::from_utf8_lossy(&j.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&j.stdout).expect("json");
    assert!(
        doc.get("replay").is_none(),
        "no mode (a) without allocator events"
    );
    assert_eq!(
        doc["experiments"][0]["aspace"]["recorded"]["page_fault_user"],
        2000
    );
    assert_eq!(
        doc["experiments"][0]["aspace"]["kernels"][0]["pgfault"],
        2000
    );
    assert_eq!(
        doc["experiments"][0]["aspace"]["kernels"][0]["faults_passthrough"],
        2000
    );
}

#[test]
fn a_trace_with_neither_stream_is_a_clear_error() {
    let t = tmp("empty.mmtrace");
    let mut w = TraceWriter::create(&t, &header()).expect("create");
    w.write(&Event {
        ts_ns: 1,
        cpu: 0,
        pid: 1,
        tid: 1,
        kind: EventKind::PagePcpuDrain {
            pfn: 1,
            order: 0,
            migratetype: 0,
        },
    })
    .expect("write");
    w.finish(&Trailer::default()).expect("finish");
    let o = mmlab(&["replay", t.to_str().expect("utf-8")]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("mode a") && err.contains("mode b"), "{err}");
}

/// Runs `mmlab replay T --experiment examples/replay-vmacache.toml` (the
/// pfn, pmd, lru and no VMA cache on otherwise equal kernels) and returns,
/// per kernel in file order, its name and JSON results.
fn replay_vmacache(trace: &Path) -> Vec<(String, serde_json::Value)> {
    let exp = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/replay-vmacache.toml");
    let o = mmlab(&[
        "replay",
        trace.to_str().expect("utf-8"),
        "--experiment",
        exp.to_str().expect("utf-8"),
        "--mode",
        "aspace",
        "--format",
        "json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let kernels = doc["experiments"][0]["aspace"]["kernels"]
        .as_array()
        .expect("kernels");
    let names: Vec<String> = kernels
        .iter()
        .map(|k| k["kernel"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(names, ["pfn", "pmd", "lru", "none"]);
    kernels
        .iter()
        .map(|k| (k["kernel"].as_str().expect("name").to_string(), k.clone()))
        .collect()
}

/// `(vmacache_find_calls, vmacache_find_hits, vmacache_first_slot_hits)`.
fn cache(k: &serde_json::Value) -> (u64, u64, u64) {
    let n = |f: &str| k[f].as_u64().unwrap_or_else(|| panic!("{f} in {k}"));
    (
        n("vmacache_find_calls"),
        n("vmacache_find_hits"),
        n("vmacache_first_slot_hits"),
    )
}

/// Issue 6: the same recorded trace replays under each VMA cache policy.
/// A synthetic trace whose hits follow from the hashes:
///
/// ```text
/// process 10, 4 VMAs of 64 pages, each in its own PMD (PMD index 0..3):
///   A....... B....... C....... D.......    faulted round-robin, page k of
///   |2 MiB   |2 MiB   |2 MiB   |           A, B, C, D, then page k+1
/// process 20, 4 VMAs of 16 pages in one PMD, 33 pages apart:
///   a  b  c  d                             faulted round-robin likewise
/// ```
///
/// - pmd (the seed): process 10's VMAs hash to 4 slots: 4 misses, every hit
///   in the first slot examined; process 20's all hash to one slot, which
///   each miss overwrites: no hit at all.
/// - pfn: at each step all four of process 10's faults hash to the same
///   slot (page k mod 4): 4 + 3 + 2 + 1 misses before each VMA has a slot of
///   its own; only D's hits are in slot 0, where the scan starts. Process
///   20's page numbers differ by 33: distinct slots, 4 misses.
/// - lru: 4 VMAs fit the 4 slots: 4 misses per process, and round-robin
///   always wants the least recently used slot, never the first.
/// - none (6.1+): no cache, every lookup walks the tree.
#[test]
fn one_trace_replays_under_each_vmacache_policy() {
    const P: u64 = 4096;
    const BASE: u64 = 0x7f00_0000_0000;
    let t = tmp("vmacache.mmtrace");
    let mut w = TraceWriter::create(&t, &header()).expect("create");
    let mut ts = 0;
    let mut n = 0;
    let mut put = |w: &mut TraceWriter<_>, pid: i32, kind| {
        ts += 100;
        n += 1;
        w.write(&Event {
            ts_ns: ts,
            cpu: 0,
            pid,
            tid: pid,
            kind,
        })
        .expect("write");
    };
    let mmap = |at: u64, len: u64| EventKind::Mmap {
        addr: 0,
        len,
        prot: 3,
        flags: 0x22,
        fd: u64::MAX,
        off: 0,
        ret: Some(at as i64),
    };
    let fault = |address: u64| EventKind::PageFaultUser {
        address,
        ip: 0,
        error_code: 6,
    };
    for (pid, stride, pages) in [(10, 512 * P, 64), (20, 33 * P, 16)] {
        let base = if pid == 10 { BASE } else { BASE + (64 << 20) };
        for i in 0..4 {
            put(&mut w, pid, mmap(base + i * stride, pages * P));
        }
        for k in 0..pages {
            for i in 0..4 {
                put(&mut w, pid, fault(base + i * stride + k * P));
            }
        }
    }
    w.finish(&Trailer {
        nr_events: n,
        ..Trailer::default()
    })
    .expect("finish");
    let r = replay_vmacache(&t);
    for (name, k) in &r {
        assert_eq!(
            k["pgfault"], 320,
            "{name}: the same faults under every policy"
        );
        assert_eq!(k["faults_taken"], 320, "{name}");
    }
    let c: Vec<(u64, u64, u64)> = r.iter().map(|(_, k)| cache(k)).collect();
    assert_eq!(c[0], (320, 246 + 60, 63 + 15), "pfn");
    assert_eq!(c[1], (320, 252, 252), "pmd");
    assert_eq!(c[2], (320, 252 + 60, 0), "lru");
    assert_eq!(c[3], (0, 0, 0), "none");
}

/// The same with a recorded trace (`cc -O2 -c` of a small C file on this
/// project's host, THP madvise, mTHP off): every policy sees the same
/// faults and makes the same number of lookups; the hits differ.
#[test]
fn a_recorded_trace_replays_under_each_vmacache_policy() {
    let t = Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/cc-c.mmtrace");
    let r = replay_vmacache(&t);
    let pgfault = &r[0].1["pgfault"];
    assert!(pgfault.as_u64().expect("pgfault") > 1000, "{pgfault}");
    for (name, k) in &r {
        assert_eq!(&k["pgfault"], pgfault, "{name}");
    }
    let c: Vec<(u64, u64, u64)> = r.iter().map(|(_, k)| cache(k)).collect();
    let calls = c[0].0;
    assert!(calls > 0);
    for (i, (calls_i, hits, first)) in c[..3].iter().enumerate() {
        assert_eq!(*calls_i, calls, "{}: one lookup per fault taken", r[i].0);
        assert!(hits < &calls && first <= hits, "{}: {:?}", r[i].0, c[i]);
    }
    assert!(
        c[0].1 != c[1].1 || c[1].1 != c[2].1,
        "the policies' hits differ: {c:?}"
    );
    assert_eq!(c[3], (0, 0, 0), "none: no cache");
}

#[test]
fn validate_shows_khugepaged_collapses_as_not_modelled() {
    let t = tmp("collapse.mmtrace");
    let counters = |n: u64| trace::event::Counters {
        vmstat: [
            ("thp_collapse_alloc".to_string(), n),
            ("pgfault".to_string(), 10 * n),
        ]
        .into_iter()
        .collect(),
        thp_stats: Default::default(),
    };
    let mut h = header();
    h.counters_before = Some(counters(5));
    let mut w = TraceWriter::create(&t, &h).expect("create");
    for r in 0..100u64 {
        w.write(&Event {
            ts_ns: r,
            cpu: 0,
            pid: 1,
            tid: 1,
            kind: EventKind::PageFaultUser {
                address: r << 12,
                ip: 0,
                error_code: 6,
            },
        })
        .expect("write");
    }
    w.finish(&Trailer {
        nr_events: 100,
        counters_after: Some(counters(8)),
        ..Trailer::default()
    })
    .expect("finish");
    let o = mmlab(&["validate", t.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("thp_collapse_alloc"))
        .unwrap_or_else(|| panic!("no thp_collapse_alloc row in\n{out}"));
    assert!(line.contains("NOT MODELLED"), "{line}");
    assert_eq!(
        line.split_whitespace().rev().nth(2),
        Some("3"),
        "3 collapses recorded: {line}"
    );
}

/// A 2 KiB damaged trace (fuzz input 110216 of `mmlab fuzz traces --seed
/// 6000000`) whose header says CPU 0's list holds 2^47 pages of a 16 TiB
/// zone: `--warm-pcp` would put about 77 M pages on it (the model's
/// `high_max`), materialising their `struct page`s. Under a user's 1 GiB
/// address-space limit the replay aborted on memory; now it is refused
/// before any work, naming the file and the way out.
#[test]
fn warm_pcp_refuses_lists_that_do_not_fit_the_host() {
    let t = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-corpus/traces/crash-6110216-warm-pcp-terabytes.mmtrace");
    let o = Command::new("sh")
        .args([
            "-c",
            "ulimit -v 1048576; exec \"$0\" replay --warm-pcp \"$1\"",
        ])
        .arg(env!("CARGO_BIN_EXE_mmlab"))
        .arg(&t)
        .output()
        .expect("sh runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code().is_some_and(|c| c != 0),
        "{:?}: {err}",
        o.status
    );
    assert!(
        err.contains("crash-6110216-warm-pcp-terabytes.mmtrace")
            && err.contains("--warm-pcp would put up to")
            && err.contains("replay without --warm-pcp"),
        "{err}"
    );
    // Without --warm-pcp the same trace replays.
    let o = mmlab(&["replay", t.to_str().expect("utf-8"), "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A recording of every process's allocator events whose machine counted
/// more allocations (`pgalloc_*`) than it traced: the pages
/// alloc_pages_bulk() took without an `mm_page_alloc` event (a snapshot
/// copied with sendfile() took ~4,400 of them in each corpus recording).
/// validate says how many, and why, instead of calling the recording
/// complete.
#[test]
fn validate_names_the_allocations_without_an_event() {
    let t = tmp("bulk.mmtrace");
    let counters = |n: u64| trace::event::Counters {
        vmstat: [("pgalloc_normal".to_string(), n)].into_iter().collect(),
        thp_stats: Default::default(),
    };
    let mut h = header();
    h.kmem_system_wide = true;
    h.counters_before = Some(counters(1000));
    let mut w = TraceWriter::create(&t, &h).expect("create");
    for r in 0..100u64 {
        let pfn = 4096 + r;
        for (i, kind) in [
            EventKind::PageAlloc {
                pfn,
                order: 0,
                migratetype: 1,
                gfp_flags: 0x140cca,
            },
            EventKind::PageFree { pfn, order: 0 },
        ]
        .into_iter()
        .enumerate()
        {
            w.write(&Event {
                ts_ns: 2 * r + i as u64,
                cpu: 0,
                pid: 1,
                tid: 1,
                kind,
            })
            .expect("write");
        }
    }
    w.finish(&Trailer {
        nr_events: 200,
        // 100 traced, 37 more counted by the machine.
        counters_after: Some(counters(1137)),
        ..Trailer::default()
    })
    .expect("finish");
    let o = mmlab(&["validate", t.to_str().expect("utf-8"), "--mode", "alloc"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("pgalloc_*"))
        .unwrap_or_else(|| panic!("no machine share line in\n{out}"));
    assert!(
        line.contains("137; in the trace: 100 (73%)")
            && line.contains("the other 37 pages were allocated without an mm_page_alloc event")
            && line.contains("alloc_pages_bulk()"),
        "{line}"
    );
}

/// A snapshot directory's `taken-at` file says when its zoneinfo was read:
/// `exec` makes validate start the allocator stream at the command's exec
/// and say so; anything but `exec` or `start` is refused naming the file
/// and line.
#[test]
fn import_reads_when_the_snapshot_was_taken() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures");
    let snap = tmp("snap");
    std::fs::create_dir_all(&*snap).expect("snapshot dir");
    std::fs::copy(
        fixtures.join("zoneinfo-2cpu-6.18.txt"),
        snap.join("zoneinfo"),
    )
    .expect("zoneinfo");
    let perf = fixtures.join("kmem.perf.data");
    let t = tmp("at-exec.mmtrace");
    let import = |taken: &str| {
        std::fs::write(snap.join("taken-at"), taken).expect("taken-at");
        mmlab(&[
            "import",
            perf.to_str().expect("utf-8"),
            "-o",
            t.to_str().expect("utf-8"),
            "--snapshot",
            snap.to_str().expect("utf-8"),
            "-q",
        ])
    };
    let o = import("exec\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = mmlab(&["validate", t.to_str().expect("utf-8"), "--mode", "alloc"]);
    assert!(
        String::from_utf8_lossy(&v.stdout).contains("the snapshot was read at the command's exec"),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    let o = import("soon\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("taken-at: line 1: expected `exec`"),
        "{err}"
    );
}
