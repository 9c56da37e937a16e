//! Scratch directories with unpredictable names, removed when dropped.
//!
//! # Why
//!
//! A scratch name built from the pid (`/tmp/mmlab-x-<pid>`) can be guessed
//! and created first by another local user (a directory they own, or a
//! symlink to one), and a directory made with `create_dir_all` is used even
//! when someone else made it. And a directory removed by the last line of a
//! test is left behind whenever an assertion before it fails: CI's `/tmp`
//! collected dozens of them.
//!
//! [`ScratchDir::new`] makes `<temp dir>/mmlab-<tag>-<64 random bits>` with
//! `mkdir(2)` (which fails on anything already there, a symlink included)
//! and mode 0700; dropping the guard removes the directory and everything
//! in it (`remove_dir_all` does not follow symlinks inside it), also when a
//! test panics. [`ScratchFile`] is one path in a directory of its own, for
//! the many tests that want a single output file.
//!
//! A process that is killed (SIGKILL, or `exit()` without unwinding)
//! leaves its directory; the name says which tag made it.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::rand::random_u64;

/// A private directory under the temp dir, removed with its contents when
/// dropped.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new empty directory `mmlab-<tag>-<random>` under
    /// [`std::env::temp_dir`], owner-only.
    pub fn new(tag: &str) -> io::Result<ScratchDir> {
        ScratchDir::new_in(&std::env::temp_dir(), tag)
    }

    /// As [`ScratchDir::new`], under `parent`.
    pub fn new_in(parent: &Path, tag: &str) -> io::Result<ScratchDir> {
        // A name taken (guessed, or planted as a symlink) costs a retry; a
        // few in a row means something else is wrong.
        let mut last = None;
        for _ in 0..16 {
            let dir = parent.join(format!("mmlab-{tag}-{:016x}", random_u64()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(ScratchDir(dir)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create a directory in {}: {e}", parent.display()),
                    ))
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// One path, `name`, in a [`ScratchDir`] of its own: the file (and anything
/// written beside it, such as an output's temporary file) goes when this
/// is dropped. Derefs to the path.
#[derive(Debug)]
pub struct ScratchFile {
    path: PathBuf,
    // Dropped after `path` is no longer used: removes the directory.
    dir: ScratchDir,
}

impl ScratchFile {
    /// `<new scratch dir tagged tag>/name`; the file is not created.
    pub fn new(tag: &str, name: &str) -> io::Result<ScratchFile> {
        let dir = ScratchDir::new(tag)?;
        Ok(ScratchFile {
            path: dir.join(name),
            dir,
        })
    }

    /// The directory the file is in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl std::ops::Deref for ScratchFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ScratchFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for ScratchFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_unique_and_gone_after_drop() {
        let a = ScratchDir::new("scratch-test").unwrap();
        let b = ScratchDir::new("scratch-test").unwrap();
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::create_dir(a.join("sub")).unwrap();
        std::fs::write(a.join("sub/f"), b"x").unwrap();
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        drop(a);
        drop(b);
        assert!(!pa.exists() && !pb.exists());
    }

    #[test]
    fn removed_when_the_holder_panics() {
        let seen = std::sync::Mutex::new(None);
        let r = std::panic::catch_unwind(|| {
            let f = ScratchFile::new("scratch-test", "out.json").unwrap();
            std::fs::write(&*f, b"{}").unwrap();
            *seen.lock().unwrap() = Some(f.dir().to_path_buf());
            panic!("a failing test");
        });
        assert!(r.is_err());
        let dir = seen.lock().unwrap().clone().unwrap();
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
