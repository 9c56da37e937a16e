//! Every command that changes the system or writes a file, killed at random
//! points by SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGKILL (issue 15): the
//! host's THP knobs, sysctls, hugetlb pool, tracefs mounts and instances and
//! processes are back as they were — at once for the catchable signals, and
//! after the next `mmlab` command for SIGKILL — and no output is half
//! written, destroyed or left as a temporary file.
//!
//! The tests hold the live-kernel lock (`host::lock::LiveLock`) for their
//! whole run and lend it to the `mmlab` processes they start
//! (`MMLAB_LIVE_LOCK_FD`), so that nobody else changes a knob in between.
//! Without root, the commands that change the system are SKIPPED (the file
//! cases still run). The delays come from a seeded SplitMix64
//! (`MMLAB_KILL_SEED`, default 15); `MMLAB_KILL_ROUNDS` (default 1) repeats
//! every case with new delays: the long run of the README's reliability
//! section is `MMLAB_KILL_ROUNDS=20 cargo test -p mmlab --test kill`.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use host::lock::LiveLock;
use mm::rng::SplitMix64;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// A directory of its own for one test, removed at the end.
struct Scratch(host::scratch::ScratchDir);

impl Scratch {
    /// A private directory (0700, an unpredictable name), removed with its
    /// contents when dropped, also when the test fails.
    fn new(tag: &str) -> Scratch {
        Scratch(host::scratch::ScratchDir::new(&format!("kill-{tag}")).expect("scratch dir"))
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

/// What must be as it was after every case.
#[derive(Debug, PartialEq, Eq)]
struct HostState {
    /// Every THP `enabled` knob and the sysctls mmlab may change.
    knobs: Vec<(String, String)>,
    /// Mount points of tracefs.
    tracefs_mounts: Vec<String>,
    /// The top-level tracing's events and switch.
    global_tracing: (String, String),
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|t| host::live::selected_choice(&t))
        .unwrap_or_else(|e| format!("<{e}>"))
}

fn host_state() -> HostState {
    let mut knobs = vec![("enabled".to_string(), read(&host::live::top_knob_path()))];
    for s in host::live::mthp_sizes_kb() {
        knobs.push((format!("{s}kB"), read(&host::live::size_knob_path(s))));
    }
    for k in [
        host::live::NR_HUGEPAGES,
        host::live::PERCPU_PAGELIST_HIGH_FRACTION,
        "/proc/sys/vm/min_free_kbytes",
        "/proc/sys/vm/watermark_scale_factor",
    ] {
        knobs.push((k.to_string(), read(Path::new(k))));
    }
    let tracefs_mounts = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some("tracefs"))
        .map(|l| l.split(' ').nth(1).unwrap_or("").to_string())
        .collect();
    let global_tracing = match host::live::find_tracefs() {
        Some(t) => (read(&t.join("set_event")), read(&t.join("tracing_on"))),
        None => (String::new(), String::new()),
    };
    HostState {
        knobs,
        tracefs_mounts,
        global_tracing,
    }
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'));
            (cmd.contains(marker) && !zombie)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// One command under test.
struct Case {
    name: &'static str,
    args: Vec<String>,
    /// The delay before the first signal is drawn from 0..max_delay_ms.
    max_delay_ms: u64,
    /// The output file and its content before the run, if it writes one.
    output: Option<(PathBuf, Vec<u8>)>,
    /// `mmlab record`: the workload gets the first signal.
    record: bool,
    /// A journal directory of the test's own (file-only cases).
    run_dir: Option<PathBuf>,
}

fn mmlab(args: &[String], lock: &LiveLock, run_dir: Option<&Path>) -> Child {
    mmlab_with_env(args, lock, run_dir, &[])
}

fn mmlab_with_env(
    args: &[String],
    lock: &LiveLock,
    run_dir: Option<&Path>,
    env: &[(&str, &str)],
) -> Child {
    let (fd, (k, v)) = lock.lend().expect("lend the live-kernel lock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mmlab"));
    cmd.args(args)
        .envs(env.iter().copied())
        .env(k, v)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(d) = run_dir {
        cmd.env(host::journal::RUN_DIR_ENV, d);
    }
    let child = cmd.spawn().expect("mmlab starts");
    drop(fd);
    child
}

/// Waits for `child`, at most `limit`; `None` if it is still running.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return Some(st);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child`, at most `limit`; `None` on a hang (the child is then
/// killed).
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let st = wait_for(child, limit);
    if st.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    st
}

fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(e) = child.stderr.as_mut() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Whether `bytes` are a complete mmlab trace (every chunk and the trailer).
fn complete_trace(path: &Path) -> bool {
    let Ok(mut r) = trace::TraceReader::open(path) else {
        return false;
    };
    r.by_ref().all(|e| e.is_ok()) && r.trailer().is_some()
}

/// Runs `case` once: signals `plan` (delay before each, in ms) to the
/// command; then checks the host and the files.
fn run_case(
    case: &Case,
    plan: &[(u64, i32)],
    lock: &LiveLock,
    marker: &str,
    dir: &Scratch,
) -> Result<String, String> {
    let before = host_state();
    let names_before = dir.names();
    let mut child = mmlab(&case.args, lock, case.run_dir.as_deref());
    let pid = child.id() as i32;
    let mut sent = Vec::new();
    for &(delay, sig) in plan {
        std::thread::sleep(Duration::from_millis(delay));
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        host::signals::send(pid, sig).expect("kill");
        sent.push(sig);
    }
    // A workload that ignored the first signal gets a second after 3 s
    // (record's "second Ctrl-C"); the command must end within 120 s.
    let status = wait_for(&mut child, Duration::from_secs(3));
    if status.is_none() && case.record {
        let _ = host::signals::send(pid, libc::SIGINT);
        sent.push(libc::SIGINT);
    }
    let status = match status {
        Some(s) => s,
        None => wait_at_most(&mut child, Duration::from_secs(120))
            .ok_or_else(|| format!("hung after signals {sent:?}: {}", stderr_of(&mut child)))?,
    };
    let err = stderr_of(&mut child);
    let mut note = format!("{}: signals {sent:?} -> {status:?}", case.name);
    if status.signal() == Some(libc::SIGKILL) {
        // The next mmlab command restores what the killed one left.
        let mut next = mmlab(&["list".to_string()], lock, case.run_dir.as_deref());
        let st = wait_at_most(&mut next, Duration::from_secs(60)).ok_or("`mmlab list` hung")?;
        let rec = stderr_of(&mut next);
        if !st.success() {
            return Err(format!("`mmlab list` after SIGKILL failed: {rec}"));
        }
        note.push_str(&format!(
            "; next command: {} line(s) of recovery",
            rec.lines().count()
        ));
    }
    check_after(case, &before, &names_before, pid, status, marker, dir)
        .map_err(|e| format!("{note}: {e}\nstderr: {err}"))?;
    Ok(note)
}

fn check_after(
    case: &Case,
    before: &HostState,
    names_before: &[String],
    pid: i32,
    status: ExitStatus,
    marker: &str,
    dir: &Scratch,
) -> Result<(), String> {
    let after = host_state();
    if &after != before {
        return Err(format!(
            "host state changed:\nbefore {before:?}\nafter  {after:?}"
        ));
    }
    if let Some(t) = host::live::find_tracefs() {
        let prefix = format!("mmlab-{pid}");
        let left: Vec<_> = std::fs::read_dir(t.join("instances"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n == &prefix || n.starts_with(&format!("{prefix}-")))
            .collect();
        if !left.is_empty() {
            return Err(format!("tracefs instances left: {left:?}"));
        }
    }
    let run_dir = case
        .run_dir
        .clone()
        .or_else(host::journal::default_dir)
        .unwrap_or_default();
    // Its journal, or the temporary file of a rewrite of it (`.<pid>-…tmp`)
    // a SIGKILL left between the write and the rename.
    let journal_prefix = format!("{pid}-");
    let journals: Vec<_> = std::fs::read_dir(&run_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.trim_start_matches('.').starts_with(&journal_prefix))
        .collect();
    if !journals.is_empty() {
        return Err(format!(
            "journals left in {}: {journals:?}",
            run_dir.display()
        ));
    }
    let procs = processes_with(marker);
    if !procs.is_empty() {
        return Err(format!("processes left: {procs:?}"));
    }
    let names = dir.names();
    let tmp: Vec<_> = names.iter().filter(|n| n.ends_with(".tmp")).collect();
    if !tmp.is_empty() {
        return Err(format!("temporary files left: {tmp:?}"));
    }
    if names.len() != names_before.len() {
        return Err(format!("files {names_before:?} became {names:?}"));
    }
    if let Some((out, old)) = &case.output {
        let now = std::fs::read(out).map_err(|e| format!("output gone: {e}"))?;
        let whole = if case.record || out.extension().is_some_and(|e| e == "mmtrace") {
            complete_trace(out)
        } else {
            serde_json::from_slice::<serde_json::Value>(&now).is_ok()
        };
        if &now != old && !whole {
            return Err(format!(
                "the output was replaced by an incomplete one ({} bytes, exit {status:?})",
                now.len()
            ));
        }
    }
    Ok(())
}

/// Runs every signal plan on `case` for the configured rounds.
fn run_all(name: &str, make: impl Fn(&Scratch, &str) -> Case, plans: &[&[i32]]) {
    let lock = LiveLock::acquire().expect("live-kernel lock");
    let seed = env_u64("MMLAB_KILL_SEED", 15);
    let rounds = env_u64("MMLAB_KILL_ROUNDS", 1);
    // SplitMix64: the delays of one seed.
    let mut rng = SplitMix64(seed ^ name.len() as u64);
    let mut failures = Vec::new();
    let mut nr = 0;
    for round in 0..rounds {
        for plan in plans {
            let dir = Scratch::new(name);
            let marker = format!("mmlab-kill-marker-{:016x}", rng.next_u64());
            let case = make(&dir, &marker);
            let timed: Vec<(u64, i32)> = plan
                .iter()
                .enumerate()
                .map(|(i, &s)| {
                    let d = if i == 0 {
                        rng.below(case.max_delay_ms.max(1))
                    } else {
                        rng.below(400)
                    };
                    (d, s)
                })
                .collect();
            nr += 1;
            match run_case(&case, &timed, &lock, &marker, &dir) {
                Ok(note) => eprintln!("{name} round {round} {timed:?}: ok ({note})"),
                Err(e) => {
                    eprintln!("{name} round {round} {timed:?}: FAILED: {e}");
                    failures.push(format!("{timed:?}: {e}"));
                }
            }
        }
    }
    eprintln!(
        "{name}: {nr} kills, {} failed (seed {seed})",
        failures.len()
    );
    assert!(failures.is_empty(), "{name}: {failures:#?}");
}

const INT: i32 = libc::SIGINT;
const TERM: i32 = libc::SIGTERM;
const KILL: i32 = libc::SIGKILL;
const HUP: i32 = libc::SIGHUP;
const QUIT: i32 = libc::SIGQUIT;

/// Why the live cases cannot run here, if they cannot.
fn live_skip(need_tracefs: bool) -> Option<String> {
    if !is_root() {
        return Some("not root: the commands cannot change knobs or tracefs".into());
    }
    if !host::live::top_knob_path().exists() {
        return Some("no THP sysfs".into());
    }
    if need_tracefs
        && host::live::find_tracefs().is_none()
        && !Path::new("/sys/kernel/tracing").is_dir()
    {
        return Some("no tracefs".into());
    }
    None
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn native_faults_killed_anywhere_leaves_the_knobs_as_they_were() {
    if let Some(why) = live_skip(false) {
        eprintln!("SKIPPED (cannot run here): {why}");
        return;
    }
    run_all(
        "native-faults",
        |_, _| Case {
            name: "native faults",
            args: strings(&["native", "faults"]),
            max_delay_ms: 3000,
            output: None,
            record: false,
            run_dir: None,
        },
        &[&[INT], &[TERM], &[KILL], &[HUP], &[QUIT], &[INT, INT]],
    );
}

#[test]
fn bench_faults_killed_anywhere_leaves_the_knobs_as_they_were() {
    if let Some(why) = live_skip(false) {
        eprintln!("SKIPPED (cannot run here): {why}");
        return;
    }
    run_all(
        "bench-faults",
        |_, _| Case {
            name: "bench faults",
            args: strings(&["bench", "faults", "--fault-mib", "256", "--fault-runs", "2"]),
            max_delay_ms: 2500,
            output: None,
            record: false,
            run_dir: None,
        },
        &[&[INT], &[TERM], &[KILL]],
    );
}

/// A workload that runs until it is signalled; `ignore` makes it ignore
/// SIGINT and SIGTERM (only the second Ctrl-C, SIGKILL, ends it).
fn workload_script(dir: &Scratch, marker: &str, ignore: bool) -> PathBuf {
    let p = dir.0.join(format!("{marker}.sh"));
    let trap = if ignore { "trap '' INT TERM\n" } else { "" };
    std::fs::write(
        &p,
        format!(
            "{trap}while :; do head -c 200000 /dev/zero | cksum >/dev/null; sleep 0.02; done\n"
        ),
    )
    .unwrap();
    p
}

fn record_case(dir: &Scratch, marker: &str, ignore: bool, kmem: bool) -> Case {
    let out = dir.0.join("t.mmtrace");
    // An existing trace the recording replaces only when complete.
    let old = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/cc-c.mmtrace"),
    )
    .unwrap();
    std::fs::write(&out, &old).unwrap();
    let script = workload_script(dir, marker, ignore);
    let mut args = strings(&["record", "-o", out.to_str().unwrap()]);
    if kmem {
        args.push("--kmem-system-wide".into());
    }
    args.extend(strings(&["--", "sh", script.to_str().unwrap()]));
    Case {
        name: "record",
        args,
        max_delay_ms: 2000,
        output: Some((out, old)),
        record: true,
        run_dir: None,
    }
}

#[test]
fn record_killed_anywhere_leaves_no_instance_mount_process_or_half_trace() {
    if let Some(why) = live_skip(true) {
        eprintln!("SKIPPED (cannot run here): {why}");
        return;
    }
    // INT and TERM end the workload and complete the trace; KILL leaves
    // the rest to the next command; TERM then KILL kills during the merge;
    // three INTs end mmlab itself.
    run_all(
        "record",
        |d, m| record_case(d, m, false, false),
        &[
            &[INT],
            &[TERM],
            &[KILL],
            &[HUP],
            &[TERM, KILL],
            &[INT, INT, INT],
        ],
    );
    run_all(
        "record-ignoring",
        |d, m| record_case(d, m, true, false),
        &[&[INT], &[TERM, KILL]],
    );
    run_all(
        "record-kmem",
        |d, m| record_case(d, m, false, true),
        &[&[INT], &[KILL]],
    );
}

/// SIGINT right after `record` forked the workload, before the workload's
/// process group is journalled (`record` pauses there, told so by
/// `trace::record::FORK_PAUSE_ENV`, and says so on stderr). The child has
/// not exec'd yet and holds copies of the instance's `trace_pipe_raw`
/// descriptors, so the instance cannot be removed until the child is gone:
/// the watcher must not undo in between, or it finds no group to kill and
/// the instance busy. A random SIGINT 21 ms after the start once hit that
/// window (`tracefs instances left: ["mmlab-30667"]`, 1 of 164 kills of
/// `MMLAB_KILL_ROUNDS=8`/`14` runs of the record test).
#[test]
fn record_interrupted_between_fork_and_journal_leaves_no_instance() {
    use std::io::BufRead;
    if let Some(why) = live_skip(true) {
        eprintln!("SKIPPED (cannot run here): {why}");
        return;
    }
    let lock = LiveLock::acquire().expect("live-kernel lock");
    let dir = Scratch::new("fork");
    let marker = format!("mmlab-kill-marker-fork-{}", std::process::id());
    let case = record_case(&dir, &marker, false, false);
    let before = host_state();
    let names_before = dir.names();
    let pause = [(trace::record::FORK_PAUSE_ENV, "700")];
    let mut child = mmlab_with_env(&case.args, &lock, None, &pause);
    let pid = child.id() as i32;
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut said = String::new();
    while !said.contains(trace::record::FORK_PAUSE_ENV) {
        let mut line = String::new();
        if err.read_line(&mut line).expect("read stderr") == 0 {
            break;
        }
        said.push_str(&line);
    }
    assert!(
        said.contains(trace::record::FORK_PAUSE_ENV),
        "record never reached the fork: {said}"
    );
    host::signals::send(pid, INT).expect("kill");
    let status = wait_at_most(&mut child, Duration::from_secs(120)).expect("record ends");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    check_after(&case, &before, &names_before, pid, status, &marker, &dir)
        .unwrap_or_else(|e| panic!("SIGINT after the fork: {e}\nstderr: {said}{rest}"));
}

#[test]
fn record_exits_with_the_workloads_status() {
    if let Some(why) = live_skip(true) {
        eprintln!("SKIPPED (cannot run here): {why}");
        return;
    }
    let lock = LiveLock::acquire().expect("live-kernel lock");
    let dir = Scratch::new("status");
    let out = dir.0.join("s.mmtrace");
    for (script, code) in [("exit 3", 3), ("kill -TERM $$", 128 + TERM), ("true", 0)] {
        let args = strings(&[
            "record",
            "-o",
            out.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ]);
        let mut c = mmlab(&args, &lock, None);
        let st = wait_at_most(&mut c, Duration::from_secs(60)).expect("record ends");
        assert_eq!(st.code(), Some(code), "{script}: {}", stderr_of(&mut c));
        assert!(complete_trace(&out));
    }
}

#[test]
fn reproduce_and_import_killed_anywhere_never_leave_half_an_output() {
    // No root needed: only files are at stake. The journal goes to the
    // test's own directory.
    let run = Scratch::new("run");
    let run_dir = run.0.path().to_path_buf();
    run_all(
        "reproduce",
        |d, _| {
            let out = d.0.join("r.json");
            std::fs::write(&out, b"{\"old\": true}").unwrap();
            Case {
                name: "reproduce",
                args: strings(&[
                    "reproduce",
                    "page-churn",
                    "--quiet",
                    "--out",
                    out.to_str().unwrap(),
                ]),
                max_delay_ms: 3000,
                output: Some((out, b"{\"old\": true}".to_vec())),
                record: false,
                run_dir: Some(run_dir.clone()),
            }
        },
        &[&[INT], &[TERM], &[KILL]],
    );
    run_all(
        "import",
        |d, _| {
            let out = d.0.join("i.mmtrace");
            std::fs::write(&out, b"not yet a trace").unwrap();
            let input = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../trace/tests/fixtures/mixed.perf.data");
            Case {
                name: "import",
                args: strings(&[
                    "import",
                    input.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                ]),
                max_delay_ms: 60,
                output: Some((out, b"not yet a trace".to_vec())),
                record: false,
                run_dir: Some(run_dir.clone()),
            }
        },
        &[&[INT], &[TERM], &[KILL]],
    );
}
