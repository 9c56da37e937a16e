//! Recording a real workload on the live kernel.
//!
//! # Mechanism
//!
//! A private tracefs instance (`instances/mmlab-<pid>`) with exactly the
//! events of [`RECORDED_EVENTS`] enabled, filtered to the recorded process
//! tree by `set_event_pid` and the `event-fork` option, read as binary
//! ring-buffer pages from `per_cpu/cpuN/trace_pipe_raw`. On this host that
//! costs about 3 % of a build's run time where `perf record` costs 16-32 %
//! (shared/reference/LIVE-KERNEL.md): the kernel writes the records once, and
//! the recorder only copies whole pages.
//!
//! # The steps
//!
//! 1. Check for root, tracefs and every event before changing anything.
//! 2. Create the instance, size its buffers, set the `mono` clock (one clock
//!    for all CPUs, so that the per-CPU streams merge in time order), enable
//!    the events. A guard removes the instance on every way out.
//! 3. Fork the child, which waits on a pipe; put its pid in
//!    `set_event_pid`; turn tracing on; let the child exec the command.
//! 4. Until the child exits, copy pages from every CPU's `trace_pipe_raw`
//!    to spool files in the output's directory (memory stays constant). The
//!    spools have no name (`O_TMPFILE`, [`host::output::unnamed_file_in`]):
//!    nobody can guess or replace them, and a kill leaves none behind.
//! 5. Turn tracing off, drain the buffers, read the lost-event counters,
//!    snapshot the kernel's counters, remove the instance.
//! 6. Merge the per-CPU spools by `(timestamp, cpu)` into the mmlab trace,
//!    written to a temporary file created in step 1 (so that an output that
//!    cannot be written fails before the command runs) and renamed over the
//!    output when complete ([`TraceFile`]): a failed or killed recording
//!    leaves an existing file at the output untouched.
//!
//! # Signals, kills and the exit status
//!
//! Every change to the system (the instances, a tracefs mount, the workload's
//! process group) is journalled before it is made (`host::journal`), so that
//! it is undone on every way out: by the guards here on return and on
//! panic, by mmlab's signal watcher on SIGINT, SIGTERM, SIGHUP and SIGQUIT,
//! and after a SIGKILL by the next mmlab process.
//!
//! The workload runs in a process group of its own, with `PR_SET_PDEATHSIG`
//! so that it dies if the recorder is killed. While it runs, the first
//! termination signal the recorder gets is passed on to the group (the
//! workload ends as it would have without mmlab, and the recording ends as
//! it does when the child exits, with `interrupted` set in the trailer); a
//! second one kills the group with SIGKILL (a workload that ignores SIGINT);
//! a third ends the recorder (`host::signals`). Being in its own group, the
//! workload cannot read from the terminal (a read stops it, as it stops a
//! background job): give it its input from a file.
//!
//! [`RecordSummary::shell_status`] is the workload's exit status as a shell
//! reports it (its exit code, or 128 + the signal that killed it), which the
//! `mmlab record` command exits with.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod exec_maps;

use crate::decode::{Decoded, Decoder, RECORDED_EVENTS, VMSTAT_WORK_EVENT, VMSTAT_WORK_FILTER};
use crate::event::{Header, TraceSource, Trailer, NR_EVENT_KINDS};
use crate::exec_layout::{exec_layout_event, ExecWindows};
use crate::format::{TraceError, TraceFile, TraceWriter};
use crate::sysinfo;
use crate::tracefs::{
    parse_format, parse_page, EventFormat, FormatParseError, PageHeaderLayout, RbRecord,
};
use exec_maps::ExecMapsRecorder;
use host::journal::{self, Change, Entry, HeldFile, JournalError};

pub use host::live::{find_tracefs, TRACEFS_PATHS};

/// How to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Ring-buffer size per CPU. 8 MiB holds about 250k records, a quarter
    /// of a second of a page-fault storm, between two polls.
    pub buffer_size_kb: u32,
    /// How long the recorder sleeps when no CPU had a page to read.
    pub poll_interval: Duration,
    /// Mount tracefs at `/sys/kernel/tracing` when it is not mounted (and
    /// unmount it afterwards). Off by default: a library should not mount
    /// file systems unasked.
    pub mount_tracefs: bool,
    /// Record the `kmem:` page allocator events of every process, not only
    /// the command's, through a second instance without a pid filter. The
    /// per-CPU lists are shared by every process on a CPU: replaying only
    /// the command's allocations and frees cannot reproduce how often the
    /// kernel's lists ran empty or overflowed on a busy machine. Off by
    /// default: the trace then grows with the whole machine's allocator
    /// traffic.
    pub kmem_system_wide: bool,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            buffer_size_kb: 8192,
            poll_interval: Duration::from_millis(10),
            mount_tracefs: false,
            kmem_system_wide: false,
        }
    }
}

/// What a recording produced.
#[derive(Clone, Debug, Default)]
pub struct RecordSummary {
    pub nr_events: u64,
    /// Per event kind, by tracepoint name.
    pub nr_events_by_kind: BTreeMap<&'static str, u64>,
    pub nr_lost_events: u64,
    pub nr_unpaired_syscalls: u64,
    /// Records of tracepoints mmlab does not use, or damaged.
    pub ignored_events: BTreeMap<String, u64>,
    /// Ring-buffer bytes read from the kernel.
    pub nr_raw_bytes: u64,
    /// Size of the mmlab trace written.
    pub nr_trace_bytes: u64,
    /// `exit N` or `signal N`.
    pub exit_status: String,
    /// The child's exit code, when it exited rather than being killed.
    pub exit_code: Option<i32>,
    /// The signal that killed the child, when it was killed.
    pub exit_signal: Option<i32>,
    pub interrupted: bool,
    /// Wall time from exec to the child's exit.
    pub command_wall: Duration,
    /// Wall time spent after the child exited: draining and writing.
    pub postprocess_wall: Duration,
}

impl RecordSummary {
    /// The workload's exit status as a shell reports it: its exit code, or
    /// 128 + the number of the signal that killed it.
    pub fn shell_status(&self) -> i32 {
        match (self.exit_code, self.exit_signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 1,
        }
    }
}

/// Why a recording failed. Every variant leaves no instance and no tracing
/// enabled behind.
#[derive(Debug)]
pub enum RecordError {
    /// Tracing needs root (or CAP_SYS_ADMIN plus tracefs permissions).
    NotRoot { euid: u32 },
    /// No tracefs at any of `tried`.
    TracefsMissing { tried: Vec<PathBuf> },
    /// `mount -t tracefs` failed.
    MountFailed { path: PathBuf, source: io::Error },
    /// A tracepoint mmlab needs does not exist on this kernel.
    EventUnavailable { event: String, path: PathBuf },
    /// The command is not an executable file, nor in `$PATH`.
    CommandNotFound { cmd: String, path_var: String },
    /// The command could not be executed (`errno` from execve).
    ExecFailed { cmd: String, source: io::Error },
    /// fork or pipe failed.
    Spawn { source: io::Error },
    /// A tracefs file could not be read or written.
    Tracefs {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    /// A tracepoint `format` file did not parse.
    Format {
        path: PathBuf,
        source: FormatParseError,
    },
    /// The output (or a spool file in its directory) could not be written.
    Output { path: PathBuf, source: TraceError },
    /// A change to the system could not be journalled, so it was not made.
    Journal(JournalError),
}

impl From<JournalError> for RecordError {
    fn from(e: JournalError) -> Self {
        RecordError::Journal(e)
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::NotRoot { euid } => {
                write!(f, "recording needs root to use tracefs; running as uid {euid}")
            }
            RecordError::TracefsMissing { tried } => write!(
                f,
                "tracefs is not mounted (looked at {}); mount it with `mount -t tracefs nodev /sys/kernel/tracing`",
                tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            RecordError::MountFailed { path, source } => {
                write!(f, "mounting tracefs at {} failed: {source}", path.display())
            }
            RecordError::EventUnavailable { event, path } => write!(
                f,
                "tracepoint {event} is not available on this kernel ({} is missing)",
                path.display()
            ),
            RecordError::CommandNotFound { cmd, path_var } => {
                write!(f, "command not found: {cmd:?} (searched PATH={path_var})")
            }
            RecordError::ExecFailed { cmd, source } => write!(f, "could not execute {cmd:?}: {source}"),
            RecordError::Spawn { source } => write!(f, "could not start the command: {source}"),
            RecordError::Tracefs { path, op, source } => {
                write!(f, "tracefs: {op} {} failed: {source}", path.display())
            }
            RecordError::Format { path, source } => write!(f, "{}: {source}", path.display()),
            RecordError::Output { path, source } => write!(f, "writing {}: {source}", path.display()),
            RecordError::Journal(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// One recording at a time per process: signal forwarding is process-wide.
static RECORD_LOCK: Mutex<()> = Mutex::new(());

fn tfs_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> RecordError + 'a {
    move |source| RecordError::Tracefs {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Every access to a file of an instance holds the journal's lock
/// (`host::journal::locked`): the kernel refuses to remove an instance while
/// one of its files is open, so the signal watcher, which removes it under
/// that lock, must never meet one open.
fn write_file(path: &Path, value: &str) -> Result<(), RecordError> {
    journal::locked(|| {
        // tracefs control files take one write; O_TRUNC clears lists such
        // as set_event_pid.
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(tfs_err(path, "open"))?;
        f.write_all(value.as_bytes())
            .map_err(tfs_err(path, "write"))
    })
}

fn read_text(path: &Path) -> Result<String, RecordError> {
    journal::locked(|| fs::read_to_string(path)).map_err(tfs_err(path, "read"))
}

/// Checks everything [`record`] needs without changing anything: root,
/// tracefs and every tracepoint. `Ok` holds the tracefs path.
pub fn check_environment() -> Result<PathBuf, RecordError> {
    // SAFETY: geteuid() has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(RecordError::NotRoot { euid });
    }
    let root = find_tracefs().ok_or_else(|| RecordError::TracefsMissing {
        tried: TRACEFS_PATHS.iter().map(PathBuf::from).collect(),
    })?;
    for ev in RECORDED_EVENTS {
        let path = event_dir(&root, ev).join("format");
        if !path.exists() {
            return Err(RecordError::EventUnavailable {
                event: ev.to_string(),
                path,
            });
        }
    }
    Ok(root)
}

fn event_dir(root: &Path, full_name: &str) -> PathBuf {
    let (sys, name) = full_name.split_once(':').unwrap_or(("", full_name));
    root.join("events").join(sys).join(name)
}

/// Finds `cmd` as `execvp` would: a path when it has a slash, else the first
/// executable file of that name in `$PATH`.
pub fn resolve_command(cmd: &str) -> Result<PathBuf, RecordError> {
    let path_var = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_string());
    let is_exec = |p: &Path| {
        fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return if is_exec(&p) {
            Ok(p)
        } else {
            Err(RecordError::CommandNotFound {
                cmd: cmd.to_string(),
                path_var,
            })
        };
    }
    if !cmd.is_empty() {
        for dir in path_var.split(':') {
            let p = Path::new(if dir.is_empty() { "." } else { dir }).join(cmd);
            if is_exec(&p) {
                return Ok(p);
            }
        }
    }
    Err(RecordError::CommandNotFound {
        cmd: cmd.to_string(),
        path_var,
    })
}

/// The private instance, and tracefs when the recorder mounted it, each
/// journalled before it was made; dropping it undoes both (tracing off,
/// events and pid filter cleared, directory removed, then unmounted).
#[derive(Default)]
struct Instance {
    dir: Option<Entry>,
    mount: Option<Entry>,
}

impl Instance {
    /// Creates the instance directory `dir`, journalled first.
    fn create(&mut self, dir: &Path) -> Result<(), RecordError> {
        let change = Change::TracefsInstance {
            dir: dir.to_path_buf(),
        };
        let (entry, ()) = journal::change(change, || {
            fs::create_dir(dir).map_err(tfs_err(dir, "mkdir"))
        })?;
        self.dir = Some(entry);
        Ok(())
    }

    /// Mounts tracefs at `at`, journalled first.
    fn mount(&mut self, at: &Path) -> Result<(), RecordError> {
        let change = Change::Mount {
            path: at.to_path_buf(),
            fstype: "tracefs".to_string(),
        };
        let (entry, ()) = journal::change(change, || mount_tracefs(at))?;
        self.mount = Some(entry);
        Ok(())
    }

    fn cleanup(&mut self) {
        // Best effort on every step: a failing step must not keep the
        // following ones from running. The unmount runs even when the
        // instance was never created.
        if let Some(e) = self.dir.take() {
            let _ = journal::undo(e);
        }
        if let Some(e) = self.mount.take() {
            let _ = journal::undo(e);
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.cleanup();
    }
}

fn mount_tracefs(at: &Path) -> Result<(), RecordError> {
    let err = |source| RecordError::MountFailed {
        path: at.to_path_buf(),
        source,
    };
    let target = CString::new(at.as_os_str().as_bytes()).map_err(|e| err(io::Error::other(e)))?;
    let fstype = c"tracefs";
    // SAFETY: all pointers are valid NUL-terminated strings; data is null.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    Ok(())
}

/// The forked child, waiting on `go` until the parent has set up tracing.
struct Child {
    pid: i32,
    go_w: i32,
    err_r: i32,
    reaped: bool,
    /// The journal entry of the child's process group.
    group: Option<Entry>,
    /// `ru_minflt`/`ru_majflt` of the child and the descendants it waited
    /// for, from `wait4()` (the kernel fills it with `RUSAGE_BOTH`).
    faults: Option<(u64, u64)>,
}

impl Child {
    /// Forks the child and journals its process group under one hold of
    /// the journal's lock ([`journal::made`]): until it execs, the child
    /// holds copies of the instance's pipes, so a signal watcher undoing in
    /// between would find the instance busy and no group to kill.
    fn spawn(path: &CString, argv: &[CString]) -> Result<Child, RecordError> {
        let (child, entry) = journal::made(|| match Self::fork(path, argv) {
            Ok(c) => {
                let change = Change::ProcessGroup {
                    pgid: c.pid,
                    start_time: journal::process_start_time(c.pid).unwrap_or(0),
                };
                (Ok(c), Some(change))
            }
            Err(e) => (Err(e), None),
        });
        let mut child = child?;
        // A group that cannot be journalled is not left running: dropping
        // the child kills and reaps it.
        child.group = Some(entry.expect("a forked child's group")?);
        Ok(child)
    }

    /// Forks the child, which waits on `go` before it execs.
    fn fork(path: &CString, argv: &[CString]) -> Result<Child, RecordError> {
        let spawn_err = || RecordError::Spawn {
            source: io::Error::last_os_error(),
        };
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut go = [0i32; 2];
        let mut err = [0i32; 2];
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: pipe2 writes two fds into each array.
        unsafe {
            if libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(spawn_err());
            }
            if libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                libc::close(go[0]);
                libc::close(go[1]);
                return Err(spawn_err());
            }
        }
        // SAFETY: after fork the child only calls async-signal-safe functions
        // (close, read, execv, write, _exit) on memory prepared before the
        // fork, as is required in a multi-threaded process.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = spawn_err();
            // SAFETY: closing fds this function opened.
            unsafe {
                for fd in [go[0], go[1], err[0], err[1]] {
                    libc::close(fd);
                }
            }
            return Err(e);
        }
        if pid == 0 {
            // SAFETY: see the fork comment above.
            unsafe {
                libc::close(go[1]);
                libc::close(err[0]);
                // A group of its own, which signals are forwarded to; and
                // death with the recorder, even by SIGKILL.
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(126);
                }
                let mut b = 0u8;
                if libc::read(go[0], &mut b as *mut u8 as *mut libc::c_void, 1) != 1 {
                    // The parent gave up before tracing was set up.
                    libc::_exit(126);
                }
                libc::execv(path.as_ptr(), ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(err[1], &errno as *const i32 as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        // SAFETY: the parent's copies of the child's ends; setpgid on our
        // own child (also done by the child: whichever runs first wins).
        unsafe {
            libc::close(go[0]);
            libc::close(err[1]);
            libc::setpgid(pid, pid);
        }
        pause_after_fork_for_tests();
        Ok(Child {
            pid,
            go_w: go[1],
            err_r: err[0],
            reaped: false,
            group: None,
            faults: None,
        })
    }

    /// Lets the child exec; returns the exec error, if any.
    fn release(&mut self) -> Result<(), io::Error> {
        let b = 1u8;
        // SAFETY: go_w is our open pipe end; err_r is read into a local.
        unsafe {
            libc::write(self.go_w, &b as *const u8 as *const libc::c_void, 1);
            libc::close(self.go_w);
            self.go_w = -1;
            let mut errno = 0i32;
            let n = libc::read(self.err_r, &mut errno as *mut i32 as *mut libc::c_void, 4);
            libc::close(self.err_r);
            self.err_r = -1;
            if n == 4 {
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
        Ok(())
    }

    /// `Some(status)` once the child has exited.
    fn try_wait(&mut self, block: bool) -> Option<i32> {
        if self.reaped {
            return None;
        }
        let mut status = 0;
        loop {
            // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: wait4 on our own child with valid status and rusage
            // pointers.
            let rc = unsafe {
                libc::wait4(
                    self.pid,
                    &mut status,
                    if block { 0 } else { libc::WNOHANG },
                    &mut ru,
                )
            };
            if rc == self.pid {
                self.reaped = true;
                self.faults = Some((ru.ru_minflt as u64, ru.ru_majflt as u64));
                return Some(status);
            }
            if rc < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: closing our fds, and killing and reaping our own child if
        // the recording is abandoned half-way.
        unsafe {
            for fd in [self.go_w, self.err_r] {
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            if !self.reaped {
                libc::kill(-self.pid, libc::SIGKILL);
            }
        }
        self.try_wait(true);
        if let Some(e) = self.group.take() {
            journal::forget(e);
        }
    }
}

/// The environment variable that makes `record` pause this many
/// milliseconds right after forking the workload (tests only: the kill
/// tests signal it there, in the window between the fork and the journal
/// entry of the workload's process group).
pub const FORK_PAUSE_ENV: &str = "MMLAB_RECORD_TEST_FORK_PAUSE_MS";

fn pause_after_fork_for_tests() {
    let Some(ms) = std::env::var(FORK_PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    eprintln!("mmlab: {FORK_PAUSE_ENV}: workload forked, pausing {ms} ms");
    std::thread::sleep(Duration::from_millis(ms));
}

/// `("exit N" | "signal N", exit code, signal)`.
fn describe_status(status: i32) -> (String, Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        (format!("exit {code}"), Some(code), None)
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        (format!("signal {sig}"), None, Some(sig))
    } else {
        (format!("status {status:#x}"), None, None)
    }
}

/// One CPU's `trace_pipe_raw` and the spool its pages go to.
struct CpuReader {
    cpu: u32,
    pipe: HeldFile,
    /// Names the (unnamed) spool in errors.
    spool_path: PathBuf,
    spool: BufWriter<File>,
}

/// Copies every page available now; returns the bytes copied.
fn drain(r: &mut CpuReader, page: &mut [u8]) -> Result<u64, RecordError> {
    let mut total = 0u64;
    loop {
        match r.pipe.read(page) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                let out = (n as u32).to_le_bytes();
                r.spool
                    .write_all(&out)
                    .and_then(|()| r.spool.write_all(&page[..n]))
                    .map_err(|source| RecordError::Output {
                        path: r.spool_path.clone(),
                        source: TraceError::Io { offset: 0, source },
                    })?;
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(tfs_err(Path::new("trace_pipe_raw"), "read")(e)),
        }
    }
}

/// Records `cmd args...` into the mmlab trace `output`.
///
/// Returns when the command has exited (or was interrupted by SIGINT, which
/// is forwarded to it); the trace is complete in both cases.
pub fn record(
    output: &Path,
    cmd: &str,
    args: &[String],
    opts: &RecordOptions,
) -> Result<RecordSummary, RecordError> {
    let _one_at_a_time = RECORD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    host::signals::install().map_err(|source| RecordError::Spawn { source })?;
    // SAFETY: geteuid() has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(RecordError::NotRoot { euid });
    }
    // The output first: one that cannot be written fails before anything
    // runs, and an existing file stays as it is until the trace is complete.
    let trace_file = TraceFile::create(output).map_err(|e| RecordError::Output {
        path: output.to_path_buf(),
        source: TraceError::Io {
            offset: 0,
            source: e.into(),
        },
    })?;
    let spool_dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (c_exe, c_argv) = command_line(cmd, args)?;
    let mut tracing = Tracing::set_up(opts, spool_dir)?;
    let machine = sysinfo::read_machine();
    let knobs = sysinfo::read_knobs();
    let kernel_release = sysinfo::read_kernel_release();
    let counters_before = sysinfo::read_counters();
    let mut run = tracing.run(&c_exe, &c_argv, cmd, opts)?;
    let post_started = Instant::now();
    let stopped = tracing.stop()?;
    let counters_after = sysinfo::read_counters();
    let header = Header {
        mmlab_version: env!("CARGO_PKG_VERSION").to_string(),
        source: TraceSource::Record {
            cmd: cmd.to_string(),
            args: args.to_vec(),
            mechanism: if opts.kmem_system_wide {
                "tracefs instances (kmem events of every process), trace_pipe_raw".to_string()
            } else {
                "tracefs instance, trace_pipe_raw".to_string()
            },
        },
        kernel_release,
        machine,
        knobs,
        trace_clock: CLOCK.to_string(),
        counters_before: Some(counters_before),
        kmem_system_wide: opts.kmem_system_wide,
        // The recorder reads its snapshot before it enables its events.
        snapshot_at_exec: false,
    };
    let mut summary = write_trace(
        output,
        trace_file,
        &header,
        &mut tracing.decoder,
        tracing.layout,
        stopped,
        &mut run,
        counters_after,
    )?;
    summary.postprocess_wall = post_started.elapsed();
    Ok(summary)
}

/// The trace clock: one clock for all CPUs, so that the per-CPU streams
/// merge in time order; perf's `CLOCK_MONOTONIC` is the same clock.
const CLOCK: &str = "mono";

/// The command's path and argument vector for `execv`.
fn command_line(cmd: &str, args: &[String]) -> Result<(CString, Vec<CString>), RecordError> {
    let exe = resolve_command(cmd)?;
    let c_exe =
        CString::new(exe.as_os_str().as_bytes()).map_err(|_| RecordError::CommandNotFound {
            cmd: cmd.to_string(),
            path_var: String::new(),
        })?;
    let c_argv = std::iter::once(cmd)
        .chain(args.iter().map(String::as_str))
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RecordError::ExecFailed {
            cmd: cmd.to_string(),
            source: io::Error::other(e),
        })?;
    Ok((c_exe, c_argv))
}

/// The tracefs side of a recording: the instances (removed on drop), the
/// event formats, and one reader per CPU and instance.
struct Tracing {
    /// Declared (and so dropped) first: the kernel refuses to remove an
    /// instance while one of its files is open.
    readers: Vec<CpuReader>,
    /// The system-wide instance (no pid filter): the vmstat work's runs,
    /// and the kmem events of every process when asked for; declared (and
    /// so dropped) before the first one, whose drop may unmount tracefs.
    wide_instance: Instance,
    instance: Instance,
    root: PathBuf,
    dir: PathBuf,
    wide_dir: PathBuf,
    /// Why the vmstat work is not recorded, if it is not.
    vmstat_work_error: Option<String>,
    tgid_on: bool,
    layout: PageHeaderLayout,
    decoder: Decoder,
    page_size: usize,
    cpus: Vec<u32>,
}

/// A command run under tracing.
struct Run {
    child: Child,
    status: i32,
    command_wall: Duration,
    nr_raw_bytes: u64,
    interrupted: bool,
    exec_windows: ExecWindows,
    exec_maps_error: Option<io::Error>,
}

/// What is left once tracing is off: the spools to merge and what the
/// kernel said about them.
struct Stopped {
    spools: Vec<(u32, File)>,
    nr_lost_stats: u64,
    tgids: BTreeMap<i32, i32>,
    vmstat_work_error: Option<String>,
}

/// Ring-buffer size per CPU of the system-wide instance when it holds only
/// the vmstat work (about one record a second per CPU).
const VMSTAT_ONLY_BUFFER_KB: u32 = 64;

/// Creates and configures a tracefs instance `name` under `root`, tracing
/// off, `buffer_kb` KiB of ring buffer per CPU, recording into `inst` so
/// that its drop removes it.
fn create_instance(
    root: &Path,
    name: &str,
    buffer_kb: u32,
    inst: &mut Instance,
) -> Result<PathBuf, RecordError> {
    let d = root.join("instances").join(name);
    inst.create(&d)?;
    write_file(&d.join("tracing_on"), "0")?;
    write_file(&d.join("buffer_size_kb"), &buffer_kb.to_string())?;
    write_file(&d.join("trace_clock"), CLOCK)?;
    Ok(d)
}

impl Tracing {
    fn set_up(opts: &RecordOptions, spool_dir: &Path) -> Result<Tracing, RecordError> {
        let mut instance = Instance::default();
        let mut wide_instance = Instance::default();
        if find_tracefs().is_none() && opts.mount_tracefs {
            instance.mount(Path::new(TRACEFS_PATHS[0]))?;
        }
        let root = check_environment()?;
        let pid = std::process::id();
        let dir = create_instance(
            &root,
            &format!("mmlab-{pid}"),
            opts.buffer_size_kb,
            &mut instance,
        )?;
        write_file(&dir.join("options/event-fork"), "1")?;
        let record_tgid = dir.join("options/record-tgid");
        let tgid_on = record_tgid.exists() && write_file(&record_tgid, "1").is_ok();
        let layout = PageHeaderLayout::parse(
            &fs::read_to_string(root.join("events/header_page")).unwrap_or_default(),
        );
        // The kworkers that run the vmstat work are not in the command's
        // process tree: their event goes to an instance without the pid
        // filter, with the kmem events when every process's are asked for.
        let (tag, buffer_kb) = if opts.kmem_system_wide {
            ("kmem", opts.buffer_size_kb)
        } else {
            ("vmstat", VMSTAT_ONLY_BUFFER_KB)
        };
        let wide_dir = create_instance(
            &root,
            &format!("mmlab-{pid}-{tag}"),
            buffer_kb,
            &mut wide_instance,
        )?;
        let rt = wide_dir.join("options/record-tgid");
        if rt.exists() {
            let _ = write_file(&rt, "1");
        }
        let (formats, vmstat_work_error) = enable_events(&dir, &wide_dir, opts.kmem_system_wide)?;
        let decoder = Decoder::new(&formats);
        let page_size = journal::locked(|| fs::read_to_string(dir.join("buffer_subbuf_size_kb")))
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(4096);
        // CPUs with a buffer, sorted by number.
        let mut cpus: Vec<u32> = journal::locked(|| {
            fs::read_dir(dir.join("per_cpu")).map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
                    .collect()
            })
        })
        .map_err(tfs_err(&dir, "list per_cpu of"))?;
        cpus.sort_unstable();
        let mut t = Tracing {
            wide_instance,
            instance,
            root,
            dir,
            wide_dir,
            vmstat_work_error,
            tgid_on,
            layout,
            decoder,
            page_size,
            cpus,
            readers: Vec::new(),
        };
        t.open_readers(spool_dir)?;
        Ok(t)
    }

    /// The instance directories with their spool tags.
    fn instance_dirs(&self) -> Vec<(PathBuf, &'static str)> {
        vec![(self.dir.clone(), ""), (self.wide_dir.clone(), ".wide")]
    }

    /// One reader of `trace_pipe_raw` per CPU and instance, each with an
    /// unnamed spool file in `spool_dir`.
    fn open_readers(&mut self, spool_dir: &Path) -> Result<(), RecordError> {
        for (idir, tag) in self.instance_dirs() {
            for &cpu in &self.cpus {
                let p = idir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
                // Held: on a signal the watcher closes it before it removes
                // the instance (the kernel refuses while a file of it is open).
                let pipe = HeldFile::open(
                    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK),
                    &p,
                )
                .map_err(tfs_err(&p, "open"))?;
                let spool_path = spool_dir.join(format!("(unnamed spool{tag} of cpu{cpu})"));
                let f = host::output::unnamed_file_in(spool_dir).map_err(|source| {
                    RecordError::Output {
                        path: spool_path.clone(),
                        source: TraceError::Io { offset: 0, source },
                    }
                })?;
                self.readers.push(CpuReader {
                    cpu,
                    pipe,
                    spool_path,
                    spool: BufWriter::with_capacity(1 << 20, f),
                });
            }
        }
        Ok(())
    }

    fn set_tracing(&self, on: bool) -> Result<(), RecordError> {
        let v = if on { "1" } else { "0" };
        write_file(&self.wide_dir.join("tracing_on"), v)?;
        write_file(&self.dir.join("tracing_on"), v)
    }

    /// Copies every page available now to the spools; the bytes copied.
    fn drain_all(&mut self, page: &mut [u8]) -> Result<u64, RecordError> {
        let mut got = 0;
        for r in self.readers.iter_mut() {
            got += drain(r, page)?;
        }
        Ok(got)
    }

    /// Forks the command, traces its process tree until it exits, and turns
    /// tracing off.
    fn run(
        &mut self,
        c_exe: &CString,
        c_argv: &[CString],
        cmd: &str,
        opts: &RecordOptions,
    ) -> Result<Run, RecordError> {
        let mut child = Child::spawn(c_exe, c_argv)?;
        let forward = host::signals::forward_to_group(child.pid);
        // What each exec maps (see `exec_maps`); without perf the trace has
        // no exec layouts and says so.
        let mut exec_windows = ExecWindows::default();
        let mut exec_maps = ExecMapsRecorder::open(child.pid, &self.cpus);
        write_file(&self.dir.join("set_event_pid"), &child.pid.to_string())?;
        self.set_tracing(true)?;
        let started = Instant::now();
        if let Err(source) = child.release() {
            return Err(RecordError::ExecFailed {
                cmd: cmd.to_string(),
                source,
            });
        }
        let mut page = vec![0u8; self.page_size];
        let mut nr_raw_bytes = 0u64;
        let status = loop {
            let got = self.drain_all(&mut page)?;
            nr_raw_bytes += got;
            if let Ok(m) = exec_maps.as_mut() {
                m.drain(&mut exec_windows);
            }
            if let Some(status) = child.try_wait(false) {
                break status;
            }
            if got == 0 {
                std::thread::sleep(opts.poll_interval);
            }
        };
        let command_wall = started.elapsed();
        self.set_tracing(false)?;
        nr_raw_bytes += self.drain_all(&mut page)?;
        let exec_maps_error = match exec_maps {
            Ok(mut m) => {
                m.drain(&mut exec_windows);
                None
            }
            Err(e) => Some(e),
        };
        let interrupted = forward.interrupted_by().is_some();
        drop(forward);
        if interrupted {
            // Ended on request: what is left of its group ends too.
            // SAFETY: kill with plain integers; the group is our child's.
            unsafe { libc::kill(-child.pid, libc::SIGKILL) };
        }
        Ok(Run {
            child,
            status,
            command_wall,
            nr_raw_bytes,
            interrupted,
            exec_windows,
            exec_maps_error,
        })
    }

    /// Reads the lost-event counters and the thread groups, closes the
    /// pipes, rewinds the spools and removes the instances before the
    /// (possibly long) merge, so that tracing is off as early as possible.
    fn stop(&mut self) -> Result<Stopped, RecordError> {
        let mut nr_lost_stats = 0u64;
        for (idir, _) in self.instance_dirs() {
            for &cpu in &self.cpus {
                let stats = idir.join(format!("per_cpu/cpu{cpu}/stats"));
                let text = read_text(&stats).unwrap_or_default();
                for line in text.lines() {
                    if let Some((k, v)) = line.split_once(':') {
                        if k.trim() == "overrun" || k.trim() == "dropped events" {
                            nr_lost_stats += v.trim().parse::<u64>().unwrap_or(0);
                        }
                    }
                }
            }
        }
        let tgids = if self.tgid_on {
            read_saved_tgids(&self.root.join("saved_tgids"))
        } else {
            BTreeMap::new()
        };
        let mut spools = Vec::with_capacity(self.readers.len());
        for r in self.readers.drain(..) {
            let CpuReader {
                cpu,
                pipe,
                spool_path,
                spool,
            } = r;
            drop(pipe);
            let spool_err = |source| RecordError::Output {
                path: spool_path.clone(),
                source: TraceError::Io { offset: 0, source },
            };
            let mut f = spool.into_inner().map_err(|e| spool_err(e.into_error()))?;
            f.seek(io::SeekFrom::Start(0)).map_err(spool_err)?;
            spools.push((cpu, f));
        }
        self.wide_instance.cleanup();
        self.instance.cleanup();
        Ok(Stopped {
            spools,
            nr_lost_stats,
            tgids,
            vmstat_work_error: self.vmstat_work_error.take(),
        })
    }
}

/// Enables every event of [`RECORDED_EVENTS`] in `dir`, except the vmstat
/// work's (and the `kmem:` ones when `kmem_system_wide`), which go to the
/// system-wide `wide_dir`. Returns their formats, and why the vmstat work
/// is not recorded if its filter was refused (it is then left off: a
/// recording of every work item of every CPU would be taken for it).
fn enable_events(
    dir: &Path,
    wide_dir: &Path,
    kmem_system_wide: bool,
) -> Result<(Vec<EventFormat>, Option<String>), RecordError> {
    let mut formats: Vec<EventFormat> = Vec::new();
    let mut vmstat_work_error = None;
    for ev in RECORDED_EVENTS {
        let edir = event_dir(dir, ev);
        let fpath = edir.join("format");
        let (sys, _) = ev.split_once(':').unwrap_or(("", ev));
        let text = read_text(&fpath)?;
        formats.push(
            parse_format(sys, &text).map_err(|source| RecordError::Format {
                path: fpath,
                source,
            })?,
        );
        if *ev == VMSTAT_WORK_EVENT {
            vmstat_work_error = enable_vmstat_work(&event_dir(wide_dir, ev)).err();
        } else if kmem_system_wide && sys == "kmem" {
            write_file(&event_dir(wide_dir, ev).join("enable"), "1")?;
        } else {
            write_file(&edir.join("enable"), "1")?;
        }
    }
    Ok((formats, vmstat_work_error))
}

/// Enables `workqueue_execute_start` in `edir` for `vmstat_update()` only:
/// by name ([`VMSTAT_WORK_FILTER`], 6.3+), else by the function's address
/// in `/proc/kallsyms` (older kernels). The error says why neither worked.
fn enable_vmstat_work(edir: &Path) -> Result<(), String> {
    let filter = edir.join("filter");
    let by_name = write_file(&filter, VMSTAT_WORK_FILTER);
    let by_addr = || -> Result<(), String> {
        let syms =
            fs::read_to_string("/proc/kallsyms").map_err(|e| format!("/proc/kallsyms: {e}"))?;
        let addr = syms
            .lines()
            .find_map(|l| {
                let mut it = l.split_whitespace();
                let (a, _, name) = (it.next()?, it.next()?, it.next()?);
                (name == "vmstat_update").then(|| a.to_string())
            })
            .filter(|a| a.bytes().any(|b| b != b'0'))
            .ok_or("vmstat_update is not in /proc/kallsyms (or its address is hidden)")?;
        write_file(&filter, &format!("function == 0x{addr}")).map_err(|e| e.to_string())
    };
    if let Err(e) = by_name {
        by_addr()
            .map_err(|a| format!("the filter {VMSTAT_WORK_FILTER:?} was refused ({e}); {a}"))?;
    }
    write_file(&edir.join("enable"), "1").map_err(|e| e.to_string())
}

/// Merges the spools into the trace at `output` and writes its trailer.
#[allow(clippy::too_many_arguments)]
fn write_trace(
    output: &Path,
    trace_file: TraceFile,
    header: &Header,
    decoder: &mut Decoder,
    layout: PageHeaderLayout,
    stopped: Stopped,
    run: &mut Run,
    counters_after: crate::event::Counters,
) -> Result<RecordSummary, RecordError> {
    let out_err = |source| RecordError::Output {
        path: output.to_path_buf(),
        source,
    };
    let mut writer = TraceWriter::new(trace_file, header).map_err(out_err)?;
    let merged = merge_spools(
        stopped.spools,
        layout,
        decoder,
        &stopped.tgids,
        &mut run.exec_windows,
        &mut writer,
    )
    .map_err(out_err)?;
    decoder.finish();
    let nr_lost_events =
        stopped.nr_lost_stats.max(merged.nr_lost_in_pages) + run.exec_windows.nr_lost;
    let mut missing_event_kinds = Vec::new();
    if let Some(e) = &stopped.vmstat_work_error {
        missing_event_kinds.push(format!("{VMSTAT_WORK_EVENT} (vmstat_update only: {e})"));
    }
    if let Some(e) = &run.exec_maps_error {
        missing_event_kinds.push(format!(
            "mmlab:exec_layout (perf_event_open for the exec mappings failed: {e})"
        ));
    }
    let mut ignored = merged.ignored.clone();
    if run.exec_windows.nr_malformed > 0 {
        ignored.insert(
            "malformed perf mapping records".to_string(),
            run.exec_windows.nr_malformed,
        );
    }
    let (exit_status, exit_code, exit_signal) = describe_status(run.status);
    let faults = run.child.faults;
    let trailer = Trailer {
        nr_events: 0,
        nr_lost_events,
        nr_unpaired_syscalls: decoder.nr_unpaired_syscalls,
        ignored_events: ignored.clone(),
        missing_event_kinds,
        counters_after: Some(counters_after),
        exit_status: Some(exit_status.clone()),
        interrupted: run.interrupted,
        workload_minflt: faults.map(|f| f.0),
        workload_majflt: faults.map(|f| f.1),
    };
    let nr_events = writer.nr_events();
    let (_, nr_trace_bytes) = writer.finish(&trailer).map_err(out_err)?;
    let mut nr_events_by_kind = BTreeMap::new();
    for (code, n) in merged.by_kind.iter().enumerate() {
        if *n > 0 {
            nr_events_by_kind.insert(crate::event::EventKind::name_of_code(code as u8), *n);
        }
    }
    Ok(RecordSummary {
        nr_events,
        nr_events_by_kind,
        nr_lost_events,
        nr_unpaired_syscalls: decoder.nr_unpaired_syscalls,
        ignored_events: ignored,
        nr_raw_bytes: run.nr_raw_bytes,
        nr_trace_bytes,
        exit_status,
        exit_code,
        exit_signal,
        interrupted: run.interrupted,
        command_wall: run.command_wall,
        postprocess_wall: Duration::ZERO,
    })
}

/// Parses `saved_tgids` (`tid tgid` lines).
fn read_saved_tgids(path: &Path) -> BTreeMap<i32, i32> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// One spool being read back: the current page and its records.
struct SpoolStream {
    cpu: u32,
    input: BufReader<File>,
    page: Vec<u8>,
    records: Vec<RbRecord>,
    next: usize,
}

#[derive(Default)]
struct MergeStats {
    by_kind: [u64; NR_EVENT_KINDS],
    ignored: BTreeMap<String, u64>,
    nr_lost_in_pages: u64,
}

impl SpoolStream {
    /// Loads pages until one has records; `false` at the end of the spool.
    fn fill(
        &mut self,
        layout: PageHeaderLayout,
        stats: &mut MergeStats,
    ) -> Result<bool, io::Error> {
        while self.next >= self.records.len() {
            let mut len = [0u8; 4];
            match self.input.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
                Err(e) => return Err(e),
            }
            let n = u32::from_le_bytes(len) as usize;
            self.page.resize(n, 0);
            self.input.read_exact(&mut self.page)?;
            self.records.clear();
            self.next = 0;
            match parse_page(&self.page, layout, &mut self.records) {
                Ok(info) => {
                    if info.missed_events {
                        stats.nr_lost_in_pages += info.nr_missed.unwrap_or(1);
                    }
                }
                Err(_) => {
                    *stats
                        .ignored
                        .entry("damaged ring-buffer page".to_string())
                        .or_default() += 1
                }
            }
        }
        Ok(true)
    }
}

fn merge_spools<W: Write>(
    spools: Vec<(u32, File)>,
    layout: PageHeaderLayout,
    decoder: &mut Decoder,
    tgids: &BTreeMap<i32, i32>,
    exec_windows: &mut ExecWindows,
    writer: &mut TraceWriter<W>,
) -> Result<MergeStats, TraceError> {
    let io_err = |source| TraceError::Io { offset: 0, source };
    let mut stats = MergeStats::default();
    let mut streams = Vec::with_capacity(spools.len());
    for (cpu, f) in spools {
        streams.push(SpoolStream {
            cpu,
            input: BufReader::with_capacity(1 << 20, f),
            page: Vec::new(),
            records: Vec::new(),
            next: 0,
        });
    }
    let mut live: Vec<usize> = Vec::new();
    for (i, s) in streams.iter_mut().enumerate() {
        if s.fill(layout, &mut stats).map_err(io_err)? {
            live.push(i);
        }
    }
    while !live.is_empty() {
        // The earliest record; ties go to the lower CPU, so the order is
        // deterministic. A linear scan is fine for the CPU counts of a host.
        let mut best = 0;
        for k in 1..live.len() {
            let (a, b) = (&streams[live[k]], &streams[live[best]]);
            if (a.records[a.next].ts, a.cpu) < (b.records[b.next].ts, b.cpu) {
                best = k;
            }
        }
        let s = &mut streams[live[best]];
        let rec = s.records[s.next];
        s.next += 1;
        let data = &s.page[rec.start..rec.end];
        if data.len() >= 8 {
            let id = u16::from_le_bytes([data[0], data[1]]) as u32;
            let tid = i32::from_le_bytes([data[4], data[5], data[6], data[7]]);
            let pid = tgids.get(&tid).copied().filter(|&p| p > 0).unwrap_or(tid);
            match decoder.decode(rec.ts, s.cpu, pid, tid, id, data) {
                Decoded::Event(ev) => {
                    stats.by_kind[ev.kind.code() as usize] += 1;
                    writer.write(&ev)?;
                    if let Some(layout) = exec_layout_event(&ev, exec_windows) {
                        stats.by_kind[layout.kind.code() as usize] += 1;
                        writer.write(&layout)?;
                    }
                }
                Decoded::Ignored(name) => *stats.ignored.entry(name).or_default() += 1,
                Decoded::Malformed(name) => {
                    *stats
                        .ignored
                        .entry(format!("malformed {name}"))
                        .or_default() += 1
                }
                Decoded::Pending | Decoded::Unpaired => {}
            }
        } else {
            *stats
                .ignored
                .entry("record shorter than its common header".to_string())
                .or_default() += 1;
        }
        if !s.fill(layout, &mut stats).map_err(io_err)? {
            live.remove(best);
        }
    }
    Ok(stats)
}
