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
        worker: false,
        abort_at: None,
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

/// SIGTERM (or Ctrl-C) ends a long run after the input running, with its
/// summary and the `--start` to continue from; the exit status is 128 + 15
/// as for a process the signal ended.
#[test]
fn a_signal_stops_a_run_with_where_to_continue() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(["fuzz", "experiments", "--front-only", "--seed", "7"])
        .args(["--count", "100000000", "--progress", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run is under way once it reports progress.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("inputs, next") {
        line.clear();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("no progress line before the end of stderr");
        }
    }
    host::signals::send(child.id() as i32, libc::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{text}");
    // "... (seed 7, inputs 0..N): ..." and "continue with --seed 7 --start N".
    let n = text
        .split("inputs 0..")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no input range in {text}"));
    assert!(n >= 50, "{text}");
    let rest = 100_000_000 - n;
    assert!(
        text.contains(&format!(
            "stopped by SIGTERM: continue with --seed 7 --start {n} --count {rest}"
        )),
        "{text}"
    );
}

/// An input that kills the process running it (here the test hook aborts
/// the worker at input 12, as an allocation beyond `--memory-mib` does) is
/// counted as failed, named, and saved; the run goes on to the end of its
/// range in a new worker.
#[test]
fn an_input_that_aborts_its_process_is_named_and_the_run_goes_on() {
    let corpus = host::scratch::ScratchDir::new("fuzz-abort").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mmlab"))
        .args(["fuzz", "experiments", "--front-only", "--seed", "100"])
        .args(["--start", "10", "--count", "5", "--corpus"])
        .arg(corpus.path())
        .env("MMLAB_FUZZ_WORKER_ABORT_AT", "12")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(
        text.contains("5 inputs (seed 100, inputs 10..15)"),
        "{text}"
    );
    assert!(text.contains("1 failed"), "{text}");
    assert!(
        text.contains("input 12 (seed 112): the process running it ended (signal: 6"),
        "{text}"
    );
    assert!(corpus.path().join("crash-112.toml").exists(), "{err}");
}
