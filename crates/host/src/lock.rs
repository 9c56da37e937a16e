//! The live-kernel lock: one user of system-wide state at a time.
//!
//! Knobs and `/proc/vmstat` are system-wide, so every process that changes
//! a knob, a hugetlb pool or a tracefs instance, or measures a system-wide
//! counter delta, holds [`LiveLock`] for the whole time: a process-wide
//! [`Mutex`] (cargo runs the tests of one binary on many threads) plus an
//! exclusive `flock(2)` on [`LOCK_PATH`] (cargo runs each test binary as its
//! own process; several engineers' tests share the host).
//!
//! Taking the lock first restores what a process that died holding it left
//! behind ([`crate::journal::recover_stale`]): its journal lists every
//! change it made, and since it held the lock, nobody changed the same
//! state after it.
//!
//! A process that holds the lock can lend it to a child it starts
//! ([`LiveLock::lend`]): the child inherits the locked file description and
//! finds it through [`LEND_ENV`], so that a test can hold the lock while it
//! kills and restarts `mmlab` commands that take it themselves.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// The cross-process lock file that serializes live-kernel measurements.
pub const LOCK_PATH: &str = "/tmp/mmlab-live-kernel.lock";
/// The environment variable through which a parent lends its lock: the
/// number of an inherited descriptor of [`LOCK_PATH`] that it holds locked.
pub const LEND_ENV: &str = "MMLAB_LIVE_LOCK_FD";

/// Why the lock could not be taken.
#[derive(Debug)]
pub struct LockError {
    /// `"open"` or `"flock"`.
    pub op: &'static str,
    /// The lock file.
    pub path: PathBuf,
    /// The underlying error.
    pub source: io::Error,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.op, self.path.display(), self.source)
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The process-wide half of [`LiveLock`].
static PROCESS_LOCK: Mutex<()> = Mutex::new(());

/// Exclusive use of the live kernel's system-wide state by this thread,
/// across threads and processes. Released on drop.
#[derive(Debug)]
pub struct LiveLock {
    // Field order matters: the flock is released (file closed) before the mutex.
    file: File,
    /// Lent by the parent: the parent's lock, not ours to release.
    borrowed: bool,
    _guard: MutexGuard<'static, ()>,
}

impl LiveLock {
    /// Blocks until no other thread of this process and no other process
    /// holds the lock, then restores what a dead holder left behind (and
    /// says so on stderr). A thread that panicked while holding the mutex
    /// poisons it; its guards restored their changes while unwinding, so the
    /// poison is cleared and the lock taken.
    pub fn acquire() -> Result<LiveLock, LockError> {
        let guard = PROCESS_LOCK.lock().unwrap_or_else(|poisoned| {
            PROCESS_LOCK.clear_poison();
            poisoned.into_inner()
        });
        let (file, borrowed) = match borrowed_lock() {
            Some(f) => (f, true),
            None => (open_and_lock()?, false),
        };
        let lock = LiveLock {
            file,
            borrowed,
            _guard: guard,
        };
        lock.recover();
        Ok(lock)
    }

    /// Restores the state of dead mmlab processes (see the module doc).
    fn recover(&self) {
        let Some(dir) = crate::journal::default_dir() else {
            return;
        };
        let rec = crate::journal::recover_stale(&dir);
        for line in &rec.lines {
            eprintln!("mmlab: state left by a process that ended: {line}");
        }
    }

    /// A descriptor of the locked file that a child inherits, and the
    /// environment variable that names it (set both on the child's
    /// `Command`; the descriptor must stay open until the child has
    /// started). The lock stays held by this process.
    pub fn lend(&self) -> io::Result<(OwnedFd, (&'static str, String))> {
        // SAFETY: F_DUPFD on a descriptor we own returns a new descriptor
        // without FD_CLOEXEC, which the returned OwnedFd owns.
        let fd = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_DUPFD, 3) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by fcntl and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok((owned, (LEND_ENV, fd.to_string())))
    }
}

fn open_and_lock() -> Result<File, LockError> {
    let err = |op, source| LockError {
        op,
        path: PathBuf::from(LOCK_PATH),
        source,
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .map_err(|e| err("open", e))?;
    loop {
        // SAFETY: flock on a descriptor we own; blocks until exclusive.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(file);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(err("flock", e));
        }
    }
}

/// The lock a parent lent through [`LEND_ENV`], if the descriptor it names
/// is open on [`LOCK_PATH`] and locked by us (a non-blocking `flock` on the
/// same open file description succeeds at once; on another one it fails).
fn borrowed_lock() -> Option<File> {
    let fd: RawFd = std::env::var(LEND_ENV).ok()?.parse().ok()?;
    if fd < 3 {
        return None;
    }
    let mut st: libc::stat = unsafe_zeroed_stat();
    // SAFETY: fstat writes into st; an invalid fd gives EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    let path_meta = std::fs::metadata(LOCK_PATH).ok()?;
    if st.st_dev != path_meta.dev() || st.st_ino != path_meta.ino() {
        return None;
    }
    // SAFETY: F_DUPFD_CLOEXEC on an open descriptor returns a new one that
    // the File below owns; the inherited one stays as it is.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return None;
    }
    // SAFETY: dup is a fresh descriptor owned by nobody else.
    let file = unsafe { File::from_raw_fd(dup) };
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    // Keep the inherited descriptor from reaching this process's own children.
    // SAFETY: F_SETFD on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    (rc == 0).then_some(file)
}

fn unsafe_zeroed_stat() -> libc::stat {
    // SAFETY: struct stat is plain data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

impl Drop for LiveLock {
    fn drop(&mut self) {
        if self.borrowed {
            // Unlocking would release the parent's lock (the description is
            // shared); closing our duplicate does not.
            return;
        }
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_serializes_threads() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static INSIDE: AtomicUsize = AtomicUsize::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..5 {
                        let _l = LiveLock::acquire().unwrap();
                        assert_eq!(INSIDE.fetch_add(1, Ordering::SeqCst), 0);
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        INSIDE.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
