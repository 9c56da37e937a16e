//! Outputs that appear whole or not at all.
//!
//! # Why
//!
//! A trace of a long run or the results of an hour of simulation must not be
//! lost to a kill during the final write, nor be truncated by a run that is
//! then rejected (`import bad.data -o existing.mmtrace`). Writing in place
//! does both. A temporary name that can be guessed (`X.json.tmp`) lets any
//! local user create it first, or, when the writer follows symlinks (as root),
//! point it at any file on the system.
//!
//! # The protocol
//!
//! 1. [`AtomicFile::create`] runs before the work starts: it refuses a target
//!    that is a directory or lies in a directory that does not exist, and
//!    creates the temporary file `.NAME.<16 random hex digits>.tmp` in the
//!    target's own directory (so that the final rename stays on one file
//!    system) with `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`: it never opens
//!    anything that already exists and never follows a symlink. So an output
//!    that cannot be written fails in the first second, not after the run.
//! 2. The caller writes through it ([`std::io::Write`]).
//! 3. [`AtomicFile::commit`] flushes, `fsync`s the file, renames it over the
//!    target and `fsync`s the directory. Until the rename, the previous
//!    output is untouched; after it, the new one is complete.
//! 4. Dropping an [`AtomicFile`] that was not committed (an error, a
//!    rejected input, a panic) removes the temporary file.
//!
//! A target that is a symlink is replaced by the new file, as `mv` would do;
//! the file it pointed to is not written. A target that already exists as a
//! character device, FIFO or socket (`/dev/null`, `/dev/stdout` on a pipe) is
//! a stream, not a file to replace: it is written in place.
//!
//! [`unnamed_file_in`] gives scratch space that has no name at all
//! (`O_TMPFILE`), for data a process writes and reads back itself (the
//! recorder's per-CPU spools): nothing to guess, nothing left behind by a kill.

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::journal::Entry;
use crate::rand::random_u64;

/// Who may read an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Owner only (0600): traces, which hold command lines, file names and
    /// the addresses of a user's processes.
    Private,
    /// 0666 less the umask, as any new file (results, reports, profiles).
    Shared,
}

impl Mode {
    fn bits(self) -> u32 {
        match self {
            Mode::Private => 0o600,
            Mode::Shared => 0o666,
        }
    }
}

/// Why an output could not be written. Names the target, the step and the
/// system's reason.
#[derive(Debug)]
pub struct OutputError {
    /// The output the caller asked for.
    pub path: PathBuf,
    /// The step that failed, e.g. "create a temporary file in its directory".
    pub what: String,
    /// The underlying error.
    pub source: io::Error,
}

impl OutputError {
    fn new(path: &Path, what: impl Into<String>, source: io::Error) -> OutputError {
        OutputError {
            path: path.to_path_buf(),
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot write {}: {}: {}",
            self.path.display(),
            self.what,
            self.source
        )
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<OutputError> for io::Error {
    /// An `io::Error` of the same kind whose message is the full
    /// [`OutputError`], for callers whose error types wrap `io::Error`.
    fn from(e: OutputError) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// How an [`AtomicFile`] reaches its target.
#[derive(Debug)]
enum Kind {
    /// A temporary file beside the target, renamed over it on commit.
    Replace { tmp: PathBuf },
    /// The target is a stream (device, FIFO, socket), written in place.
    Stream,
}

/// An output being written: invisible at its target until
/// [`commit`](AtomicFile::commit), removed if dropped before.
///
/// Invariant: while `file` is `Some` and the kind is `Replace`, `tmp` names a
/// file this value created and nobody else opened by name.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    file: Option<File>,
    kind: Kind,
    /// The temporary file's entry in the process's journal
    /// ([`crate::journal`]): a signal or the next run after a kill removes it.
    entry: Option<Entry>,
}

/// How many names are tried before giving up (each collision is a 1 in 2^64
/// event unless someone is creating names in the directory on purpose).
const CREATE_ATTEMPTS: u32 = 16;
/// The longest file name part kept in a temporary name (NAME_MAX is 255).
const MAX_BASE_BYTES: usize = 200;

impl AtomicFile {
    /// Checks `target` and creates the temporary file that will become it.
    /// Call this before the work that produces the output, so that an
    /// unwritable output fails at once.
    pub fn create(target: &Path, mode: Mode) -> Result<AtomicFile, OutputError> {
        Self::create_inner(target, mode, true)
    }

    fn create_inner(target: &Path, mode: Mode, journal: bool) -> Result<AtomicFile, OutputError> {
        let dir = parent_dir(target);
        let Some(name) = target.file_name() else {
            return Err(OutputError::new(
                target,
                "it names a directory, not a file",
                io::Error::from_raw_os_error(libc::EISDIR),
            ));
        };
        match std::fs::metadata(target) {
            Ok(m) if m.is_dir() => {
                return Err(OutputError::new(
                    target,
                    "it is a directory",
                    io::Error::from_raw_os_error(libc::EISDIR),
                ))
            }
            Ok(m) if is_stream(&m.file_type()) => return Self::open_stream(target),
            _ => {}
        }
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(OutputError::new(
                    target,
                    format!("{} is not a directory", dir.display()),
                    io::Error::from_raw_os_error(libc::ENOTDIR),
                ))
            }
            Err(e) => {
                return Err(OutputError::new(
                    target,
                    format!("its directory {} cannot be used", dir.display()),
                    e,
                ))
            }
        }
        let (file, tmp, entry) = create_temp_beside(dir, name.as_bytes(), mode, journal)
            .map_err(|e| OutputError::new(target, "create a temporary file in its directory", e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            file: Some(file),
            kind: Kind::Replace { tmp },
            entry,
        })
    }

    fn open_stream(target: &Path) -> Result<AtomicFile, OutputError> {
        // No O_CREAT: only a stream that already exists is opened, so this
        // cannot create or truncate a file.
        let file = OpenOptions::new()
            .write(true)
            .open(target)
            .map_err(|e| OutputError::new(target, "open", e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            file: Some(file),
            kind: Kind::Stream,
            entry: None,
        })
    }

    /// The output this file becomes.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary file's path while it is being written (`None` for a
    /// stream target).
    pub fn temp_path(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Replace { tmp } => Some(tmp),
            Kind::Stream => None,
        }
    }

    /// The open file (to `seek`, or to read back what was written).
    pub fn file(&mut self) -> &mut File {
        self.file
            .as_mut()
            .expect("an AtomicFile holds its file until commit")
    }

    /// Makes the output whole at its target: flush, `fsync`, rename over the
    /// target, `fsync` of the directory. On error the temporary file is
    /// removed and the target is as it was.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let mut file = self.file.take().expect("an AtomicFile is committed once");
        let target = self.target.clone();
        file.flush()
            .map_err(|e| OutputError::new(&target, "flush", e))?;
        let Kind::Replace { tmp } = &self.kind else {
            return Ok(());
        };
        file.sync_all()
            .map_err(|e| OutputError::new(&target, "fsync the temporary file", e))?;
        drop(file);
        std::fs::rename(tmp, &target).map_err(|e| {
            OutputError::new(&target, format!("rename {} over it", tmp.display()), e)
        })?;
        // The rename happened: nothing is left to remove on drop.
        self.kind = Kind::Stream;
        if let Some(e) = self.entry.take() {
            crate::journal::forget(e);
        }
        sync_dir(parent_dir(&target));
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Kind::Replace { tmp } = &self.kind {
            self.file = None;
            let _ = std::fs::remove_file(tmp);
        }
        if let Some(e) = self.entry.take() {
            crate::journal::forget(e);
        }
    }
}

/// Writes `bytes` to `target` atomically (see the module doc).
pub fn write_atomic(target: &Path, bytes: &[u8], mode: Mode) -> Result<(), OutputError> {
    let mut f = AtomicFile::create(target, mode)?;
    f.write_all(bytes)
        .map_err(|e| OutputError::new(target, "write the temporary file", e))?;
    f.commit()
}

/// [`write_atomic`] for the journal itself (which must not journal its own
/// temporary file), owner-only.
pub(crate) fn write_unjournalled(target: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create_inner(target, Mode::Private, false)?;
    f.write_all(bytes)?;
    f.commit()?;
    Ok(())
}

/// `path` made absolute against the current directory, so that a journal
/// entry still names it after a `chdir` or from another process.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Fails now if `target` could not be written later: it is a directory, its
/// directory is missing or not writable. Creates and removes a temporary
/// file; leaves `target` untouched. Prefer keeping the [`AtomicFile`] of
/// [`AtomicFile::create`] open through the work where that is possible.
pub fn check_writable(target: &Path, mode: Mode) -> Result<(), OutputError> {
    AtomicFile::create(target, mode).map(drop)
}

/// A file with no name, in `dir`, open for reading and writing, owner-only:
/// scratch space that nobody else can open by name and that disappears when
/// it is closed, also when the process is killed. Uses `O_TMPFILE` (Linux
/// 3.11+); where the file system lacks it, a random name opened with
/// `O_EXCL|O_NOFOLLOW` is unlinked at once.
pub fn unnamed_file_in(dir: &Path) -> io::Result<File> {
    let tmpfile = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_EXCL)
        .open(dir);
    match tmpfile {
        Ok(f) => Ok(f),
        // EOPNOTSUPP: the file system has no O_TMPFILE; EISDIR/EINVAL: the
        // kernel predates it.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
            ) =>
        {
            let (f, path, _) = create_temp_beside(dir, b"mmlab-scratch", Mode::Private, false)?;
            std::fs::remove_file(&path)?;
            Ok(f)
        }
        Err(e) => Err(e),
    }
}

/// `.NAME.<random>.tmp` in `dir`, created exclusively without following
/// symlinks. With `journal`, the name is journalled and the file created
/// under the journal's lock, so that neither a signal (whose handler undoes
/// the journal and then holds it until the process ends) nor a SIGKILL (the
/// next run undoes the stale journal) can leave the file behind. Journalling
/// after the create left both windows open; `tests/kill.rs` found them.
fn create_temp_beside(
    dir: &Path,
    name: &[u8],
    mode: Mode,
    journal: bool,
) -> io::Result<(File, PathBuf, Option<Entry>)> {
    let base = &name[..name.len().min(MAX_BASE_BYTES)];
    let mut last_err = None;
    for _ in 0..CREATE_ATTEMPTS {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(std::ffi::OsStr::from_bytes(base));
        tmp_name.push(format!(".{:016x}.tmp", random_u64()));
        let path = dir.join(tmp_name);
        let made = if journal {
            crate::journal::temp_file(&absolute(&path), || create_new_file(&path, mode))
        } else {
            create_new_file(&path, mode).map(|f| (f, None))
        };
        match made {
            Ok((f, entry)) => return Ok((f, path, entry)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EEXIST)))
}

/// Creates `path` exclusively (never through a symlink) with `mode`.
fn create_new_file(path: &Path, mode: Mode) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .read(true)
        .create_new(true)
        .mode(mode.bits())
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    if mode == Mode::Private {
        // The umask can only narrow 0600; this makes it exact.
        if let Err(e) = f.set_permissions(std::fs::Permissions::from_mode(0o600)) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    }
    Ok(f)
}

/// The directory a target lives in (`.` for a bare file name).
fn parent_dir(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn is_stream(t: &std::fs::FileType) -> bool {
    t.is_char_device() || t.is_fifo() || t.is_socket()
}

/// `fsync` of a directory, so that a rename in it survives a power loss.
/// Best effort: some file systems refuse it, and the rename has happened.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests;
