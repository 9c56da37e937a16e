//! A test's private scratch directory: `host::scratch::ScratchDir` (mode
//! 0700, an unpredictable name made with `mkdir`, so nothing planted there is
//! ever used), removed with everything in it when the guard drops, also when
//! the test panics: the tests leave nothing behind in the temp dir.

use std::path::{Path, PathBuf};

pub struct Scratch(host::scratch::ScratchDir);

impl Scratch {
    /// A new empty directory under the temp dir, named after `tag`.
    pub fn new(tag: &str) -> Scratch {
        Scratch(host::scratch::ScratchDir::new(tag).expect("scratch dir"))
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    #[allow(dead_code)]
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}
