//! An exec's layout completed from its ELF files, for a perf.data recorded
//! without `perf record -d`.
//!
//! # Why
//!
//! Without `-d`, perf reports only the executable mappings an exec makes
//! (the program's and the interpreter's text): not their data, their
//! `.bss`, nor the stack. The `.bss` is anonymous memory that takes large
//! folios like any other (`scripts/corpus/README.md`), so a replay that
//! does not know it carries its faults over unchanged under every folio
//! configuration (a `make -j2`: 22 % of its faults; `gzip`, whose buffers
//! are static arrays, more). The ELF loader maps each `PT_LOAD` segment at
//! the same load bias as the text segment perf reported, so the file's
//! program headers give the rest.
//!
//! # How (`load_elf_binary()` / `elf_load()` of 6.18)
//!
//! The bias is the reported text mapping's address less its segment's
//! page-aligned `p_vaddr` (0 for a fixed-address executable). Each
//! `PT_LOAD` is mapped from the file over `[p_vaddr, p_vaddr + p_filesz)`
//! rounded out to pages, and the rest of `p_memsz` beyond the last file
//! page is anonymous (the `.bss`), as perf's `//anon` record of it says.
//!
//! # Where it errs
//!
//! The files are read on the importing host: a file changed or gone since
//! the recording gives no layout, or a wrong one (the import counts the
//! execs completed this way). The stack's place is not known: its faults
//! are carried over as before.

use crate::event::ExecVma;

const PAGE: u64 = 4096;
const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
const MAP_PRIVATE: u32 = 2;
/// Program headers beyond this many are not read (a real binary has ~13).
const MAX_PHDRS: usize = 128;
/// The bytes of a file read for its program headers.
pub const ELF_HEAD_BYTES: usize = 64 << 10;

fn page_down(x: u64) -> u64 {
    x & !(PAGE - 1)
}

fn page_up(x: u64) -> Option<u64> {
    Some(x.checked_add(PAGE - 1)? & !(PAGE - 1))
}

/// One `PT_LOAD`: offset, virtual address, sizes in the file and in
/// memory, `PF_*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Load {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    flags: u32,
}

/// The `PT_LOAD` headers of a 64-bit little-endian ELF file's first bytes.
fn loads(head: &[u8]) -> Option<Vec<Load>> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(head.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(head.get(at..at + 8)?.try_into().ok()?));
    // ELFCLASS64, ELFDATA2LSB.
    if head.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let (phentsize, phnum) = (u16_at(0x36)? as usize, u16_at(0x38)? as usize);
    if phentsize < 56 || phnum > MAX_PHDRS {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(at)? != PT_LOAD {
            continue;
        }
        out.push(Load {
            flags: u32_at(at + 4)?,
            offset: u64_at(at + 8)?,
            vaddr: u64_at(at + 16)?,
            filesz: u64_at(at + 32)?,
            memsz: u64_at(at + 40)?,
        });
    }
    Some(out)
}

fn prot_of(flags: u32) -> u32 {
    (if flags & PF_R != 0 { 1 } else { 0 })
        | (if flags & PF_W != 0 { 2 } else { 0 })
        | (if flags & PF_X != 0 { 4 } else { 0 })
}

/// The mappings the loader made for the file of the reported executable
/// mapping `text`, from the file's first bytes `head`; None when the file
/// is no ELF file whose executable segment matches the mapping.
fn file_layout(text: &ExecVma, head: &[u8]) -> Option<Vec<ExecVma>> {
    let loads = loads(head)?;
    let seg = loads
        .iter()
        .find(|l| l.flags & PF_X != 0 && page_down(l.offset) == text.pgoff)?;
    let bias = text.start.checked_sub(page_down(seg.vaddr))?;
    let mut out = Vec::new();
    for l in &loads {
        let start = bias.checked_add(page_down(l.vaddr))?;
        let file_end = page_up(bias.checked_add(l.vaddr)?.checked_add(l.filesz)?)?;
        let end = page_up(bias.checked_add(l.vaddr)?.checked_add(l.memsz)?)?;
        if file_end > start {
            out.push(ExecVma {
                start,
                len: file_end - start,
                pgoff: page_down(l.offset),
                prot: prot_of(l.flags),
                flags: MAP_PRIVATE,
                name: text.name.clone(),
            });
        }
        if end > file_end {
            out.push(ExecVma {
                start: file_end,
                len: end - file_end,
                pgoff: file_end,
                prot: prot_of(l.flags),
                flags: MAP_PRIVATE,
                name: "//anon".to_string(),
            });
        }
    }
    Some(out)
}

/// An exec's reported mappings `vmas` (perf without `-d`: the executable
/// ones) completed with every segment and `.bss` of their ELF files, read
/// by `head_of(path)` (the file's first [`ELF_HEAD_BYTES`]). Returns the
/// layout and the number of files it completed.
pub fn complete_from_elf(
    vmas: &[ExecVma],
    mut head_of: impl FnMut(&str) -> Option<Vec<u8>>,
) -> (Vec<ExecVma>, usize) {
    let mut out = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    let mut nr_files = 0;
    for v in vmas {
        let is_file = v.name.starts_with('/') && v.name != "//anon";
        if !is_file || v.prot & 4 == 0 {
            out.push(v.clone());
            continue;
        }
        if done.contains(&v.name.as_str()) {
            continue;
        }
        match head_of(&v.name).and_then(|h| file_layout(v, &h)) {
            Some(l) => {
                out.extend(l);
                done.push(&v.name);
                nr_files += 1;
            }
            None => out.push(v.clone()),
        }
    }
    out.sort_by_key(|v| v.start);
    (out, nr_files)
}

/// The first [`ELF_HEAD_BYTES`] of the regular file at `path` on this
/// host.
pub fn read_head(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = Vec::with_capacity(ELF_HEAD_BYTES);
    f.take(ELF_HEAD_BYTES as u64).read_to_end(&mut head).ok()?;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF header with these `PT_LOAD`s.
    fn elf(loads: &[Load]) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        h[0x38..0x3a].copy_from_slice(&(loads.len() as u16).to_le_bytes());
        for l in loads {
            let mut p = vec![0u8; 56];
            p[..4].copy_from_slice(&PT_LOAD.to_le_bytes());
            p[4..8].copy_from_slice(&l.flags.to_le_bytes());
            p[8..16].copy_from_slice(&l.offset.to_le_bytes());
            p[16..24].copy_from_slice(&l.vaddr.to_le_bytes());
            p[32..40].copy_from_slice(&l.filesz.to_le_bytes());
            p[40..48].copy_from_slice(&l.memsz.to_le_bytes());
            h.extend(p);
        }
        h
    }

    #[test]
    fn a_pie_gets_its_segments_and_bss_at_the_text_mappings_bias() {
        // text at 0x1000 (file 0x1000), data at 0x3df0 with a .bss to
        // 0x805020: as gcc lays out a PIE with an 8 MiB static array.
        let file = elf(&[
            Load {
                offset: 0,
                vaddr: 0,
                filesz: 0x6a0,
                memsz: 0x6a0,
                flags: PF_R,
            },
            Load {
                offset: 0x1000,
                vaddr: 0x1000,
                filesz: 0x2d5,
                memsz: 0x2d5,
                flags: PF_R | PF_X,
            },
            Load {
                offset: 0x2df0,
                vaddr: 0x3df0,
                filesz: 0x230,
                memsz: 0x801230,
                flags: PF_R | PF_W,
            },
        ]);
        let text = ExecVma {
            start: 0x5555_5555_5000,
            len: 0x1000,
            pgoff: 0x1000,
            prot: 5,
            flags: MAP_PRIVATE,
            name: "/t/exec_folios".into(),
        };
        let vdso = ExecVma {
            name: "[vdso]".into(),
            start: 0x7fff_f7fc_1000,
            ..text.clone()
        };
        let (l, n) = complete_from_elf(&[text, vdso], |_| Some(file.clone()));
        assert_eq!(n, 1);
        let spans: Vec<_> = l
            .iter()
            .map(|v| (v.start - 0x5555_5555_4000, v.len, v.name.as_str(), v.prot))
            .collect();
        // |R|X|   RW   |  .bss ...  |
        assert_eq!(
            spans,
            [
                (0, 0x1000, "/t/exec_folios", 1),
                (0x1000, 0x1000, "/t/exec_folios", 5),
                (0x3000, 0x2000, "/t/exec_folios", 3),
                (0x5000, 0x801000, "//anon", 3),
                (0x7fff_f7fc_1000 - 0x5555_5555_4000, 0x1000, "[vdso]", 5),
            ]
        );
    }

    #[test]
    fn a_file_that_is_not_its_elf_leaves_the_mapping_as_reported() {
        let text = ExecVma {
            start: 0x40_0000,
            len: 0x1000,
            pgoff: 0x1000,
            prot: 5,
            flags: MAP_PRIVATE,
            name: "/gone".into(),
        };
        let (l, n) = complete_from_elf(std::slice::from_ref(&text), |_| None);
        assert_eq!((l, n), (vec![text.clone()], 0));
        // An ELF whose executable segment is at another offset.
        let file = elf(&[Load {
            offset: 0x2000,
            vaddr: 0x2000,
            filesz: 1,
            memsz: 1,
            flags: PF_X,
        }]);
        let (l, n) = complete_from_elf(std::slice::from_ref(&text), |_| Some(file.clone()));
        assert_eq!((l, n), (vec![text], 0));
        assert!(loads(b"\x7fELF\x01\x01").is_none());
    }
}
