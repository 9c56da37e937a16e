//! The mmlab trace format: a compact, streaming, damage-tolerant binary file.
//!
//! # Layout
//!
//! ```text
//! file    := magic "MMLABTR\0" | version u16 | reserved u16
//!            | header_len u32 | header_crc u32 | header (JSON, header_len bytes)
//!            | chunk* | trailer
//! chunk   := 'C' | payload_len u32 | nr_events u32 | payload_crc u32 | payload
//! trailer := 'T' | payload_len u32 | payload_crc u32 | payload (JSON)
//! ```
//!
//! All integers in the framing are little-endian. A chunk's payload is a run
//! of event records, each `kind u8 | ts_delta | cpu | pid | tid - pid | fields`,
//! every number a LEB128 varint (signed ones zigzag-encoded). Timestamps,
//! pfns and addresses are stored as differences from the previous record of
//! the same chunk, which is what makes a typical event 6 to 10 bytes; the
//! differences restart at every chunk, so each chunk decodes on its own.
//!
//! # Why chunks with checksums
//!
//! A recording cut short (the disk filled, the machine stopped) or a file
//! damaged in transit must still give every event before the damage: the
//! reader checks each chunk's CRC-32 before it yields any of the chunk's
//! events, yields all whole chunks, and then reports where and what the
//! damage is. Memory stays bounded by one chunk ([`MAX_CHUNK_BYTES`]).

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use host::output::{AtomicFile, Mode, OutputError};

use crate::event::{Event, EventKind, ExecVma, Header, Trailer};

/// The first eight bytes of every mmlab trace.
pub const MAGIC: [u8; 8] = *b"MMLABTR\0";
/// The format version this code writes. Version 2 added the `ExecLayout`
/// event (kind 15); version 3 the perf records (`perf:mmap`, `perf:comm`)
/// and system call results that may be absent (a presence flag before
/// each `ret`). Older files read as before.
pub const VERSION: u16 = 3;
/// The oldest format version this code reads.
pub const MIN_VERSION: u16 = 1;
/// Most mappings one `ExecLayout` event may hold: a real exec makes a few
/// dozen; a corrupted count must not allocate gigabytes.
const MAX_EXEC_VMAS: u64 = 4096;
/// The writer closes a chunk once its payload reaches this size. 64 KiB keeps
/// the loss on damage small while the framing costs under 0.03 %.
pub const CHUNK_TARGET_BYTES: usize = 64 * 1024;
/// The largest chunk or header a reader accepts: a corrupted length must not
/// make the reader allocate gigabytes.
pub const MAX_CHUNK_BYTES: u32 = 16 * 1024 * 1024;
/// Longest exec filename stored; the kernel's own limit is `PATH_MAX`.
const MAX_FILENAME_BYTES: u64 = 4096;

const TAG_CHUNK: u8 = b'C';
const TAG_TRAILER: u8 = b'T';

/// Why a trace could not be read (or written).
#[derive(Debug)]
pub enum TraceError {
    /// The operating system failed a read or write at `offset`.
    Io { offset: u64, source: io::Error },
    /// The file does not start with [`MAGIC`]: it is not an mmlab trace.
    BadMagic { found: Vec<u8> },
    /// The file is an mmlab trace of a version this code does not read.
    UnsupportedVersion { found: u16, supported: u16 },
    /// The file ends at `offset`, inside something: `expected` says what.
    /// `record` is the number of events read before.
    Truncated {
        offset: u64,
        record: u64,
        expected: &'static str,
    },
    /// A chunk's (or the header's or trailer's) bytes do not match its
    /// checksum.
    ChecksumMismatch {
        offset: u64,
        record: u64,
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    /// Bytes that pass the checksum but do not decode (or an impossible
    /// length): `what` says which expectation failed.
    Corrupt {
        offset: u64,
        record: u64,
        what: String,
    },
    /// The header or trailer JSON does not describe a trace.
    Json {
        offset: u64,
        what: &'static str,
        source: serde_json::Error,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io { offset, source } => write!(f, "I/O error at byte {offset}: {source}"),
            TraceError::BadMagic { found } => write!(
                f,
                "not an mmlab trace: expected magic {:?} at byte 0, found {:?}",
                String::from_utf8_lossy(&MAGIC),
                String::from_utf8_lossy(found)
            ),
            TraceError::UnsupportedVersion { found, supported } => {
                write!(f, "mmlab trace version {found} is not supported (this build reads versions {MIN_VERSION} to {supported})")
            }
            TraceError::Truncated { offset, record, expected } => write!(
                f,
                "trace truncated at byte {offset} after {record} events: expected {expected}"
            ),
            TraceError::ChecksumMismatch { offset, record, what, stored, computed } => write!(
                f,
                "{what} at byte {offset} (after {record} events) is damaged: checksum {stored:#010x} stored, {computed:#010x} computed"
            ),
            TraceError::Corrupt { offset, record, what } => {
                write!(f, "corrupt trace at byte {offset}, event {record}: {what}")
            }
            TraceError::Json { offset, what, source } => {
                write!(f, "{what} at byte {offset} is not valid: {source}")
            }
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io { source, .. } => Some(source),
            TraceError::Json { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), the checksum of
/// zlib and gzip, so a chunk can be checked with common tools.
///
/// Computed eight bytes at a time ("slicing-by-8", Intel's 2008 technique):
/// table `k` gives the CRC of a byte followed by `k` zero bytes, so eight
/// lookups combine a whole 64-bit word. A trace reader checks every chunk,
/// and the byte-at-a-time loop was a third of its time in a replay.
pub fn crc32(bytes: &[u8]) -> u32 {
    const TABLES: [[u32; 256]; 8] = {
        let mut t = [[0u32; 256]; 8];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[0][i] = c;
            i += 1;
        }
        let mut i = 0;
        while i < 256 {
            let mut k = 1;
            while k < 8 {
                let prev = t[k - 1][i];
                t[k][i] = t[0][(prev & 0xff) as usize] ^ (prev >> 8);
                k += 1;
            }
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ crc;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        crc = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][(hi & 0xff) as usize]
            ^ TABLES[2][((hi >> 8) & 0xff) as usize]
            ^ TABLES[1][((hi >> 16) & 0xff) as usize]
            ^ TABLES[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        crc = TABLES[0][((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_signed(buf: &mut Vec<u8>, v: i64) {
    put_varint(buf, zigzag(v));
}

/// The state that record deltas are taken against; reset at every chunk.
#[derive(Default, Clone, Copy)]
struct DeltaState {
    ts_ns: u64,
    pfn: u64,
    address: u64,
}

impl DeltaState {
    fn put_pfn(&mut self, buf: &mut Vec<u8>, pfn: u64) {
        put_signed(buf, pfn.wrapping_sub(self.pfn) as i64);
        self.pfn = pfn;
    }

    fn put_addr(&mut self, buf: &mut Vec<u8>, address: u64) {
        put_signed(buf, address.wrapping_sub(self.address) as i64);
        self.address = address;
    }
}

fn encode_event(buf: &mut Vec<u8>, st: &mut DeltaState, ev: &Event) {
    buf.push(ev.kind.code());
    put_signed(buf, ev.ts_ns.wrapping_sub(st.ts_ns) as i64);
    st.ts_ns = ev.ts_ns;
    put_varint(buf, ev.cpu as u64);
    put_signed(buf, ev.pid as i64);
    put_signed(buf, ev.tid as i64 - ev.pid as i64);
    ev.kind.encode_fields(&mut FieldWriter { buf, st });
}

/// The encoder of an event's fields, one method per codec of the event
/// table (`event_kinds!` in `event.rs`); [`FieldReader`] has the decoders
/// of the same names.
pub(crate) struct FieldWriter<'a> {
    buf: &'a mut Vec<u8>,
    st: &'a mut DeltaState,
}

impl FieldWriter<'_> {
    /// A page frame number, as a difference from the previous one.
    pub(crate) fn pfn(&mut self, v: &u64) {
        self.st.put_pfn(self.buf, *v);
    }

    /// A user address, as a difference from the previous one.
    pub(crate) fn addr(&mut self, v: &u64) {
        self.st.put_addr(self.buf, *v);
    }

    pub(crate) fn u64(&mut self, v: &u64) {
        put_varint(self.buf, *v);
    }

    pub(crate) fn u32(&mut self, v: &u32) {
        put_varint(self.buf, *v as u64);
    }

    pub(crate) fn i32(&mut self, v: &i32) {
        put_signed(self.buf, *v as i64);
    }

    pub(crate) fn i64(&mut self, v: &i64) {
        put_signed(self.buf, *v);
    }

    pub(crate) fn bool(&mut self, v: &bool) {
        put_varint(self.buf, *v as u64);
    }

    /// A string of at most [`MAX_FILENAME_BYTES`] bytes (longer ones are
    /// cut: the kernel's own limit is `PATH_MAX`).
    pub(crate) fn str(&mut self, v: &str) {
        let bytes = v.as_bytes();
        let len = bytes.len().min(MAX_FILENAME_BYTES as usize);
        put_varint(self.buf, len as u64);
        self.buf.extend_from_slice(&bytes[..len]);
    }

    /// The mappings of an exec: their number (at most [`MAX_EXEC_VMAS`]),
    /// then each one's fields.
    pub(crate) fn exec_vmas(&mut self, vmas: &[ExecVma]) {
        let n = vmas.len().min(MAX_EXEC_VMAS as usize);
        put_varint(self.buf, n as u64);
        for v in &vmas[..n] {
            for x in [v.start, v.len, v.pgoff, v.prot as u64, v.flags as u64] {
                put_varint(self.buf, x);
            }
            self.str(&v.name);
        }
    }

    /// A system call's return value, absent when its exit was not recorded:
    /// a presence flag, then the value (version 3; before, no flag).
    pub(crate) fn ret(&mut self, v: &Option<i64>) {
        match v {
            Some(r) => {
                self.buf.push(1);
                put_signed(self.buf, *r);
            }
            None => self.buf.push(0),
        }
    }
}

/// Writes an mmlab trace, one chunk at a time.
///
/// Invariant: at most one chunk of events is held in memory; [`TraceWriter::finish`]
/// must be called to write the last chunk and the trailer (a writer dropped
/// without it leaves a file that reads as truncated, which is what it is).
pub struct TraceWriter<W: Write> {
    out: W,
    chunk: Vec<u8>,
    nr_chunk_events: u32,
    state: DeltaState,
    nr_events: u64,
    nr_bytes: u64,
}

impl TraceWriter<TraceFile> {
    /// Starts the trace file `path` (see [`TraceFile`]) and writes the header.
    /// The file appears at `path` when [`TraceWriter::finish`] returns `Ok`.
    pub fn create(path: &Path, header: &Header) -> Result<Self, TraceError> {
        let file = TraceFile::create(path).map_err(|e| TraceError::Io {
            offset: 0,
            source: e.into(),
        })?;
        TraceWriter::new(file, header)
    }
}

/// Where a [`TraceWriter`] writes: what [`TraceWriter::finish`] does last.
pub trait TraceSink: Write {
    /// Makes the written bytes final (by default, flushes them).
    fn complete(&mut self) -> io::Result<()> {
        self.flush()
    }
}

impl TraceSink for Vec<u8> {}
impl TraceSink for io::Sink {}
impl TraceSink for File {}
impl<W: Write> TraceSink for BufWriter<W> {}

/// A trace file being written: owner-only (mode 0600, since a trace shows
/// the commands a user ran and the addresses of their processes), written
/// to an unpredictable temporary file beside `path` and renamed over it when
/// the trace is complete ([`host::output`]). Until then an existing file at
/// `path` is untouched; dropped before, nothing is left behind.
pub struct TraceFile {
    out: Option<BufWriter<AtomicFile>>,
}

impl TraceFile {
    /// Checks `path` (not a directory, in a directory that exists and is
    /// writable) and creates the temporary file. Call before the work that
    /// produces the trace.
    pub fn create(path: &Path) -> Result<TraceFile, OutputError> {
        let f = AtomicFile::create(path, Mode::Private)?;
        Ok(TraceFile {
            out: Some(BufWriter::with_capacity(256 * 1024, f)),
        })
    }

    fn out(&mut self) -> io::Result<&mut BufWriter<AtomicFile>> {
        self.out
            .as_mut()
            .ok_or_else(|| io::Error::other("the trace file is already complete"))
    }
}

impl Write for TraceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out()?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out()?.flush()
    }
}

impl TraceSink for TraceFile {
    /// Flushes, `fsync`s and renames the trace into place.
    fn complete(&mut self) -> io::Result<()> {
        let out = self
            .out
            .take()
            .ok_or_else(|| io::Error::other("completed twice"))?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.commit().map_err(io::Error::from)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the magic, version and header to `out`.
    pub fn new(mut out: W, header: &Header) -> Result<Self, TraceError> {
        let json = serde_json::to_vec(header).map_err(|source| TraceError::Json {
            offset: 20,
            what: "trace header",
            source,
        })?;
        let mut head = Vec::with_capacity(20 + json.len());
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&(json.len() as u32).to_le_bytes());
        head.extend_from_slice(&crc32(&json).to_le_bytes());
        head.extend_from_slice(&json);
        out.write_all(&head)
            .map_err(|source| TraceError::Io { offset: 0, source })?;
        Ok(TraceWriter {
            out,
            chunk: Vec::with_capacity(CHUNK_TARGET_BYTES + 256),
            nr_chunk_events: 0,
            state: DeltaState::default(),
            nr_events: 0,
            nr_bytes: head.len() as u64,
        })
    }

    /// Appends one event.
    pub fn write(&mut self, ev: &Event) -> Result<(), TraceError> {
        encode_event(&mut self.chunk, &mut self.state, ev);
        self.nr_chunk_events += 1;
        self.nr_events += 1;
        if self.chunk.len() >= CHUNK_TARGET_BYTES {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Events written so far.
    pub fn nr_events(&self) -> u64 {
        self.nr_events
    }

    fn flush_chunk(&mut self) -> Result<(), TraceError> {
        if self.nr_chunk_events == 0 {
            return Ok(());
        }
        let mut frame = [0u8; 13];
        frame[0] = TAG_CHUNK;
        frame[1..5].copy_from_slice(&(self.chunk.len() as u32).to_le_bytes());
        frame[5..9].copy_from_slice(&self.nr_chunk_events.to_le_bytes());
        frame[9..13].copy_from_slice(&crc32(&self.chunk).to_le_bytes());
        let offset = self.nr_bytes;
        self.out
            .write_all(&frame)
            .and_then(|()| self.out.write_all(&self.chunk))
            .map_err(|source| TraceError::Io { offset, source })?;
        self.nr_bytes += (frame.len() + self.chunk.len()) as u64;
        self.chunk.clear();
        self.nr_chunk_events = 0;
        self.state = DeltaState::default();
        Ok(())
    }
}

impl<W: TraceSink> TraceWriter<W> {
    /// Writes the last chunk and the trailer (with `nr_events` filled in),
    /// completes the sink ([`TraceSink::complete`]: a [`TraceFile`] is
    /// renamed into place), and returns the output and the total bytes
    /// written.
    pub fn finish(mut self, trailer: &Trailer) -> Result<(W, u64), TraceError> {
        self.flush_chunk()?;
        let mut trailer = trailer.clone();
        trailer.nr_events = self.nr_events;
        let offset = self.nr_bytes;
        let json = serde_json::to_vec(&trailer).map_err(|source| TraceError::Json {
            offset,
            what: "trace trailer",
            source,
        })?;
        let mut frame = Vec::with_capacity(9 + json.len());
        frame.push(TAG_TRAILER);
        frame.extend_from_slice(&(json.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32(&json).to_le_bytes());
        frame.extend_from_slice(&json);
        self.out
            .write_all(&frame)
            .and_then(|()| self.out.complete())
            .map_err(|source| TraceError::Io { offset, source })?;
        self.nr_bytes += frame.len() as u64;
        Ok((self.out, self.nr_bytes))
    }
}

/// A cursor over one chunk's payload that turns a short read into an error
/// naming the offset.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    base_offset: u64,
    record: u64,
}

impl Cursor<'_> {
    fn corrupt(&self, what: String) -> TraceError {
        TraceError::Corrupt {
            offset: self.base_offset + self.pos as u64,
            record: self.record,
            what,
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, TraceError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.corrupt(format!("chunk ends inside an event: expected {what}")))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline(always)]
    fn varint(&mut self, what: &str) -> Result<u64, TraceError> {
        // Fast paths (most fields are one byte; a varint has at most ten):
        // no per-byte end check when the whole varint lies in the chunk.
        // Anything unusual (the chunk's end, an overlong varint) takes the
        // checked loop below, which names the error.
        if let Some(&b) = self.bytes.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(b as u64);
            }
        }
        // Up to eight bytes from one word, inline as well (addresses, pfns
        // and times are several bytes; a call per field cost the replay
        // ~10 % of its instructions).
        if let Some(v) = self.varint_word() {
            return Ok(v);
        }
        self.varint_long(what)
    }

    /// [`Cursor::varint`] of more than one byte, out of line so that the
    /// one-byte case inlines into the decoder.
    #[inline(never)]
    fn varint_long(&mut self, what: &str) -> Result<u64, TraceError> {
        if let Some(v) = self.varint_word() {
            return Ok(v);
        }
        if let Some(bytes) = self.bytes.get(self.pos..self.pos.saturating_add(10)) {
            let mut v = 0u64;
            for (i, &b) in bytes.iter().enumerate() {
                v |= ((b & 0x7f) as u64) << (7 * i);
                if b & 0x80 == 0 {
                    if i == 9 && b > 1 {
                        break;
                    }
                    self.pos += i + 1;
                    return Ok(v);
                }
            }
        }
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err(self.corrupt(format!("varint for {what} is longer than 64 bits")))
    }

    /// A varint of at most eight bytes that lies whole in the chunk, read as
    /// one little-endian word: the first byte without its continuation bit
    /// ends it, and the 7-bit groups are packed together in three steps
    /// (pairs, quads, the two halves). `None` (nothing consumed) when eight
    /// bytes do not remain or all eight continue: the byte loops take it.
    #[inline(always)]
    fn varint_word(&mut self) -> Option<u64> {
        let word: [u8; 8] = self.bytes.get(self.pos..self.pos + 8)?.try_into().ok()?;
        let w = u64::from_le_bytes(word);
        let ends = !w & 0x8080_8080_8080_8080;
        if ends == 0 {
            return None;
        }
        let len = ends.trailing_zeros() / 8 + 1;
        let keep = if len == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * len)) - 1
        };
        let mut x = w & keep & 0x7f7f_7f7f_7f7f_7f7f;
        x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
        x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
        x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
        self.pos += len as usize;
        Some(x)
    }

    #[inline(always)]
    fn signed(&mut self, what: &str) -> Result<i64, TraceError> {
        Ok(unzigzag(self.varint(what)?))
    }

    #[inline(always)]
    fn u32(&mut self, what: &str) -> Result<u32, TraceError> {
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| self.too_wide(what, v as i128))
    }

    #[inline(always)]
    fn i32(&mut self, what: &str) -> Result<i32, TraceError> {
        let v = self.signed(what)?;
        i32::try_from(v).map_err(|_| self.too_wide(what, v as i128))
    }

    /// The error of a 32-bit field whose value `v` is wider (out of line:
    /// the decoders inline the fields' fast paths).
    #[cold]
    #[inline(never)]
    fn too_wide(&self, what: &str, v: i128) -> TraceError {
        self.corrupt(format!("{what} {v} does not fit in 32 bits"))
    }

    #[inline]
    fn pfn(&mut self, st: &mut DeltaState) -> Result<u64, TraceError> {
        st.pfn = st.pfn.wrapping_add(self.signed("pfn")? as u64);
        Ok(st.pfn)
    }

    #[inline]
    fn addr(&mut self, st: &mut DeltaState, what: &str) -> Result<u64, TraceError> {
        st.address = st.address.wrapping_add(self.signed(what)? as u64);
        Ok(st.address)
    }

    #[inline]
    fn decode_event(&mut self, st: &mut DeltaState, version: u16) -> Result<Event, TraceError> {
        let code = self.u8("event kind")?;
        st.ts_ns = st.ts_ns.wrapping_add(self.signed("timestamp")? as u64);
        let ts_ns = st.ts_ns;
        let cpu = self.u32("cpu")?;
        let pid = self.i32("pid")?;
        let tid_delta = self.signed("tid")?;
        let tid = i32::try_from(pid as i64 + tid_delta).map_err(|_| {
            self.corrupt(format!(
                "tid {} does not fit in 32 bits",
                pid as i64 + tid_delta
            ))
        })?;
        let mut fields = FieldReader {
            cur: self,
            st,
            version,
        };
        let Some(kind) = EventKind::decode_fields(code, &mut fields)? else {
            return Err(self.corrupt(format!(
                "unknown event kind {code} (expected 0..={})",
                crate::event::NR_EVENT_KINDS - 1
            )));
        };
        Ok(Event {
            ts_ns,
            cpu,
            pid,
            tid,
            kind,
        })
    }
}

/// The decoder of an event's fields: the codecs of [`FieldWriter`], each
/// naming the field in its error.
pub(crate) struct FieldReader<'c, 'b> {
    cur: &'c mut Cursor<'b>,
    st: &'c mut DeltaState,
    /// The file's format version (it changes how `ret` is stored).
    version: u16,
}

impl FieldReader<'_, '_> {
    #[inline]
    pub(crate) fn pfn(&mut self, _what: &str) -> Result<u64, TraceError> {
        self.cur.pfn(self.st)
    }

    #[inline]
    pub(crate) fn addr(&mut self, what: &str) -> Result<u64, TraceError> {
        self.cur.addr(self.st, what)
    }

    #[inline]
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, TraceError> {
        self.cur.varint(what)
    }

    #[inline]
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, TraceError> {
        self.cur.u32(what)
    }

    #[inline]
    pub(crate) fn i32(&mut self, what: &str) -> Result<i32, TraceError> {
        self.cur.i32(what)
    }

    #[inline]
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, TraceError> {
        self.cur.signed(what)
    }

    #[inline]
    pub(crate) fn bool(&mut self, what: &str) -> Result<bool, TraceError> {
        Ok(self.cur.varint(what)? != 0)
    }

    pub(crate) fn str(&mut self, what: &str) -> Result<String, TraceError> {
        let len = self.cur.varint(what)?;
        let c = &mut *self.cur;
        let end = usize::try_from(len)
            .ok()
            .filter(|&l| len <= MAX_FILENAME_BYTES && c.pos + l <= c.bytes.len())
            .map(|l| c.pos + l)
            .ok_or_else(|| c.corrupt(format!("{what} of {len} bytes does not fit the chunk")))?;
        let s = String::from_utf8_lossy(&c.bytes[c.pos..end]).into_owned();
        c.pos = end;
        Ok(s)
    }

    pub(crate) fn exec_vmas(&mut self, _what: &str) -> Result<Vec<ExecVma>, TraceError> {
        let n = self.cur.varint("number of exec mappings")?;
        if n > MAX_EXEC_VMAS {
            return Err(self.cur.corrupt(format!(
                "an exec layout of {n} mappings (at most {MAX_EXEC_VMAS})"
            )));
        }
        let mut vmas = Vec::with_capacity(n as usize);
        for _ in 0..n {
            vmas.push(ExecVma {
                start: self.cur.varint("mapping start")?,
                len: self.cur.varint("mapping length")?,
                pgoff: self.cur.varint("mapping pgoff")?,
                prot: self.cur.u32("mapping prot")?,
                flags: self.cur.u32("mapping flags")?,
                name: self.str("mapping name")?,
            });
        }
        Ok(vmas)
    }

    pub(crate) fn ret(&mut self, what: &str) -> Result<Option<i64>, TraceError> {
        if self.version < 3 {
            return self.cur.signed(what).map(Some);
        }
        match self.cur.u8(what)? {
            0 => Ok(None),
            1 => self.cur.signed(what).map(Some),
            other => Err(self
                .cur
                .corrupt(format!("{what}: presence flag {other} (expected 0 or 1)"))),
        }
    }
}

/// Reads an mmlab trace as a stream of events.
///
/// Memory holds one chunk at a time, whatever the trace's length. After the
/// first error the iterator ends; the events before the damage have all been
/// yielded. A file that ends cleanly between chunks but without its trailer
/// is reported as truncated after its last event.
pub struct TraceReader<R: Read> {
    input: R,
    header: Header,
    trailer: Option<Trailer>,
    offset: u64,
    nr_events: u64,
    chunk: Vec<u8>,
    chunk_offset: u64,
    pos: usize,
    chunk_events_left: u32,
    state: DeltaState,
    /// The file's format version.
    version: u16,
    done: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens the trace at `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Io { offset: 0, source })?;
        TraceReader::new(BufReader::with_capacity(256 * 1024, file))
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on end of file before the
/// first byte, `Truncated` on end of file after it.
fn read_full<R: Read>(
    input: &mut R,
    buf: &mut [u8],
    offset: u64,
    record: u64,
    expected: &'static str,
) -> Result<bool, TraceError> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(TraceError::Truncated {
                    offset: offset + got as u64,
                    record,
                    expected,
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(TraceError::Io {
                    offset: offset + got as u64,
                    source,
                })
            }
        }
    }
    Ok(true)
}

/// [`read_full`] where the end of the input is as much an error as a short
/// read: the whole of `buf` (`expected` at `offset`) must be there.
fn read_exact_at<R: Read>(
    input: &mut R,
    buf: &mut [u8],
    offset: u64,
    record: u64,
    expected: &'static str,
) -> Result<(), TraceError> {
    if read_full(input, buf, offset, record, expected)? {
        Ok(())
    } else {
        Err(TraceError::Truncated {
            offset,
            record,
            expected,
        })
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl<R: Read> TraceReader<R> {
    /// Reads and checks the magic, version and header.
    pub fn new(mut input: R) -> Result<Self, TraceError> {
        let mut head = [0u8; 20];
        let mut got = 0;
        // A short file is most often not a trace at all: report the magic
        // when even that is incomplete or wrong.
        while got < head.len() {
            match input.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Io {
                        offset: got as u64,
                        source,
                    })
                }
            }
        }
        if got < 8 || head[..8] != MAGIC {
            return Err(TraceError::BadMagic {
                found: head[..got.min(8)].to_vec(),
            });
        }
        if got < head.len() {
            return Err(TraceError::Truncated {
                offset: got as u64,
                record: 0,
                expected: "the trace header",
            });
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(TraceError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let len = le_u32(&head[12..16]);
        let stored = le_u32(&head[16..20]);
        if len > MAX_CHUNK_BYTES {
            return Err(TraceError::Corrupt {
                offset: 12,
                record: 0,
                what: format!("header length {len} exceeds the limit of {MAX_CHUNK_BYTES} bytes"),
            });
        }
        let mut json = vec![0u8; len as usize];
        if !read_full(&mut input, &mut json, 20, 0, "the trace header")? && len > 0 {
            return Err(TraceError::Truncated {
                offset: 20,
                record: 0,
                expected: "the trace header",
            });
        }
        let computed = crc32(&json);
        if computed != stored {
            return Err(TraceError::ChecksumMismatch {
                offset: 20,
                record: 0,
                what: "trace header",
                stored,
                computed,
            });
        }
        let header = serde_json::from_slice(&json).map_err(|source| TraceError::Json {
            offset: 20,
            what: "trace header",
            source,
        })?;
        Ok(TraceReader {
            input,
            header,
            trailer: None,
            offset: 20 + len as u64,
            nr_events: 0,
            chunk: Vec::new(),
            chunk_offset: 0,
            pos: 0,
            chunk_events_left: 0,
            state: DeltaState::default(),
            version,
            done: false,
        })
    }

    /// The trace header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The trailer, once the iterator has reached the end of a whole file.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    /// The header and the trailer (if the end was reached), taking the
    /// reader apart (no copy of their counters).
    pub fn into_header_trailer(self) -> (Header, Option<Trailer>) {
        (self.header, self.trailer)
    }

    /// Events yielded so far.
    pub fn nr_events_read(&self) -> u64 {
        self.nr_events
    }

    /// Reads the next frame: a chunk (`Ok(true)`), or the trailer or a clean
    /// end (`Ok(false)`).
    fn next_frame(&mut self) -> Result<bool, TraceError> {
        let mut tag = [0u8; 1];
        read_exact_at(
            &mut self.input,
            &mut tag,
            self.offset,
            self.nr_events,
            "a chunk or the trailer",
        )?;
        match tag[0] {
            TAG_CHUNK => self.read_chunk(),
            TAG_TRAILER => self.read_trailer(),
            other => Err(TraceError::Corrupt {
                offset: self.offset,
                record: self.nr_events,
                what: format!(
                    "expected a chunk ('C') or the trailer ('T'), found byte {other:#04x}"
                ),
            }),
        }
    }

    /// Reads a chunk's frame and payload (its tag already read) and checks
    /// its size and checksum.
    fn read_chunk(&mut self) -> Result<bool, TraceError> {
        let mut frame = [0u8; 12];
        read_exact_at(
            &mut self.input,
            &mut frame,
            self.offset + 1,
            self.nr_events,
            "a chunk frame",
        )?;
        let len = le_u32(&frame[0..4]);
        let nr = le_u32(&frame[4..8]);
        let stored = le_u32(&frame[8..12]);
        if len > MAX_CHUNK_BYTES || nr == 0 || nr > len {
            return Err(TraceError::Corrupt {
                offset: self.offset + 1,
                record: self.nr_events,
                what: format!(
                    "chunk frame says {nr} events in {len} bytes (limit {MAX_CHUNK_BYTES})"
                ),
            });
        }
        self.chunk.resize(len as usize, 0);
        let payload_offset = self.offset + 13;
        read_exact_at(
            &mut self.input,
            &mut self.chunk,
            payload_offset,
            self.nr_events,
            "a chunk payload",
        )?;
        let computed = crc32(&self.chunk);
        if computed != stored {
            return Err(TraceError::ChecksumMismatch {
                offset: self.offset,
                record: self.nr_events,
                what: "chunk",
                stored,
                computed,
            });
        }
        self.chunk_offset = payload_offset;
        self.offset = payload_offset + len as u64;
        self.pos = 0;
        self.chunk_events_left = nr;
        self.state = DeltaState::default();
        Ok(true)
    }

    /// Reads the trailer (its tag already read), checks its checksum and
    /// that it counts the events read.
    fn read_trailer(&mut self) -> Result<bool, TraceError> {
        let mut frame = [0u8; 8];
        read_exact_at(
            &mut self.input,
            &mut frame,
            self.offset + 1,
            self.nr_events,
            "the trailer frame",
        )?;
        let len = le_u32(&frame[0..4]);
        let stored = le_u32(&frame[4..8]);
        if len > MAX_CHUNK_BYTES {
            return Err(TraceError::Corrupt {
                offset: self.offset + 1,
                record: self.nr_events,
                what: format!("trailer length {len} exceeds the limit of {MAX_CHUNK_BYTES} bytes"),
            });
        }
        let mut json = vec![0u8; len as usize];
        read_exact_at(
            &mut self.input,
            &mut json,
            self.offset + 9,
            self.nr_events,
            "the trailer",
        )?;
        let computed = crc32(&json);
        if computed != stored {
            return Err(TraceError::ChecksumMismatch {
                offset: self.offset,
                record: self.nr_events,
                what: "trailer",
                stored,
                computed,
            });
        }
        let trailer: Trailer =
            serde_json::from_slice(&json).map_err(|source| TraceError::Json {
                offset: self.offset + 9,
                what: "trace trailer",
                source,
            })?;
        if trailer.nr_events != self.nr_events {
            return Err(TraceError::Corrupt {
                offset: self.offset,
                record: self.nr_events,
                what: format!(
                    "trailer counts {} events but the file holds {}",
                    trailer.nr_events, self.nr_events
                ),
            });
        }
        self.trailer = Some(trailer);
        Ok(false)
    }

    #[inline]
    fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.chunk_events_left == 0 {
            if self.pos != self.chunk.len() {
                return Err(TraceError::Corrupt {
                    offset: self.chunk_offset + self.pos as u64,
                    record: self.nr_events,
                    what: format!(
                        "{} bytes left over after the chunk's last event",
                        self.chunk.len() - self.pos
                    ),
                });
            }
            if !self.next_frame()? {
                return Ok(None);
            }
        }
        let mut cur = Cursor {
            bytes: &self.chunk,
            pos: self.pos,
            base_offset: self.chunk_offset,
            record: self.nr_events,
        };
        let ev = cur.decode_event(&mut self.state, self.version)?;
        self.pos = cur.pos;
        self.chunk_events_left -= 1;
        self.nr_events += 1;
        Ok(Some(ev))
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_event() {
            Ok(Some(ev)) => Some(Ok(ev)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded list of events of every kind (xorshift64*, Vigna 2016), so
    /// that round trips cover large and negative deltas.
    pub(crate) fn sample_events(seed: u64, n: usize) -> Vec<Event> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut ts = 1_000_000u64;
        (0..n)
            .map(|i| {
                ts += next() % 5000;
                let r = next();
                let kind = match i % 18 {
                    0 => EventKind::PageAlloc {
                        pfn: r % (1 << 36),
                        order: (r % 11) as u32,
                        migratetype: 1,
                        gfp_flags: 0x140dca,
                    },
                    1 => EventKind::PageFree {
                        pfn: r % (1 << 36),
                        order: 0,
                    },
                    2 => EventKind::PageAllocZoneLocked {
                        pfn: r >> 30,
                        order: 3,
                        migratetype: 0,
                        percpu_refill: r & 1 == 1,
                    },
                    3 => EventKind::PagePcpuDrain {
                        pfn: r >> 40,
                        order: 0,
                        migratetype: 2,
                    },
                    4 => EventKind::PageFaultUser {
                        address: r & 0x7fff_ffff_f000,
                        ip: r >> 20,
                        error_code: 6,
                    },
                    5 => EventKind::Mmap {
                        addr: 0,
                        len: 1 << 30,
                        prot: 3,
                        flags: 0x22,
                        fd: u64::MAX,
                        off: 0,
                        ret: Some((r >> 17) as i64),
                    },
                    6 => EventKind::Munmap {
                        addr: r >> 16,
                        len: 4096,
                        ret: if r & 1 == 0 { Some(-22) } else { None },
                    },
                    7 => EventKind::Brk {
                        brk: r >> 20,
                        ret: Some((r >> 20) as i64),
                    },
                    8 => EventKind::Mremap {
                        addr: r >> 16,
                        old_len: 4096,
                        new_len: 8192,
                        flags: 1,
                        new_addr: 0,
                        ret: Some(-12),
                    },
                    9 => EventKind::Mprotect {
                        start: r >> 16,
                        len: 4096,
                        prot: 1,
                        ret: Some(0),
                    },
                    10 => EventKind::Madvise {
                        start: r >> 16,
                        len_in: 1 << 21,
                        behavior: 14,
                        ret: Some(0),
                    },
                    11 => EventKind::Fork {
                        parent: 100,
                        child: (r % 40000) as i32,
                    },
                    12 => EventKind::Exec {
                        pid: 101,
                        filename: format!("/usr/bin/prog{}", r % 100),
                    },
                    13 => EventKind::PageFaultKernel {
                        address: r & 0x7fff_ffff_f000,
                        ip: r >> 20,
                        error_code: 2,
                    },
                    14 => EventKind::MmapRecord {
                        addr: r & 0x7fff_ffff_f000,
                        len: 1 << 21,
                        pgoff: r >> 50,
                        prot: 3,
                        flags: 2,
                        filename: if r & 1 == 0 {
                            "//anon"
                        } else {
                            "/usr/lib/libc.so.6"
                        }
                        .to_string(),
                    },
                    16 => EventKind::ExecLayout {
                        pid: 101,
                        vmas: (0..r % 4)
                            .map(|k| ExecVma {
                                start: 0x5555_0000_0000 + k * 0x1000,
                                len: 0x1000,
                                pgoff: k,
                                prot: 5,
                                flags: 2,
                                name: "/usr/bin/prog".into(),
                            })
                            .collect(),
                    },
                    15 => EventKind::Comm {
                        comm: format!("cc1-{}", r % 7),
                        exec: r & 2 != 0,
                    },
                    _ => EventKind::Exit {
                        pid: (r % 40000) as i32,
                    },
                };
                Event {
                    ts_ns: ts,
                    cpu: (r % 4) as u32,
                    pid: 100 + (r % 3) as i32,
                    tid: 100 + (r % 5) as i32,
                    kind,
                }
            })
            .collect()
    }

    pub(crate) fn write_to_vec(events: &[Event]) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), &Header::synthetic("test"))
            .expect("writing to a Vec cannot fail");
        for ev in events {
            w.write(ev).expect("writing to a Vec cannot fail");
        }
        let trailer = Trailer {
            nr_lost_events: 3,
            ..Trailer::default()
        };
        w.finish(&trailer).expect("writing to a Vec cannot fail").0
    }

    #[test]
    fn varint_and_zigzag_round_trip_extremes() {
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN, 1 << 40] {
            let mut buf = Vec::new();
            put_signed(&mut buf, v);
            let mut cur = Cursor {
                bytes: &buf,
                pos: 0,
                base_offset: 0,
                record: 0,
            };
            assert_eq!(cur.signed("v").expect("valid varint"), v);
            assert_eq!(cur.pos, buf.len());
        }
    }

    #[test]
    fn varints_decode_the_same_with_and_without_the_fast_path() {
        let dec = |bytes: &[u8]| {
            let mut cur = Cursor {
                bytes,
                pos: 0,
                base_offset: 0,
                record: 0,
            };
            cur.varint("v")
                .map(|v| (v, cur.pos))
                .map_err(|e| e.to_string())
        };
        let mut max = vec![0xff; 9];
        max.push(0x01);
        for tail in [&[][..], &[0x05, 0x06, 0x07][..], &[0u8; 12][..]] {
            // The whole varint in the chunk (fast path) or at its very end
            // (checked path): the same value and length.
            let mut b = max.clone();
            b.extend_from_slice(tail);
            assert_eq!(dec(&b), Ok((u64::MAX, 10)));
            let mut b = vec![0x80, 0x01];
            b.extend_from_slice(tail);
            assert_eq!(dec(&b), Ok((128, 2)));
            // Overlong: an eleventh byte, or a tenth above 1.
            let mut b = vec![0xff; 9];
            b.push(0x02);
            b.extend_from_slice(tail);
            assert!(dec(&b).unwrap_err().contains("longer than 64 bits"));
            let mut b = vec![0xff; 10];
            b.push(0x00);
            b.extend_from_slice(tail);
            assert!(dec(&b).unwrap_err().contains("longer than 64 bits"));
        }
        assert!(dec(&[0x80, 0x80])
            .unwrap_err()
            .contains("chunk ends inside"));
    }

    /// The word-at-a-time path gives the value and length of the plain
    /// byte loop for every length of varint and every number of bytes
    /// after it in the chunk, and the same error (text and offset) for
    /// varints cut short by the chunk's end.
    #[test]
    fn varints_of_every_length_decode_as_the_byte_loop_does() {
        let by_bytes = |bytes: &[u8]| -> Result<(u64, usize), String> {
            let mut v = 0u64;
            for (i, &b) in bytes.iter().enumerate().take(10) {
                v |= ((b & 0x7f) as u64) << (7 * i);
                if b & 0x80 == 0 {
                    return Ok((v, i + 1));
                }
            }
            Err("short".into())
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for bits in 0..=64u32 {
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = if bits == 0 {
                    0
                } else {
                    (x >> (64 - bits)) | (1u64 << (bits - 1))
                };
                let mut enc = Vec::new();
                put_varint(&mut enc, v);
                for pad in 0..=10 {
                    let mut b = enc.clone();
                    b.extend(std::iter::repeat_n(0x81u8, pad));
                    let mut cur = Cursor {
                        bytes: &b,
                        pos: 0,
                        base_offset: 100,
                        record: 3,
                    };
                    let got = cur.varint("v").map(|v| (v, cur.pos));
                    assert_eq!(got.ok(), by_bytes(&b).ok(), "{v:#x} + {pad} bytes");
                    assert_eq!(by_bytes(&b), Ok((v, enc.len())));
                }
                for cut in 1..enc.len() {
                    let mut cur = Cursor {
                        bytes: &enc[..cut],
                        pos: 0,
                        base_offset: 100,
                        record: 3,
                    };
                    let e = cur.varint("v").unwrap_err().to_string();
                    assert!(e.contains("chunk ends inside an event: expected v"), "{e}");
                    assert!(e.contains(&format!("at byte {}", 100 + cut)), "{e}");
                }
            }
        }
    }

    #[test]
    fn version_1_and_2_records_have_a_result_without_a_presence_flag() {
        // munmap(0x1000, 0x2000) = -22 as version 1 wrote it: kind 6, ts
        // delta, cpu, pid, tid - pid, addr delta, len, ret (all varints).
        let mut b = vec![6u8];
        put_signed(&mut b, 5);
        put_varint(&mut b, 1);
        put_signed(&mut b, 7);
        put_signed(&mut b, 0);
        put_signed(&mut b, 0x1000);
        put_varint(&mut b, 0x2000);
        put_signed(&mut b, -22);
        let decode = |version| {
            let mut cur = Cursor {
                bytes: &b,
                pos: 0,
                base_offset: 0,
                record: 0,
            };
            cur.decode_event(&mut DeltaState::default(), version)
                .map(|e| (e.kind, cur.pos))
        };
        let (kind, used) = decode(1).expect("a version-1 record");
        assert_eq!(used, b.len());
        assert_eq!(
            kind,
            EventKind::Munmap {
                addr: 0x1000,
                len: 0x2000,
                ret: Some(-22)
            }
        );
        // Version 2 stored it the same way; read as version 3 the same
        // bytes are damaged: the zigzag of -22 (43) is no presence flag.
        assert_eq!(decode(2).expect("version 2").0, kind);
        assert!(decode(3).is_err());
    }

    #[test]
    fn the_event_table_names_every_code_once() {
        let names: std::collections::BTreeSet<&str> = (0..crate::event::NR_EVENT_KINDS as u8)
            .map(EventKind::name_of_code)
            .collect();
        assert_eq!(names.len(), crate::event::NR_EVENT_KINDS);
        assert!(!names.contains("unknown"));
        for c in 0..crate::event::NR_EVENT_KINDS as u8 {
            assert_eq!(EventKind::code_of_name(EventKind::name_of_code(c)), Some(c));
        }
        assert_eq!(
            EventKind::name_of_code(crate::event::NR_EVENT_KINDS as u8),
            "unknown"
        );
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        // The check value of CRC-32/ISO-HDLC for "123456789".
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn crc32_by_words_matches_the_bitwise_definition() {
        fn bitwise(bytes: &[u8]) -> u32 {
            let mut crc = !0u32;
            for &b in bytes {
                crc ^= b as u32;
                for _ in 0..8 {
                    crc = if crc & 1 != 0 {
                        0xEDB8_8320 ^ (crc >> 1)
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let bytes: Vec<u8> = (0..300)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        // Every length from empty to several words, and every misalignment.
        for start in 0..9 {
            for end in start..bytes.len() {
                assert_eq!(crc32(&bytes[start..end]), bitwise(&bytes[start..end]));
            }
        }
    }

    #[test]
    fn round_trip_preserves_every_event_and_the_trailer() {
        let events = sample_events(7, 50_000);
        let bytes = write_to_vec(&events);
        let mut reader = TraceReader::new(&bytes[..]).expect("header is valid");
        let back: Vec<Event> = reader
            .by_ref()
            .collect::<Result<_, _>>()
            .expect("file is whole");
        assert_eq!(back, events);
        let trailer = reader.trailer().expect("trailer present");
        assert_eq!(trailer.nr_events, 50_000);
        assert_eq!(trailer.nr_lost_events, 3);
        assert_eq!(reader.header().source, Header::synthetic("test").source);
    }

    #[test]
    fn truncated_file_yields_whole_chunks_then_names_the_offset() {
        let events = sample_events(3, 40_000);
        let bytes = write_to_vec(&events);
        let cut = bytes.len() * 2 / 3;
        let mut got = 0usize;
        let mut err = None;
        for item in TraceReader::new(&bytes[..cut]).expect("header is whole") {
            match item {
                Ok(ev) => {
                    assert_eq!(ev, events[got], "event {got} differs");
                    got += 1;
                }
                Err(e) => err = Some(e),
            }
        }
        assert!(got > 0 && got < events.len(), "got {got} events");
        match err {
            Some(TraceError::Truncated { offset, record, .. }) => {
                assert!(offset <= cut as u64);
                assert_eq!(record, got as u64);
            }
            other => panic!("expected Truncated, got {other:?}"),
        }
    }

    #[test]
    fn flipped_byte_is_caught_by_the_chunk_checksum() {
        let events = sample_events(5, 30_000);
        let mut bytes = write_to_vec(&events);
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        let results: Vec<_> = TraceReader::new(&bytes[..])
            .expect("header intact")
            .collect();
        let last = results.last().expect("at least the error");
        assert!(
            matches!(
                last,
                Err(TraceError::ChecksumMismatch { what: "chunk", .. })
            ),
            "got {last:?}"
        );
        let nr_ok = results.iter().filter(|r| r.is_ok()).count();
        assert!(nr_ok < events.len());
        for (i, r) in results.iter().take(nr_ok).enumerate() {
            assert_eq!(r.as_ref().ok(), Some(&events[i]));
        }
    }

    #[test]
    fn foreign_file_is_rejected_by_magic() {
        let err = TraceReader::new(&b"PERFILE2 and then some more bytes"[..]).err();
        assert!(
            matches!(err, Some(TraceError::BadMagic { .. })),
            "got {err:?}"
        );
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("not an mmlab trace"), "{msg}");
    }

    #[test]
    fn missing_trailer_is_reported_after_the_last_event() {
        let events = sample_events(9, 10);
        let mut w = TraceWriter::new(Vec::new(), &Header::synthetic("t")).expect("vec");
        for ev in &events {
            w.write(ev).expect("vec");
        }
        w.flush_chunk().expect("vec");
        let bytes = w.out;
        let results: Vec<_> = TraceReader::new(&bytes[..]).expect("header").collect();
        assert_eq!(results.len(), 11);
        assert!(matches!(
            results[10],
            Err(TraceError::Truncated { record: 10, .. })
        ));
    }

    #[test]
    fn written_file_is_private_to_its_owner() {
        use std::os::unix::fs::PermissionsExt;
        let dir = host::scratch::ScratchDir::new("trace-mode").expect("scratch dir");
        let path = dir.join("t.mmtrace");
        std::fs::write(&path, b"old").expect("temp file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let w = TraceWriter::create(&path, &Header::synthetic("mode")).expect("create");
        w.finish(&Trailer::default()).expect("finish");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let n = TraceReader::open(&path).expect("open").count();
        assert_eq!(n, 0);
    }
}
