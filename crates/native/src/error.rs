//! Typed errors for everything that can go wrong on a live host.
//!
//! An environment problem (not root, a read-only sysfs, a failed `mmap`) is never a
//! panic: it is a [`NativeError`] that names the system call or path and the errno,
//! so that the CLI can print it and a test can print "SKIPPED (cannot run here)".

use std::fmt;
use std::path::PathBuf;

use crate::knobs::CannotRun;

/// Everything a measurement in this crate can fail with.
#[derive(Debug)]
pub enum NativeError {
    /// The host lacks something the measurement needs (root, a writable knob, an mTHP
    /// size, tracefs). Tests print this as "SKIPPED (cannot run here): ...".
    CannotRun(CannotRun),
    /// A system call failed in this process.
    Syscall {
        /// The call, e.g. `"mmap"`, `"madvise(MADV_HUGEPAGE)"`.
        call: &'static str,
        /// What it was doing, e.g. `"reserve 1028 MiB PROT_NONE"`.
        what: String,
        /// The errno it returned.
        errno: i32,
    },
    /// Reading, writing or opening a file failed.
    Io {
        /// `"read"`, `"write"`, `"open"`, `"flock"`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file had content that this crate did not expect.
    Parse {
        /// The file.
        path: PathBuf,
        /// The offending content (a line, or the whole value of a sysfs file).
        content: String,
        /// What was expected instead.
        expected: &'static str,
    },
    /// A knob did not take the value that was written to it.
    KnobRejected {
        /// The knob's file.
        path: PathBuf,
        /// The value written.
        wanted: String,
        /// The value read back.
        got: String,
    },
    /// The forked child that runs a fault pattern failed inside.
    ChildFailed {
        /// The step of the child that failed (e.g. `"mmap MAP_FIXED"`).
        stage: &'static str,
        /// The errno it saw.
        errno: i32,
    },
    /// The forked child died or exited in a way that gives no result.
    ChildDied {
        /// The `wait4` status word.
        status: i32,
    },
    /// A configuration value is out of range.
    InvalidConfig {
        /// What is wrong.
        what: String,
    },
    /// A measurement thread panicked.
    ThreadPanicked {
        /// Which thread.
        what: &'static str,
    },
    /// A change to system state could not be journalled, so it was not made
    /// (`host::journal`).
    Journal(host::journal::JournalError),
}

impl NativeError {
    /// A [`NativeError::Syscall`] with the current `errno`.
    pub(crate) fn last_os(call: &'static str, what: impl Into<String>) -> Self {
        NativeError::Syscall {
            call,
            what: what.into(),
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }

    /// A [`NativeError::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        NativeError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether this error means "this host cannot run the measurement" rather than
    /// "the measurement broke".
    pub fn is_cannot_run(&self) -> bool {
        matches!(self, NativeError::CannotRun(_))
    }
}

/// The name and description of an errno value, e.g. `EPERM (Operation not permitted)`.
fn errno_text(errno: i32) -> String {
    let msg = std::io::Error::from_raw_os_error(errno);
    format!("errno {errno} ({msg})")
}

impl fmt::Display for NativeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NativeError::CannotRun(why) => write!(f, "cannot run here: {why}"),
            NativeError::Syscall { call, what, errno } => {
                write!(f, "{call} failed ({what}): {}", errno_text(*errno))
            }
            NativeError::Io { op, path, source } => {
                write!(f, "{op} {} failed: {source}", path.display())
            }
            NativeError::Parse {
                path,
                content,
                expected,
            } => write!(
                f,
                "{}: unexpected content {content:?}, expected {expected}",
                path.display()
            ),
            NativeError::KnobRejected { path, wanted, got } => write!(
                f,
                "{}: wrote {wanted:?} but it reads back {got:?}",
                path.display()
            ),
            NativeError::ChildFailed { stage, errno } => {
                write!(
                    f,
                    "fault-pattern child failed at {stage}: {}",
                    errno_text(*errno)
                )
            }
            NativeError::ChildDied { status } => {
                if libc::WIFSIGNALED(*status) {
                    write!(
                        f,
                        "fault-pattern child killed by signal {}",
                        libc::WTERMSIG(*status)
                    )
                } else {
                    write!(
                        f,
                        "fault-pattern child exited with status {} without a result",
                        libc::WEXITSTATUS(*status)
                    )
                }
            }
            NativeError::InvalidConfig { what } => write!(f, "invalid configuration: {what}"),
            NativeError::ThreadPanicked { what } => write!(f, "{what} thread panicked"),
            NativeError::Journal(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for NativeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NativeError::Io { source, .. } => Some(source),
            NativeError::Journal(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CannotRun> for NativeError {
    fn from(why: CannotRun) -> Self {
        NativeError::CannotRun(why)
    }
}

impl From<host::journal::JournalError> for NativeError {
    fn from(e: host::journal::JournalError) -> Self {
        NativeError::Journal(e)
    }
}

impl From<host::lock::LockError> for NativeError {
    fn from(e: host::lock::LockError) -> Self {
        NativeError::Io {
            op: e.op,
            path: e.path,
            source: e.source,
        }
    }
}
