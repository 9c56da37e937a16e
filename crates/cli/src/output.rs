//! Output files and standard output.
//!
//! # Files appear whole or not at all
//!
//! [`write_atomically`] writes into a new file beside the target, under a
//! name nobody can predict (128 random bits), created with `O_EXCL` and
//! `O_NOFOLLOW` so that a planted file or symlink is never written through;
//! it syncs the file, renames it over the target and syncs the directory.
//! A failure at any step removes the temporary file and leaves the old
//! target as it was.
//!
//! # A closed pipe is not an error
//!
//! `mmlab reproduce | head` must end quietly with status 0, as `cat` does.
//! Rust ignores `SIGPIPE`, so a write to a closed pipe returns `EPIPE`:
//! [`is_broken_pipe`] finds it in an error chain and `main` exits 0.

use crate::report::Format;
use crate::results::{to_json_pretty, ResultsDoc};
use anyhow::{bail, Context, Result};
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// 128 bits from the kernel's random pool (falling back to the standard
/// library's randomly keyed hasher if `/dev/urandom` cannot be read).
fn random_suffix() -> String {
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        use std::hash::{BuildHasher, Hasher};
        for half in b.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes the bytes `fill` produces to `path`: whole or not at all (see the
/// module doc).
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?;
    if path.is_dir() {
        bail!("{}: is a directory; expected a file name", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (tmp, mut file) = create_temp(&dir, &name.to_string_lossy())?;
    let written = (|| -> Result<()> {
        let mut w = std::io::BufWriter::new(&mut file);
        fill(&mut w).with_context(|| format!("cannot write {}", path.display()))?;
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
        drop(w);
        file.sync_all()
            .with_context(|| format!("cannot sync {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // The rename is durable once the directory is synced; a directory that
    // cannot be opened for that (some network file systems) is not an error.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A new temporary file in `dir`, opened with `O_EXCL | O_NOFOLLOW`.
fn create_temp(dir: &Path, name: &str) -> Result<(PathBuf, std::fs::File)> {
    for _ in 0..16 {
        let tmp = dir.join(format!(".{name}.{}.tmp", random_suffix()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot create a file in {} (for {name})", dir.display())
                })
            }
        }
    }
    bail!(
        "cannot create a temporary file in {}: 16 random names were taken",
        dir.display()
    )
}

/// Writes `bytes` to `path` atomically.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// True if the error, or any error it wraps, is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes `s` to standard output, returning the error (`EPIPE` included)
/// instead of panicking as `print!` does.
pub fn print(s: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()
}

/// Writes a results document in one of the data formats (`json`,
/// `jsonl`, `csv`, `csv-wide`); the table formats write nothing here.
pub fn write_document(doc: &ResultsDoc, format: Format, w: &mut dyn Write) -> std::io::Result<()> {
    match format {
        Format::Json => {
            w.write_all(to_json_pretty(doc).as_bytes())?;
            w.write_all(b"\n")
        }
        Format::Jsonl => {
            writeln!(w, "{}", doc.header_json())?;
            for e in &doc.experiments {
                writeln!(w, "{}", ResultsDoc::experiment_record(e))?;
            }
            Ok(())
        }
        Format::Csv => crate::csv_out::write_tidy(doc, w),
        Format::CsvWide => crate::csv_out::write_wide(doc, w),
        Format::Text | Format::Markdown => Ok(()),
    }
}

/// Writes the results document to `path` as JSON, atomically.
pub fn write_results(path: &Path, doc: &ResultsDoc) -> Result<()> {
    write_with(path, |w| write_document(doc, Format::Json, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!("mmlab-output-{}", random_suffix()));
        std::fs::create_dir(&d).expect("scratch dir");
        d
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let d = scratch();
        let p = d.join("r.json");
        write_atomically(&p, b"old").expect("first write");
        let e = write_with(&p, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .expect_err("the fill failed");
        assert!(format!("{e:#}").contains("disk full"), "{e:#}");
        assert_eq!(std::fs::read(&p).expect("old file"), b"old");
        let names: Vec<_> = std::fs::read_dir(&d)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1, "a temporary file was left: {names:?}");
        write_atomically(&p, b"new").expect("second write");
        assert_eq!(std::fs::read(&p).expect("new file"), b"new");
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

    #[test]
    fn temporary_names_are_not_predictable_and_a_directory_is_refused() {
        assert_ne!(random_suffix(), random_suffix());
        assert_eq!(random_suffix().len(), 32);
        let d = scratch();
        let e = write_atomically(&d, b"x").expect_err("a directory");
        assert!(format!("{e:#}").contains("is a directory"), "{e:#}");
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

    #[test]
    fn broken_pipe_is_found_inside_a_context_chain() {
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing the table");
        assert!(is_broken_pipe(&e));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
