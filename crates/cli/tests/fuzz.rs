//! The fuzzers in CI: a short seeded run of each target, and every input
//! in `tests/fuzz-corpus/` (inputs that once failed) replayed. The long
//! runs are `mmlab fuzz experiments|traces --count N` (README,
//! "Reliability").

use std::path::Path;

use mmlab::fuzz::{self, Budget, Options, Outcome, Target};

fn opts(seed: u64, count: u64, front_only: bool) -> Options {
    Options {
        seed,
        start: 0,
        count,
        corpus: None,
        budget: Budget {
            front_only,
            ..Budget::default()
        },
        progress_every: 0,
        verbose: false,
    }
}

fn assert_clean(what: &str, r: &fuzz::Report) {
    assert!(
        r.failures.is_empty(),
        "{what}: {} of {} inputs failed: {:?}",
        r.failures.len(),
        r.nr_inputs,
        r.failures
    );
}

#[test]
fn experiments_short_seeded_run() {
    let t = fuzz::experiments::Experiments;
    let front = fuzz::run(&t, &opts(7, 400, true));
    assert_clean("experiments (front end)", &front);
    let full = fuzz::run(&t, &opts(7, 12, false));
    assert_clean("experiments (run)", &full);
    // The generator's inputs are mostly valid: both paths are exercised.
    assert!(front.nr_ran > 40 && front.nr_rejected > 40, "{front:?}");
    assert!(full.nr_ran + full.nr_rejected == 12, "{full:?}");
}

#[test]
fn traces_short_seeded_run() {
    let t = fuzz::traces::Traces;
    let front = fuzz::run(&t, &opts(7, 300, true));
    assert_clean("traces (front end)", &front);
    let full = fuzz::run(&t, &opts(7, 12, false));
    assert_clean("traces (replay)", &full);
    assert!(front.nr_ran > 20 && front.nr_rejected > 20, "{front:?}");
}

#[test]
fn same_seed_same_inputs() {
    for t in [
        &fuzz::experiments::Experiments as &dyn Target,
        &fuzz::traces::Traces,
    ] {
        for seed in [1, 2, 1 << 40] {
            assert_eq!(t.make(seed), t.make(seed));
        }
        assert_ne!(t.make(1), t.make(2));
    }
}

/// Every saved crash input, through its target's full path.
#[test]
fn corpus_inputs_no_longer_fail() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    let mut n = 0;
    for (sub, target) in [
        (
            "experiments",
            &fuzz::experiments::Experiments as &dyn Target,
        ),
        ("traces", &fuzz::traces::Traces),
    ] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            let bytes = std::fs::read(&p).unwrap();
            if let Outcome::Failed(what) = target.run(&bytes, &Budget::default()) {
                panic!("{}: {what}", p.display());
            }
            n += 1;
        }
    }
    assert!(n >= 1, "no corpus inputs found under {}", dir.display());
}
