//! Differential tests of the address space from seeded operation lists
//! (`mm::rng::SplitMix64`), against trivially correct references:
//!
//! - the VMA tree against a per-page table of `(flags, page offset)`: the
//!   model's VMAs must be exactly the maximal runs of pages with equal flags
//!   and contiguous offsets, and `find_vma()` must answer as a scan does,
//!   after every `mmap`/`munmap`/`mprotect`/`mremap`/`madvise`;
//! - the page tables against a `BTreeMap` from address to entry (frame, or
//!   the zero page; writable; exclusive; `PROT_NONE`), updated by the rules
//!   of the fault path, zap, `mprotect`, `mremap` and `fork`, compared entry
//!   for entry after every operation, with the invariant checker.

mod common;

use common::World;
use mm::knobs::{KnobValue, Preset};
use mm::memory::{access_ok, check_mm_invariants, fork, handle_mm_fault, VmFault};
use mm::mprotect::Prot;
use mm::mremap::MremapFlags;
use mm::pgtable::{
    entry_pfn, Level, PAGE_ANON_EXCLUSIVE, PAGE_PROTNONE, PAGE_RW, PAGE_SPECIAL, PMD_SIZE,
};
use mm::rng::SplitMix64;
use mm::vma::{Advice, Errno, MmStruct, MmapLayout, VmFlags, MMAP_BASE};
use mm::Vaddr;
use std::collections::BTreeMap;

const P: u64 = 4096;

fn world(layout: MmapLayout) -> World {
    let mut cfg = Preset::Linux6_18.config();
    cfg.set_knob(
        "transparent_hugepage/enabled",
        &KnobValue::Str("never".into()),
    )
    .unwrap();
    cfg.mm.mmap_layout = layout;
    World::new(cfg)
}

// ---------------------------------------------------------------------------
// The VMA tree against a per-page table.

/// Pages `[MMAP_BASE - WINDOW, MMAP_BASE)`: every operation stays inside.
const WINDOW_PAGES: u64 = 1024;
const WBASE: u64 = MMAP_BASE - WINDOW_PAGES * P;

/// The reference: per page of the window, `(flags, pgoff)` if mapped.
struct RefVmas {
    pages: Vec<Option<(VmFlags, u64)>>,
}

impl RefVmas {
    fn idx(a: u64) -> usize {
        ((a - WBASE) / P) as usize
    }

    fn get(&self, a: u64) -> Option<(VmFlags, u64)> {
        self.pages[Self::idx(a)]
    }

    fn set(&mut self, a: u64, v: Option<(VmFlags, u64)>) {
        let i = Self::idx(a);
        self.pages[i] = v;
    }

    fn clear(&mut self, a: u64, len: u64) {
        for i in 0..len / P {
            self.set(a + i * P, None);
        }
    }

    fn map(&mut self, a: u64, len: u64, flags: VmFlags, pgoff: u64) {
        for i in 0..len / P {
            self.set(a + i * P, Some((flags, pgoff + i)));
        }
    }

    fn free(&self, a: u64, len: u64) -> bool {
        (0..len / P).all(|i| self.get(a + i * P).is_none())
    }

    /// The maximal runs: `(start, end, flags, pgoff)`.
    fn vmas(&self) -> Vec<(u64, u64, VmFlags, u64)> {
        let mut out: Vec<(u64, u64, VmFlags, u64)> = Vec::new();
        for (i, p) in self.pages.iter().enumerate() {
            let a = WBASE + i as u64 * P;
            let Some((f, off)) = *p else { continue };
            if let Some(last) = out.last_mut() {
                if last.1 == a && last.2 == f && last.3 + (a - last.0) / P == off {
                    last.1 = a + P;
                    continue;
                }
            }
            out.push((a, a + P, f, off));
        }
        out
    }

    /// The run containing `a`.
    fn vma_at(&self, a: u64) -> Option<(u64, u64, VmFlags, u64)> {
        self.vmas().into_iter().find(|v| v.0 <= a && a < v.1)
    }

    /// Top-down placement of `len` bytes below `MMAP_BASE` (page-aligned
    /// layout): the highest free run of the window, checked page by page.
    fn place(&self, len: u64) -> Option<u64> {
        let mut s = MMAP_BASE - len;
        loop {
            if self.free(s, len) {
                return Some(s);
            }
            if s < WBASE + P {
                return None;
            }
            s -= P;
        }
    }
}

fn model_vmas(mm: &MmStruct) -> Vec<(u64, u64, VmFlags, u64)> {
    mm.vmas
        .values()
        .map(|v| (v.start, v.end, v.flags, v.pgoff))
        .collect()
}

/// What the reference predicts for `mremap()` of valid, aligned arguments.
#[allow(clippy::too_many_arguments)]
fn ref_mremap(
    r: &mut RefVmas,
    addr: u64,
    old_len: u64,
    new_len: u64,
    flags: MremapFlags,
    new_addr: u64,
) -> Result<u64, Errno> {
    let Some(v) = r.vma_at(addr) else {
        return Err(Errno::Fault);
    };
    let fixed = flags.contains(MremapFlags::FIXED);
    let mv = |r: &mut RefVmas, from: u64, len: u64, to: u64, new_len: u64| {
        let (f, off) = r.get(from).expect("mapped");
        let _ = len;
        r.clear(from, len);
        r.map(to, new_len, f, off);
    };
    if !fixed {
        if new_len == old_len {
            return Ok(addr);
        }
        if new_len < old_len {
            r.clear(addr + new_len, old_len - new_len);
            return Ok(addr);
        }
        if old_len > v.1 - addr {
            return Err(Errno::Fault);
        }
        let delta = new_len - old_len;
        if v.1 == addr + old_len && v.1 + delta <= MMAP_BASE && r.free(v.1, delta) {
            let off = v.3 + (v.1 - v.0) / P;
            r.map(v.1, delta, v.2, off);
            return Ok(addr);
        }
        if !flags.contains(MremapFlags::MAYMOVE) {
            return Err(Errno::NoMem);
        }
        // The source still counts as mapped while the target is found.
        let to = r.place(new_len).expect("the window has room");
        mv(r, addr, old_len, to, new_len);
        return Ok(to);
    }
    if addr < new_addr + new_len && new_addr < addr + old_len {
        return Err(Errno::Inval);
    }
    r.clear(new_addr, new_len);
    let mut old_len = old_len;
    if new_len < old_len {
        r.clear(addr + new_len, old_len - new_len);
        old_len = new_len;
    }
    let v = r.vma_at(addr).expect("still mapped");
    if old_len > v.1 - addr {
        return Err(Errno::Fault);
    }
    mv(r, addr, old_len, new_addr, new_len);
    Ok(new_addr)
}

fn vma_differential(seed: u64) {
    let mut w = world(MmapLayout::PageAligned);
    let mut mm = w.mm();
    let mut r = RefVmas {
        pages: vec![None; WINDOW_PAGES as usize],
    };
    let mut rng = SplitMix64(seed);
    let rw = VmFlags::READ.or(VmFlags::WRITE).or(VmFlags::ANON_PRIVATE);
    for step in 0..1500 {
        let len = (1 + rng.below(24)) * P;
        let addr = WBASE + rng.below(WINDOW_PAGES - 48) * P;
        let what = rng.below(100);
        let (label, got, want): (String, Result<u64, Errno>, Result<u64, Errno>) = match what {
            0..=19 => {
                let got = mm.mmap(
                    &mut w.pa,
                    &mut w.cx,
                    Vaddr(addr),
                    len,
                    mm::vma::MapFlags::FIXED,
                );
                r.clear(addr, len);
                r.map(addr, len, rw, addr / P);
                (
                    format!("mmap fixed {addr:#x}+{len:#x}"),
                    got.map(|a| a.0),
                    Ok(addr),
                )
            }
            20..=27 => {
                // Only placements the window can hold are followed.
                if r.place(len).is_none() {
                    continue;
                }
                let want = r.place(len).ok_or(Errno::NoMem);
                if let Ok(a) = want {
                    r.map(a, len, rw, a / P);
                }
                let got = mm.mmap(&mut w.pa, &mut w.cx, Vaddr(0), len, mm::vma::MapFlags::NONE);
                (format!("mmap {len:#x}"), got.map(|a| a.0), want)
            }
            28..=42 => {
                let got = mm.munmap(&mut w.pa, &mut w.cx, Vaddr(addr), len).map(|_| 0);
                r.clear(addr, len);
                (format!("munmap {addr:#x}+{len:#x}"), got, Ok(0))
            }
            43..=69 => {
                let prot = [Prot::NONE, Prot::READ, Prot::RW, Prot::READ.or(Prot::EXEC)]
                    [rng.below(4) as usize];
                let got = mm
                    .mprotect(&mut w.pa, &mut w.cx, Vaddr(addr), len, prot)
                    .map(|_| 0);
                // The mapped run from addr changes; a hole ends it with ENOMEM.
                let mut want = Ok(0);
                for i in 0..len / P {
                    let a = addr + i * P;
                    match r.get(a) {
                        Some((f, off)) => {
                            let nf = prot.vm_flags().or(f.without(VmFlags::ACCESS));
                            r.set(a, Some((nf, off)));
                        }
                        None => {
                            want = Err(Errno::NoMem);
                            break;
                        }
                    }
                }
                (format!("mprotect {addr:#x}+{len:#x} {prot}"), got, want)
            }
            70..=79 => {
                let advice = if rng.below(2) == 0 {
                    Advice::HugePage
                } else {
                    Advice::NoHugePage
                };
                let got = mm
                    .madvise(&mut w.pa, &mut w.cx, Vaddr(addr), len, advice)
                    .map(|_| 0);
                let (set, clear) = if advice == Advice::HugePage {
                    (VmFlags::HUGEPAGE, VmFlags::NOHUGEPAGE)
                } else {
                    (VmFlags::NOHUGEPAGE, VmFlags::HUGEPAGE)
                };
                let mut want = Ok(0);
                for i in 0..len / P {
                    let a = addr + i * P;
                    match r.get(a) {
                        Some((f, off)) => r.set(a, Some((f.without(clear).or(set), off))),
                        None => want = Err(Errno::NoMem),
                    }
                }
                (format!("madvise {addr:#x}+{len:#x} {advice:?}"), got, want)
            }
            _ => {
                // mremap of a mapped address: shrink, grow or move.
                let Some(v) = r.vmas().get(rng.below(8) as usize).copied() else {
                    continue;
                };
                let a = v.0 + rng.below((v.1 - v.0) / P) * P;
                let old_len = (1 + rng.below((v.1 - a) / P)) * P;
                let new_len = (1 + rng.below(32)) * P;
                let flags = match rng.below(3) {
                    0 => MremapFlags::default(),
                    1 => MremapFlags::MAYMOVE,
                    _ => MremapFlags::MAYMOVE.or(MremapFlags::FIXED),
                };
                if r.place(new_len).is_none() {
                    continue;
                }
                let new_addr = if flags.contains(MremapFlags::FIXED) {
                    WBASE + rng.below(WINDOW_PAGES - 48) * P
                } else {
                    0
                };
                let got = mm.mremap(
                    &mut w.pa,
                    &mut w.cx,
                    Vaddr(a),
                    old_len,
                    new_len,
                    flags,
                    Vaddr(new_addr),
                );
                let want = ref_mremap(&mut r, a, old_len, new_len, flags, new_addr);
                (
                    format!("mremap {a:#x} {old_len:#x}->{new_len:#x} {flags:?} {new_addr:#x}"),
                    got.map(|a| a.0),
                    want,
                )
            }
        };
        assert_eq!(got, want, "seed {seed} step {step}: {label}");
        mm.check_vmas();
        assert_eq!(
            model_vmas(&mm),
            r.vmas(),
            "seed {seed} step {step}: {label}"
        );
        for _ in 0..4 {
            let a = WBASE + rng.below(WINDOW_PAGES) * P;
            let got = mm.find_vma(&mut w.cx, a).map(|v| (v.start, v.end));
            let want = r.vmas().into_iter().find(|v| v.1 > a).map(|v| (v.0, v.1));
            assert_eq!(got, want, "seed {seed} step {step}: find_vma({a:#x})");
        }
    }
    check_mm_invariants(&w.pa, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn vma_tree_matches_a_per_page_reference() {
    for seed in [1, 2, 3, 0x5eed] {
        vma_differential(seed);
    }
}

// ---------------------------------------------------------------------------
// The page tables against a map from address to entry.

/// One page's entry as the reference sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RefPte {
    /// The frame, or `None` for the zero page.
    pfn: Option<u64>,
    write: bool,
    exclusive: bool,
    protnone: bool,
}

type RefMap = BTreeMap<u64, RefPte>;

fn model_ptes(mm: &MmStruct) -> RefMap {
    let mut out = RefMap::new();
    mm.pgt.for_each_leaf(|addr, level, _, e| {
        let n = if level == Level::Pmd { PMD_SIZE / P } else { 1 };
        for i in 0..n {
            out.insert(
                addr + i * P,
                RefPte {
                    pfn: (e & PAGE_SPECIAL == 0).then(|| entry_pfn(e).0 + i),
                    write: e & PAGE_RW != 0,
                    exclusive: e & PAGE_ANON_EXCLUSIVE != 0,
                    protnone: e & PAGE_PROTNONE != 0,
                },
            );
        }
    });
    out
}

fn mapped_anywhere(maps: &[RefMap], pfn: u64) -> usize {
    maps.iter()
        .map(|m| m.values().filter(|e| e.pfn == Some(pfn)).count())
        .sum()
}

fn remove_range(m: &mut RefMap, a: u64, len: u64) {
    let keys: Vec<u64> = m.range(a..a + len).map(|(&k, _)| k).collect();
    for k in keys {
        m.remove(&k);
    }
}

/// The reference's rule for a user access at `a` in address space `i`,
/// given what the model did (`new` is the model's entry afterwards).
fn ref_access(maps: &mut [RefMap], i: usize, a: u64, write: bool, new: Option<RefPte>) {
    let old = maps[i].get(&a).copied();
    let want = match (old, write) {
        (Some(e), false) => e,
        (Some(e), true) if e.write => e,
        (None, false) => RefPte {
            pfn: None,
            write: false,
            exclusive: false,
            protnone: false,
        },
        (old, true) => {
            // Reuse a page this mapping holds alone; otherwise a fresh one.
            let reuse = old
                .and_then(|e| e.pfn.map(|p| (e, p)))
                .filter(|&(e, p)| e.exclusive || mapped_anywhere(maps, p) == 1);
            let pfn = match reuse {
                Some((_, p)) => p,
                None => {
                    let p = new.and_then(|n| n.pfn).expect("a write maps a frame");
                    assert_eq!(mapped_anywhere(maps, p), 0, "fresh frame {p:#x} in use");
                    p
                }
            };
            RefPte {
                pfn: Some(pfn),
                write: true,
                exclusive: true,
                protnone: false,
            }
        }
    };
    maps[i].insert(a, want);
}

fn pte_differential(seed: u64) {
    let mut w = world(MmapLayout::ThpAligned);
    let mut mms = vec![w.mm()];
    let mut maps = vec![RefMap::new()];
    let mut rng = SplitMix64(seed);
    let base = 0x4000_0000u64;
    let span = 512u64; // pages
                       // Operations that did something, by kind: the list must exercise each.
    let mut done: BTreeMap<String, u32> = BTreeMap::new();
    for step in 0..3000 {
        let i = rng.below(mms.len() as u64) as usize;
        let len = (1 + rng.below(16)) * P;
        let addr = base + rng.below(span - 32) * P;
        let what = rng.below(100);
        let label;
        match what {
            0..=9 => {
                label = format!("mm {i}: mmap fixed {addr:#x}+{len:#x}");
                mms[i]
                    .mmap(
                        &mut w.pa,
                        &mut w.cx,
                        Vaddr(addr),
                        len,
                        mm::vma::MapFlags::FIXED,
                    )
                    .unwrap();
                remove_range(&mut maps[i], addr, len);
            }
            10..=49 => {
                let write = rng.below(3) != 0;
                label = format!("mm {i}: touch {addr:#x}+{len:#x} write {write}");
                for k in 0..len / P {
                    let a = addr + k * P;
                    let mm = &mut mms[i];
                    if access_ok(mm, Vaddr(a), write) {
                        continue;
                    }
                    match handle_mm_fault(&mut w.pa, &mut w.cx, &mut w.g, mm, Vaddr(a), write) {
                        Ok(()) => {
                            let new = model_ptes(mm).get(&a).copied();
                            let old = maps[i].get(&a).copied();
                            let kind = if old.is_some() { "wp fault" } else { "fault" };
                            *done.entry(kind.into()).or_default() += 1;
                            ref_access(&mut maps, i, a, write, new);
                        }
                        Err(VmFault::Sigsegv) => {
                            let v = mms[i].vma_at(a);
                            let allowed = v.is_some_and(|v| {
                                if write {
                                    v.flags.contains(VmFlags::WRITE)
                                } else {
                                    v.flags.0 & VmFlags::ACCESS.0 != 0
                                }
                            });
                            assert!(!allowed, "seed {seed} step {step}: SIGSEGV at {a:#x}");
                        }
                        Err(e) => panic!("seed {seed} step {step}: {e:?}"),
                    }
                }
            }
            50..=57 => {
                label = format!("mm {i}: munmap {addr:#x}+{len:#x}");
                mms[i]
                    .munmap(&mut w.pa, &mut w.cx, Vaddr(addr), len)
                    .unwrap();
                remove_range(&mut maps[i], addr, len);
            }
            58..=63 => {
                label = format!("mm {i}: MADV_DONTNEED {addr:#x}+{len:#x}");
                let _ = mms[i].madvise(&mut w.pa, &mut w.cx, Vaddr(addr), len, Advice::DontNeed);
                remove_range(&mut maps[i], addr, len);
            }
            64..=79 => {
                let prot = [Prot::NONE, Prot::READ, Prot::RW][rng.below(3) as usize];
                label = format!("mm {i}: mprotect {addr:#x}+{len:#x} {prot}");
                let _ = mms[i].mprotect(&mut w.pa, &mut w.cx, Vaddr(addr), len, prot);
                // Entries in the contiguously mapped part from addr change.
                let mut end = addr;
                while end < addr + len && mms[i].vma_at(end).is_some() {
                    end += P;
                }
                let nf = prot.vm_flags();
                for (_, e) in maps[i].range_mut(addr..end) {
                    e.protnone = nf.0 == 0;
                    e.write = nf.contains(VmFlags::WRITE) && e.exclusive && e.pfn.is_some();
                }
            }
            80..=89 => {
                let Some(v) = mms[i].vma_at(addr) else {
                    continue;
                };
                let old_len = len.min(v.end - addr);
                let new_len = (1 + rng.below(16)) * P;
                let fixed = rng.below(2) == 0;
                let target = base + (span + rng.below(span - 32)) * P;
                let (flags, na) = if fixed {
                    (MremapFlags::MAYMOVE.or(MremapFlags::FIXED), target)
                } else {
                    (MremapFlags::MAYMOVE, 0)
                };
                label = format!("mm {i}: mremap {addr:#x} {old_len:#x}->{new_len:#x} {flags:?}");
                let to = mms[i]
                    .mremap(
                        &mut w.pa,
                        &mut w.cx,
                        Vaddr(addr),
                        old_len,
                        new_len,
                        flags,
                        Vaddr(na),
                    )
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: {label}: {e}"));
                if fixed {
                    remove_range(&mut maps[i], to.0, new_len);
                }
                if new_len < old_len {
                    remove_range(&mut maps[i], addr + new_len, old_len - new_len);
                }
                if to != Vaddr(addr) {
                    *done.entry("mremap move".into()).or_default() += 1;
                    let moved = old_len.min(new_len);
                    let ents: Vec<(u64, RefPte)> = maps[i]
                        .range(addr..addr + moved)
                        .map(|(&k, &e)| (k, e))
                        .collect();
                    remove_range(&mut maps[i], addr, moved);
                    for (k, e) in ents {
                        maps[i].insert(k - addr + to.0, e);
                    }
                }
            }
            90..=94 if mms.len() < 3 => {
                label = format!("mm {i}: fork");
                let child = fork(&mut w.pa, &mut w.cx, &mut mms[i]).unwrap();
                for e in maps[i].values_mut() {
                    e.write = false;
                    e.exclusive = false;
                }
                *done.entry("fork".into()).or_default() += 1;
                let m = maps[i].clone();
                mms.push(child);
                maps.push(m);
            }
            _ if mms.len() > 1 => {
                let j = 1 + rng.below(mms.len() as u64 - 1) as usize;
                label = format!("mm {j}: exit");
                let mm = mms.remove(j);
                maps.remove(j);
                w.exit(mm);
            }
            _ => continue,
        }
        let kind = label.split(' ').nth(2).unwrap_or("?").to_string();
        *done.entry(kind).or_default() += 1;
        for (k, mm) in mms.iter().enumerate() {
            assert_eq!(
                model_ptes(mm),
                maps[k],
                "seed {seed} step {step}: {label}: mm {k} differs"
            );
        }
        let refs: Vec<&MmStruct> = mms.iter().collect();
        check_mm_invariants(&w.pa, &refs);
    }
    for kind in [
        "fault",
        "wp fault",
        "mremap move",
        "fork",
        "mprotect",
        "munmap",
        "MADV_DONTNEED",
        "exit",
    ] {
        assert!(
            done.get(kind).copied().unwrap_or(0) >= 3,
            "seed {seed}: too few {kind}: {done:?}"
        );
    }
    for mm in mms {
        w.exit(mm);
    }
    w.check_all_free();
}

#[test]
fn page_tables_match_a_map_of_entries() {
    for seed in [11, 12, 13] {
        pte_differential(seed);
    }
}
