//! Setting the live kernel's THP knobs for one run, and never leaving them changed.
//!
//! # What this exercises
//!
//! The kernel reads `/sys/kernel/mm/transparent_hugepage/enabled` and, since 6.8, the
//! per-size `hugepages-<size>kB/enabled` files on every anonymous fault
//! (`thp_vma_allowable_orders()` in `mm/huge_memory.c`) to decide which folio orders a
//! fault may allocate; `inherit` makes a size follow the top-level file. The knobs are
//! system-wide: while a test has `hugepages-64kB` at `always`, every process on the
//! host faults 64 KiB folios, and `/proc/vmstat` counts them all.
//!
//! # The protocol
//!
//! 1. [`LiveLock::acquire`] (`host::lock`) serializes every user of system-wide
//!    state: a process-wide mutex (cargo runs tests of one binary on many threads)
//!    plus an exclusive `flock(2)` on [`LOCK_PATH`] (cargo runs each test binary as
//!    its own process). Taking it first restores what a process that died holding
//!    it left behind.
//! 2. A [`KnobGuard`] borrows the lock, so it cannot outlive it. Before its first
//!    write to a knob it journals the knob's value (`host::journal`), then writes;
//!    it writes the saved values back, in reverse order, when dropped — also while
//!    unwinding from a panic. A SIGINT/SIGTERM/SIGHUP/SIGQUIT to the `mmlab`
//!    binary restores them through the journal (`host::signals`), and after a
//!    SIGKILL the next `mmlab` process does.
//! 3. [`KnobGuard::restore`] does the same but reports failures; tests call it and
//!    then compare [`thp_snapshot`] with the one taken before the run.
//!
//! [`LiveKernel::probe`] says up front whether any of this can work here, and why not.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use host::journal::{self, Change, Entry};
pub use host::live::{mthp_sizes_kb, size_knob_path, top_knob_path};
pub use host::live::{PERCPU_PAGELIST_HIGH_FRACTION, THP_DIR, TRACEFS_PATHS};
pub use host::lock::{LiveLock, LOCK_PATH};

use crate::error::NativeError;

/// The values of a THP `enabled` file (top level or per size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThpEnabled {
    /// Large folios for every anonymous VMA.
    Always,
    /// Only a per-size knob: follow the top-level `enabled`.
    Inherit,
    /// Only for VMAs with `MADV_HUGEPAGE` (`VM_HUGEPAGE`).
    Madvise,
    /// Never.
    Never,
}

impl ThpEnabled {
    /// The word sysfs uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ThpEnabled::Always => "always",
            ThpEnabled::Inherit => "inherit",
            ThpEnabled::Madvise => "madvise",
            ThpEnabled::Never => "never",
        }
    }

    /// Parses the word sysfs uses.
    pub fn parse(word: &str) -> Option<ThpEnabled> {
        Some(match word {
            "always" => ThpEnabled::Always,
            "inherit" => ThpEnabled::Inherit,
            "madvise" => ThpEnabled::Madvise,
            "never" => ThpEnabled::Never,
            _ => return None,
        })
    }
}

/// A full THP knob setting for one run: the top-level `enabled` and every per-size
/// `hugepages-<size>kB/enabled`. Sizes the host has but `sizes` does not list are set
/// to `unlisted`, so that a run never depends on what a previous run left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThpKnobs {
    /// `transparent_hugepage/enabled` (never `Inherit`).
    pub enabled: ThpEnabled,
    /// `(size_kb, value)` for named sizes.
    pub sizes: Vec<(u32, ThpEnabled)>,
    /// The value for every other size present on the host.
    pub unlisted: ThpEnabled,
}

impl ThpKnobs {
    /// THP off: every size `never`, top level `never`.
    pub fn off() -> ThpKnobs {
        ThpKnobs {
            enabled: ThpEnabled::Never,
            sizes: Vec::new(),
            unlisted: ThpEnabled::Never,
        }
    }

    /// Only `size_kb` at `value`; every other size `never`; the top level at
    /// `madvise` (what it is by default, and irrelevant since no size inherits it).
    pub fn only(size_kb: u32, value: ThpEnabled) -> ThpKnobs {
        ThpKnobs {
            enabled: ThpEnabled::Madvise,
            sizes: vec![(size_kb, value)],
            unlisted: ThpEnabled::Never,
        }
    }

    /// Every size in `sizes_kb` at `value`; every other size `never`.
    pub fn all_of(sizes_kb: &[u32], value: ThpEnabled) -> ThpKnobs {
        ThpKnobs {
            enabled: ThpEnabled::Madvise,
            sizes: sizes_kb.iter().map(|&s| (s, value)).collect(),
            unlisted: ThpEnabled::Never,
        }
    }

    /// The value this setting gives `size_kb`.
    pub fn value_for(&self, size_kb: u32) -> ThpEnabled {
        self.sizes
            .iter()
            .find(|(s, _)| *s == size_kb)
            .map_or(self.unlisted, |&(_, v)| v)
    }
}

/// Why a live-kernel measurement cannot run on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CannotRun {
    /// Knobs need root.
    NotRoot {
        /// The effective uid.
        euid: u32,
    },
    /// The kernel has no THP sysfs directory (THP not built in).
    NoThpSysfs,
    /// A knob file exists but cannot be opened for writing (read-only sysfs in a
    /// container, or a security module).
    KnobNotWritable {
        /// The knob.
        path: PathBuf,
        /// The errno from `open(O_WRONLY)`.
        errno: i32,
    },
    /// The kernel has no per-size knob for this size (before 6.8, or another
    /// page size).
    NoMthpSize {
        /// The size in KiB.
        size_kb: u32,
    },
    /// tracefs is not mounted at `/sys/kernel/tracing` or `/sys/kernel/debug/tracing`.
    NoTracefs,
    /// The architecture or page size differs from what the measurement assumes.
    Unsupported {
        /// What is different.
        what: String,
    },
}

impl std::fmt::Display for CannotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CannotRun::NotRoot { euid } => {
                write!(f, "not root (euid {euid}); changing THP knobs needs root")
            }
            CannotRun::NoThpSysfs => write!(f, "{THP_DIR} does not exist (no THP in this kernel)"),
            CannotRun::KnobNotWritable { path, errno } => write!(
                f,
                "{} is not writable: {}",
                path.display(),
                std::io::Error::from_raw_os_error(*errno)
            ),
            CannotRun::NoMthpSize { size_kb } => write!(
                f,
                "no {THP_DIR}/hugepages-{size_kb}kB (kernel without mTHP, or no such size)"
            ),
            CannotRun::NoTracefs => write!(f, "tracefs is not mounted"),
            CannotRun::Unsupported { what } => write!(f, "unsupported host: {what}"),
        }
    }
}

/// What the live kernel on this host offers to measurements.
#[derive(Clone, Debug)]
pub struct LiveKernel {
    /// The effective uid.
    pub euid: u32,
    /// Whether the THP sysfs directory exists.
    pub thp_sysfs: bool,
    /// The first THP knob that cannot be opened for writing, if any.
    pub knob_not_writable: Option<(PathBuf, i32)>,
    /// The mTHP sizes (KiB) with a `hugepages-<size>kB` directory, ascending.
    pub mthp_sizes_kb: Vec<u32>,
    /// Where tracefs is mounted, if it is.
    pub tracefs: Option<PathBuf>,
    /// The base page size.
    pub page_size: usize,
}

impl LiveKernel {
    /// Looks at the host without changing anything.
    pub fn probe() -> LiveKernel {
        // SAFETY: geteuid cannot fail and has no preconditions.
        let euid = unsafe { libc::geteuid() };
        // SAFETY: sysconf has no preconditions.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let thp_dir = Path::new(THP_DIR);
        let thp_sysfs = thp_dir.join("enabled").exists();
        let mthp_sizes_kb = mthp_sizes_kb();
        let mut knob_not_writable = None;
        if thp_sysfs {
            let mut files = vec![thp_dir.join("enabled")];
            files.extend(mthp_sizes_kb.iter().map(|s| size_knob_path(*s)));
            for f in files {
                // Opening for writing without writing tells whether a write would be
                // allowed (EACCES, EPERM, EROFS) and changes nothing.
                if let Err(e) = OpenOptions::new().write(true).open(&f) {
                    knob_not_writable = Some((f, e.raw_os_error().unwrap_or(0)));
                    break;
                }
            }
        }
        let tracefs = TRACEFS_PATHS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("trace_pipe").exists());
        LiveKernel {
            euid,
            thp_sysfs,
            knob_not_writable,
            mthp_sizes_kb,
            tracefs,
            page_size,
        }
    }

    /// `Ok` if THP knobs can be changed here, with every size in `sizes_kb` present;
    /// otherwise the first reason why not.
    pub fn require_thp_knobs(&self, sizes_kb: &[u32]) -> Result<(), CannotRun> {
        if self.page_size != crate::sys::PAGE_SIZE {
            return Err(CannotRun::Unsupported {
                what: format!("page size {} (this crate assumes 4096)", self.page_size),
            });
        }
        if self.euid != 0 {
            return Err(CannotRun::NotRoot { euid: self.euid });
        }
        if !self.thp_sysfs {
            return Err(CannotRun::NoThpSysfs);
        }
        if let Some((path, errno)) = &self.knob_not_writable {
            return Err(CannotRun::KnobNotWritable {
                path: path.clone(),
                errno: *errno,
            });
        }
        for &s in sizes_kb {
            if !self.mthp_sizes_kb.contains(&s) {
                return Err(CannotRun::NoMthpSize { size_kb: s });
            }
        }
        Ok(())
    }

    /// `Ok` if tracefs is mounted.
    pub fn require_tracefs(&self) -> Result<&Path, CannotRun> {
        self.tracefs.as_deref().ok_or(CannotRun::NoTracefs)
    }
}

/// Reads a knob's current value: for a sysfs choice list such as
/// `always [madvise] never` the bracketed word, otherwise the trimmed content.
pub fn read_knob(path: &Path) -> Result<String, NativeError> {
    host::live::read_choice(path).map_err(|e| NativeError::io("read", path, e))
}

fn write_knob(path: &Path, value: &str) -> Result<(), NativeError> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| NativeError::io("open", path, e))?;
    f.write_all(value.as_bytes())
        .map_err(|e| NativeError::io("write", path, e))
}

/// Knob changes for one run, undone on drop. Borrows the [`LiveLock`], so the
/// restore always happens while the lock is still held.
#[derive(Debug)]
pub struct KnobGuard<'lock> {
    _lock: &'lock LiveLock,
    /// `(path, value before our first write, its journal entry)`, in the
    /// order first written.
    saved: Vec<(PathBuf, String, Entry)>,
}

impl<'lock> KnobGuard<'lock> {
    /// A guard that has changed nothing yet.
    pub fn new(lock: &'lock LiveLock) -> KnobGuard<'lock> {
        KnobGuard {
            _lock: lock,
            saved: Vec::new(),
        }
    }

    /// Writes `value` to the knob at `path`, after saving its current value (once,
    /// journalled before the write), and checks that it reads back as `value`.
    pub fn set(&mut self, path: &Path, value: &str) -> Result<(), NativeError> {
        if self.saved.iter().any(|(p, _, _)| p == path) {
            journal::locked(|| write_knob(path, value))?;
        } else {
            let before = read_knob(path)?;
            let change = Change::File {
                path: path.to_path_buf(),
                old: before.clone(),
            };
            let (entry, ()) = journal::change(change, || write_knob(path, value))?;
            self.saved.push((path.to_path_buf(), before, entry));
        }
        let got = read_knob(path)?;
        if got != value {
            return Err(NativeError::KnobRejected {
                path: path.to_path_buf(),
                wanted: value.to_string(),
                got,
            });
        }
        Ok(())
    }

    /// Applies a full THP setting: the top level and every size present on the host.
    pub fn set_thp(&mut self, knobs: &ThpKnobs) -> Result<(), NativeError> {
        if knobs.enabled == ThpEnabled::Inherit {
            return Err(NativeError::InvalidConfig {
                what: "the top-level THP `enabled` cannot be `inherit`".into(),
            });
        }
        let present = mthp_sizes_kb();
        for &(s, _) in &knobs.sizes {
            if !present.contains(&s) {
                return Err(CannotRun::NoMthpSize { size_kb: s }.into());
            }
        }
        self.set(&top_knob_path(), knobs.enabled.as_str())?;
        for s in present {
            self.set(&size_knob_path(s), knobs.value_for(s).as_str())?;
        }
        Ok(())
    }

    /// The knobs this guard will restore, with their saved values.
    pub fn saved(&self) -> Vec<(PathBuf, String)> {
        self.saved
            .iter()
            .map(|(p, v, _)| (p.clone(), v.clone()))
            .collect()
    }

    /// Restores every saved value now, reporting the first failure (all are tried).
    pub fn restore(mut self) -> Result<(), NativeError> {
        self.restore_all()
    }

    fn restore_all(&mut self) -> Result<(), NativeError> {
        let mut first_err = None;
        while let Some((path, _, entry)) = self.saved.pop() {
            // The journal writes the saved value back and checks it reads so.
            if let Err(e) = journal::undo(entry) {
                first_err.get_or_insert(NativeError::io("restore", path, e));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for KnobGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.restore_all() {
            // Drop cannot return the error; a knob left changed must not go unnoticed.
            eprintln!("mmlab native: FAILED TO RESTORE A KERNEL KNOB: {e}");
        }
    }
}

/// The current value of every THP `enabled` knob: `(path, value)`, top level first.
/// Tests take this before a run and compare after it.
pub fn thp_snapshot() -> Result<Vec<(PathBuf, String)>, NativeError> {
    let mut out = vec![(top_knob_path(), read_knob(&top_knob_path())?)];
    for s in mthp_sizes_kb() {
        let p = size_knob_path(s);
        let v = read_knob(&p)?;
        out.push((p, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_choice_lists() {
        for v in [
            ThpEnabled::Always,
            ThpEnabled::Inherit,
            ThpEnabled::Madvise,
            ThpEnabled::Never,
        ] {
            assert_eq!(ThpEnabled::parse(v.as_str()), Some(v));
        }
    }

    #[test]
    fn knobs_value_for() {
        let k = ThpKnobs::only(64, ThpEnabled::Always);
        assert_eq!(k.value_for(64), ThpEnabled::Always);
        assert_eq!(k.value_for(2048), ThpEnabled::Never);
    }

    #[test]
    fn guard_restores_on_panic() {
        let live = LiveKernel::probe();
        if let Err(why) = live.require_thp_knobs(&[64]) {
            eprintln!("SKIPPED (cannot run here): {why}");
            return;
        }
        let lock = LiveLock::acquire().unwrap();
        let before = thp_snapshot().unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut g = KnobGuard::new(&lock);
            g.set_thp(&ThpKnobs::only(64, ThpEnabled::Always)).unwrap();
            assert_eq!(read_knob(&size_knob_path(64)).unwrap(), "always");
            panic!("deliberate panic with a knob changed");
        }));
        assert!(r.is_err());
        assert_eq!(thp_snapshot().unwrap(), before, "a knob was left changed");
    }
}
