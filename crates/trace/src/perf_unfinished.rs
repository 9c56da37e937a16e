//! perf.data files whose header perf never finished.
//!
//! # Why
//!
//! `perf record` writes its header twice: a provisional one when it
//! starts (the attributes, the data section's offset, a data size of 0)
//! and the final one when it stops (the data size, then the feature
//! sections after the data: the tracepoint formats, the event names, the
//! command line, the machine). A perf killed with SIGKILL, by the OOM
//! killer, or a file copied while perf still ran, has the provisional
//! header and no feature sections; `perf report` warns that the data size
//! is 0 and reads the records to the end of the file. So does the import
//! here: every record header is checked as for a finished file, a last
//! record cut short by the kill is dropped with a warning naming its
//! offset, and the header is patched in memory (data size, no features)
//! for the parser.
//!
//! What such a file lacks, the import takes from this host: the tracepoint
//! formats and names come from its tracefs, matched by the tracepoint ids
//! in the attributes. That is right only for a file recorded on this host
//! since its last boot (ids are given out at boot); the import says so.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::decode::RECORDED_EVENTS;
use crate::tracefs::{parse_format, EventFormat};

/// The provisional header's data section, read to the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfinished {
    /// Bytes of whole records from the data section's offset.
    pub data_size: u64,
    pub nr_records: u64,
    /// A last record cut short: its byte offset in the file, the size its
    /// header gives (0 when the header itself is cut) and the bytes left.
    pub cut: Option<(u64, u64, u64)>,
}

impl Unfinished {
    /// What the import says about the file.
    pub fn warnings(&self, formats_from: Option<&Path>) -> Vec<String> {
        let mut w = vec![format!(
            "the perf.data header was never finished (perf was killed?): its data size is 0 and it has \
             no feature sections; read {} records to the end of the file, as perf report does",
            self.nr_records
        )];
        match self.cut {
            Some((at, 0, left)) => w.push(format!(
                "the last record, at byte {at}, is cut inside its 8-byte header ({left} bytes): dropped"
            )),
            Some((at, len, left)) => w.push(format!(
                "the last record, at byte {at}, is cut: its header says {len} bytes, the file ends \
                 {left} bytes into it: dropped"
            )),
            None => {}
        }
        if let Some(dir) = formats_from {
            w.push(format!(
                "the tracepoint names and formats are not in the file: taken from this host's {} by \
                 the ids in the file's attributes (right only for a file recorded on this host since \
                 its last boot); the command line and the machine are unknown",
                dir.display()
            ));
        }
        w
    }
}

/// Walks the records of a data section that starts at `offset` and whose
/// size the header does not give, to the end of the file (`file_len`):
/// each header is checked as in a finished file; a last record that the
/// end of the file cuts is left out.
pub fn walk_to_eof<R: Read + Seek>(
    r: &mut R,
    offset: u64,
    file_len: u64,
) -> Result<Unfinished, String> {
    let mut r = std::io::BufReader::with_capacity(1 << 16, r);
    r.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
    let (mut at, mut n) = (offset, 0u64);
    let mut cut = None;
    while at < file_len {
        let record =
            |what: String| format!("data section damaged: record {n} at byte {at}: {what}");
        let left = file_len - at;
        if left < 8 {
            cut = Some((at, 0, left));
            break;
        }
        let mut h = [0u8; 8];
        r.read_exact(&mut h).map_err(|e| record(e.to_string()))?;
        let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let len = u16::from_le_bytes([h[6], h[7]]) as u64;
        super::perf::check_record_header(kind, len).map_err(record)?;
        if len > left {
            cut = Some((at, len, left));
            break;
        }
        r.seek_relative(len as i64 - 8)
            .map_err(|e| record(e.to_string()))?;
        at += len;
        n += 1;
    }
    Ok(Unfinished {
        data_size: at - offset,
        nr_records: n,
        cut,
    })
}

/// A reader that shows the parser a finished header: bytes `[0, 104)` of
/// the file replaced by `header`.
pub struct PatchedHeader<R> {
    inner: R,
    pos: u64,
    header: Option<[u8; 104]>,
}

impl<R: Read + Seek> PatchedHeader<R> {
    /// `inner` as it is.
    pub fn unchanged(inner: R) -> Self {
        PatchedHeader {
            inner,
            pos: 0,
            header: None,
        }
    }

    /// `inner` with the header's data size set and its feature bits
    /// cleared (the feature sections were never written).
    pub fn finished(mut inner: R, data_size: u64) -> std::io::Result<Self> {
        let mut h = [0u8; 104];
        inner.seek(SeekFrom::Start(0))?;
        inner.read_exact(&mut h)?;
        h[48..56].copy_from_slice(&data_size.to_le_bytes());
        h[72..104].fill(0);
        inner.seek(SeekFrom::Start(0))?;
        Ok(PatchedHeader {
            inner,
            pos: 0,
            header: Some(h),
        })
    }
}

impl<R: Read + Seek> Read for PatchedHeader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &self.header {
            for (i, b) in buf[..n].iter_mut().enumerate() {
                let at = self.pos + i as u64;
                if at >= 104 {
                    break;
                }
                *b = h[at as usize];
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for PatchedHeader<R> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

/// The tracefs directories tried for the host's event formats.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The formats of the tracepoints mmlab replays from an `events/`
/// directory of tracefs (or a copy of it: `cp -r /sys/kernel/tracing/events
/// DIR`); those it cannot read are left out.
pub fn tracefs_formats(events: &Path) -> Vec<EventFormat> {
    RECORDED_EVENTS
        .iter()
        .filter_map(|ev| {
            let (system, name) = ev.split_once(':')?;
            let text =
                std::fs::read_to_string(events.join(system).join(name).join("format")).ok()?;
            parse_format(system, &text).ok()
        })
        .collect()
}

/// [`tracefs_formats`] of this host, with the directory they came from.
pub fn host_formats() -> Option<(PathBuf, Vec<EventFormat>)> {
    TRACEFS.iter().find_map(|root| {
        let dir = Path::new(root).join("events");
        let formats = tracefs_formats(&dir);
        (!formats.is_empty()).then_some((dir, formats))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn rec(kind: u32, len: u16) -> Vec<u8> {
        let mut v = kind.to_le_bytes().to_vec();
        v.extend(0u16.to_le_bytes());
        v.extend(len.to_le_bytes());
        v.resize(len as usize, 0xab);
        v
    }

    #[test]
    fn records_to_the_end_and_a_cut_last_one_dropped() {
        let mut f = vec![0u8; 16];
        f.extend(rec(9, 40));
        f.extend(rec(3, 24));
        let whole = f.len() as u64;
        f.extend(&rec(9, 48)[..20]);
        let u = walk_to_eof(&mut Cursor::new(&f), 16, f.len() as u64).unwrap();
        assert_eq!(u.data_size, whole - 16);
        assert_eq!(u.nr_records, 2);
        assert_eq!(u.cut, Some((whole, 48, 20)));
        // Cut inside the header.
        let g = &f[..whole as usize + 5];
        let u = walk_to_eof(&mut Cursor::new(g), 16, g.len() as u64).unwrap();
        assert_eq!(u.cut, Some((whole, 0, 5)));
        // A damaged header before the end is an error, not a cut.
        let mut h = f[..whole as usize].to_vec();
        h[16 + 40 + 6] = 4;
        let e = walk_to_eof(&mut Cursor::new(&h), 16, h.len() as u64).unwrap_err();
        assert!(e.contains("record 1 at byte 56"), "{e}");
    }

    #[test]
    fn the_patched_header_shows_the_size_and_no_features() {
        let mut f = vec![7u8; 200];
        let mut r = PatchedHeader::finished(Cursor::new(&mut f), 1234).unwrap();
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(&got[48..56], &1234u64.to_le_bytes());
        assert!(got[72..104].iter().all(|&b| b == 0));
        assert_eq!(&got[104..], &[7u8; 96][..]);
        r.seek(SeekFrom::Start(48)).unwrap();
        let mut b = [0u8; 2];
        r.read_exact(&mut b).unwrap();
        assert_eq!(b, [0xd2, 0x04]);
    }
}
