//! Output files and standard output.
//!
//! # Files appear whole or not at all
//!
//! [`write_with`] goes through `host::output::AtomicFile` (issue 15): a
//! failure at any step leaves the old target as it was and no temporary
//! file behind.
//!
//! # A closed pipe is not an error
//!
//! `mmlab reproduce | head` must end quietly with status 0, as `cat` does.
//! Rust ignores `SIGPIPE`, so a write to a closed pipe returns `EPIPE`:
//! [`is_broken_pipe`] finds it in an error chain and `main` exits 0.

use crate::report::Format;
use crate::results::{to_json_pretty, ResultsDoc};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Writes the bytes `fill` produces to `path`, whole or not at all
/// (`host::output::AtomicFile`: an unpredictable temporary file beside the
/// target, `O_EXCL | O_NOFOLLOW`, fsync, rename).
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut f = host::output::AtomicFile::create(path, host::Mode::Shared)?;
    {
        let mut w = std::io::BufWriter::new(&mut f);
        fill(&mut w).with_context(|| format!("cannot write {}", path.display()))?;
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    f.commit()?;
    Ok(())
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

/// Writes the results document to `path` in the form its extension names:
/// `.jsonl` JSON Lines, `.csv` tidy CSV, `.html`/`.htm` the HTML report,
/// anything else JSON.
pub fn write_results_as(path: &Path, doc: &ResultsDoc) -> Result<()> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jsonl" => write_with(path, |w| write_document(doc, Format::Jsonl, w)),
        "csv" => write_with(path, |w| write_document(doc, Format::Csv, w)),
        "html" | "htm" => {
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            write_atomically(path, crate::html::render(doc, &name).as_bytes())
        }
        _ => write_results(path, doc),
    }
}

/// Fails now, before any work, if `path` could not be written at the end.
pub fn check_out(path: Option<&Path>) -> Result<()> {
    if let Some(p) = path {
        host::output::check_writable(p, host::Mode::Shared)?;
    }
    Ok(())
}

/// The directory of `--report DIR`, created if missing.
pub fn report_dir(dir: &Path) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--report {}: cannot create the directory", dir.display()))?;
    check_out(Some(&dir.join("report.html")))?;
    Ok(dir.to_path_buf())
}

/// Writes `text` to `out` (atomically) or, without one, to stdout.
pub fn emit(out: Option<&Path>, text: &str) -> Result<()> {
    match out {
        Some(p) => write_atomically(p, text.as_bytes()),
        None => Ok(print(text)?),
    }
}

/// Makes a panic on a closed stdout (`print!` to `mmlab ... | head` in code
/// that does not return the error) end the process quietly with status 0,
/// as the returned errors do; every other panic keeps its message.
pub fn quiet_broken_pipe_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipe_is_found_inside_a_context_chain() {
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing the table");
        assert!(is_broken_pipe(&e));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
