//! A test's private scratch directory (mode 0700, a name no other process
//! can have taken), removed with everything in it when the guard drops, also
//! when the test panics: the tests leave nothing behind in the temp dir.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Scratch(PathBuf);

impl Scratch {
    /// A new empty directory under the temp dir, named after `tag`.
    pub fn new(tag: &str) -> Scratch {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let d = std::env::temp_dir().join(format!(
                "mmlab-{tag}-{}-{}-{nanos:x}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            // create, not create_all: a directory (or a planted symlink)
            // already there is never used.
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => return Scratch(d),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("scratch dir {}: {e}", d.display()),
            }
        }
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    #[allow(dead_code)]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
