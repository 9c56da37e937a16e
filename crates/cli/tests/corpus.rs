//! The validation corpus (`scripts/corpus.py`, issue 13) without root: the
//! committed recordings replay to the committed predictions, and the
//! committed predictions stand against the committed live measurements as
//! the README's table says, misses included. `scripts/corpus/` holds this
//! host's (CPU family 26, measured 2026-11-25), `scripts/corpus/host-zen3/`
//! the first host's (a Zen 3 guest, 2026-11-23/24): each host's
//! predictions are judged against its own live runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(name: &str) -> Value {
    let p = root().join("scripts/corpus").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const JIT: &str = "JIT runtime: its own runs differ by 3 % at 4 KiB and 9 % at 64 KiB (V8's concurrent GC threads' timing: --single-threaded runs agree to 0.04 %); the recorded run is one of them";
const JVM: &str =
    "JVM: its own 4 KiB runs differ by up to 30 % (GC heap sizing, JIT and GC threads' timing)";
const ASLR: &str = "ASLR: each run's layout decides how many large folios fit each mapping (live spread of the same configuration up to 11 %)";
const KHUGEPAGED: &str =
    "khugepaged collapses part of the heap during the run (thp_collapse_alloc moves; not modelled)";
const SMALL: &str = "under 300 faults: a few faults of layout noise are over 2 %";

/// The first host's data.
const ZEN3: &str = "host-zen3/";

/// The (program, configuration) pairs whose page faults the model misses by
/// more than 2 %, each with the mechanism (see scripts/corpus/README.md),
/// keyed by the directory and suffix of the live runs (`""`/`ZEN3`, with
/// ASLR `""` or without `"-noaslr"`). A pair not listed must be within 2 %;
/// a listed one may improve.
const KNOWN_MISSES: &[(&str, &str, &str, &str)] = &[
    ("host-zen3/-noaslr", "node", "64k", JIT),
    ("host-zen3/-noaslr", "node", "all", JIT),
    ("host-zen3/-noaslr", "node", "hf100", JIT),
    ("host-zen3/-noaslr", "java", "16k", JVM),
    ("host-zen3/-noaslr", "java", "64k", JVM),
    ("host-zen3/-noaslr", "java", "2m", JVM),
    ("host-zen3/-noaslr", "java", "all", JVM),
    ("host-zen3/-noaslr", "java", "hf8", JVM),
    ("host-zen3/-noaslr", "java", "hf100", JVM),
    ("host-zen3/", "python", "64k", ASLR),
    ("host-zen3/", "python", "all", ASLR),
    ("host-zen3/", "sqlite", "2m", ASLR),
    ("host-zen3/", "zstd", "all", SMALL),
    ("host-zen3/", "sort", "all", SMALL),
    ("host-zen3/", "gzip", "64k", SMALL),
    ("host-zen3/", "gzip", "all", SMALL),
    ("host-zen3/", "node", "64k", JIT),
    ("host-zen3/", "node", "2m", JIT),
    ("host-zen3/", "node", "all", JIT),
    ("host-zen3/", "node", "hf8", JIT),
    ("host-zen3/", "node", "hf100", JIT),
    ("host-zen3/", "xz", "2m", KHUGEPAGED),
    ("host-zen3/", "xz", "all", KHUGEPAGED),
    ("host-zen3/", "java", "16k", JVM),
    ("host-zen3/", "java", "64k", JVM),
    ("host-zen3/", "java", "2m", JVM),
    ("host-zen3/", "java", "all", JVM),
    ("host-zen3/", "java", "hf8", JVM),
    ("host-zen3/", "java", "hf100", JVM),
];

fn pct(model: f64, live: f64) -> f64 {
    if live == 0.0 {
        0.0
    } else {
        100.0 * (model - live) / live
    }
}

#[test]
fn committed_recordings_replay_to_the_committed_predictions() {
    for set in ["host-zen3/", "host-zen3/-noaslr", "-noaslr"] {
        recordings_replay_to_predictions(set);
    }
}

#[test]
fn committed_perf_record_recordings_replay_to_the_committed_predictions() {
    replay_to_predictions(
        "host-zen3/perf-recordings-noaslr/minimal",
        "host-zen3/predictions-perf-minimal-noaslr.json",
    );
}

/// `set`: a data directory (`""` or [`ZEN3`]) and the live runs' suffix.
fn split_set(set: &str) -> (&str, &str) {
    set.split_at(if set.starts_with(ZEN3) { ZEN3.len() } else { 0 })
}

fn recordings_replay_to_predictions(set: &str) {
    let (dir, sfx) = split_set(set);
    replay_to_predictions(
        &format!("{dir}recordings{sfx}"),
        &format!("{dir}predictions{sfx}.json"),
    );
}

fn replay_to_predictions(dir: &str, predictions: &str) {
    let preds = load(predictions);
    let dir = root().join("scripts/corpus").join(dir);
    let exp = root().join("examples/replay-folio-configs.toml");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("scripts/corpus/recordings") {
        let path = entry.expect("entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let o = Command::new(env!("CARGO_BIN_EXE_mmlab"))
            .args(["replay", path.to_str().expect("utf-8"), "--experiment"])
            .arg(&exp)
            .args(["--mode", "aspace", "--format", "json", "--quiet"])
            .output()
            .expect("mmlab runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let doc: Value = serde_json::from_slice(&o.stdout).expect("json");
        let want = &preds["programs"][name]["kernels"];
        // The results document: one experiment, its mode (b) replay.
        let aspace = &doc["experiments"][0]["aspace"];
        for k in aspace["kernels"].as_array().expect("kernels") {
            let kname = k["kernel"].as_str().expect("name");
            assert_eq!(
                &k["pgfault"],
                want[kname]
                    .get("pgfault_replayed")
                    .unwrap_or(&want[kname]["pgfault"]),
                "{name} under {kname}: the replay no longer gives the committed prediction"
            );
            let sizes: BTreeMap<String, u64> = k["anon_fault_alloc"]
                .as_object()
                .expect("sizes")
                .iter()
                .filter(|(_, v)| v.as_u64() != Some(0))
                .map(|(kb, v)| {
                    (
                        kb.trim_end_matches("kB").to_string(),
                        v.as_u64().expect("n"),
                    )
                })
                .collect();
            let committed: BTreeMap<String, u64> =
                serde_json::from_value(want[kname]["anon_fault_alloc"].clone()).expect("sizes");
            assert_eq!(sizes, committed, "{name} under {kname}: anon_fault_alloc");
        }
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} committed recordings");
}

#[test]
fn committed_predictions_meet_the_goals_but_for_the_named_misses() {
    for set in ["host-zen3/", "host-zen3/-noaslr", "-noaslr"] {
        predictions_meet_goals(set);
    }
}

fn predictions_meet_goals(set: &str) {
    let (dir, sfx) = split_set(set);
    predictions_file_meets_goals(
        set,
        &format!("{dir}predictions{sfx}.json"),
        "",
        KNOWN_MISSES,
    );
}

const KFAULT: &str = "no exceptions:page_fault_kernel: the kernel's faults are an ESTIMATE shrunk with the user faults; the live value is inside its printed band";

/// The plain `perf record` recordings (`scripts/corpus.py perf-record
/// --no-aslr`, one line per source; this host's `full` line and the first
/// host's three) and their pairs outside 2 %.
const PERF_MISSES: &[(&str, &str, &str, &str)] = &[
    ("perf-full", "gzip", "all", SMALL),
    ("host-zen3/perf-full", "node", "64k", JIT),
    ("host-zen3/perf-full", "node", "all", JIT),
    ("host-zen3/perf-full", "node", "hf100", JIT),
    ("host-zen3/perf-full", "zstd", "all", SMALL),
    ("host-zen3/perf-full", "sort", "all", SMALL),
    ("host-zen3/perf-full", "java", "*", JVM),
    ("host-zen3/perf-typical", "node", "*", JIT),
    ("host-zen3/perf-typical", "java", "*", JVM),
    ("host-zen3/perf-typical", "server", "all", KFAULT),
    ("host-zen3/perf-typical", "zstd", "*", KFAULT),
    ("host-zen3/perf-typical", "sort", "*", KFAULT),
    ("host-zen3/perf-minimal", "node", "64k", JIT),
    ("host-zen3/perf-minimal", "node", "all", JIT),
    ("host-zen3/perf-minimal", "java", "*", JVM),
    ("host-zen3/perf-minimal", "sqlite", "2m", MREMAP_IN_PLACE),
    ("host-zen3/perf-minimal", "server", "*", NO_KMEM),
    ("host-zen3/perf-minimal", "zstd", "*", NO_KMEM),
    ("host-zen3/perf-minimal", "sort", "*", NO_KMEM),
    ("host-zen3/perf-minimal", "gzip", "*", NO_KMEM),
];

const NO_KMEM: &str = "no kmem and no exceptions:page_fault_kernel: the kernel's faults cannot be estimated (NOT ESTIMATED, with a band)";
const MREMAP_IN_PLACE: &str = "no mremap: the mappings are inferred up to the next mapping above; one grown in place ends lower, and a THP fits in the model where it did not";

#[test]
fn committed_perf_record_predictions_meet_the_goals_but_for_the_named_misses() {
    for line in [
        "perf-full",
        "host-zen3/perf-full",
        "host-zen3/perf-typical",
        "host-zen3/perf-minimal",
    ] {
        let (dir, source) = split_set(line);
        let set = format!("{dir}-noaslr");
        let misses: Vec<_> = PERF_MISSES
            .iter()
            .filter(|m| m.0 == line)
            .map(|m| (set.as_str(), m.1, m.2, m.3))
            .collect();
        predictions_file_meets_goals(
            &set,
            &format!("{dir}predictions-{source}-noaslr.json"),
            source,
            &misses,
        );
    }
}

fn predictions_file_meets_goals(
    set: &str,
    file: &str,
    source: &str,
    known: &[(&str, &str, &str, &str)],
) {
    let (dir, sfx) = split_set(set);
    let live = load(&format!("{dir}live{sfx}.json"));
    let preds = load(file);
    let mut pairs = 0;
    let mut failures = Vec::new();
    for (prog, configs) in live["programs"].as_object().expect("programs") {
        let Some(p) = preds["programs"].get(prog) else {
            continue;
        };
        let outside = p["outside_trace"].as_f64().expect("outside_trace");
        for (cfg, l) in configs.as_object().expect("configs") {
            if cfg == "4k" {
                continue;
            }
            let kernel = if p["kernels"].get(cfg).is_some() {
                cfg.as_str()
            } else {
                "4k"
            };
            let model = recordings_mean(p, kernel).unwrap_or_else(|| {
                p["kernels"][kernel]["pgfault"].as_f64().expect("pgfault") + outside
            });
            let err = pct(model, l["faults"]["mean"].as_f64().expect("mean"));
            pairs += 1;
            let known = known
                .iter()
                .any(|(s, a, b, _)| *s == set && a == prog && (b == cfg || *b == "*"));
            if err.abs() > 2.0 && !known {
                failures.push(format!(
                    "{dir}live{sfx} {source}: {prog} {cfg}: page faults {err:+.1} %"
                ));
            }
        }
    }
    assert!(
        pairs >= 40,
        "only {pairs} (program, config) pairs in the corpus"
    );
    assert!(
        failures.is_empty(),
        "outside the 2 % goal and not a named miss:\n{}",
        failures.join("\n")
    );
}

/// The mean predicted faults under `kernel` of a program recorded several
/// times (`recordings` in predictions*.json: each 4 KiB run kept and
/// replayed, `corpus.py predict`); `None` for a program recorded once.
fn recordings_mean(p: &Value, kernel: &str) -> Option<f64> {
    let recs = p.get("recordings")?.as_array()?;
    let sum: f64 = recs
        .iter()
        .map(|r| r[kernel]["pgfault"].as_f64().expect("pgfault"))
        .sum();
    Some(sum / recs.len() as f64)
}

const SORT_TOP: &str = "sort sets the corpus's most kernel faults (17.7 % of its faults), the band's top; its live runs under these kernels are a few faults above its recorded run";

/// Pairs of the minimal `perf record` line (no allocator events, no
/// `mremap`) whose live count is outside the printed band.
const MINIMAL_OUTSIDE_BAND: &[(&str, &str, &str)] = &[
    ("java", "*", JVM),
    ("node", "2m", JIT),
    ("node", "hf100", JIT),
    ("sort", "hf8", SORT_TOP),
    ("sort", "hf100", SORT_TOP),
];

/// Every band a perf-line prediction prints holds its own figure, and the
/// minimal line's bands (the kernel faults it cannot estimate, the faults
/// a missing `mremap` leaves outside every mapping) hold the live count
/// but for the named pairs.
#[test]
fn perf_record_bands_hold_their_prediction_and_the_minimal_line_the_live_count() {
    let live = load("host-zen3/live-noaslr.json");
    for source in ["perf-typical", "perf-minimal"] {
        let preds = load(&format!("host-zen3/predictions-{source}-noaslr.json"));
        let mut outside = Vec::new();
        let mut banded = 0;
        for (prog, p) in preds["programs"].as_object().expect("programs") {
            let o = p["outside_trace"].as_f64().expect("outside_trace");
            for (kname, k) in p["kernels"].as_object().expect("kernels") {
                let Some(b) = k["pgfault_band"].as_array() else {
                    continue;
                };
                let (lo, hi) = (b[0].as_f64().expect("lo"), b[1].as_f64().expect("hi"));
                let c = k["pgfault"].as_f64().expect("pgfault");
                assert!(
                    lo <= c && c <= hi,
                    "{source} {prog} {kname}: {c} outside its band [{lo}, {hi}]"
                );
                banded += 1;
            }
            if source != "perf-minimal" {
                continue;
            }
            for (cfg, l) in live["programs"][prog].as_object().into_iter().flatten() {
                let kernel = if p["kernels"].get(cfg).is_some() {
                    cfg.as_str()
                } else {
                    "4k"
                };
                let b = p["kernels"][kernel]["pgfault_band"]
                    .as_array()
                    .expect("every minimal prediction has a band");
                let v = l["faults"]["mean"].as_f64().expect("mean");
                let inside =
                    b[0].as_f64().expect("lo") + o <= v && v <= b[1].as_f64().expect("hi") + o;
                let named = MINIMAL_OUTSIDE_BAND
                    .iter()
                    .any(|(a, c, _)| a == prog && (c == cfg || *c == "*"));
                if !inside && !named && cfg != "4k" {
                    outside.push(format!("{prog} {cfg}: live {v} outside [{b:?}] + {o}"));
                }
            }
        }
        assert!(
            banded >= 20,
            "{source}: only {banded} predictions with a band"
        );
        assert!(
            outside.is_empty(),
            "{source}: live outside the band:\n{}",
            outside.join("\n")
        );
    }
}
