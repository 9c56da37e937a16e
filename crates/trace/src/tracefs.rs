//! Parsers for what tracefs (and perf's copy of it) describes: a tracepoint's
//! `format` text, and the binary pages of the ring buffer that
//! `per_cpu/cpuN/trace_pipe_raw` returns.
//!
//! # Why parse the format files
//!
//! Field offsets of a tracepoint record change between kernel versions and
//! configurations (`mm_page_alloc`'s `gfp_flags` moved when `migratetype`
//! did); the kernel publishes them in `events/<system>/<name>/format`, and
//! perf copies the same text into a perf.data file's `HEADER_TRACING_DATA`.
//! Reading fields by name through that text is what makes a trace from any
//! kernel decode correctly.
//!
//! # The ring-buffer page
//!
//! A page is a header (`timestamp` u64, `commit` word, then data; the
//! offsets come from `events/header_page`) followed by event headers of 32
//! bits: `type_len` in the low 5 bits and a 27-bit `time_delta` above it.
//! `type_len` 1..=28 is a data record of `4 * type_len` bytes; 0 is a data
//! record whose length (plus 4) is in the next word; 29 is padding (or a
//! discarded record); 30 extends the time delta by the next word; 31 is an
//! absolute timestamp. The `commit` word holds the bytes of data in the page
//! and two flags: events were lost before this page, and their count is
//! stored after the data.

use std::fmt;

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    /// `__data_loc` fields hold a (length << 16 | offset) word that points
    /// into the record's dynamic area.
    pub data_loc: bool,
}

impl Field {
    /// Reads the field as an integer (little-endian, sign-extended when the
    /// field is signed), or `None` if the record is too short.
    pub fn read_u64(&self, data: &[u8]) -> Option<u64> {
        let bytes = data.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut raw = [0u8; 8];
        let n = bytes.len().min(8);
        raw[..n].copy_from_slice(&bytes[..n]);
        let v = u64::from_le_bytes(raw);
        if self.signed && n < 8 && n > 0 {
            let shift = 64 - 8 * n as u32;
            Some((((v << shift) as i64) >> shift) as u64)
        } else {
            Some(v)
        }
    }

    /// Reads the field as a signed integer.
    pub fn read_i64(&self, data: &[u8]) -> Option<i64> {
        self.read_u64(data).map(|v| v as i64)
    }

    /// Reads a string field: `__data_loc char[]` or a fixed `char[N]`,
    /// up to the first NUL.
    pub fn read_str(&self, data: &[u8]) -> Option<String> {
        let bytes = if self.data_loc {
            let loc = self.read_u64(data)? as u32;
            let off = (loc & 0xffff) as usize;
            let len = (loc >> 16) as usize;
            data.get(off..off.checked_add(len)?)?
        } else {
            data.get(self.offset..self.offset.checked_add(self.size)?)?
        };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }
}

/// A tracepoint's record layout, from its `format` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    pub system: String,
    pub name: String,
    pub id: u32,
    pub fields: Vec<Field>,
}

impl EventFormat {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// `system:name`, as perf and tracefs spell an event.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.system, self.name)
    }
}

/// Why a `format` text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatParseError {
    pub event: String,
    pub line: usize,
    pub what: String,
}

impl fmt::Display for FormatParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tracepoint format of {} line {}: {}",
            self.event, self.line, self.what
        )
    }
}

impl std::error::Error for FormatParseError {}

/// Parses one `format` text (`name:`, `ID:`, then `field:` lines).
pub fn parse_format(system: &str, text: &str) -> Result<EventFormat, FormatParseError> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    let err = |line: usize, what: String, name: &Option<String>| FormatParseError {
        event: format!("{system}:{}", name.as_deref().unwrap_or("?")),
        line,
        what,
    };
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("name:") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = t.strip_prefix("ID:") {
            id = Some(rest.trim().parse::<u32>().map_err(|e| {
                err(
                    line_no,
                    format!("ID {:?} is not a number: {e}", rest.trim()),
                    &name,
                )
            })?);
        } else if t.starts_with("field:") {
            fields.push(parse_field_line(t).map_err(|what| err(line_no, what, &name))?);
        } else if t.starts_with("print fmt:") {
            break;
        }
    }
    let name = name.ok_or_else(|| err(0, "no \"name:\" line".to_string(), &None))?;
    let id = id.ok_or_else(|| err(0, "no \"ID:\" line".to_string(), &Some(name.clone())))?;
    Ok(EventFormat {
        system: system.to_string(),
        name,
        id,
        fields,
    })
}

/// Parses `field:unsigned long pfn; offset:8; size:8; signed:0;`.
fn parse_field_line(line: &str) -> Result<Field, String> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';') {
        let part = part.trim();
        if let Some(d) = part.strip_prefix("field:") {
            decl = Some(d.trim().to_string());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = Some(
                v.trim()
                    .parse::<usize>()
                    .map_err(|e| format!("bad offset {v:?}: {e}"))?,
            );
        } else if let Some(v) = part.strip_prefix("size:") {
            size = Some(
                v.trim()
                    .parse::<usize>()
                    .map_err(|e| format!("bad size {v:?}: {e}"))?,
            );
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    let decl = decl.ok_or("no field declaration")?;
    let offset = offset.ok_or("no offset")?;
    let size = size.ok_or("no size")?;
    // The name is the last identifier of the declaration once every
    // bracket group is dropped: `char comm[16]` → `comm`, and
    // `__data_loc char[] filename` → `filename`.
    let mut base = String::with_capacity(decl.len());
    let mut depth = 0usize;
    for c in decl.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            c if depth == 0 => base.push(c),
            _ => {}
        }
    }
    let base = base.trim();
    let name = base
        .rsplit(|c: char| c.is_whitespace() || c == '*')
        .next()
        .unwrap_or(base)
        .to_string();
    if name.is_empty() {
        return Err(format!("no field name in {decl:?}"));
    }
    Ok(Field {
        name,
        offset,
        size,
        signed,
        data_loc: decl.contains("__data_loc"),
    })
}

/// The layout of a ring-buffer page header, from `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeaderLayout {
    pub commit_offset: usize,
    pub commit_size: usize,
    pub data_offset: usize,
}

impl Default for PageHeaderLayout {
    /// The 64-bit layout (`local_t` commit of 8 bytes).
    fn default() -> Self {
        PageHeaderLayout {
            commit_offset: 8,
            commit_size: 8,
            data_offset: 16,
        }
    }
}

impl PageHeaderLayout {
    /// Parses `events/header_page`; missing fields keep the 64-bit default.
    pub fn parse(text: &str) -> PageHeaderLayout {
        let mut layout = PageHeaderLayout::default();
        for line in text.lines() {
            if let Ok(f) = parse_field_line(line.trim()) {
                match f.name.as_str() {
                    "commit" => {
                        layout.commit_offset = f.offset;
                        layout.commit_size = f.size;
                    }
                    "data" => layout.data_offset = f.offset,
                    _ => {}
                }
            }
        }
        layout
    }
}

/// A data record found in a ring-buffer page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RbRecord {
    pub ts: u64,
    /// Byte range of the record's payload within the page.
    pub start: usize,
    pub end: usize,
}

/// What a page says beyond its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageInfo {
    /// Events were lost before this page (ring-buffer overwrite).
    pub missed_events: bool,
    /// How many, when the kernel had room to store the count.
    pub nr_missed: Option<u64>,
}

/// Why a ring-buffer page could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageError {
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ring-buffer page byte {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for PageError {}

const RB_MISSED_EVENTS: u64 = 1 << 31;
const RB_MISSED_STORED: u64 = 1 << 30;
const RB_COMMIT_MASK: u64 = (1 << 30) - 1;
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
const TS_SHIFT: u32 = 27;

fn word(page: &[u8], at: usize) -> Option<u32> {
    let b = page.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The page header: the page's timestamp, where its data ends, and what it
/// says about lost events.
fn page_header(page: &[u8], layout: PageHeaderLayout) -> Result<(u64, usize, PageInfo), PageError> {
    let pe = |offset: usize, what: String| PageError { offset, what };
    let ts_bytes = page
        .get(0..8)
        .ok_or_else(|| pe(0, format!("page of {} bytes has no header", page.len())))?;
    let ts = u64::from_le_bytes([
        ts_bytes[0],
        ts_bytes[1],
        ts_bytes[2],
        ts_bytes[3],
        ts_bytes[4],
        ts_bytes[5],
        ts_bytes[6],
        ts_bytes[7],
    ]);
    let commit_field = Field {
        name: "commit".into(),
        offset: layout.commit_offset,
        size: layout.commit_size,
        signed: false,
        data_loc: false,
    };
    let commit = commit_field
        .read_u64(page)
        .ok_or_else(|| pe(layout.commit_offset, "no commit word".into()))?;
    let data_len = (commit & RB_COMMIT_MASK) as usize;
    let data_end = layout.data_offset + data_len;
    if data_end > page.len() {
        return Err(pe(
            layout.commit_offset,
            format!(
                "commit says {data_len} bytes of data, page holds {}",
                page.len()
            ),
        ));
    }
    let mut info = PageInfo {
        missed_events: commit & RB_MISSED_EVENTS != 0,
        nr_missed: None,
    };
    if commit & RB_MISSED_STORED != 0 {
        let f = Field {
            name: "missed".into(),
            offset: data_end,
            size: layout.commit_size,
            signed: false,
            data_loc: false,
        };
        info.nr_missed = f.read_u64(page);
    }
    Ok((ts, data_end, info))
}

/// Parses one ring-buffer page into `out` (appending), returning what the
/// page header says about lost events.
pub fn parse_page(
    page: &[u8],
    layout: PageHeaderLayout,
    out: &mut Vec<RbRecord>,
) -> Result<PageInfo, PageError> {
    let pe = |offset: usize, what: String| PageError { offset, what };
    let (mut ts, data_end, info) = page_header(page, layout)?;
    let mut pos = layout.data_offset;
    while pos + 4 <= data_end {
        let hdr = word(page, pos).unwrap_or(0);
        let type_len = hdr & 0x1f;
        let delta = (hdr >> 5) as u64;
        match type_len {
            TYPE_PADDING => {
                // A zero delta marks the unused end of the page; otherwise it
                // is a discarded record whose length is in the next word and
                // whose delta the following records are relative to.
                if delta == 0 {
                    break;
                }
                let len = word(page, pos + 4)
                    .ok_or_else(|| pe(pos, "padding without length".into()))?
                    as usize;
                ts = ts.wrapping_add(delta);
                pos = pos
                    .checked_add(4 + len)
                    .ok_or_else(|| pe(pos, "padding length overflows".into()))?;
            }
            TYPE_TIME_EXTEND => {
                let ext = word(page, pos + 4)
                    .ok_or_else(|| pe(pos, "time extend without its word".into()))?;
                ts = ts.wrapping_add(((ext as u64) << TS_SHIFT) | delta);
                pos += 8;
            }
            TYPE_TIME_STAMP => {
                // An absolute stamp keeps the top bits of the current one.
                let ext = word(page, pos + 4)
                    .ok_or_else(|| pe(pos, "time stamp without its word".into()))?;
                let abs = ((ext as u64) << TS_SHIFT) | delta;
                ts = (ts & !((1u64 << 59) - 1)) | abs;
                pos += 8;
            }
            0 => {
                let len = word(page, pos + 4)
                    .ok_or_else(|| pe(pos, "record without length".into()))?
                    as usize;
                if len < 4 {
                    return Err(pe(pos, format!("record length word {len} is below 4")));
                }
                let start = pos + 8;
                let end = start + (len - 4);
                if end > data_end {
                    return Err(pe(
                        pos,
                        format!("record of {} bytes runs past the page data", len - 4),
                    ));
                }
                ts = ts.wrapping_add(delta);
                out.push(RbRecord { ts, start, end });
                pos = end + ((4 - (len - 4) % 4) % 4);
            }
            n => {
                let start = pos + 4;
                let end = start + 4 * n as usize;
                if end > data_end {
                    return Err(pe(
                        pos,
                        format!("record of {} bytes runs past the page data", 4 * n),
                    ));
                }
                ts = ts.wrapping_add(delta);
                out.push(RbRecord { ts, start, end });
                pos = end;
            }
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MM_PAGE_ALLOC: &str = "name: mm_page_alloc\nID: 653\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int order;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long gfp_flags;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:int migratetype;\toffset:32;\tsize:4;\tsigned:1;\n\n\
print fmt: \"page=%p\"\n";

    #[test]
    fn format_text_gives_field_offsets_by_name() {
        let f = parse_format("kmem", MM_PAGE_ALLOC).expect("valid format");
        assert_eq!(f.id, 653);
        assert_eq!(f.full_name(), "kmem:mm_page_alloc");
        let mt = f.field("migratetype").expect("field");
        assert_eq!((mt.offset, mt.size, mt.signed), (32, 4, true));
        let mut rec = vec![0u8; 36];
        rec[32..36].copy_from_slice(&(-1i32).to_le_bytes());
        assert_eq!(mt.read_i64(&rec), Some(-1));
        assert_eq!(
            f.field("gfp_flags").and_then(|g| g.read_u64(&rec[..30])),
            None
        );
    }

    #[test]
    fn data_loc_and_char_array_names() {
        let f =
            parse_field_line("field:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;")
                .expect("ok");
        assert_eq!(f.name, "filename");
        assert!(f.data_loc);
        let mut rec = vec![0u8; 12];
        rec[8..12].copy_from_slice(&((4u32 << 16) | 12).to_le_bytes());
        rec.extend_from_slice(b"/bin\0");
        assert_eq!(f.read_str(&rec).as_deref(), Some("/bin"));
        let c =
            parse_field_line("field:char comm[16];\toffset:8;\tsize:16;\tsigned:0;").expect("ok");
        assert_eq!(c.name, "comm");
    }

    #[test]
    fn page_with_small_large_and_extended_records() {
        let mut page = vec![0u8; 4096];
        page[0..8].copy_from_slice(&1000u64.to_le_bytes());
        let mut data = Vec::new();
        // An 8-byte record, delta 5.
        data.extend_from_slice(&((5u32 << 5) | 2).to_le_bytes());
        data.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        // A time extend of (1 << 27) + 3.
        data.extend_from_slice(&((3u32 << 5) | 30).to_le_bytes());
        data.extend_from_slice(&1u32.to_le_bytes());
        // A type_len 0 record of 120 bytes, delta 7.
        data.extend_from_slice(&(7u32 << 5).to_le_bytes());
        data.extend_from_slice(&124u32.to_le_bytes());
        data.extend_from_slice(&[9u8; 120]);
        page[8..16].copy_from_slice(&(data.len() as u64).to_le_bytes());
        page[16..16 + data.len()].copy_from_slice(&data);
        let mut out = Vec::new();
        let info = parse_page(&page, PageHeaderLayout::default(), &mut out).expect("valid page");
        assert!(!info.missed_events);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            RbRecord {
                ts: 1005,
                start: 20,
                end: 28
            }
        );
        assert_eq!(out[1].ts, 1005 + (1 << 27) + 3 + 7);
        assert_eq!(out[1].end - out[1].start, 120);
    }

    #[test]
    fn page_with_bad_commit_is_an_error_not_a_panic() {
        let mut page = vec![0u8; 64];
        page[8..16].copy_from_slice(&5000u64.to_le_bytes());
        let mut out = Vec::new();
        assert!(parse_page(&page, PageHeaderLayout::default(), &mut out).is_err());
        assert!(parse_page(&page[..4], PageHeaderLayout::default(), &mut out).is_err());
    }
}
