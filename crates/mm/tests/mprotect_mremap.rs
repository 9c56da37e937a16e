//! Scenario tests of `mprotect()` and `mremap()`: VMA splits and merges drawn
//! as ASCII layouts (one character per 4 KiB page: `w` read-write, `r`
//! read-only, `n` PROT_NONE, `.` unmapped; `|` between two VMAs that touch),
//! the write bits of the page tables, the faults that follow, and the
//! kernel's errors. The invariant checker runs after every step.

mod common;

use common::{World, KIB};
use mm::knobs::{KnobValue, Preset};
use mm::memory::{access_ok, check_mm_invariants, fork, handle_mm_fault, VmFault};
use mm::mprotect::Prot;
use mm::mremap::MremapFlags;
use mm::pgtable::{Level, PMD_SIZE};
use mm::vma::{Errno, MmStruct, VmFlags};
use mm::vmstat::VmEvent;
use mm::Vaddr;

const P: u64 = 4096;

fn world(thp: &str) -> World {
    let mut cfg = Preset::Linux6_18.config();
    cfg.set_knob("transparent_hugepage/enabled", &KnobValue::Str(thp.into()))
        .unwrap();
    World::new(cfg)
}

/// The layout of `[base, base + pages * 4 KiB)`.
fn draw(mm: &MmStruct, base: u64, pages: u64) -> String {
    let mut out = String::new();
    let mut prev: Option<u64> = None;
    for i in 0..pages {
        let a = base + i * P;
        match mm.vma_at(a) {
            None => {
                out.push('.');
                prev = None;
            }
            Some(v) => {
                if v.start == a && prev.is_some_and(|e| e == a) {
                    out.push('|');
                }
                let f = v.flags;
                out.push(if f.contains(VmFlags::WRITE) {
                    'w'
                } else if f.contains(VmFlags::READ) {
                    'r'
                } else {
                    'n'
                });
                prev = Some(v.end);
            }
        }
    }
    out
}

/// `mmap(MAP_FIXED)` of `len` bytes of anonymous read-write memory at `a`.
fn map_fixed(w: &mut World, mm: &mut MmStruct, a: u64, len: u64) {
    mm.mmap(
        &mut w.pa,
        &mut w.cx,
        Vaddr(a),
        len,
        mm::vma::MapFlags::FIXED,
    )
    .unwrap();
}

/// `mprotect()` that must succeed.
fn protect(w: &mut World, mm: &mut MmStruct, a: u64, len: u64, prot: Prot) {
    mm.mprotect(&mut w.pa, &mut w.cx, Vaddr(a), len, prot)
        .unwrap();
}

fn check(w: &World, mms: &[&MmStruct]) {
    w.pa.check_invariants();
    check_mm_invariants(&w.pa, mms);
}

/// The pfn mapped at `a` (PTE or inside a PMD leaf), if any.
fn pfn_at(mm: &MmStruct, a: u64) -> Option<u64> {
    let pmd = mm.pgt.lookup(a, Level::Pmd)?;
    let e = mm.pgt.get(pmd);
    if e & mm::pgtable::PAGE_PSE != 0 {
        return Some(mm::pgtable::entry_pfn(e).0 + (a % PMD_SIZE) / P);
    }
    let pte = mm.pgt.lookup(a, Level::Pte)?;
    let e = mm.pgt.get(pte);
    mm::pgtable::present(e).then(|| mm::pgtable::entry_pfn(e).0)
}

/// Reads one byte at `a` the way a user access does.
fn read(w: &mut World, mm: &mut MmStruct, a: u64) -> Result<(), VmFault> {
    if access_ok(mm, Vaddr(a), false) {
        return Ok(());
    }
    handle_mm_fault(&mut w.pa, &mut w.cx, &mut w.g, mm, Vaddr(a), false)
}

/// Writes one byte at `a` the way a user access does.
fn write(w: &mut World, mm: &mut MmStruct, a: u64) -> Result<(), VmFault> {
    if access_ok(mm, Vaddr(a), true) {
        return Ok(());
    }
    handle_mm_fault(&mut w.pa, &mut w.cx, &mut w.g, mm, Vaddr(a), true)
}

#[test]
fn mprotect_splits_and_merges() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut mm, b, 10 * P);
    assert_eq!(draw(&mm, b, 10), "wwwwwwwwww");
    protect(&mut w, &mut mm, b + 3 * P, 4 * P, Prot::READ);
    assert_eq!(draw(&mm, b, 10), "www|rrrr|www");
    // The same protection again changes nothing.
    protect(&mut w, &mut mm, b + 4 * P, P, Prot::READ);
    assert_eq!(draw(&mm, b, 10), "www|rrrr|www");
    // Extending the read-only part to the right merges it with the pages
    // that become read-only there.
    protect(&mut w, &mut mm, b + 7 * P, 2 * P, Prot::READ);
    assert_eq!(draw(&mm, b, 10), "www|rrrrrr|w");
    protect(&mut w, &mut mm, b, P, Prot::NONE);
    assert_eq!(draw(&mm, b, 10), "n|ww|rrrrrr|w");
    check(&w, &[&mm]);
    // Back to read-write everywhere: one VMA again.
    protect(&mut w, &mut mm, b, 10 * P, Prot::RW);
    assert_eq!(draw(&mm, b, 10), "wwwwwwwwww");
    assert_eq!(mm.vmas.len(), 1);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mprotect_across_a_hole_changes_what_precedes_it_then_fails() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut mm, b, 3 * P);
    map_fixed(&mut w, &mut mm, b + 5 * P, 3 * P);
    assert_eq!(draw(&mm, b, 8), "www..www");
    assert_eq!(
        mm.mprotect(&mut w.pa, &mut w.cx, Vaddr(b + P), 6 * P, Prot::READ),
        Err(Errno::NoMem)
    );
    // As in the kernel, the VMA before the hole was changed.
    assert_eq!(draw(&mm, b, 8), "w|rr..www");
    // A range that starts in a hole fails at once.
    assert_eq!(
        mm.mprotect(&mut w.pa, &mut w.cx, Vaddr(b + 3 * P), 4 * P, Prot::READ),
        Err(Errno::NoMem)
    );
    assert_eq!(draw(&mm, b, 8), "w|rr..www");
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mprotect_errors_are_the_kernels() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut mm, b, 4 * P);
    let mut mp = |mm: &mut MmStruct, a: u64, l: u64, p: Prot| {
        mm.mprotect(&mut w.pa, &mut w.cx, Vaddr(a), l, p)
    };
    assert_eq!(mp(&mut mm, b + 1, P, Prot::READ), Err(Errno::Inval));
    assert_eq!(mp(&mut mm, b, 0, Prot::READ), Ok(()));
    assert_eq!(mp(&mut mm, b, u64::MAX, Prot::READ), Err(Errno::NoMem));
    assert_eq!(mp(&mut mm, b, P, Prot(0x10)), Err(Errno::Inval));
    assert_eq!(
        mp(&mut mm, b, P, Prot::GROWSDOWN.or(Prot::GROWSUP)),
        Err(Errno::Inval)
    );
    assert_eq!(
        mp(&mut mm, b, P, Prot::READ.or(Prot::GROWSDOWN)),
        Err(Errno::Inval)
    );
    assert_eq!(mp(&mut mm, 0x2000_0000, P, Prot::READ), Err(Errno::NoMem));
    // PROT_SEM is accepted and changes nothing.
    assert_eq!(mp(&mut mm, b, P, Prot::RW.or(Prot::SEM)), Ok(()));
    assert_eq!(mm.vmas.len(), 1);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn read_only_pages_fault_with_sigsegv_and_exclusive_pages_become_writable_again() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut mm, b, 8 * P);
    // wwwwzzzz: four pages written, four only read (the zero page).
    for i in 0..4 {
        write(&mut w, &mut mm, b + i * P).unwrap();
        read(&mut w, &mut mm, b + (4 + i) * P).unwrap();
    }
    assert_eq!(mm.nr_faults, 8);
    protect(&mut w, &mut mm, b, 8 * P, Prot::READ);
    check(&w, &[&mm]);
    for i in 0..8 {
        assert!(
            access_ok(&mut mm, Vaddr(b + i * P), false),
            "page {i} readable"
        );
        assert!(
            !access_ok(&mut mm, Vaddr(b + i * P), true),
            "page {i} read-only"
        );
    }
    let pgfault = w.pa.vmstat.get(VmEvent::PGFAULT);
    assert_eq!(write(&mut w, &mut mm, b), Err(VmFault::Sigsegv));
    // A refused access reaches neither pgfault nor ru_minflt.
    assert_eq!(w.pa.vmstat.get(VmEvent::PGFAULT), pgfault);
    assert_eq!(mm.nr_faults, 8);
    protect(&mut w, &mut mm, b, 8 * P, Prot::RW);
    // The written pages are exclusive: writable again without a fault; the
    // zero-page entries stay read-only and take one write fault each.
    for i in 0..4 {
        assert!(
            access_ok(&mut mm, Vaddr(b + i * P), true),
            "page {i} writable"
        );
        assert!(!access_ok(&mut mm, Vaddr(b + (4 + i) * P), true));
    }
    for i in 0..8 {
        write(&mut w, &mut mm, b + i * P).unwrap();
    }
    assert_eq!(mm.nr_faults, 12);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn prot_none_refuses_every_access_until_restored() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut mm, b, 4 * P);
    for i in 0..4 {
        write(&mut w, &mut mm, b + i * P).unwrap();
    }
    protect(&mut w, &mut mm, b + P, 2 * P, Prot::NONE);
    assert_eq!(draw(&mm, b, 4), "w|nn|w");
    check(&w, &[&mm]);
    assert!(!access_ok(&mut mm, Vaddr(b + P), false));
    assert_eq!(read(&mut w, &mut mm, b + P), Err(VmFault::Sigsegv));
    assert_eq!(read(&mut w, &mut mm, b + 2 * P), Err(VmFault::Sigsegv));
    read(&mut w, &mut mm, b).unwrap();
    // The pages stayed mapped: restoring read-write needs no fault.
    let pfn = pfn_at(&mm, b + P);
    protect(&mut w, &mut mm, b + P, 2 * P, Prot::RW);
    assert_eq!(draw(&mm, b, 4), "wwww");
    assert!(access_ok(&mut mm, Vaddr(b + P), true));
    assert_eq!(pfn_at(&mm, b + P), pfn);
    assert_eq!(mm.nr_faults, 4);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn pages_shared_by_fork_stay_write_protected_after_mprotect() {
    let mut w = world("never");
    let mut parent = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut parent, b, 4 * P);
    for i in 0..4 {
        write(&mut w, &mut parent, b + i * P).unwrap();
    }
    let mut child = fork(&mut w.pa, &mut w.cx, &mut parent).unwrap();
    for mm in [&mut parent, &mut child] {
        protect(&mut w, mm, b, 4 * P, Prot::READ);
        protect(&mut w, mm, b, 4 * P, Prot::RW);
        assert!(
            !access_ok(mm, Vaddr(b), true),
            "a shared page is not exclusive"
        );
    }
    check(&w, &[&parent, &child]);
    // The child's write copies; after the child exits, the parent's write
    // reuses the page it now holds alone.
    let before = pfn_at(&parent, b);
    write(&mut w, &mut child, b).unwrap();
    assert_ne!(pfn_at(&child, b), before);
    check(&w, &[&parent, &child]);
    w.exit(child);
    write(&mut w, &mut parent, b).unwrap();
    assert_eq!(pfn_at(&parent, b), before);
    assert_eq!(parent.nr_faults, 5);
    check(&w, &[&parent]);
    w.exit(parent);
    w.check_all_free();
}

#[test]
fn mprotect_of_part_of_a_thp_splits_its_pmd() {
    let mut w = world("always");
    let mut mm = w.mm();
    let b = mm
        .mmap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(0),
            2 * PMD_SIZE,
            mm::vma::MapFlags::NONE,
        )
        .unwrap();
    assert_eq!(b % PMD_SIZE, 0);
    w.touch(&mut mm, b.0, 2 * PMD_SIZE);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_FAULT_ALLOC), 2);
    // A whole aligned 2 MiB: the PMD leaf is changed, not split.
    mm.mprotect(&mut w.pa, &mut w.cx, b, PMD_SIZE, Prot::READ)
        .unwrap();
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 0);
    assert!(!access_ok(&mut mm, b + 5 * P, true));
    check(&w, &[&mm]);
    // One 4 KiB page of the second THP: its VMA splits in three (r|w|r|w
    // in all) and the PMD is split to PTEs; the other 511 pages stay
    // writable.
    assert_eq!(mm.vmas.len(), 2);
    mm.mprotect(&mut w.pa, &mut w.cx, b + PMD_SIZE + 7 * P, P, Prot::READ)
        .unwrap();
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 1);
    assert_eq!(mm.vmas.len(), 4);
    assert!(!access_ok(&mut mm, b + PMD_SIZE + 7 * P, true));
    assert!(access_ok(&mut mm, b + PMD_SIZE + 8 * P, true));
    check(&w, &[&mm]);
    // Back to read-write: exclusive pages are writable without faults.
    let faults = mm.nr_faults;
    mm.mprotect(&mut w.pa, &mut w.cx, b, 2 * PMD_SIZE, Prot::RW)
        .unwrap();
    assert_eq!(mm.vmas.len(), 1);
    w.touch(&mut mm, b.0, 2 * PMD_SIZE);
    assert_eq!(mm.nr_faults, faults);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mremap_shrinks_grows_in_place_and_moves() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    let flags0 = MremapFlags::default();
    map_fixed(&mut w, &mut mm, b, 8 * P);
    w.touch(&mut mm, b, 8 * P);
    let pfns: Vec<Option<u64>> = (0..8).map(|i| pfn_at(&mm, b + i * P)).collect();
    assert_eq!(draw(&mm, b, 12), "wwwwwwww....");
    // Shrink: the tail's pages are freed.
    let r = mm.mremap(
        &mut w.pa,
        &mut w.cx,
        Vaddr(b),
        8 * P,
        6 * P,
        flags0,
        Vaddr(0),
    );
    assert_eq!(r, Ok(Vaddr(b)));
    assert_eq!(draw(&mm, b, 12), "wwwwww......");
    check(&w, &[&mm]);
    // Grow in place into the free pages after it.
    let r = mm.mremap(
        &mut w.pa,
        &mut w.cx,
        Vaddr(b),
        6 * P,
        10 * P,
        flags0,
        Vaddr(0),
    );
    assert_eq!(r, Ok(Vaddr(b)));
    assert_eq!(draw(&mm, b, 12), "wwwwwwwwww..");
    // A neighbour in the way: ENOMEM without MREMAP_MAYMOVE ...
    map_fixed(&mut w, &mut mm, b + 10 * P, P);
    protect(&mut w, &mut mm, b + 10 * P, P, Prot::READ);
    assert_eq!(draw(&mm, b, 12), "wwwwwwwwww|r.");
    assert_eq!(
        mm.mremap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(b),
            10 * P,
            12 * P,
            flags0,
            Vaddr(0)
        ),
        Err(Errno::NoMem)
    );
    // ... a move with it: page tables move, the pages keep their frames and
    // need no fault, the old range is gone.
    let faults = mm.nr_faults;
    let to = mm
        .mremap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(b),
            10 * P,
            12 * P,
            MremapFlags::MAYMOVE,
            Vaddr(0),
        )
        .unwrap();
    assert_ne!(to, Vaddr(b));
    assert_eq!(draw(&mm, b, 12), "..........r.");
    assert_eq!(draw(&mm, to.0, 12), "wwwwwwwwwwww");
    for (i, pfn) in pfns.iter().take(6).enumerate() {
        assert_eq!(
            pfn_at(&mm, (to + i as u64 * P).0),
            *pfn,
            "page {i} kept its frame"
        );
    }
    w.touch(&mut mm, to.0, 6 * P);
    assert_eq!(mm.nr_faults, faults);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mremap_fixed_replaces_the_target_and_moved_vmas_keep_their_offset() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    let fixed = MremapFlags::MAYMOVE.or(MremapFlags::FIXED);
    map_fixed(&mut w, &mut mm, b, 4 * P);
    map_fixed(&mut w, &mut mm, b + 6 * P, 4 * P);
    w.touch(&mut mm, b, 4 * P);
    w.touch(&mut mm, b + 6 * P, 4 * P);
    assert_eq!(draw(&mm, b, 10), "wwww..wwww");
    // Move the first two pages over the last two: the target's pages are
    // unmapped first, the source range leaves a hole.
    let first = pfn_at(&mm, b);
    let r = mm.mremap(
        &mut w.pa,
        &mut w.cx,
        Vaddr(b),
        2 * P,
        2 * P,
        fixed,
        Vaddr(b + 8 * P),
    );
    assert_eq!(r, Ok(Vaddr(b + 8 * P)));
    // The moved VMA's page offset is not contiguous with its new left
    // neighbour's: they stay two VMAs.
    assert_eq!(draw(&mm, b, 10), "..ww..ww|ww");
    assert_eq!(pfn_at(&mm, b + 8 * P), first);
    check(&w, &[&mm]);
    // Moving it back next to the pages it came with merges again.
    let r = mm.mremap(
        &mut w.pa,
        &mut w.cx,
        Vaddr(b + 8 * P),
        2 * P,
        2 * P,
        fixed,
        Vaddr(b),
    );
    assert_eq!(r, Ok(Vaddr(b)));
    assert_eq!(draw(&mm, b, 10), "wwww..ww..");
    assert_eq!(mm.vmas.len(), 2);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mremap_errors_are_the_kernels() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    let m = MremapFlags::MAYMOVE;
    let fixed = MremapFlags::MAYMOVE.or(MremapFlags::FIXED);
    map_fixed(&mut w, &mut mm, b, 4 * P);
    let mut mr = |mm: &mut MmStruct, a: u64, o: u64, n: u64, f: MremapFlags, na: u64| {
        mm.mremap(&mut w.pa, &mut w.cx, Vaddr(a), o, n, f, Vaddr(na))
    };
    assert_eq!(mr(&mut mm, b + 1, P, 2 * P, m, 0), Err(Errno::Inval));
    assert_eq!(mr(&mut mm, b, P, 0, m, 0), Err(Errno::Inval));
    assert_eq!(mr(&mut mm, b, P, P, MremapFlags(0x8), 0), Err(Errno::Inval));
    assert_eq!(
        mr(&mut mm, b, P, P, MremapFlags::FIXED, 0x2000_0000),
        Err(Errno::Inval)
    );
    assert_eq!(mr(&mut mm, b, P, P, fixed, 0x2000_0001), Err(Errno::Inval));
    // Source and target overlap.
    assert_eq!(
        mr(&mut mm, b, 2 * P, 2 * P, fixed, b + P),
        Err(Errno::Inval)
    );
    // DONTUNMAP cannot resize.
    let du = MremapFlags::MAYMOVE.or(MremapFlags::DONTUNMAP);
    assert_eq!(mr(&mut mm, b, P, 2 * P, du, 0), Err(Errno::Inval));
    // No VMA at addr, or a growing range past its VMA's end: EFAULT.
    assert_eq!(mr(&mut mm, 0x2000_0000, P, 2 * P, m, 0), Err(Errno::Fault));
    assert_eq!(
        mr(&mut mm, b + 2 * P, 4 * P, 8 * P, m, 0),
        Err(Errno::Fault)
    );
    // A private mapping cannot be "duplicated" with old_len 0.
    assert_eq!(mr(&mut mm, b, 0, P, m, 0), Err(Errno::Inval));
    // Target beyond the address space.
    assert_eq!(
        mr(&mut mm, b, P, P, fixed, mm::vma::TASK_SIZE),
        Err(Errno::Inval)
    );
    assert_eq!(draw(&mm, b, 4), "wwww");
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mremap_dontunmap_moves_the_pages_and_keeps_an_empty_vma() {
    let mut w = world("never");
    let mut mm = w.mm();
    let b = 0x1000_0000;
    map_fixed(&mut w, &mut mm, b, 4 * P);
    w.touch(&mut mm, b, 4 * P);
    let first = pfn_at(&mm, b);
    let du = MremapFlags::MAYMOVE.or(MremapFlags::DONTUNMAP);
    let to = mm
        .mremap(&mut w.pa, &mut w.cx, Vaddr(b), 4 * P, 4 * P, du, Vaddr(0))
        .unwrap();
    assert_eq!(draw(&mm, b, 4), "wwww");
    assert_eq!(pfn_at(&mm, b), None);
    assert_eq!(pfn_at(&mm, to.0), first);
    // The old range faults afresh.
    assert_eq!(w.touch(&mut mm, b, 4 * P), 4);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}

#[test]
fn mremap_moves_thps_whole_when_aligned_and_splits_them_otherwise() {
    let mut w = world("always");
    let mut mm = w.mm();
    let len = 4 * PMD_SIZE;
    let b = mm
        .mmap(&mut w.pa, &mut w.cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .unwrap();
    assert_eq!(w.touch(&mut mm, b.0, len), 4);
    let tables = mm.pgt.nr_tables();
    // A non-fixed move keeps the 2 MiB alignment: PMDs move whole.
    let to = mm
        .mremap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(b.0),
            len,
            len + PMD_SIZE,
            MremapFlags::MAYMOVE,
            Vaddr(0),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let to = if to == b {
        // Grown in place: move it explicitly instead.
        let t = 0x4000_0000;
        mm.mremap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(b.0),
            len,
            len,
            MremapFlags::MAYMOVE.or(MremapFlags::FIXED),
            Vaddr(t),
        )
        .unwrap()
    } else {
        to
    };
    assert_eq!(to % PMD_SIZE, 0);
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 0);
    assert_eq!(w.touch(&mut mm, to.0, len), 0);
    check(&w, &[&mm]);
    // MREMAP_FIXED to an address 16 KiB past a 2 MiB boundary: every PMD
    // is split and its PTEs move one by one.
    let odd = 0x8000_0000 + 16 * KIB;
    let r = mm.mremap(
        &mut w.pa,
        &mut w.cx,
        Vaddr(to.0),
        len,
        len,
        MremapFlags::MAYMOVE.or(MremapFlags::FIXED),
        Vaddr(odd),
    );
    assert_eq!(r, Ok(Vaddr(odd)));
    assert_eq!(w.pa.vmstat.get(VmEvent::THP_SPLIT_PMD), 4);
    assert_eq!(w.touch(&mut mm, odd, len), 0);
    assert!(mm.pgt.nr_tables() >= tables);
    check(&w, &[&mm]);
    w.exit(mm);
    w.check_all_free();
}
