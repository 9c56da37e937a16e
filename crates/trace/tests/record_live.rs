//! Recording on the live kernel. These tests need root and tracefs; without
//! them each prints `SKIPPED: <reason>` and returns.
//!
//! They are serialized twice: by a mutex within this binary, and by
//! `flock` on `/tmp/mmlab-live-kernel.lock`, which other crates' tests that
//! touch system-wide knobs take too.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use host::scratch::ScratchFile;
use trace::record::{record, RecordError, RecordOptions};
use trace::{EventKind, TraceReader};

static LOCAL: Mutex<()> = Mutex::new(());

/// Holds both locks for the duration of a test.
struct LiveLock {
    _guard: std::sync::MutexGuard<'static, ()>,
    fd: i32,
}

impl Drop for LiveLock {
    fn drop(&mut self) {
        // SAFETY: fd is the lock file this test opened; closing releases the flock.
        unsafe {
            libc::close(self.fd);
        }
    }
}

fn live_lock() -> LiveLock {
    let guard = LOCAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = c"/tmp/mmlab-live-kernel.lock";
    // SAFETY: a valid path and flags; flock on the returned fd.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC,
            0o666,
        )
    };
    assert!(fd >= 0, "cannot open /tmp/mmlab-live-kernel.lock");
    // SAFETY: fd is open.
    let rc = unsafe { libc::flock(fd, libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock failed");
    LiveLock { _guard: guard, fd }
}

/// `None` when the test can run, else why not.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!("recording needs root, running as uid {euid}"));
    }
    let tracefs_possible =
        Path::new("/sys/kernel/tracing").is_dir() || trace::record::find_tracefs().is_some();
    if !tracefs_possible {
        return Some("no tracefs and no /sys/kernel/tracing to mount it on".into());
    }
    None
}

fn opts() -> RecordOptions {
    // Mount tracefs if this machine has it unmounted; the recorder unmounts
    // it again afterwards.
    RecordOptions {
        buffer_size_kb: 4096,
        mount_tracefs: true,
        ..RecordOptions::default()
    }
}

/// `name` in a private scratch directory of its own, removed when dropped
/// (also when the test fails): spools left beside the output would show.
fn out_path(name: &str) -> ScratchFile {
    ScratchFile::new("trace-live", name).expect("scratch dir")
}

/// What tracefs looks like from outside: our instance must be gone and the
/// top-level event list unchanged.
fn tracefs_state() -> Option<(Vec<String>, String)> {
    let root = trace::record::find_tracefs()?;
    let mut instances: Vec<String> = fs::read_dir(root.join("instances"))
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    instances.sort();
    Some((
        instances,
        fs::read_to_string(root.join("set_event")).unwrap_or_default(),
    ))
}

fn assert_clean(before: &Option<(Vec<String>, String)>) {
    let ours = format!("mmlab-{}", std::process::id());
    if let Some((instances, set_event)) = tracefs_state() {
        assert!(!instances.contains(&ours), "instance {ours} left behind");
        if let Some((_, before_events)) = before {
            assert_eq!(&set_event, before_events, "top-level set_event changed");
        }
    }
}

#[test]
fn records_a_pipeline_and_reads_it_back() {
    if let Some(why) = skip_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    let _lock = live_lock();
    let before = tracefs_state();
    let out = out_path("dd.mmtrace");
    let args = vec![
        "-c".to_string(),
        "dd if=/dev/zero bs=1M count=64 2>/dev/null | gzip > /dev/null".to_string(),
    ];
    let s = record(&out, "sh", &args, &opts()).expect("recording succeeds");
    assert_clean(&before);
    println!("{s:#?}");
    assert_eq!(s.exit_code, Some(0));
    assert!(!s.interrupted);
    assert!(s.nr_events > 1000, "only {} events", s.nr_events);
    for kind in [
        "kmem:mm_page_alloc",
        "kmem:mm_page_free",
        "exceptions:page_fault_user",
        "syscalls:mmap",
    ] {
        assert!(
            s.nr_events_by_kind.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} events"
        );
    }
    let mode = fs::metadata(&out)
        .expect("output exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let spools: Vec<_> = fs::read_dir(out.parent().expect("dir"))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".spool"))
        .collect();
    assert!(spools.is_empty(), "spool files left: {spools:?}");

    let mut reader = TraceReader::open(&out).expect("trace opens");
    let header = reader.header().clone();
    assert!(header.machine.nr_cpus >= 1);
    assert!(!header.machine.zones.is_empty(), "no zones in header");
    let before_c = header.counters_before.clone().expect("counters before");
    let mut n = 0u64;
    let mut last_ts = 0u64;
    let mut forks = 0;
    let mut execs = Vec::new();
    let mut pids = std::collections::BTreeSet::new();
    for ev in reader.by_ref() {
        let ev = ev.expect("event decodes");
        assert!(ev.ts_ns >= last_ts, "event {n} goes back in time");
        last_ts = ev.ts_ns;
        pids.insert(ev.pid);
        match &ev.kind {
            EventKind::Fork { .. } => forks += 1,
            EventKind::Exec { filename, .. } => execs.push(filename.clone()),
            _ => {}
        }
        n += 1;
    }
    assert_eq!(n, s.nr_events);
    // sh forks dd and gzip; each of the three execs.
    assert!(forks >= 2, "{forks} forks");
    assert!(
        execs.iter().any(|f| f.ends_with("gzip")),
        "execs: {execs:?}"
    );
    assert!(pids.len() >= 3, "pids seen: {pids:?}");
    let trailer = reader.trailer().expect("trailer").clone();
    assert_eq!(trailer.nr_events, n);
    let after_c = trailer.counters_after.expect("counters after");
    let pgfault = |c: &trace::event::Counters| c.vmstat.get("pgfault").copied().unwrap_or(0);
    assert!(pgfault(&after_c) > pgfault(&before_c));
    fs::remove_file(&out).expect("cleanup");
}

#[test]
fn missing_command_is_a_clear_error_and_leaves_nothing() {
    if let Some(why) = skip_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    let _lock = live_lock();
    let before = tracefs_state();
    let out = out_path("missing.mmtrace");
    let err = record(&out, "mmlab-no-such-command-xyz", &[], &opts()).expect_err("must fail");
    assert!(
        matches!(err, RecordError::CommandNotFound { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("command not found"), "{err}");
    assert_clean(&before);
    assert!(!out.exists());
}

#[test]
fn failing_command_is_recorded_with_its_status() {
    if let Some(why) = skip_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    let _lock = live_lock();
    let before = tracefs_state();
    let out = out_path("fail.mmtrace");
    let s =
        record(&out, "sh", &["-c".into(), "exit 3".into()], &opts()).expect("recording succeeds");
    assert_clean(&before);
    assert_eq!(s.exit_code, Some(3));
    assert_eq!(s.exit_status, "exit 3");
    let reader = TraceReader::open(&out).expect("opens");
    assert_eq!(reader.count() as u64, s.nr_events);
    fs::remove_file(&out).expect("cleanup");
}

#[test]
fn sigint_is_forwarded_and_everything_is_cleaned_up() {
    if let Some(why) = skip_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    let _lock = live_lock();
    let before = tracefs_state();
    let out = out_path("sigint.mmtrace");
    let instance_on = format!("instances/mmlab-{}/tracing_on", std::process::id());
    let sender = std::thread::spawn(move || {
        // Wait until tracing is on (the handler is installed before), then
        // interrupt as Ctrl-C would.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let on = trace::record::find_tracefs()
                .and_then(|r| fs::read_to_string(r.join(&instance_on)).ok())
                .map(|s| s.trim() == "1")
                .unwrap_or(false);
            if on {
                std::thread::sleep(Duration::from_millis(200));
                // SAFETY: signalling our own process.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGINT);
                }
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    let t0 = Instant::now();
    let s = record(&out, "sleep", &["30".into()], &opts()).expect("recording ends cleanly");
    assert!(
        sender.join().expect("sender thread"),
        "tracing never turned on"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "SIGINT did not stop the command"
    );
    assert!(s.interrupted);
    assert_eq!(s.exit_status, format!("signal {}", libc::SIGINT));
    assert_clean(&before);
    let mut reader = TraceReader::open(&out).expect("opens");
    assert!(reader.by_ref().all(|e| e.is_ok()));
    assert!(reader.trailer().expect("trailer").interrupted);
    fs::remove_file(&out).expect("cleanup");
}

/// Records `sort` of an 8 MiB file (a large anonymous buffer filled by
/// `read()`, so both user and kernel faults) and replays its address-space
/// stream (mode b) under the recorded configuration: the model's page
/// faults must match the workload's own count (`ru_minflt + ru_majflt` of
/// the command and the descendants it waited for) within 2 %.
#[test]
fn mode_b_predicts_the_recorded_workloads_faults() {
    let _lock = live_lock();
    if let Some(why) = skip_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    if trace::record::resolve_command("sort").is_err() {
        println!("SKIPPED: no sort(1) in PATH");
        return;
    }
    let input = out_path("sort-input.txt");
    let mut text = String::with_capacity(8 << 20);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while text.len() < 8 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{x:016x}{:x}\n", x.rotate_left(17)));
    }
    fs::write(&input, text).expect("input");
    let out = out_path("sort.mmtrace");
    let args = vec![
        "-o".to_string(),
        "/dev/null".to_string(),
        input.display().to_string(),
    ];
    let before = tracefs_state();
    // The allocator events of every process, as `--kmem-system-wide`.
    let o = RecordOptions {
        kmem_system_wide: true,
        ..opts()
    };
    let s = record(&out, "sort", &args, &o).expect("recording succeeds");
    assert_clean(&before);
    if let Some((instances, _)) = tracefs_state() {
        let ours = format!("mmlab-{}-kmem", std::process::id());
        assert!(!instances.contains(&ours), "instance {ours} left behind");
    }
    assert_eq!(s.exit_code, Some(0));
    assert!(
        s.nr_events_by_kind
            .get("kmem:mm_page_alloc")
            .copied()
            .unwrap_or(0)
            > 0
    );
    let header = TraceReader::open(&out).expect("trace").header().clone();
    assert!(header.kmem_system_wide);
    let mut cfg = mm::knobs::Preset::Linux6_18.config();
    for (k, v) in trace::aspace::recorded_thp_knobs(&header) {
        cfg.set_knob(&k, &v).expect("recorded knob");
    }
    let layout = mm::page_alloc::MemoryLayout {
        nodes: vec![mm::page_alloc::NodeLayout {
            nr_cpus: header.machine.nr_cpus.max(1),
            nr_pages: 2 << 18,
        }],
        dma32_pages: 0,
    };
    let r = trace::aspace::replay_aspace(&out, &layout, &mm::cost::CostTable::uniform(1), &[cfg])
        .expect("replay");
    let t = r.trailer.clone().expect("trailer");
    // Mode (a) of the same trace under the recorded configuration: every
    // recorded allocation and free (frees of older pages included) is
    // performed by the model, the lists starting as recorded.
    let prep = trace::replay::Prepared::open(&out).expect("mode (a)");
    let nr_cpus = header.machine.nr_cpus.max(1);
    let mut pa = mm::page_alloc::PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    let pre = prep.preallocate(&mut pa, nr_cpus);
    prep.warm_pcp(&mut pa, nr_cpus);
    let mut eng = sim::Engine::new(pa, mm::cost::CostTable::uniform(20), 1);
    let (tasks, stats) = prep.tasks_with(nr_cpus, pre);
    for task in tasks {
        eng.spawn(task);
    }
    eng.run();
    let st = stats.borrow().clone();
    let rec = &prep.recorded;
    let model_zl = eng
        .pa
        .vmstat
        .get(mm::vmstat::VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED);
    let model_drain = eng.pa.vmstat.get(mm::vmstat::VmEvent::MM_PAGE_PCPU_DRAIN);
    println!(
        "mode (a): zone-locked recorded {} model {model_zl}; PCP drains recorded {} model {model_drain}",
        rec.alloc_zone_locked, rec.pcpu_drains
    );
    assert_eq!(
        st.allocs + st.alloc_failed,
        rec.allocs - rec.unsupported_order
    );
    assert_eq!(st.alloc_failed, 0);
    assert_eq!(st.frees + st.frees_of_failed, rec.frees);
    let live = t.workload_minflt.expect("ru_minflt recorded") + t.workload_majflt.unwrap_or(0);
    let m = &r.models[0];
    let pred = m.predicted_pgfault();
    println!(
        "live {live} faults, trace {} user + {} kernel, model {pred} ({} taken, {} absorbed, {} passed through)",
        r.recorded.faults, r.recorded.kernel_faults, m.faults_taken, m.faults_absorbed, m.faults_passthrough
    );
    assert!(
        pred.abs_diff(live) * 50 <= live,
        "model {pred} vs live {live}: more than 2 % apart"
    );
    // The buffer is anonymous memory: most faults go through the model.
    assert!(m.faults_replayed * 2 > r.recorded.faults + r.recorded.kernel_faults);
}

/// Every exec of a recorded shell pipeline comes with its mappings
/// (`ExecLayout`, from the kernel's `PERF_RECORD_MMAP2` records), and with
/// them no recorded fault is outside every mapping: the stack, the `.bss`
/// and the program's and interpreter's files are all in the replay, which
/// then predicts the trace's own faults exactly and the workload's
/// `ru_minflt` to within the recorder's own child (its faults between fork
/// and exec are before the trace).
#[test]
fn every_exec_has_its_layout_and_no_fault_is_outside_a_mapping() {
    let _lock = live_lock();
    if let Some(why) = skip_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    let out = out_path("execs.mmtrace");
    let args = vec![
        "-c".to_string(),
        "ls / >/dev/null; cat /proc/self/maps >/dev/null; sort /proc/self/maps >/dev/null"
            .to_string(),
    ];
    let before = tracefs_state();
    let s = record(&out, "sh", &args, &opts()).expect("recording succeeds");
    assert_clean(&before);
    assert_eq!(s.exit_code, Some(0));
    let execs = s.nr_events_by_kind.get("sched:sched_process_exec").copied();
    let layouts = s.nr_events_by_kind.get("mmlab:exec_layout").copied();
    assert!(execs >= Some(4), "sh and its three commands: {execs:?}");
    assert_eq!(layouts, execs, "one layout per exec");
    let header = TraceReader::open(&out).expect("trace").header().clone();
    let mut cfg = mm::knobs::Preset::Linux6_18.config();
    for (k, v) in trace::aspace::recorded_thp_knobs(&header) {
        cfg.set_knob(&k, &v).expect("recorded knob");
    }
    let layout = mm::page_alloc::MemoryLayout {
        nodes: vec![mm::page_alloc::NodeLayout {
            nr_cpus: header.machine.nr_cpus.max(1),
            nr_pages: 1 << 18,
        }],
        dma32_pages: 0,
    };
    let r = trace::aspace::replay_aspace(&out, &layout, &mm::cost::CostTable::uniform(1), &[cfg])
        .expect("replay");
    let m = &r.models[0];
    let recorded = r.recorded.faults + r.recorded.kernel_faults;
    println!(
        "{recorded} recorded faults: {} in the model, {} in files or the vDSO, {} elsewhere; {} exec argument pages",
        m.faults_replayed,
        m.faults_passthrough_file,
        m.faults_passthrough - m.faults_passthrough_file,
        m.faults_exec_args
    );
    // The recorder's own child can fault between tracing on and its exec,
    // in the recorder's address space, which is not recorded: a few.
    let outside = m.faults_passthrough - m.faults_passthrough_file;
    assert!(outside <= 8, "{outside} faults outside every mapping");
    assert_eq!(m.faults_sigsegv, 0, "a recorded fault the model refused");
    assert_eq!(m.predicted_pgfault() - m.faults_exec_args, recorded);
    assert!(m.faults_exec_args >= execs.unwrap_or(0));
}
