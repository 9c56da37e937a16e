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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use linux_perf_data::linux_perf_event_reader::{EventRecord, PerfEventType, RecordType};
use linux_perf_data::{Feature, PerfFileReader, PerfFileRecord};

use crate::decode::{Decoded, Decoder, RECORDED_EVENTS};
use crate::elf_layout::{complete_from_elf, read_head};
use crate::event::{
    Counters, Event, EventKind, ExecVma, Header, Knobs, Machine, TraceSource, Trailer,
    NR_EVENT_KINDS,
};
use crate::format::{TraceError, TraceWriter};
use crate::perf_unfinished::{
    host_formats, tracefs_formats, walk_to_eof, PatchedHeader, Unfinished,
};
use crate::perf_workload::WorkloadTree;
use crate::sysinfo::ZoneinfoSnapshot;
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
    /// A snapshot given with the import (`--zoneinfo`, ...) is damaged, or
    /// from another machine or kernel than the perf.data: `line` (1-based,
    /// 0 for the file as a whole) says where.
    Snapshot {
        path: PathBuf,
        line: usize,
        what: String,
    },
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
            PerfImportError::Snapshot { path, line: 0, what } => write!(f, "{}: {what}", path.display()),
            PerfImportError::Snapshot { path, line, what } => {
                write!(f, "{}: line {line}: {what}", path.display())
            }
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
    /// System calls recorded at their entry only (`munmap`, ...): replayed
    /// with the model's result.
    pub entry_only_syscalls: Vec<&'static str>,
    /// Of the `mmap`s without their exit, those whose address a
    /// `PERF_RECORD_MMAP2` gave.
    pub nr_mmaps_placed_by_records: u64,
    /// The recorded command's pid and the processes and threads of its
    /// tree, when the file says which it is (perf's `perf-exec` child).
    pub workload_tree: Option<(i32, usize)>,
    /// Faults, calls and task events of other processes left out
    /// (`perf record -a`); their allocator events are kept.
    pub nr_other_process_events: u64,
    /// Faults and memory calls of perf's own child before it exec'd the
    /// command, left out (see `perf_workload`).
    pub nr_perf_child_events: u64,
    /// How the file was read: a header perf never finished, a cut last
    /// record, formats taken from this host.
    pub warnings: Vec<String>,
    /// Without `-d`: the execs whose layout the ELF files on this host
    /// completed, of those seen.
    pub execs_from_elf: (u64, u64),
}

impl ImportSummary {
    /// One line per ignored event kind and per lost capability, for users.
    pub fn report(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.warnings.clone();
        lines.extend(
            self.ignored_events
                .iter()
                .map(|(name, n)| format!("{n} events of kind {name} ignored")),
        );
        match self.workload_tree {
            Some((pid, n)) if self.nr_other_process_events > 0 => lines.push(format!(
                "the recorded command is pid {pid} ({n} processes and threads in its tree): \
                 {} fault, call and task events of other processes left out (perf record -a), \
                 their page allocator events kept",
                self.nr_other_process_events
            )),
            None => lines.push(
                "no perf-exec process (perf record without a command, or -p): \
                 every process's faults and calls are replayed"
                    .to_string(),
            ),
            _ => {}
        }
        if self.nr_perf_child_events > 0 {
            lines.push(format!(
                "{} faults and calls of perf's own child before it exec'd the command left out \
                 (perf's code, not the command's; a recording without -a never has them)",
                self.nr_perf_child_events
            ));
        }
        lines.extend(self.reduced_capability.iter().cloned());
        if self.execs_from_elf.1 > 0 {
            lines.push(format!(
                "{} of {} execs: their data segments and .bss taken from the ELF files on this host \
                 (recorded without -d; a file changed since the recording gives a wrong layout); \
                 the stack's place is unknown, its faults are carried over",
                self.execs_from_elf.0, self.execs_from_elf.1
            ));
        }
        if self.nr_lost_events > 0 {
            lines.push(format!(
                "{} events were lost while recording: the trace is incomplete (perf could not write \
                 them out in time; record again with larger ring buffers, e.g. perf record -m 128M, \
                 and without -a unless the PCP counters are to be validated)",
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
///
/// A file whose header perf never finished (data size 0) is read to its
/// end ([`crate::perf_unfinished`]): what was found is returned.
fn validate_perf_file<R: Read + Seek>(r: &mut R) -> Result<Option<Unfinished>, String> {
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
    if u(48) == 0 {
        // perf's provisional header: read the records to the end.
        let data_at = u(40);
        let u = walk_to_eof(r, data_at, len)?;
        if u.nr_records == 0 {
            return Err(format!(
                "the header says the data section is empty and no whole record follows it at byte {}: \
                 perf record was stopped before it wrote any, or recorded nothing",
                data_at
            ));
        }
        r.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        return Ok(Some(u));
    }
    validate_records(r, u(40), u(48))?;
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
    Ok(None)
}

/// Checks one record header: a perf record type, and at least its own 8
/// bytes.
pub(crate) fn check_record_header(kind: u32, len: u64) -> Result<(), String> {
    if !(1..=31).contains(&kind) && !(64..=127).contains(&kind) {
        return Err(format!(
            "type {kind} is not a perf record type (expected 1-31, or 64-127 for perf's own)"
        ));
    }
    if len < 8 {
        return Err(format!("size {len} is smaller than its 8-byte header"));
    }
    Ok(())
}

/// Walks the record headers of the data section (`[offset, offset +
/// size)`): each must be at least its own 8 bytes, of a perf record type,
/// and end inside the section, the last one exactly at its end. A damaged
/// size would otherwise make the parser skip or misread the records after
/// it (a size of 0: read the same record forever). Reads the headers only.
fn validate_records<R: Read + Seek>(r: &mut R, offset: u64, size: u64) -> Result<(), String> {
    use std::io::{BufReader, SeekFrom};
    let mut r = BufReader::with_capacity(1 << 16, r);
    r.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
    let end = offset + size;
    let (mut at, mut n) = (offset, 0u64);
    while at < end {
        let record =
            |what: String| format!("data section damaged: record {n} at byte {at}: {what}");
        if end - at < 8 {
            return Err(record(format!(
                "the section ends {} bytes into its 8-byte header",
                end - at
            )));
        }
        let mut h = [0u8; 8];
        r.read_exact(&mut h).map_err(|e| record(e.to_string()))?;
        let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let len = u16::from_le_bytes([h[6], h[7]]) as u64;
        check_record_header(kind, len).map_err(record)?;
        if len > end - at {
            return Err(record(format!(
                "its {len} bytes run past the end of the data section at byte {end}"
            )));
        }
        r.seek_relative(len as i64 - 8)
            .map_err(|e| record(e.to_string()))?;
        at += len;
        n += 1;
    }
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

/// What a replay loses when the tracepoint `name` was not recorded, given
/// the tracepoints that were (`present`) and whether perf's own task
/// records (fork, exit, comm) are in the file.
fn capability_loss(name: &str, present: &[String], task_records: bool) -> String {
    let has = |n: &str| present.iter().any(|p| p == n);
    let call = |dir: &str| {
        name.strip_prefix("syscalls:sys_")
            .and_then(|r| r.strip_prefix(dir))
    };
    if let Some(c) = call("exit_") {
        if has(&format!("syscalls:sys_enter_{c}")) {
            return match c {
                "mmap" => "mmap is replayed at its entry: its address comes from the PERF_RECORD_MMAP2 \
                           right after it (perf record -d), else from the model's own placement (faults \
                           there then pass through unchanged)"
                    .into(),
                "brk" => "brk is replayed at its entry with the model's result; the heap's start comes \
                          from a [heap] PERF_RECORD_MMAP2 (perf record -d), else the heap is not modelled"
                    .into(),
                "mremap" => "mremap is replayed at its entry with the model's result: a moved range lands \
                             where the model puts it, not where the kernel did"
                    .into(),
                _ => format!(
                    "{c} is replayed at its entry with the model's result (nothing to check it against)"
                ),
            };
        }
        return format!("{c} results are not recorded (nor its entries: see sys_enter_{c})");
    }
    if let Some(c) = call("enter_") {
        return match c {
            "mmap" => "mmaps are not replayed: mappings made during the recording are not in the model \
                       and their faults pass through unchanged under every kernel"
                .into(),
            "munmap" => "munmaps are not replayed: unmapped memory stays mapped in the model, so a later \
                         mapping there keeps the old pages and absorbs its faults"
                .into(),
            "brk" => "brk is not replayed: the heap is not modelled and its faults pass through".into(),
            "mremap" => "mremaps are not replayed: moved and resized mappings keep their old extent".into(),
            "mprotect" => "mprotects are not replayed: PROT_NONE reservations opened later (malloc arenas, \
                           thread stacks) make the model's faults there SIGSEGVs"
                .into(),
            _ => "madvise is not replayed: MADV_DONTNEED, MADV_HUGEPAGE and MADV_NOHUGEPAGE are not applied"
                .into(),
        };
    }
    match name {
        "kmem:mm_page_alloc" => "page allocator traffic cannot be replayed (mode a), and the kernel's faults \
             on user memory cannot be estimated where exceptions:page_fault_kernel is missing too"
            .into(),
        "kmem:mm_page_free" => "page allocator traffic cannot be replayed (mode a)".into(),
        "kmem:mm_page_alloc_zone_locked" => "zone-lock allocations cannot be validated".into(),
        "kmem:mm_page_pcpu_drain" => "PCP drains cannot be validated".into(),
        "workqueue:workqueue_execute_start" => "the per-CPU vmstat work's times are not known: the model's \
             vmstat work (decay_pcp_high() and its PCP drains) runs on its own one-second grid, not at the \
             recorded phase (record it with --filter 'function.function == vmstat_update')"
            .into(),
        "exceptions:page_fault_user" => "page faults cannot be replayed (no touch stream)".into(),
        "exceptions:page_fault_kernel" if has("kmem:mm_page_alloc") => {
            "the kernel's faults on user memory (read() into fresh buffers, 0.1-18 % of a program's faults) \
             are not replayed; replay and validate print an ESTIMATE of their number from the zeroed pages \
             the allocator gave the processes that no user fault explains (error -1 % to +1 % of the faults \
             on recordings that hold both), and each kernel's pgfault with it, in a band"
                .into()
        }
        "exceptions:page_fault_kernel" => "the kernel's faults on user memory (read() into fresh buffers, \
             0.1-18 % of a program's faults) are not replayed, and without kmem:mm_page_alloc not estimated \
             either: every predicted pgfault is short by them"
            .into(),
        "sched:sched_process_exec" if task_records => {
            "execs come from perf's PERF_RECORD_COMM (exec): named by the 15-byte comm, before the new \
             image's mappings"
                .into()
        }
        "sched:sched_process_fork" | "sched:sched_process_exit" if task_records => {
            "forks and exits come from perf's PERF_RECORD_FORK/EXIT".into()
        }
        _ => "process lifecycle is inferred from pids only".into(),
    }
}

/// What an import of one file knows before reading its records.
struct Prelude {
    /// Per attribute: its tracepoint id (if a tracepoint) and its name.
    attrs: Vec<(Option<u32>, String)>,
    /// The tracepoints recorded, by full name.
    present: Vec<String>,
    /// `perf record -d`: data and anonymous mappings are reported.
    mmap_data: bool,
}

/// The attributes of the file and what they say.
fn prelude(
    perf_file: &linux_perf_data::PerfFile,
    by_id: &BTreeMap<u32, &EventFormat>,
    opts: &ImportOptions,
) -> Prelude {
    let mut attrs: Vec<(Option<u32>, String)> = Vec::new();
    let mut mmap_data = false;
    for a in perf_file.event_attributes() {
        let attr = a.attributes();
        mmap_data |= attr
            .flags
            .contains(linux_perf_data::linux_perf_event_reader::AttrFlags::MMAP_DATA);
        let id = match attr.type_ {
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
    let present = attrs
        .iter()
        .filter_map(|(id, _)| id.and_then(|i| by_id.get(&i)).map(|f| f.full_name()))
        .collect();
    Prelude {
        attrs,
        present,
        mmap_data: mmap_data && !opts.ignores("perf:mmap-data") && !opts.ignores("perf:mmap"),
    }
}

/// The trace header of an imported file.
fn import_header(perf_file: &linux_perf_data::PerfFile, source_name: &str) -> Header {
    let cmdline = perf_cmdline(perf_file);
    // `perf record -a` (or --all-cpus) records every process.
    let system_wide = cmdline
        .as_deref()
        .is_some_and(|c| c.split(' ').any(|w| w == "-a" || w == "--all-cpus"));
    Header {
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
        snapshot_at_exec: false,
    }
}

/// `major.minor` of a kernel release (`6.18.44-fc` → (6, 18)).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Rejects a zoneinfo that cannot describe the machine and kernel the
/// perf.data was recorded on: another number of CPUs, a pageset format of
/// another kernel generation (`high_min`/`high_max` appeared in 6.7), or
/// another amount of memory (perf's `MemTotal` must lie between 80 % and
/// 101 % of the zones' present pages: the kernel's reservations and
/// firmware holes take up to a few percent, a balloon more).
fn check_zoneinfo(
    perf_file: &linux_perf_data::PerfFile,
    path: &Path,
    snap: &ZoneinfoSnapshot,
) -> Result<(), PerfImportError> {
    let err = |line: usize, what: String| PerfImportError::Snapshot {
        path: path.to_path_buf(),
        line,
        what,
    };
    let cpu_line = snap.first_cpu_line;
    if let Some(n) = perf_file.nr_cpus().ok().flatten() {
        if snap.nr_cpus() != 0 && snap.nr_cpus() != n.nr_cpus_available {
            return Err(err(
                cpu_line,
                format!(
                    "the pagesets are of {} CPUs, the perf.data's machine has {}: a zoneinfo of another machine",
                    snap.nr_cpus(),
                    n.nr_cpus_available
                ),
            ));
        }
    }
    let release = perf_file.os_release().ok().flatten().unwrap_or("");
    if let Some(v) = kernel_version(release) {
        let autotune = v >= (6, 7);
        if cpu_line != 0 && autotune != snap.has_high_min() {
            return Err(err(
                cpu_line,
                format!(
                    "the pagesets {} high_min/high_max, which Linux 6.7 and later print and earlier kernels                      do not; the perf.data's kernel is {release}: a zoneinfo of another kernel",
                    if snap.has_high_min() { "have" } else { "lack" }
                ),
            ));
        }
    }
    if let Some(total_kib) = perf_file.total_mem().ok().flatten() {
        let present = snap.present_kib();
        if present > 0 && (total_kib * 100 > present * 101 || total_kib * 100 < present * 80) {
            return Err(err(
                snap.zone_lines.first().copied().unwrap_or(0),
                format!(
                    "the zones hold {} MiB of memory, the perf.data's machine has {} MiB (MemTotal):                      a zoneinfo of another machine",
                    present / 1024,
                    total_kib / 1024
                ),
            ));
        }
    }
    Ok(())
}

/// Opens and checks a perf.data file: its reader, record iterator and
/// tracepoint formats.
fn open_perf<R: Read + Seek>(
    mut reader: R,
    input: &Path,
    formats_dir: Option<&Path>,
) -> Result<OpenedPerf<R>, PerfImportError> {
    let path = || input.to_path_buf();
    let unfinished = validate_perf_file(&mut reader)
        .map_err(|what| PerfImportError::NotPerfData { path: path(), what })?;
    let reader = match &unfinished {
        Some(u) => PatchedHeader::finished(reader, u.data_size).map_err(|e| {
            PerfImportError::NotPerfData {
                path: path(),
                what: e.to_string(),
            }
        })?,
        None => PatchedHeader::unchanged(reader),
    };
    // The parser crate has been seen to panic on damaged input that passes
    // the checks above (an arithmetic overflow); a panic there must not take
    // the caller down with it. This does not help under panic=abort.
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        PerfFileReader::parse_file(reader)
    }))
    .map_err(|_| PerfImportError::NotPerfData {
        path: path(),
        what: "the perf.data parser failed on malformed headers".to_string(),
    })?
    .map_err(|e| PerfImportError::NotPerfData {
        path: path(),
        what: e.to_string(),
    })?;
    let Some(u) = unfinished else {
        let tracing = parsed
            .perf_file
            .feature_section_data(Feature::TRACING_DATA)
            .ok_or_else(|| PerfImportError::NoTracingData { path: path() })?;
        let formats =
            parse_tracing_data(tracing).map_err(|(offset, what)| PerfImportError::TracingData {
                path: path(),
                offset,
                what,
            })?;
        return Ok((parsed, formats, Vec::new()));
    };
    // The feature sections were never written: the formats from the
    // directory given, else from this host.
    let (dir, formats) = match formats_dir {
        Some(d) => (d.to_path_buf(), tracefs_formats(d)),
        None => host_formats().ok_or_else(|| PerfImportError::NoTracingData { path: path() })?,
    };
    if formats.is_empty() {
        return Err(PerfImportError::NoTracingData { path: path() });
    }
    Ok((parsed, formats, u.warnings(Some(&dir))))
}

/// A parsed perf.data file, its tracepoint formats, and what the import
/// must say about how it was read.
type OpenedPerf<R> = (
    PerfFileReader<PatchedHeader<R>>,
    Vec<EventFormat>,
    Vec<String>,
);

/// Event kinds an import can be told to leave out, besides the
/// tracepoints of [`RECORDED_EVENTS`]: perf's own records.
pub const IGNORABLE_RECORDS: [&str; 3] = ["perf:mmap", "perf:mmap-data", "perf:task"];

/// How to import a perf.data file.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Import as if these had not been recorded: tracepoints by
    /// `system:name`, `perf:mmap` (every `PERF_RECORD_MMAP2`),
    /// `perf:mmap-data` (those of non-executable mappings: a recording
    /// without `perf record -d`), `perf:task` (`PERF_RECORD_FORK`, `EXIT`
    /// and `COMM`). To see what an event contributes, and to measure an
    /// estimate against the recorded truth.
    pub ignore_events: BTreeSet<String>,
    /// The machine's zones, watermarks and per-CPU pagesets for the trace
    /// header (a perf.data file has none): a `/proc/zoneinfo` taken just
    /// before the recording, with its file name for errors. It is checked
    /// against what the perf.data says of its machine and kernel.
    pub zoneinfo: Option<(PathBuf, ZoneinfoSnapshot)>,
    /// The knobs in force (`transparent_hugepage/**`,
    /// `vm.percpu_pagelist_high_fraction`).
    pub knobs: Option<Knobs>,
    /// `/proc/vmstat` (and THP statistics) snapshots taken before and
    /// after the recording: the header's and trailer's counters.
    pub counters_before: Option<Counters>,
    pub counters_after: Option<Counters>,
    /// Without `perf record -d`, do not complete the execs' layouts from
    /// the ELF files on this host ([`crate::elf_layout`]).
    pub no_elf_layouts: bool,
    /// Where to take the tracepoint formats from when the file lacks them
    /// (a perf killed before it wrote its feature sections): an `events/`
    /// directory of tracefs or a copy of it. Default: this host's.
    pub tracefs_events: Option<PathBuf>,
    /// The zoneinfo was read when the command exec'd, perf's events already
    /// on (the header's [`Header::snapshot_at_exec`]).
    pub snapshot_at_exec: bool,
}

impl ImportOptions {
    /// Checks the names of `ignore_events`.
    pub fn check(&self) -> Result<(), String> {
        for n in &self.ignore_events {
            if !RECORDED_EVENTS.contains(&n.as_str()) && !IGNORABLE_RECORDS.contains(&n.as_str()) {
                return Err(format!(
                    "cannot ignore {n:?}: expected one of {}, {}",
                    RECORDED_EVENTS.join(", "),
                    IGNORABLE_RECORDS.join(", ")
                ));
            }
        }
        Ok(())
    }

    fn ignores(&self, name: &str) -> bool {
        self.ignore_events.contains(name)
    }
}

/// Imports the perf.data file `input` into the mmlab trace `output`.
pub fn import(input: &Path, output: &Path) -> Result<ImportSummary, PerfImportError> {
    import_with(input, output, &ImportOptions::default())
}

/// [`import`] with options.
pub fn import_with(
    input: &Path,
    output: &Path,
    opts: &ImportOptions,
) -> Result<ImportSummary, PerfImportError> {
    let f = File::open(input).map_err(|source| PerfImportError::Open {
        path: input.to_path_buf(),
        source,
    })?;
    let header_source = input.display().to_string();
    // The trace appears whole or not at all: an existing file of the same
    // name survives a failed import.
    let out = crate::format::TraceFile::create(output).map_err(|e| PerfImportError::Output {
        path: output.to_path_buf(),
        source: TraceError::Io {
            offset: 0,
            source: e.into(),
        },
    })?;
    import_from_with(BufReader::new(f), input, &header_source, out, output, opts).map(|(s, _)| s)
}

/// Imports from any seekable reader into any writer; `input` and `output`
/// only name them in errors. Returns the summary and the writer, completed
/// ([`crate::format::TraceSink::complete`]: a [`crate::format::TraceFile`]
/// is renamed into place only when the whole import succeeded).
pub fn import_from<R: Read + Seek, W: crate::format::TraceSink>(
    reader: R,
    input: &Path,
    source_name: &str,
    out: W,
    output: &Path,
) -> Result<(ImportSummary, W), PerfImportError> {
    import_from_with(
        reader,
        input,
        source_name,
        out,
        output,
        &ImportOptions::default(),
    )
}

/// [`import_from`] with options.
pub fn import_from_with<R: Read + Seek, W: crate::format::TraceSink>(
    reader: R,
    input: &Path,
    source_name: &str,
    out: W,
    output: &Path,
    opts: &ImportOptions,
) -> Result<(ImportSummary, W), PerfImportError> {
    let (
        PerfFileReader {
            mut perf_file,
            mut record_iter,
        },
        mut formats,
        warnings,
    ) = open_perf(reader, input, opts.tracefs_events.as_deref())?;
    // An ignored tracepoint is as if its format were not in the file: its
    // samples are dropped and the decoder treats its kind as missing.
    let dropped: BTreeSet<u32> = formats
        .iter()
        .filter(|f| opts.ignores(&f.full_name()))
        .map(|f| f.id)
        .collect();
    formats.retain(|f| !dropped.contains(&f.id));
    let by_id: BTreeMap<u32, &EventFormat> = formats.iter().map(|f| (f.id, f)).collect();
    let pre = prelude(&perf_file, &by_id, opts);
    let decoder = Decoder::new(&formats);
    if !pre.present.iter().any(|n| decoder.handles(n)) {
        return Err(PerfImportError::NoUsableEvents {
            path: input.to_path_buf(),
            found: pre.attrs.iter().map(|(_, n)| n.clone()).collect(),
        });
    }
    let mut header = import_header(&perf_file, source_name);
    if let Some((path, snap)) = &opts.zoneinfo {
        check_zoneinfo(&perf_file, path, snap)?;
        header.machine.zones = snap.zones.clone();
        if header.machine.nr_cpus == 0 {
            header.machine.nr_cpus = snap.nr_cpus();
        }
    }
    if let Some(k) = &opts.knobs {
        header.knobs = k.clone();
    }
    header.counters_before = opts.counters_before.clone();
    header.snapshot_at_exec = opts.snapshot_at_exec;
    let writer = TraceWriter::new(out, &header).map_err(|source| PerfImportError::Output {
        path: output.to_path_buf(),
        source,
    })?;
    let mut imp = Importer::new(decoder, writer, &pre, dropped, opts);
    imp.warnings = warnings;
    let mut nr_records = 0u64;
    loop {
        let rec =
            record_iter
                .next_record(&mut perf_file)
                .map_err(|e| PerfImportError::Records {
                    path: input.to_path_buf(),
                    record: nr_records,
                    what: e.to_string(),
                })?;
        let Some(PerfFileRecord::EventRecord { attr_index, record }) = rec else {
            if rec.is_none() {
                break;
            }
            nr_records += 1;
            continue;
        };
        nr_records += 1;
        imp.record(attr_index, &record)
            .map_err(|e| imp.error(e, input, output, nr_records - 1))?;
    }
    imp.finish(&pre, output)
}

/// Why one record stopped an import.
enum RecordError {
    Parse(String),
    Output(TraceError),
}

/// The state of one import: the decoder, the writer, the counts, and the
/// `mmap`/`brk` entries (their exits not recorded) held until the
/// `PERF_RECORD_MMAP2` that says where they went, or the task's next event.
struct Importer<W: crate::format::TraceSink> {
    decoder: Decoder,
    writer: TraceWriter<W>,
    attrs: Vec<(Option<u32>, String)>,
    by_kind: [u64; NR_EVENT_KINDS],
    ignored: BTreeMap<String, u64>,
    nr_lost: u64,
    /// Make these kinds from perf's task records (their tracepoints were
    /// not recorded).
    forks_from_records: bool,
    exits_from_records: bool,
    execs_from_records: bool,
    /// Whether any of perf's FORK/EXIT/COMM records was seen.
    task_records: bool,
    /// Entry-only `mmap`/`brk` events by thread id.
    held: BTreeMap<i32, Event>,
    /// The time of the last event written: held events are released at it,
    /// so that the trace stays in time order.
    last_ts: u64,
    /// Entry-only `mmap`s whose address a `PERF_RECORD_MMAP2` gave exactly.
    nr_mmaps_placed: u64,
    /// Tracepoint ids whose samples are dropped ([`ImportOptions`]).
    dropped: BTreeSet<u32>,
    /// perf records to drop: every MMAP, the non-executable ones, the task
    /// records.
    drop_mmap: bool,
    drop_mmap_data: bool,
    drop_task: bool,
    /// For the trailer.
    counters_after: Option<Counters>,
    /// Processes inside an exec (from its `PERF_RECORD_COMM` to its end):
    /// the `Exec` event to write (made from the comm record when the
    /// tracepoint was not recorded) and the mappings gathered so far.
    execs: BTreeMap<i32, (Option<Event>, Vec<ExecVma>)>,
    /// `perf record -d`: the exec's data, `.bss` and stack are reported.
    mmap_data: bool,
    /// The recorded command's process tree (`perf record -a` records
    /// every process).
    workload: WorkloadTree,
    /// How the file was read (an unfinished header), for the summary.
    warnings: Vec<String>,
    /// Without `-d`: execs seen, and those whose layout the ELF files gave.
    nr_execs_without_layout: u64,
    nr_execs_from_elf: u64,
    no_elf_layouts: bool,
}

impl<W: crate::format::TraceSink> Importer<W> {
    fn new(
        decoder: Decoder,
        writer: TraceWriter<W>,
        pre: &Prelude,
        dropped: BTreeSet<u32>,
        opts: &ImportOptions,
    ) -> Self {
        let missing = |n: &str| !pre.present.iter().any(|p| p == n);
        Importer {
            decoder,
            writer,
            attrs: pre.attrs.clone(),
            by_kind: [0; NR_EVENT_KINDS],
            ignored: BTreeMap::new(),
            nr_lost: 0,
            forks_from_records: missing("sched:sched_process_fork"),
            exits_from_records: missing("sched:sched_process_exit"),
            execs_from_records: missing("sched:sched_process_exec"),
            task_records: false,
            held: BTreeMap::new(),
            last_ts: 0,
            nr_mmaps_placed: 0,
            dropped,
            drop_mmap: opts.ignores("perf:mmap"),
            drop_mmap_data: opts.ignores("perf:mmap-data"),
            drop_task: opts.ignores("perf:task"),
            counters_after: opts.counters_after.clone(),
            execs: BTreeMap::new(),
            mmap_data: pre.mmap_data,
            workload: WorkloadTree::default(),
            warnings: Vec::new(),
            nr_execs_without_layout: 0,
            nr_execs_from_elf: 0,
            no_elf_layouts: opts.no_elf_layouts,
        }
    }

    fn error(&self, e: RecordError, input: &Path, output: &Path, record: u64) -> PerfImportError {
        match e {
            RecordError::Parse(what) => PerfImportError::Records {
                path: input.to_path_buf(),
                record,
                what,
            },
            RecordError::Output(source) => PerfImportError::Output {
                path: output.to_path_buf(),
                source,
            },
        }
    }

    /// One record of the data section.
    fn record(
        &mut self,
        attr_index: usize,
        record: &linux_perf_data::linux_perf_event_reader::RawEventRecord<'_>,
    ) -> Result<(), RecordError> {
        let t = record.record_type;
        if t == RecordType::SAMPLE {
            return self.sample(attr_index, record);
        }
        if t == RecordType::LOST {
            if let Ok(EventRecord::Lost(l)) = record.parse() {
                self.nr_lost += l.count;
            }
            return Ok(());
        }
        let common = record.common_data().unwrap_or_default();
        let ts = common.timestamp.unwrap_or(0);
        let cpu = common.cpu.unwrap_or(0);
        let body = record.data.as_slice();
        let ev = match t {
            RecordType::MMAP | RecordType::MMAP2 if !self.drop_mmap => {
                parse_mmap_record(&body, t == RecordType::MMAP2, record.misc)
                    .filter(|(_, _, k)| !(self.drop_mmap_data && is_data_mapping(k)))
            }
            RecordType::COMM if !self.drop_task => self.comm_record(&body, record.misc),
            RecordType::FORK | RecordType::EXIT if !self.drop_task => {
                self.task_record(&body, t == RecordType::FORK)
            }
            _ => return Ok(()),
        };
        match ev {
            Some((pid, tid, kind)) => self.emit(Event {
                ts_ns: ts,
                cpu,
                pid,
                tid,
                kind,
            }),
            None => Ok(()),
        }
    }

    fn sample(
        &mut self,
        attr_index: usize,
        record: &linux_perf_data::linux_perf_event_reader::RawEventRecord<'_>,
    ) -> Result<(), RecordError> {
        let Ok(EventRecord::Sample(s)) = record.parse() else {
            return Err(RecordError::Parse("a sample record does not parse".into()));
        };
        let (attr_id, attr_name) = self
            .attrs
            .get(attr_index)
            .cloned()
            .unwrap_or((None, format!("event #{attr_index}")));
        let (Some(id), Some(raw)) = (attr_id, s.raw) else {
            *self.ignored.entry(attr_name).or_default() += 1;
            return Ok(());
        };
        if self.dropped.contains(&id) {
            return Ok(());
        }
        let data = raw.as_slice();
        let tid = s.tid.unwrap_or(-1);
        let pid = s.pid.unwrap_or(tid);
        let ts = s.timestamp.unwrap_or(0);
        match self
            .decoder
            .decode(ts, s.cpu.unwrap_or(0), pid, tid, id, &data)
        {
            Decoded::Event(ev) => self.emit(ev),
            Decoded::Ignored(name) => {
                *self.ignored.entry(name).or_default() += 1;
                Ok(())
            }
            Decoded::Malformed(name) => {
                *self.ignored.entry(format!("malformed {name}")).or_default() += 1;
                Ok(())
            }
            Decoded::Pending | Decoded::Unpaired => Ok(()),
        }
    }

    /// `PERF_RECORD_COMM`: an exec (`PERF_RECORD_MISC_COMM_EXEC`) or one
    /// perf synthesized at the start (time 0); renames of running threads
    /// are of no use to a replay and dropped.
    fn comm_record(&mut self, body: &[u8], misc: u16) -> Option<(i32, i32, EventKind)> {
        self.task_records = true;
        let (pid, tid) = (le_i32(body, 0)?, le_i32(body, 4)?);
        let rest = body.get(8..)?;
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let comm = String::from_utf8_lossy(&rest[..end]).into_owned();
        let exec = misc & PERF_RECORD_MISC_COMM_EXEC != 0;
        Some((pid, tid, EventKind::Comm { comm, exec }))
    }

    /// `PERF_RECORD_FORK`/`EXIT` (`pid, ppid, tid, ptid, time`), as the
    /// sched tracepoints' events where those were not recorded. The
    /// records perf synthesized at the start (time 0: threads that already
    /// existed) are no forks.
    fn task_record(&mut self, body: &[u8], fork: bool) -> Option<(i32, i32, EventKind)> {
        self.task_records = true;
        let (pid, ppid, tid, ptid) = (
            le_i32(body, 0)?,
            le_i32(body, 4)?,
            le_i32(body, 8)?,
            le_i32(body, 12)?,
        );
        let time = le_u64(body, 16)?;
        if fork {
            (self.forks_from_records && time != 0).then_some((
                ppid,
                ptid,
                EventKind::Fork {
                    parent: ptid,
                    child: tid,
                },
            ))
        } else {
            self.exits_from_records
                .then_some((pid, tid, EventKind::Exit { pid: tid }))
        }
    }

    /// Writes `ev`, after releasing what its task held; holds an entry-only
    /// `mmap` or `brk`; pairs a `PERF_RECORD_MMAP2` with the held call it
    /// places; gathers an exec's mappings into its `ExecLayout`.
    fn emit(&mut self, ev: Event) -> Result<(), RecordError> {
        if !self.workload.keeps(&ev) {
            return Ok(());
        }
        if let EventKind::Comm { exec: true, comm } = &ev.kind {
            self.begin_exec(&ev, comm.clone());
            return self.write(&ev);
        }
        if self.in_exec(&ev)? {
            return Ok(());
        }
        if let EventKind::MmapRecord { addr, len, .. } = &ev.kind {
            if let Some(mut held) = self.held.remove(&ev.tid) {
                if let EventKind::Mmap { len: l, ret, .. } = &mut held.kind {
                    if (*l).div_ceil(4096) * 4096 == *len && ret.is_none() {
                        *ret = Some(*addr as i64);
                        self.nr_mmaps_placed += 1;
                    }
                }
                held.ts_ns = ev.ts_ns;
                self.write(&ev)?;
                return self.write(&held);
            }
            return self.write(&ev);
        }
        self.release(ev.tid)?;
        if matches!(
            ev.kind,
            EventKind::Mmap { ret: None, .. } | EventKind::Brk { ret: None, .. }
        ) {
            self.held.insert(ev.tid, ev);
            return Ok(());
        }
        self.write(&ev)
    }

    /// A `PERF_RECORD_COMM` of an exec: the kernel is in `begin_new_exec()`
    /// for process `ev.pid`; the new image's `PERF_RECORD_MMAP2` records
    /// follow until the exec returns to user space. Its `Exec` event is
    /// made from this record when `sched_process_exec` was not recorded.
    fn begin_exec(&mut self, ev: &Event, comm: String) {
        let exec = self.execs_from_records.then(|| Event {
            kind: EventKind::Exec {
                pid: ev.tid,
                filename: comm,
            },
            ..ev.clone()
        });
        self.execs.insert(ev.pid, (exec, Vec::new()));
    }

    /// An event of a process that is inside an exec: its mappings are
    /// gathered (true: nothing to write now); its `sched_process_exec`, or
    /// with that not recorded its first event back in user space, ends the
    /// exec: the `Exec` event, then the `ExecLayout` of the gathered
    /// mappings (with `perf record -d` only: without it the stack, data and
    /// `.bss` are not reported, and a partial layout would mislead).
    fn in_exec(&mut self, ev: &Event) -> Result<bool, RecordError> {
        let Some((exec, vmas)) = self.execs.get_mut(&ev.pid) else {
            return Ok(false);
        };
        match &ev.kind {
            EventKind::MmapRecord {
                addr,
                len,
                pgoff,
                prot,
                flags,
                filename,
            } => {
                vmas.push(ExecVma {
                    start: *addr,
                    len: *len,
                    pgoff: *pgoff,
                    prot: *prot,
                    flags: *flags,
                    name: filename.clone(),
                });
                return Ok(true);
            }
            // The kernel's faults of the exec itself (the .bss cleared, the
            // stack written) come before its end, as with the tracepoint;
            // so do the loader's page allocations: neither is the process
            // back in user space (an allocation ending the exec lost the
            // layout of every exec of a recording without the sched
            // tracepoints).
            EventKind::PageFaultKernel { .. }
            | EventKind::PageAlloc { .. }
            | EventKind::PageFree { .. }
            | EventKind::PageAllocZoneLocked { .. }
            | EventKind::PagePcpuDrain { .. } => return Ok(false),
            EventKind::Exit { .. } => {
                // A process that dies in its exec, or whose exec nothing
                // after it ended: the exec made from perf's record is
                // written before the exit.
                if let Some((Some(exec), vmas)) = self.execs.remove(&ev.pid) {
                    self.end_exec(ev, exec, vmas)?;
                }
                return Ok(false);
            }
            EventKind::Exec { .. } => {}
            _ if exec.is_none() => return Ok(false),
            _ => {}
        }
        let Some((exec, vmas)) = self.execs.remove(&ev.pid) else {
            return Ok(false);
        };
        self.end_exec(ev, exec.unwrap_or_else(|| ev.clone()), vmas)?;
        // The tracepoint's own Exec was written; any other event still has
        // to be.
        Ok(matches!(ev.kind, EventKind::Exec { .. }))
    }

    /// Writes an exec's `Exec` event (at `ev`'s time, or the latest
    /// written), then its `ExecLayout`.
    fn end_exec(
        &mut self,
        ev: &Event,
        mut exec: Event,
        vmas: Vec<ExecVma>,
    ) -> Result<(), RecordError> {
        let ts_ns = ev.ts_ns.max(self.last_ts);
        exec.ts_ns = ts_ns;
        self.write(&exec)?;
        let vmas = if self.mmap_data {
            vmas
        } else {
            self.layout_from_elf(vmas)
        };
        if !vmas.is_empty() {
            self.write(&Event {
                ts_ns,
                cpu: ev.cpu,
                pid: ev.pid,
                tid: ev.tid,
                kind: EventKind::ExecLayout { pid: ev.pid, vmas },
            })?;
        }
        Ok(())
    }

    /// Without `perf record -d`: an exec's executable mappings completed
    /// from the ELF files on this host ([`crate::elf_layout`]), or no
    /// layout (a partial one would mislead) when no file could be read.
    fn layout_from_elf(&mut self, vmas: Vec<ExecVma>) -> Vec<ExecVma> {
        if self.no_elf_layouts {
            return Vec::new();
        }
        self.nr_execs_without_layout += 1;
        let (layout, nr_files) = complete_from_elf(&vmas, read_head);
        if nr_files == 0 {
            return Vec::new();
        }
        self.nr_execs_from_elf += 1;
        layout
    }

    /// Writes the event `tid` holds, unplaced, at the latest time written.
    fn release(&mut self, tid: i32) -> Result<(), RecordError> {
        match self.held.remove(&tid) {
            Some(mut h) => {
                h.ts_ns = h.ts_ns.max(self.last_ts);
                self.write(&h)
            }
            None => Ok(()),
        }
    }

    fn write(&mut self, ev: &Event) -> Result<(), RecordError> {
        self.by_kind[ev.kind.code() as usize] += 1;
        self.last_ts = self.last_ts.max(ev.ts_ns);
        self.writer.write(ev).map_err(RecordError::Output)
    }

    /// Writes what is still held and the trailer; the summary.
    fn finish(
        mut self,
        pre: &Prelude,
        output: &Path,
    ) -> Result<(ImportSummary, W), PerfImportError> {
        let out_err = |source| PerfImportError::Output {
            path: output.to_path_buf(),
            source,
        };
        let record_err = |e| match e {
            RecordError::Output(source) => out_err(source),
            RecordError::Parse(what) => PerfImportError::NotPerfData {
                path: output.to_path_buf(),
                what,
            },
        };
        // Execs that nothing after them ended (the file ends inside them).
        let open: Vec<i32> = self.execs.keys().copied().collect();
        for pid in open {
            if let Some((Some(exec), vmas)) = self.execs.remove(&pid) {
                let at = exec.clone();
                self.end_exec(&at, exec, vmas).map_err(record_err)?;
            }
        }
        let held: Vec<i32> = self.held.keys().copied().collect();
        for tid in held {
            self.release(tid).map_err(record_err)?;
        }
        self.decoder.finish();
        let missing_event_kinds: Vec<String> = RECORDED_EVENTS
            .iter()
            .filter(|ev| !pre.present.iter().any(|p| p == *ev))
            .map(|ev| ev.to_string())
            .collect();
        let reduced_capability = reduced_capability(pre, &missing_event_kinds, self.task_records);
        let trailer = Trailer {
            nr_events: 0,
            nr_lost_events: self.nr_lost,
            nr_unpaired_syscalls: self.decoder.nr_unpaired_syscalls,
            ignored_events: self.ignored.clone(),
            missing_event_kinds: missing_event_kinds.clone(),
            counters_after: self.counters_after.take(),
            exit_status: None,
            interrupted: false,
            workload_minflt: None,
            workload_majflt: None,
        };
        let nr_events = self.writer.nr_events();
        let (out, _) = self.writer.finish(&trailer).map_err(out_err)?;
        let mut nr_events_by_kind = BTreeMap::new();
        for (code, n) in self.by_kind.iter().enumerate() {
            if *n > 0 {
                nr_events_by_kind.insert(crate::event::EventKind::name_of_code(code as u8), *n);
            }
        }
        Ok((
            ImportSummary {
                nr_events,
                nr_events_by_kind,
                ignored_events: self.ignored,
                nr_lost_events: self.nr_lost,
                nr_unpaired_syscalls: self.decoder.nr_unpaired_syscalls,
                reduced_capability,
                missing_event_kinds,
                entry_only_syscalls: self.decoder.entry_only_syscalls(),
                nr_mmaps_placed_by_records: self.nr_mmaps_placed,
                workload_tree: self.workload.tree(),
                nr_other_process_events: self.workload.nr_dropped,
                nr_perf_child_events: self.workload.nr_before_exec,
                warnings: self.warnings,
                execs_from_elf: (self.nr_execs_from_elf, self.nr_execs_without_layout),
            },
            out,
        ))
    }
}

/// What an import cannot predict: one line per event kind the recording
/// lacks (saying whether it is required), and one when `perf record -d` was
/// not used.
fn reduced_capability(pre: &Prelude, missing: &[String], task_records: bool) -> Vec<String> {
    let mut lines: Vec<String> = missing
        .iter()
        .map(|ev| {
            let required = if REQUIRED_EVENTS.contains(&ev.as_str()) {
                " (required)"
            } else {
                ""
            };
            format!(
                "{ev} was not recorded{required}: {}",
                capability_loss(ev, &pre.present, task_records)
            )
        })
        .collect();
    if !pre.mmap_data {
        lines.push(
            "perf record -d was not used: no PERF_RECORD_MMAP2 for data and anonymous mappings \
             (where an mmap or brk went when its exit was not recorded, the program's data and heap)"
                .to_string(),
        );
    }
    lines
}

/// `PERF_RECORD_MISC_COMM_EXEC`: the comm record of an `execve()`.
const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_DATA`: a `PERF_RECORD_MMAP` of a non-executable
/// mapping.
const PERF_RECORD_MISC_MMAP_DATA: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: the MMAP2 record carries a build id
/// instead of the device and inode numbers.
const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

fn le_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A mapping `perf record` reports only with `-d` (`mmap_data`): one
/// without `PROT_EXEC`.
fn is_data_mapping(k: &EventKind) -> bool {
    matches!(k, EventKind::MmapRecord { prot, .. } if prot & 4 == 0)
}

/// Parses a `PERF_RECORD_MMAP2` (`pid, tid, addr, len, pgoff`, then the
/// device/inode numbers or a build id, `prot, flags`, the file name) or
/// `PERF_RECORD_MMAP` (no ids, no `prot`/`flags`) body, bounded by its
/// length. The kernel's image (`pid` -1) is not a user mapping and dropped.
fn parse_mmap_record(body: &[u8], v2: bool, misc: u16) -> Option<(i32, i32, EventKind)> {
    const PROT_READ: u32 = 1;
    const PROT_EXEC: u32 = 4;
    const MAP_PRIVATE: u32 = 2;
    let (pid, tid) = (le_i32(body, 0)?, le_i32(body, 4)?);
    if pid == -1 {
        return None;
    }
    let (addr, len, pgoff) = (le_u64(body, 8)?, le_u64(body, 16)?, le_u64(body, 24)?);
    let (prot, flags, name_at) = if v2 {
        // 24 bytes of ids either way: u32 maj, u32 min, u64 ino, u64
        // ino_generation, or u8 size, 3 bytes of padding, 20 bytes of
        // build id.
        if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 && *body.get(32)? > 20 {
            return None;
        }
        (le_u32(body, 56)?, le_u32(body, 60)?, 64)
    } else {
        let exec = misc & PERF_RECORD_MISC_MMAP_DATA == 0;
        (
            PROT_READ | if exec { PROT_EXEC } else { 0 },
            MAP_PRIVATE,
            32,
        )
    };
    let rest = body.get(name_at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    let filename = String::from_utf8_lossy(&rest[..end]).into_owned();
    Some((
        pid,
        tid,
        EventKind::MmapRecord {
            addr,
            len,
            pgoff,
            prot,
            flags,
            filename,
        },
    ))
}
