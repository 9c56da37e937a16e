//! A journal of every change mmlab makes to the host, so that each one is
//! undone on every way out: normally by its owner, by the signal watcher
//! ([`crate::signals`]) on SIGINT, SIGTERM, SIGHUP or SIGQUIT, and after a
//! SIGKILL or a crash by the next mmlab process that takes the live-kernel
//! lock ([`crate::lock::LiveLock`]) or starts its command line.
//!
//! # The protocol
//!
//! 1. Before a change is made, [`record`] writes it to this process's
//!    journal file with what undoes it (a knob's previous value, the tracefs
//!    instance to remove, ...), through a temporary file, `fsync` and rename.
//! 2. The change itself is made inside [`locked`] (or [`change`] does both):
//!    the signal watcher takes the same lock before it undoes anything, so a
//!    change is never made after the watcher restored its knob.
//! 3. The owner undoes it with [`undo`] (or says it is gone with [`forget`]:
//!    a temporary file that was renamed, a child that was reaped), which
//!    rewrites the journal; an empty journal is removed.
//! 4. A journal whose owner is gone (no process with its pid and start time)
//!    is stale: [`recover_stale`] undoes its changes in reverse order, says
//!    what it did, and removes it with any unfinished rewrite of it (the
//!    temporary file of a rewrite its owner died before renaming). It also
//!    removes tracefs instances named `mmlab-<pid>…` whose process is gone,
//!    which older versions and other tools built on them may leave without
//!    a journal.
//!
//! # Where
//!
//! `/run/mmlab/<pid>-<start time>.journal` (mode 0600 in a 0700 directory)
//! when running as root: `/run` is a tmpfs, so the journal lives exactly as
//! long as the state it describes — a power loss resets the knobs and
//! removes tracefs instances, and takes the journals with it. Without root,
//! nothing system-wide can change; the journal then only lists temporary
//! files, in `$XDG_RUNTIME_DIR/mmlab` when there is one (else in memory, so
//! that a signal still removes them). `MMLAB_RUN_DIR` overrides the
//! directory (tests).
//!
//! # Format
//!
//! Text, one record per line, fields separated by one space and
//! percent-encoded (bytes outside `!`..`~` and `%` itself):
//!
//! ```text
//! mmlab-journal 1
//! owner <pid> <start time in clock ticks since boot>
//! <id> file <path> <previous value>
//! <id> tracefs-instance <dir>
//! <id> mount <path> <fstype>
//! <id> process-group <pgid> <start time of its leader>
//! <id> temp-file <path>
//! ```

use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The first line of every journal.
const MAGIC_LINE: &str = "mmlab-journal 1";
/// The journal directory of root.
pub const RUN_DIR: &str = "/run/mmlab";
/// Overrides the journal directory.
pub const RUN_DIR_ENV: &str = "MMLAB_RUN_DIR";

/// One change to the host and what undoes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A sysfs or procfs file (a THP knob, a sysctl, the hugetlb pool size)
    /// that gets `old` written back.
    File {
        /// The knob.
        path: PathBuf,
        /// Its value before the change, as it reads.
        old: String,
    },
    /// A tracefs instance: tracing off, events and pid filter cleared, the
    /// directory removed.
    TracefsInstance {
        /// `…/tracing/instances/<name>`.
        dir: PathBuf,
    },
    /// A file system mounted by mmlab: unmounted if it is still mounted
    /// there with this type.
    Mount {
        /// The mount point.
        path: PathBuf,
        /// Its type, e.g. `tracefs`.
        fstype: String,
    },
    /// A process group mmlab started (a recorded workload): killed.
    ProcessGroup {
        /// The group, whose leader is the process mmlab forked.
        pgid: i32,
        /// The leader's start time (`/proc/<pid>/stat` field 22), so that a
        /// reused pid is never killed.
        start_time: u64,
    },
    /// A temporary file of an output being written: removed.
    TempFile {
        /// The file.
        path: PathBuf,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::File { path, old } => write!(f, "{} back to {old:?}", path.display()),
            Change::TracefsInstance { dir } => write!(f, "tracefs instance {}", dir.display()),
            Change::Mount { path, fstype } => write!(f, "{fstype} mount at {}", path.display()),
            Change::ProcessGroup { pgid, .. } => write!(f, "process group {pgid}"),
            Change::TempFile { path } => write!(f, "temporary file {}", path.display()),
        }
    }
}

/// A change recorded in this process's journal, to be undone or forgotten
/// by its owner.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an entry must be undone or forgotten, or the change stays journalled"]
pub struct Entry {
    id: u64,
}

/// Why a change could not be journalled (and so was not made).
#[derive(Debug)]
pub struct JournalError {
    /// The change.
    pub change: String,
    /// The journal file or directory.
    pub path: PathBuf,
    /// The underlying error.
    pub source: io::Error,
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot journal the change of {} in {} (so it was not made): {}",
            self.change,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The identity of a process: its pid and start time, which together never
/// repeat until the machine reboots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The pid.
    pub pid: i32,
    /// `/proc/<pid>/stat` field 22, in clock ticks since boot.
    pub start_time: u64,
}

impl Owner {
    /// This process.
    pub fn this_process() -> Owner {
        let pid = std::process::id() as i32;
        Owner {
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
        }
    }

    /// Whether the process is still running (a zombie counts as gone).
    pub fn is_alive(&self) -> bool {
        process_start_time(self.pid) == Some(self.start_time) && !is_zombie(self.pid)
    }
}

/// `/proc/<pid>/stat` field 22 (`starttime`), if the process exists.
pub fn process_start_time(pid: i32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3 on).
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces and ')'.
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn is_zombie(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s == "Z" || s == "X"))
}

/// Changes undone, each with how its undo went.
pub type Undone = Vec<(Change, io::Result<()>)>;

/// A journal: the changes of one owner, kept in memory and, when it has a
/// directory, in a file there.
#[derive(Debug)]
pub struct Journal {
    dir: Option<PathBuf>,
    owner: Owner,
    entries: Vec<(u64, Change)>,
    next_id: u64,
    /// Descriptors open inside journalled state ([`HeldFile`]): closed (made
    /// to point at `/dev/null`) before the state is undone at exit, since the
    /// kernel refuses to remove a tracefs instance with a file open in it.
    held_fds: Vec<RawFd>,
    /// Set once the changes were undone for good (the process is ending):
    /// nothing may be journalled after that.
    closed: bool,
}

impl Journal {
    /// An empty journal of `owner` that persists in `dir` (when `Some`).
    pub fn new(dir: Option<PathBuf>, owner: Owner) -> Journal {
        Journal {
            dir,
            owner,
            entries: Vec::new(),
            next_id: 1,
            held_fds: Vec::new(),
            closed: false,
        }
    }

    /// The file this journal is written to, if it has a directory.
    pub fn path(&self) -> Option<PathBuf> {
        let o = self.owner;
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}-{}.journal", o.pid, o.start_time)))
    }

    /// The changes not yet undone, oldest first.
    pub fn changes(&self) -> impl Iterator<Item = &Change> {
        self.entries.iter().map(|(_, c)| c)
    }

    /// Adds `change` and writes the journal; on failure the change is not
    /// journalled (and must not be made), unless `best_effort` (temporary
    /// files: remembered in memory even when the file cannot be written).
    pub fn add(&mut self, change: Change, best_effort: bool) -> Result<Entry, JournalError> {
        if self.closed {
            return Err(JournalError {
                change: change.to_string(),
                path: self.path().unwrap_or_default(),
                source: io::Error::other("mmlab is ending and has restored the host"),
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push((id, change));
        if let Err(source) = self.persist() {
            if !best_effort {
                let (_, change) = self.entries.pop().expect("just pushed");
                return Err(JournalError {
                    change: change.to_string(),
                    path: self.path().or_else(|| self.dir.clone()).unwrap_or_default(),
                    source,
                });
            }
        }
        Ok(Entry { id })
    }

    /// Removes an entry (undone or gone by other means) and rewrites the
    /// journal. Returns the change.
    pub fn remove(&mut self, entry: Entry) -> Option<Change> {
        let i = self.entries.iter().position(|(id, _)| *id == entry.id)?;
        let (_, c) = self.entries.remove(i);
        let _ = self.persist();
        Some(c)
    }

    /// Undoes every change, newest first, and closes the journal to new
    /// changes. Changes whose undo failed stay in the journal file, for the
    /// next mmlab process to retry once this one is gone. Returns what was
    /// done.
    pub fn undo_all(&mut self) -> Undone {
        self.closed = true;
        self.release_held_fds();
        let mut done = Vec::new();
        let mut failed = Vec::new();
        while let Some((id, c)) = self.entries.pop() {
            let r = c.undo();
            if r.is_err() {
                failed.push((id, c.clone()));
            }
            done.push((c, r));
        }
        failed.reverse();
        self.entries = failed;
        let _ = self.persist();
        done
    }

    /// Points every held descriptor at `/dev/null`: the files they had open
    /// are closed, and the numbers stay taken (a thread still reading one
    /// reads nothing, and never a file opened since under the same number).
    fn release_held_fds(&mut self) {
        let Ok(null) = std::fs::File::open("/dev/null") else {
            return;
        };
        for fd in self.held_fds.drain(..) {
            // SAFETY: dup2 onto a descriptor this process holds open (a
            // HeldFile deregisters before it closes); it atomically replaces
            // the open file behind the number.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }

    fn persist(&self) -> io::Result<()> {
        let Some(path) = self.path() else {
            return Ok(());
        };
        if self.entries.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        ensure_private_dir(path.parent().expect("a journal path has a directory"))?;
        let mut text = format!(
            "{MAGIC_LINE}\nowner {} {}\n",
            self.owner.pid, self.owner.start_time
        );
        for (id, c) in &self.entries {
            text.push_str(&format!("{id} {}\n", encode_change(c)));
        }
        crate::output::write_unjournalled(&path, text.as_bytes())
    }
}

/// Creates `dir` (0700) if missing; refuses one that others may write to.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != euid || m.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a directory owned by uid {euid} and writable only by it",
            dir.display()
        )));
    }
    Ok(())
}

impl Change {
    /// What undoing it does, for reports: "restored …", "removed …".
    pub fn undo_text(&self) -> String {
        match self {
            Change::File { .. } => format!("restored {self}"),
            Change::TracefsInstance { .. } | Change::TempFile { .. } => format!("removed {self}"),
            Change::Mount { .. } => format!("unmounted the {self}"),
            Change::ProcessGroup { .. } => format!("killed {self}"),
        }
    }

    /// Undoes the change now. Undoing what is already undone (a knob already
    /// at its value, an instance already removed) is not an error.
    pub fn undo(&self) -> io::Result<()> {
        match self {
            Change::File { path, old } => restore_file(path, old),
            Change::TracefsInstance { dir } => remove_tracefs_instance(dir),
            Change::Mount { path, fstype } => unmount(path, fstype),
            Change::ProcessGroup { pgid, start_time } => kill_group(*pgid, *start_time),
            Change::TempFile { path } => match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_file() => std::fs::remove_file(path),
                _ => Ok(()),
            },
        }
    }
}

fn restore_file(path: &Path, old: &str) -> io::Result<()> {
    // O_TRUNC does nothing to a sysfs or procfs file and makes a regular
    // file (a test's stand-in) read back exactly.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(old.as_bytes())?;
    drop(f);
    let now = crate::live::read_choice(path)?;
    if now != old {
        return Err(io::Error::other(format!("wrote {old:?}, it reads {now:?}")));
    }
    Ok(())
}

/// Turns a tracefs instance off and removes it (the kernel refuses `rmdir`
/// while a file of it is open; the caller closes its readers first).
pub fn remove_tracefs_instance(dir: &Path) -> io::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    // Each step on its own: a failing one must not keep the others from
    // running. O_TRUNC clears list files such as set_event_pid.
    for (file, value) in [
        ("tracing_on", "0"),
        ("set_event", ""),
        ("set_event_pid", ""),
    ] {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(dir.join(file))
            .and_then(|mut f| f.write_all(value.as_bytes()));
    }
    // The kernel refuses (EBUSY) while a file of the instance is open; the
    // caller closed its own, so what remains is short-lived (a reader of
    // another process, a file being closed): retry for a while.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match std::fs::remove_dir(dir) {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Whether `path` is a mount point of type `fstype` now.
pub fn is_mounted(path: &Path, fstype: &str) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    text.lines().any(|l| {
        let mut it = l.split(' ');
        let (_, Some(at), Some(ty)) = (it.next(), it.next(), it.next()) else {
            return false;
        };
        ty == fstype && Path::new(&unescape_mounts(at)) == path
    })
}

/// `/proc/self/mounts` writes space, tab, newline and backslash as `\ooo`.
fn unescape_mounts(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

fn unmount(path: &Path, fstype: &str) -> io::Result<()> {
    if !is_mounted(path, fstype) {
        return Ok(());
    }
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::umount(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Kills the process group `pgid` if its leader is the process that was
/// started (same start time); when the leader is gone, kills the members
/// that started no earlier than it did (the group cannot have been reused
/// while they are in it, unless every member left first and a new leader
/// took the id: the start-time test keeps older processes safe).
fn kill_group(pgid: i32, start_time: u64) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::other(format!(
            "refusing to kill process group {pgid}"
        )));
    }
    match process_start_time(pgid) {
        Some(t) if t == start_time => {
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            // A leader forked but not yet exec'd holds copies of its parent's
            // descriptors (a tracefs instance's pipes, which keep the
            // instance from being removed): wait until it has let go of
            // them (a zombie has closed its files).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while process_start_time(pgid) == Some(start_time)
                && !is_zombie(pgid)
                && std::time::Instant::now() < until
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            return Ok(());
        }
        Some(_) => return Ok(()), // the pid is someone else's now
        None => {}
    }
    for pid in group_members(pgid) {
        if process_start_time(pid).is_some_and(|t| t >= start_time) {
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    Ok(())
}

/// The pids whose process group is `pgid` (`/proc/<pid>/stat` field 5).
pub fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            stat_fields(pid)
                .and_then(|f| f.get(2)?.parse::<i32>().ok())
                .is_some_and(|g| g == pgid)
                && !is_zombie(pid)
        })
        .collect()
}

fn encode(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02x}"));
        }
    }
    s
}

fn decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

fn encode_path(p: &Path) -> String {
    encode(p.as_os_str().as_bytes())
}

fn decode_path(s: &str) -> Option<PathBuf> {
    Some(PathBuf::from(OsString::from_vec(decode(s)?)))
}

fn decode_str(s: &str) -> Option<String> {
    String::from_utf8(decode(s)?).ok()
}

fn encode_change(c: &Change) -> String {
    match c {
        Change::File { path, old } => {
            format!("file {} {}", encode_path(path), encode(old.as_bytes()))
        }
        Change::TracefsInstance { dir } => format!("tracefs-instance {}", encode_path(dir)),
        Change::Mount { path, fstype } => {
            format!("mount {} {}", encode_path(path), encode(fstype.as_bytes()))
        }
        Change::ProcessGroup { pgid, start_time } => format!("process-group {pgid} {start_time}"),
        Change::TempFile { path } => format!("temp-file {}", encode_path(path)),
    }
}

fn decode_change(fields: &[&str]) -> Option<Change> {
    Some(match fields {
        ["file", path, old] => Change::File {
            path: decode_path(path)?,
            old: decode_str(old)?,
        },
        ["tracefs-instance", dir] => Change::TracefsInstance {
            dir: decode_path(dir)?,
        },
        ["mount", path, fstype] => Change::Mount {
            path: decode_path(path)?,
            fstype: decode_str(fstype)?,
        },
        ["process-group", pgid, t] => Change::ProcessGroup {
            pgid: pgid.parse().ok()?,
            start_time: t.parse().ok()?,
        },
        ["temp-file", path] => Change::TempFile {
            path: decode_path(path)?,
        },
        _ => return None,
    })
}

/// A journal read back from its file.
#[derive(Debug)]
pub struct Stale {
    /// The file.
    pub path: PathBuf,
    /// Its owner.
    pub owner: Owner,
    /// Its changes, oldest first.
    pub changes: Vec<Change>,
    /// Lines that did not parse (reported, skipped).
    pub bad_lines: Vec<String>,
}

/// Parses a journal file's text.
pub fn parse_journal(path: &Path, text: &str) -> Result<Stale, String> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC_LINE) {
        return Err(format!("{}: not an mmlab journal", path.display()));
    }
    let owner = lines
        .next()
        .and_then(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f.as_slice() {
                ["owner", pid, t] => Some(Owner {
                    pid: pid.parse().ok()?,
                    start_time: t.parse().ok()?,
                }),
                _ => None,
            }
        })
        .ok_or_else(|| format!("{}: no owner line", path.display()))?;
    let mut changes = Vec::new();
    let mut bad_lines = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.split(' ').collect();
        match f.split_first().and_then(|(_, rest)| decode_change(rest)) {
            Some(c) => changes.push(c),
            None => bad_lines.push(l.to_string()),
        }
    }
    Ok(Stale {
        path: path.to_path_buf(),
        owner,
        changes,
        bad_lines,
    })
}

/// What [`recover_stale`] did, one line per change, for the user.
#[derive(Debug, Default)]
pub struct Recovery {
    /// `"restored …"` / `"could not restore …: why"` lines.
    pub lines: Vec<String>,
}

impl Recovery {
    /// Whether anything was found.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// The journal files in `dir` whose owner is gone, and the tracefs
/// instances named `mmlab-<pid>…` whose process is gone. Changes nothing.
pub fn find_stale(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut journals: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension() == Some(OsStr::new("journal")))
        .filter(|p| {
            let alive = p
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(owner_named)
                .is_some_and(|o| o.is_alive());
            !alive
        })
        .collect();
    journals.sort();
    (journals, stale_tracefs_instances())
}

/// The owner a journal's name `<pid>-<start time>` gives.
fn owner_named(stem: &str) -> Option<Owner> {
    let (pid, t) = stem.split_once('-')?;
    Some(Owner {
        pid: pid.parse().ok()?,
        start_time: t.parse().ok()?,
    })
}

/// Unfinished rewrites of journals whose owner is gone: the temporary
/// files `.<pid>-<start time>.journal.<random>.tmp` that a journal is
/// written through, left when the owner died between writing one and
/// renaming it over its journal. They describe no change that was made
/// (a change is made only after its record's rename), so they are only
/// removed. Changes nothing.
pub fn stale_journal_rewrites(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let owner = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('.')?.strip_suffix(".tmp"))
                .and_then(|n| n.rsplit_once('.'))
                .and_then(|(journal, _random)| journal.strip_suffix(".journal"))
                .and_then(owner_named);
            owner.is_some_and(|o| !o.is_alive())
        })
        .collect();
    v.sort();
    v
}

/// Tracefs instances named `mmlab-<pid>` or `mmlab-<pid>-<suffix>` whose
/// process no longer exists.
pub fn stale_tracefs_instances() -> Vec<PathBuf> {
    let Some(root) = crate::live::find_tracefs() else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("instances"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("mmlab-")) else {
                return false;
            };
            let pid = rest.split('-').next().and_then(|p| p.parse::<i32>().ok());
            pid.is_some_and(|pid| pid > 0 && process_start_time(pid).is_none())
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// Undoes the changes of every stale journal in `dir` (newest first), and
/// removes unfinished rewrites of stale journals and stale tracefs
/// instances; says what it did. The caller holds the
/// live-kernel lock, so that no other process changes the same knobs
/// meanwhile (a stale journal's owner held it when it died).
pub fn recover_stale(dir: &Path) -> Recovery {
    let mut rec = Recovery::default();
    let (journals, instances) = find_stale(dir);
    for path in journals {
        let stale = match std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|t| parse_journal(&path, &t))
        {
            Ok(s) => s,
            Err(e) => {
                rec.lines
                    .push(format!("unreadable journal left as it is: {e}"));
                continue;
            }
        };
        for l in &stale.bad_lines {
            rec.lines.push(format!(
                "{}: skipped a line that does not parse: {l:?}",
                path.display()
            ));
        }
        for c in stale.changes.iter().rev() {
            rec.lines.push(match c.undo() {
                Ok(()) => format!("pid {} (gone): {}", stale.owner.pid, c.undo_text()),
                Err(e) => format!("pid {} (gone): COULD NOT UNDO {c}: {e}", stale.owner.pid),
            });
        }
        if let Err(e) = std::fs::remove_file(&path) {
            rec.lines
                .push(format!("could not remove {}: {e}", path.display()));
        }
    }
    for path in stale_journal_rewrites(dir) {
        rec.lines.push(match std::fs::remove_file(&path) {
            Ok(()) => format!(
                "removed {}, an unfinished rewrite of a journal (its process is gone)",
                path.display()
            ),
            Err(e) => format!("could not remove {}: {e}", path.display()),
        });
    }
    for dir in instances {
        // A journal above may have removed it already.
        if !dir.exists() {
            continue;
        }
        rec.lines.push(match remove_tracefs_instance(&dir) {
            Ok(()) => format!(
                "removed tracefs instance {} (its process is gone)",
                dir.display()
            ),
            Err(e) => format!("COULD NOT REMOVE tracefs instance {}: {e}", dir.display()),
        });
    }
    rec
}

/// The journal directory of this process: `MMLAB_RUN_DIR`, else
/// `/run/mmlab` for root, else `$XDG_RUNTIME_DIR/mmlab`, else none.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os(RUN_DIR_ENV).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from(RUN_DIR));
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join("mmlab"))
}

/// This process's journal.
static JOURNAL: Mutex<Option<Journal>> = Mutex::new(None);

/// The process's journal, created on first use; a poisoned lock (a panic
/// while it was held) is taken over: the journal itself is always consistent
/// between its own method calls.
pub(crate) fn global() -> MutexGuard<'static, Option<Journal>> {
    let mut g = JOURNAL.lock().unwrap_or_else(|p| {
        JOURNAL.clear_poison();
        p.into_inner()
    });
    if g.is_none() {
        *g = Some(Journal::new(default_dir(), Owner::this_process()));
    }
    g
}

/// Journals `change` in this process's journal before it is made.
pub fn record(change: Change) -> Result<Entry, JournalError> {
    global().as_mut().expect("initialised").add(change, false)
}

/// Journals the temporary file `path` and creates it with `make`, both
/// under the journal's lock. The entry is remembered in memory even if the
/// journal file cannot be written (a user without a runtime directory). If
/// `make` fails, the name is forgotten and nothing is removed: the file, if
/// one exists under that name, is not ours.
pub(crate) fn temp_file<T>(
    path: &Path,
    make: impl FnOnce() -> io::Result<T>,
) -> io::Result<(T, Option<Entry>)> {
    let mut g = global();
    let j = g.as_mut().expect("initialised");
    let change = Change::TempFile {
        path: path.to_path_buf(),
    };
    let entry = j.add(change, true).ok();
    match make() {
        Ok(t) => Ok((t, entry)),
        Err(e) => {
            if let Some(entry) = entry {
                j.remove(entry);
            }
            Err(e)
        }
    }
}

/// Runs `make` (a journalled change) while holding the journal, so that the
/// signal watcher cannot undo in the middle of it. Once the watcher has
/// undone everything, this blocks until the process ends.
pub fn locked<T>(make: impl FnOnce() -> T) -> T {
    let _g = global();
    make()
}

/// Makes a change that is known only once made (a forked child's process
/// group: its pid), then journals it, both under one hold of the journal's
/// lock. So the signal watcher, which undoes under that lock, runs either
/// before `make` (which then never runs: the lock is not given back once
/// everything is undone) or after the change is in the journal, never in
/// between, where it would find nothing to undo for a change that exists.
/// `make` returns its result and the change it made, if it made one.
pub fn made<T>(
    make: impl FnOnce() -> (T, Option<Change>),
) -> (T, Option<Result<Entry, JournalError>>) {
    let mut g = global();
    let (t, change) = make();
    let entry = change.map(|c| g.as_mut().expect("initialised").add(c, false));
    (t, entry)
}

/// Journals `change`, then makes it with `make` under the journal's lock.
/// If `make` fails, the change is undone (best effort: it may have been
/// made in part) and forgotten.
pub fn change<T, E: From<JournalError>>(
    change: Change,
    make: impl FnOnce() -> Result<T, E>,
) -> Result<(Entry, T), E> {
    let entry = record(change)?;
    let r = locked(make);
    match r {
        Ok(t) => Ok((entry, t)),
        Err(e) => {
            let _ = undo(entry);
            Err(e)
        }
    }
}

/// A file opened inside journalled state (a tracefs instance's
/// `trace_pipe_raw`), which must be closed before that state can be undone:
/// if the process is ending on a signal, the watcher closes it first
/// (see [`Journal::undo_all`]).
#[derive(Debug)]
pub struct HeldFile {
    file: std::fs::File,
}

impl HeldFile {
    /// Opens `path` with `opts` and registers the descriptor, both under the
    /// journal's lock (so that the watcher either sees it or has already
    /// undone everything, and then this never returns).
    pub fn open(opts: &std::fs::OpenOptions, path: &Path) -> io::Result<HeldFile> {
        let mut g = global();
        let file = opts.open(path)?;
        g.as_mut()
            .expect("initialised")
            .held_fds
            .push(file.as_raw_fd());
        Ok(HeldFile { file })
    }
}

impl io::Read for HeldFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        let fd = self.file.as_raw_fd();
        // Deregistered before the File closes the number.
        global()
            .as_mut()
            .expect("initialised")
            .held_fds
            .retain(|&f| f != fd);
    }
}

/// Undoes a journalled change now and removes it from the journal.
pub fn undo(entry: Entry) -> io::Result<()> {
    let mut g = global();
    let j = g.as_mut().expect("initialised");
    match j.remove(entry) {
        Some(c) => c.undo(),
        None => Ok(()),
    }
}

/// Removes a change from the journal without undoing it (it was undone by
/// other means, or is no longer there to undo).
pub fn forget(entry: Entry) {
    global().as_mut().expect("initialised").remove(entry);
}

/// Undoes every change of this process (newest first) and closes the
/// journal. Returns the guard, which the caller keeps while the process
/// ends, so that no change is made after the undo.
pub(crate) fn undo_all_for_exit() -> (MutexGuard<'static, Option<Journal>>, Undone) {
    let mut g = global();
    let done = g.as_mut().expect("initialised").undo_all();
    (g, done)
}

#[cfg(test)]
mod tests;
