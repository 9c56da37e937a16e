//! Import of perf.data files recorded with tracepoints, such as
//! `perf record -e kmem:mm_page_alloc -e kmem:mm_page_free [-a] -- CMD`.
//!
//! # How
//!
//! The perf.data container (header, attributes, sorted records) is read by
//! the `linux-perf-data` crate. Each tracepoint sample carries the
//! tracepoint's record as `PERF_SAMPLE_RAW`; its layout comes from the
//! `format` texts that perf copies into the `HEADER_TRACING_DATA` feature
//! section, parsed here (see [`parse_tracing_data`]). The records are then
//! decoded by the same [`Decoder`] as a live recording, so both sources give
//! the same events.
//!
//! # What is reported
//!
//! Samples of events mmlab does not use are counted by event name
//! (`sched:sched_switch` → 12,000), and the event kinds a replay would want
//! but the file lacks are listed as reduced replay capability.
//!
//! Deviation: only little-endian files are read (perf writes the host's
//! order; every host mmlab targets is little-endian).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use linux_perf_data::linux_perf_event_reader::{EventRecord, PerfEventType, RecordType};
use linux_perf_data::{Feature, PerfFileReader, PerfFileRecord};

use crate::decode::{Decoded, Decoder, RECORDED_EVENTS};
use crate::event::{Header, Knobs, Machine, TraceSource, Trailer, NR_EVENT_KINDS};
use crate::format::{TraceError, TraceWriter};
use crate::tracefs::{parse_format, EventFormat};

/// The tracepoints without which a replay cannot model the page allocator.
pub const REQUIRED_EVENTS: [&str; 2] = ["kmem:mm_page_alloc", "kmem:mm_page_free"];

/// Why a perf.data file could not be imported.
#[derive(Debug)]
pub enum PerfImportError {
    /// The file could not be opened.
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a perf.data file, or its header or attribute section
    /// is damaged.
    NotPerfData { path: PathBuf, what: String },
    /// A record in the data section could not be read (truncated or
    /// corrupted file). `record` is the number of records read before.
    Records {
        path: PathBuf,
        record: u64,
        what: String,
    },
    /// The file has no `HEADER_TRACING_DATA` section: it was not recorded
    /// with tracepoints.
    NoTracingData { path: PathBuf },
    /// The tracing-data section is damaged at `offset` (within the section).
    TracingData {
        path: PathBuf,
        offset: usize,
        what: String,
    },
    /// None of the file's events are tracepoints mmlab can use.
    NoUsableEvents { path: PathBuf, found: Vec<String> },
    /// The mmlab trace could not be written.
    Output { path: PathBuf, source: TraceError },
}

impl fmt::Display for PerfImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfImportError::Open { path, source } => write!(f, "{}: cannot open: {source}", path.display()),
            PerfImportError::NotPerfData { path, what } => {
                write!(f, "{}: not a readable perf.data file: {what}", path.display())
            }
            PerfImportError::Records { path, record, what } => {
                write!(f, "{}: data section damaged after {record} records: {what}", path.display())
            }
            PerfImportError::NoTracingData { path } => write!(
                f,
                "{}: no tracing data section; record with tracepoints, e.g. `perf record -e kmem:mm_page_alloc -e kmem:mm_page_free`",
                path.display()
            ),
            PerfImportError::TracingData { path, offset, what } => {
                write!(f, "{}: tracing data section damaged at byte {offset}: {what}", path.display())
            }
            PerfImportError::NoUsableEvents { path, found } => write!(
                f,
                "{}: none of its events ({}) are tracepoints mmlab replays (expected {})",
                path.display(),
                found.join(", "),
                REQUIRED_EVENTS.join(", ")
            ),
            PerfImportError::Output { path, source } => write!(f, "writing {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for PerfImportError {}

/// What an import produced.
#[derive(Clone, Debug, Default)]
pub struct ImportSummary {
    pub nr_events: u64,
    pub nr_events_by_kind: BTreeMap<&'static str, u64>,
    /// Samples of events mmlab does not use, by event name.
    pub ignored_events: BTreeMap<String, u64>,
    /// perf's LOST records: samples the kernel dropped.
    pub nr_lost_events: u64,
    pub nr_unpaired_syscalls: u64,
    /// Event kinds the file lacks, with what a replay loses.
    pub reduced_capability: Vec<String>,
    /// Kinds the file lacks, by tracepoint name (also in the trailer).
    pub missing_event_kinds: Vec<String>,
}

impl ImportSummary {
    /// One line per ignored event kind and per lost capability, for users.
    pub fn report(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .ignored_events
            .iter()
            .map(|(name, n)| format!("{n} events of kind {name} ignored"))
            .collect();
        lines.extend(self.reduced_capability.iter().cloned());
        if self.nr_lost_events > 0 {
            lines.push(format!(
                "{} events were lost while recording: the trace is incomplete",
                self.nr_lost_events
            ));
        }
        lines
    }
}

/// Parses a `HEADER_TRACING_DATA` section into the event formats it holds.
///
/// The section is perf's copy of tracefs: a magic, a version string, the
/// byte order, the page header and event header texts, the ftrace formats,
/// then per system the formats of its events.
pub fn parse_tracing_data(data: &[u8]) -> Result<Vec<EventFormat>, (usize, String)> {
    let mut r = SectionReader { data, pos: 0 };
    let magic = r.take(10, "magic")?;
    if magic != b"\x17\x08\x44tracing" {
        return Err((
            0,
            "expected the tracing-data magic \\x17\\x08Dtracing".into(),
        ));
    }
    let version = r.cstr("version")?;
    let big_endian = r.take(1, "endianness")?[0] != 0;
    if big_endian {
        return Err((r.pos - 1, "big-endian tracing data is not supported".into()));
    }
    let _long_size = r.take(1, "long size")?;
    let _page_size = r.u32("page size")?;
    let hp = r.cstr("header_page name")?;
    if hp != "header_page" {
        return Err((r.pos, format!("expected \"header_page\", found {hp:?}")));
    }
    let n = r.u64("header_page size")?;
    r.take_len(n, "header_page text")?;
    let he = r.cstr("header_event name")?;
    if he != "header_event" {
        return Err((r.pos, format!("expected \"header_event\", found {he:?}")));
    }
    let n = r.u64("header_event size")?;
    r.take_len(n, "header_event text")?;
    let nr_ftrace = r.u32("ftrace format count")?;
    for _ in 0..nr_ftrace {
        let n = r.u64("ftrace format size")?;
        r.take_len(n, "ftrace format")?;
    }
    let nr_systems = r.u32("event system count")?;
    let mut formats = Vec::new();
    for _ in 0..nr_systems {
        let system = r.cstr("event system name")?;
        let nr_events = r.u32("event count")?;
        for _ in 0..nr_events {
            let n = r.u64("event format size")?;
            let at = r.pos;
            let text = r.take_len(n, "event format")?;
            let text = String::from_utf8_lossy(text);
            formats.push(parse_format(&system, &text).map_err(|e| (at, e.to_string()))?);
        }
    }
    let _ = version;
    Ok(formats)
}

struct SectionReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> SectionReader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], (usize, String)> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| {
                (
                    self.pos,
                    format!(
                        "section ends inside {what} ({n} bytes needed, {} left)",
                        self.data.len() - self.pos
                    ),
                )
            })?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn take_len(&mut self, n: u64, what: &str) -> Result<&'a [u8], (usize, String)> {
        let n = usize::try_from(n)
            .map_err(|_| (self.pos, format!("{what} length {n} is impossible")))?;
        self.take(n, what)
    }

    fn u32(&mut self, what: &str) -> Result<u32, (usize, String)> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, (usize, String)> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    fn cstr(&mut self, what: &str) -> Result<String, (usize, String)> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| (self.pos, format!("{what} is not terminated")))?;
        let s = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }
}

/// Checks that every section a perf.data header names lies inside the file,
/// before the parser crate allocates buffers of the sizes it reads: a
/// corrupted size must be an error, not an allocation of exabytes.
fn validate_perf_file<R: Read + Seek>(r: &mut R) -> Result<(), String> {
    use std::io::SeekFrom;
    let len = r.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
    r.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut head = [0u8; 104];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    if got < 8 || (&head[..8] != b"PERFILE2" && &head[..8] != b"2ELIFREP") {
        return Err(format!(
            "expected the magic \"PERFILE2\" at byte 0, found {:?}",
            String::from_utf8_lossy(&head[..got.min(8)])
        ));
    }
    if &head[..8] == b"2ELIFREP" {
        return Err("big-endian perf.data files are not supported".to_string());
    }
    if got < head.len() {
        return Err(format!(
            "file of {len} bytes ends inside the 104-byte perf header"
        ));
    }
    let u = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let check = |name: &str, offset: u64, size: u64| -> Result<(), String> {
        match offset.checked_add(size) {
            Some(end) if end <= len => Ok(()),
            _ => Err(format!(
                "{name} section at byte {offset} of {size} bytes lies outside the {len}-byte file"
            )),
        }
    };
    // perf_event_attr has grown from 64 bytes (PERF_ATTR_SIZE_VER0) to
    // about 136; the parser divides the attrs section by this size, so 0
    // (found by fuzzing) must not reach it.
    let attr_size = u(16);
    if !(64..=4096).contains(&attr_size) {
        return Err(format!(
            "the header's attr_size is {attr_size}; expected the size of a perf_event_attr (64 to 4096 bytes)"
        ));
    }
    check("attrs", u(24), u(32))?;
    check("data", u(40), u(48))?;
    check("event types", u(56), u(64))?;
    let table = u(40) + u(48);
    // The feature bits, in order: the table has one entry per set bit.
    let bits: Vec<u32> = (0..256u32)
        .filter(|b| u(72 + 8 * (*b as usize / 64)) & (1 << (b % 64)) != 0)
        .collect();
    check("feature table", table, bits.len() as u64 * 16)?;
    r.seek(SeekFrom::Start(table)).map_err(|e| e.to_string())?;
    for bit in bits {
        let mut e = [0u8; 16];
        r.read_exact(&mut e).map_err(|e| e.to_string())?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&e[..8]);
        let offset = u64::from_le_bytes(b);
        b.copy_from_slice(&e[8..]);
        let size = u64::from_le_bytes(b);
        check(&format!("feature {bit}"), offset, size)?;
        if bit == 12 {
            let here = r.stream_position().map_err(|e| e.to_string())?;
            validate_event_desc(r, offset, size)?;
            r.seek(SeekFrom::Start(here)).map_err(|e| e.to_string())?;
        }
    }
    r.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    Ok(())
}

/// Walks `HEADER_EVENT_DESC` (nr, attr_size, then per event the attr, the
/// number of ids, a name and the ids) and checks that it stays inside its
/// section.
fn validate_event_desc<R: Read + Seek>(r: &mut R, offset: u64, size: u64) -> Result<(), String> {
    let err = |what: &str| format!("EVENT_DESC section: {what}");
    let size = usize::try_from(size).map_err(|_| err("too large"))?;
    r.seek(std::io::SeekFrom::Start(offset))
        .map_err(|e| e.to_string())?;
    let mut sec = vec![0u8; size];
    r.read_exact(&mut sec).map_err(|e| e.to_string())?;
    let u32_at = |at: usize| {
        sec.get(at..at.checked_add(4)?)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let short = || err("ends inside an event description");
    let nr = u32_at(0).ok_or_else(short)?;
    let attr_size = u32_at(4).ok_or_else(short)?;
    let mut pos = 8usize;
    for _ in 0..nr {
        pos = pos.checked_add(attr_size).ok_or_else(short)?;
        let nr_ids = u32_at(pos).ok_or_else(short)?;
        let str_len = u32_at(pos + 4).ok_or_else(short)?;
        pos = pos
            .checked_add(8)
            .and_then(|p| p.checked_add(str_len))
            .and_then(|p| p.checked_add(nr_ids.checked_mul(8)?))
            .filter(|&p| p <= size)
            .ok_or_else(short)?;
    }
    Ok(())
}

/// The perf command line from the `HEADER_CMDLINE` feature section: a u32
/// count, then per string a u32 length and that many bytes, NUL-padded.
///
/// Not `PerfFile::cmdline()`: linux-perf-data 0.13 reserves a vector of the
/// count read from the file before reading any string, so a damaged count
/// (found by fuzzing: 0x7830207c) asks for gigabytes and aborts the process.
/// Here the count is only trusted as far as the section can hold strings.
fn perf_cmdline(perf_file: &linux_perf_data::PerfFile) -> Option<String> {
    let data = perf_file.feature_section_data(Feature::CMDLINE)?;
    let big = perf_file.endian() == linux_perf_data::Endianness::BigEndian;
    let u32_at = |pos: usize| -> Option<usize> {
        let b: [u8; 4] = data.get(pos..pos.checked_add(4)?)?.try_into().ok()?;
        Some(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        } as usize)
    };
    let count = u32_at(0)?;
    // Each string takes at least its 4-byte length.
    if count > data.len() / 4 {
        return None;
    }
    let mut pos = 4usize;
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u32_at(pos)?;
        pos += 4;
        let bytes = data.get(pos..pos.checked_add(len)?)?;
        pos += len;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        words.push(String::from_utf8_lossy(&bytes[..end]).into_owned());
    }
    Some(words.join(" "))
}

/// What each missing kind costs a replay.
fn capability_loss(name: &str) -> &'static str {
    match name {
        "kmem:mm_page_alloc" | "kmem:mm_page_free" => "page allocator traffic cannot be replayed",
        "kmem:mm_page_alloc_zone_locked" => "zone-lock allocations cannot be validated",
        "kmem:mm_page_pcpu_drain" => "PCP drains cannot be validated",
        "exceptions:page_fault_user" => "page faults cannot be replayed (no touch stream)",
        "exceptions:page_fault_kernel" => {
            "the kernel's faults on user memory (read() into fresh buffers) are missing from pgfault"
        }
        "sched:sched_process_fork" | "sched:sched_process_exec" | "sched:sched_process_exit" => {
            "process lifecycle is inferred from pids only"
        }
        _ => "address-space system calls cannot be replayed",
    }
}

/// Imports the perf.data file `input` into the mmlab trace `output`.
///
/// The trace is written to a temporary file beside `output` and renamed over
/// it only when the import succeeded ([`crate::format::TraceFile`]): an input
/// that is rejected, at the magic check or half-way, leaves an existing
/// `output` as it was.
pub fn import(input: &Path, output: &Path) -> Result<ImportSummary, PerfImportError> {
    let out = crate::format::TraceFile::create(output).map_err(|e| PerfImportError::Output {
        path: output.to_path_buf(),
        source: TraceError::Io {
            offset: 0,
            source: e.into(),
        },
    })?;
    let f = File::open(input).map_err(|source| PerfImportError::Open {
        path: input.to_path_buf(),
        source,
    })?;
    let header_source = input.display().to_string();
    import_from(BufReader::new(f), input, &header_source, out, output).map(|(s, _)| s)
}

/// Imports from any seekable reader into any writer; `input` and `output`
/// only name them in errors. Returns the summary and the writer, completed
/// ([`crate::format::TraceSink::complete`]).
pub fn import_from<R: Read + Seek, W: crate::format::TraceSink>(
    reader: R,
    input: &Path,
    source_name: &str,
    out: W,
    output: &Path,
) -> Result<(ImportSummary, W), PerfImportError> {
    let path = || input.to_path_buf();
    let mut reader = reader;
    validate_perf_file(&mut reader)
        .map_err(|what| PerfImportError::NotPerfData { path: path(), what })?;
    // The parser crate has been seen to panic on damaged input that passes
    // the checks above (an arithmetic overflow); a panic there must not take
    // the caller down with it. This does not help under panic=abort.
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        PerfFileReader::parse_file(reader)
    }))
    .map_err(|_| PerfImportError::NotPerfData {
        path: path(),
        what: "the perf.data parser failed on malformed headers".to_string(),
    })?;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = parsed.map_err(|e| PerfImportError::NotPerfData {
        path: path(),
        what: e.to_string(),
    })?;
    let tracing = perf_file
        .feature_section_data(Feature::TRACING_DATA)
        .ok_or_else(|| PerfImportError::NoTracingData { path: path() })?;
    let formats =
        parse_tracing_data(tracing).map_err(|(offset, what)| PerfImportError::TracingData {
            path: path(),
            offset,
            what,
        })?;
    let by_id: BTreeMap<u32, &EventFormat> = formats.iter().map(|f| (f.id, f)).collect();

    // Per attribute: its tracepoint id (if a tracepoint) and its name.
    let mut attrs: Vec<(Option<u32>, String)> = Vec::new();
    for a in perf_file.event_attributes() {
        let id = match a.attributes().type_ {
            PerfEventType::Tracepoint(config) => u32::try_from(config).ok(),
            _ => None,
        };
        let name = a
            .name()
            .map(str::to_string)
            .or_else(|| id.and_then(|i| by_id.get(&i)).map(|f| f.full_name()))
            .unwrap_or_else(|| format!("event #{}", attrs.len()));
        attrs.push((id, name));
    }
    let mut decoder = Decoder::new(&formats);
    let present: Vec<String> = attrs
        .iter()
        .filter_map(|(id, _)| id.and_then(|i| by_id.get(&i)).map(|f| f.full_name()))
        .collect();
    if !present.iter().any(|n| decoder.handles(n)) {
        return Err(PerfImportError::NoUsableEvents {
            path: path(),
            found: attrs.iter().map(|(_, n)| n.clone()).collect(),
        });
    }
    // Kinds a replay wants that were not recorded. A system call needs both
    // its entry and its exit.
    let mut missing_event_kinds = Vec::new();
    for ev in RECORDED_EVENTS {
        if !present.iter().any(|p| p == ev) {
            missing_event_kinds.push(ev.to_string());
        }
    }
    let reduced_capability: Vec<String> = missing_event_kinds
        .iter()
        .map(|ev| {
            let required = if REQUIRED_EVENTS.contains(&ev.as_str()) {
                " (required)"
            } else {
                ""
            };
            format!("{ev} was not recorded{required}: {}", capability_loss(ev))
        })
        .collect();

    let cmdline = perf_cmdline(&perf_file);
    // `perf record -a` (or --all-cpus) records every process.
    let system_wide = cmdline
        .as_deref()
        .is_some_and(|c| c.split(' ').any(|w| w == "-a" || w == "--all-cpus"));
    let header = Header {
        mmlab_version: env!("CARGO_PKG_VERSION").to_string(),
        source: TraceSource::PerfImport {
            file: source_name.to_string(),
            perf_version: perf_file.perf_version().ok().flatten().map(str::to_string),
            cmdline,
        },
        kernel_release: perf_file.os_release().ok().flatten().map(str::to_string),
        machine: Machine {
            nr_cpus: perf_file
                .nr_cpus()
                .ok()
                .flatten()
                .map(|n| n.nr_cpus_online)
                .unwrap_or(0),
            zones: Vec::new(),
        },
        knobs: Knobs::default(),
        trace_clock: "perf".to_string(),
        counters_before: None,
        kmem_system_wide: system_wide,
    };
    let out_err = |source| PerfImportError::Output {
        path: output.to_path_buf(),
        source,
    };
    let mut writer = TraceWriter::new(out, &header).map_err(out_err)?;
    let mut by_kind = [0u64; NR_EVENT_KINDS];
    let mut ignored: BTreeMap<String, u64> = BTreeMap::new();
    let mut nr_lost = 0u64;
    let mut nr_records = 0u64;
    loop {
        let rec =
            record_iter
                .next_record(&mut perf_file)
                .map_err(|e| PerfImportError::Records {
                    path: path(),
                    record: nr_records,
                    what: e.to_string(),
                })?;
        let Some(rec) = rec else { break };
        nr_records += 1;
        let PerfFileRecord::EventRecord { attr_index, record } = rec else {
            continue;
        };
        // Only samples and lost-event records matter here. The others are
        // not parsed: linux-perf-event-reader 0.10 asserts on a damaged
        // MMAP2 build-id length (found by fuzzing), which would abort.
        if record.record_type != RecordType::SAMPLE && record.record_type != RecordType::LOST {
            continue;
        }
        let parsed = record.parse().map_err(|e| PerfImportError::Records {
            path: path(),
            record: nr_records - 1,
            what: e.to_string(),
        })?;
        let (attr_id, attr_name) = attrs
            .get(attr_index)
            .cloned()
            .unwrap_or((None, format!("event #{attr_index}")));
        match parsed {
            EventRecord::Sample(s) => {
                let (Some(id), Some(raw)) = (attr_id, s.raw) else {
                    *ignored.entry(attr_name).or_default() += 1;
                    continue;
                };
                let data = raw.as_slice();
                let tid = s.tid.unwrap_or(-1);
                let pid = s.pid.unwrap_or(tid);
                match decoder.decode(
                    s.timestamp.unwrap_or(0),
                    s.cpu.unwrap_or(0),
                    pid,
                    tid,
                    id,
                    &data,
                ) {
                    Decoded::Event(ev) => {
                        by_kind[ev.kind.code() as usize] += 1;
                        writer.write(&ev).map_err(out_err)?;
                    }
                    Decoded::Ignored(name) => *ignored.entry(name).or_default() += 1,
                    Decoded::Malformed(name) => {
                        *ignored.entry(format!("malformed {name}")).or_default() += 1
                    }
                    Decoded::Pending | Decoded::Unpaired => {}
                }
            }
            EventRecord::Lost(l) => nr_lost += l.count,
            _ => {}
        }
    }
    decoder.finish();
    let trailer = Trailer {
        nr_events: 0,
        nr_lost_events: nr_lost,
        nr_unpaired_syscalls: decoder.nr_unpaired_syscalls,
        ignored_events: ignored.clone(),
        missing_event_kinds: missing_event_kinds.clone(),
        counters_after: None,
        exit_status: None,
        interrupted: false,
        workload_minflt: None,
        workload_majflt: None,
    };
    let nr_events = writer.nr_events();
    let (out, _) = writer.finish(&trailer).map_err(out_err)?;
    let mut nr_events_by_kind = BTreeMap::new();
    for (code, n) in by_kind.iter().enumerate() {
        if *n > 0 {
            nr_events_by_kind.insert(crate::event::EventKind::name_of_code(code as u8), *n);
        }
    }
    Ok((
        ImportSummary {
            nr_events,
            nr_events_by_kind,
            ignored_events: ignored,
            nr_lost_events: nr_lost,
            nr_unpaired_syscalls: decoder.nr_unpaired_syscalls,
            reduced_capability,
            missing_event_kinds,
        },
        out,
    ))
}
