//! Per-page metadata (`struct page`, include/linux/mm_types.h) and the
//! intrusive lists that thread through it.
//!
//! # Layout: 16 bytes a page
//!
//! A simulated machine of 1 TiB has 2^28 base pages; to fit it in a laptop's
//! memory the metadata of a page is four `u32` words, stored as four parallel
//! arrays (so that a fresh array is all zeroes, which the host allocator gives
//! lazily: untouched metadata costs no resident memory):
//!
//! | word      | while free (buddy or PCP)      | while allocated                  |
//! |-----------|--------------------------------|----------------------------------|
//! | `flags`   | order, PG_buddy/PG_pcp, migratetype | order, PG_head, later folio flags |
//! | `next`    | list link                      | head: folio refcount (see below) |
//! | `prev`    | list link                      | head: entire (PMD) mapcount      |
//! | `private` | reserved                       | reserved for the folio layer     |
//!
//! The folio words of an allocated head (`memory.rs`): `next` counts the
//! 4 KiB mappings of the folio's pages by user page tables, a PMD mapping
//! counting 512 (the kernel's `_refcount` with one reference per mapped
//! page); `prev` counts the PMD mappings (`_entire_mapcount`). A folio is
//! freed when its refcount reaches zero.
//!
//! As in the kernel, the list links and the allocated-page fields share
//! storage (the kernel's `struct page` is a union of such views). Pfns are
//! stored as `u32`: a model of up to 16 TiB of memory.
//!
//! Deviation: the kernel threads PCP pages through `page->pcp_list` and buddy
//! pages through `page->buddy_list`, which overlay the same words; so does the
//! model. The kernel has no "on a PCP list" flag; the model keeps one
//! (`PG_PCP`) so that the invariant checker can tell where every page is.

use crate::types::Pfn;

/// "No page": the end of a list.
pub const NIL: u32 = u32::MAX;

/// Bits of `flags` holding the order of a block head.
pub const ORDER_MASK: u32 = 0x1f;
/// The block is free on a buddy list and this page is its head (`PageBuddy`).
pub const PG_BUDDY: u32 = 1 << 5;
/// The block is free on a per-CPU list and this page is its head.
pub const PG_PCP: u32 = 1 << 6;
/// The block is allocated and this page is its head.
pub const PG_HEAD: u32 = 1 << 7;
/// An allocated large anonymous folio that is partially unmapped and on the
/// deferred split queue (`folio_test_partially_mapped()`, kept in the head's
/// flags as the kernel keeps it in the folio's). Set and cleared by
/// `memory::anon_folio`; bit 11 is the allocator's `PG_TAIL`.
pub const PG_PARTIALLY_MAPPED: u32 = 1 << 12;
/// Model-only (the kernel has no such flag): a user access reached this page
/// of an anonymous folio since it was allocated. Set by
/// `memory::user_access`, read when the folio is freed, to measure memory
/// bloat (pages a large folio allocated that the program never used). The
/// allocator resets it with the other flags.
pub const PG_UTOUCHED: u32 = 1 << 13;
/// An allocated folio is locked (`PG_locked`, `folio_trylock()`): migration
/// skips it. Only tests set it in the model (a folio locked by I/O or by
/// another migration).
pub const PG_LOCKED: u32 = 1 << 14;
/// Shift of the migratetype stored in a free block's head
/// (the kernel caches the PCP migratetype in `page->index`).
pub const MT_SHIFT: u32 = 8;
/// Mask of the stored migratetype, after shifting.
pub const MT_MASK: u32 = 0x7;

/// The metadata of every page of the simulated machine, indexed by pfn.
#[derive(Clone, Debug)]
pub struct MemMap {
    flags: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    private: Vec<u32>,
}

impl MemMap {
    /// Metadata for `nr_pages` pages, all zero (no flags, no links).
    pub fn new(nr_pages: u64) -> MemMap {
        assert!(
            nr_pages < NIL as u64,
            "mem_map of {nr_pages} pages does not fit u32 pfns"
        );
        let n = nr_pages as usize;
        MemMap {
            flags: vec![0; n],
            next: vec![0; n],
            prev: vec![0; n],
            private: vec![0; n],
        }
    }

    /// Number of pages described.
    pub fn len(&self) -> u64 {
        self.flags.len() as u64
    }

    /// True if no page is described.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// Bytes of host memory per simulated page.
    pub const BYTES_PER_PAGE: usize = 4 * std::mem::size_of::<u32>();

    /// The flags word of `pfn`.
    #[inline]
    pub fn flags(&self, pfn: u32) -> u32 {
        self.flags[pfn as usize]
    }

    /// Sets the flags word of `pfn`.
    #[inline]
    pub fn set_flags(&mut self, pfn: u32, flags: u32) {
        self.flags[pfn as usize] = flags;
    }

    /// The private word of `pfn`.
    #[inline]
    pub fn private(&self, pfn: u32) -> u32 {
        self.private[pfn as usize]
    }

    /// Sets the private word of `pfn`.
    #[inline]
    pub fn set_private(&mut self, pfn: u32, v: u32) {
        self.private[pfn as usize] = v;
    }

    /// The folio refcount of an allocated head (its `next` word).
    #[inline]
    pub fn refcount(&self, head: u32) -> u32 {
        self.next[head as usize]
    }

    /// Sets the folio refcount of an allocated head.
    #[inline]
    pub fn set_refcount(&mut self, head: u32, v: u32) {
        self.next[head as usize] = v;
    }

    /// The entire (PMD) mapcount of an allocated head (its `prev` word).
    #[inline]
    pub fn entire_mapcount(&self, head: u32) -> u32 {
        self.prev[head as usize]
    }

    /// Sets the entire mapcount of an allocated head.
    #[inline]
    pub fn set_entire_mapcount(&mut self, head: u32, v: u32) {
        self.prev[head as usize] = v;
    }

    /// References to an allocated folio other than its mappings: GUP pins,
    /// transient `folio_get()`s (the head's `private` word; 0 for a folio
    /// only its page tables reference). Migration needs it to be 0
    /// (`folio_expected_ref_count()`).
    #[inline]
    pub fn folio_extra_refs(&self, head: u32) -> u32 {
        self.private[head as usize]
    }

    /// Sets the extra references of an allocated folio (see
    /// [`MemMap::folio_extra_refs`]); must be 0 again before it is freed.
    #[inline]
    pub fn set_folio_extra_refs(&mut self, head: u32, v: u32) {
        self.private[head as usize] = v;
    }

    /// The order stored in `pfn`'s flags (`buddy_order()` for a free head).
    #[inline]
    pub fn order(&self, pfn: u32) -> u8 {
        (self.flags(pfn) & ORDER_MASK) as u8
    }

    /// The migratetype stored in a free block's head.
    #[inline]
    pub fn stored_mt(&self, pfn: u32) -> u8 {
        ((self.flags(pfn) >> MT_SHIFT) & MT_MASK) as u8
    }

    /// True if `pfn` heads a free block of exactly `order` on a buddy list
    /// (`page_is_buddy()` without the zone check, which the caller makes).
    #[inline]
    pub fn is_buddy_of_order(&self, pfn: u32, order: u8) -> bool {
        let f = self.flags(pfn);
        f & PG_BUDDY != 0 && (f & ORDER_MASK) as u8 == order
    }

    /// The next page on the list that `pfn` is on.
    #[inline]
    pub fn next(&self, pfn: u32) -> u32 {
        self.next[pfn as usize]
    }

    /// The previous page on the list that `pfn` is on.
    #[inline]
    pub fn prev(&self, pfn: u32) -> u32 {
        self.prev[pfn as usize]
    }
}

/// A doubly linked list of block heads threaded through [`MemMap`]
/// (`struct list_head` with its entries in `struct page`).
///
/// Invariant: `len` is the number of entries; `head == NIL` iff `tail == NIL`
/// iff `len == 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageList {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for PageList {
    fn default() -> Self {
        PageList {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl PageList {
    /// True if the list has no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// The first entry (`list_first_entry()`).
    #[inline]
    pub fn first(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The last entry (`list_last_entry()`).
    #[inline]
    pub fn last(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// Adds `pfn` at the head (`list_add()`).
    #[inline]
    pub fn add(&mut self, mem: &mut MemMap, pfn: u32) {
        mem.prev[pfn as usize] = NIL;
        mem.next[pfn as usize] = self.head;
        if self.head != NIL {
            mem.prev[self.head as usize] = pfn;
        } else {
            self.tail = pfn;
        }
        self.head = pfn;
        self.len += 1;
    }

    /// Adds `pfn` at the tail (`list_add_tail()`).
    #[inline]
    pub fn add_tail(&mut self, mem: &mut MemMap, pfn: u32) {
        mem.next[pfn as usize] = NIL;
        mem.prev[pfn as usize] = self.tail;
        if self.tail != NIL {
            mem.next[self.tail as usize] = pfn;
        } else {
            self.head = pfn;
        }
        self.tail = pfn;
        self.len += 1;
    }

    /// Unlinks `pfn`, which must be on this list (`list_del()`).
    #[inline]
    pub fn del(&mut self, mem: &mut MemMap, pfn: u32) {
        let (p, n) = (mem.prev[pfn as usize], mem.next[pfn as usize]);
        if p != NIL {
            mem.next[p as usize] = n;
        } else {
            debug_assert_eq!(self.head, pfn, "list_del of a page not on this list");
            self.head = n;
        }
        if n != NIL {
            mem.prev[n as usize] = p;
        } else {
            debug_assert_eq!(self.tail, pfn, "list_del of a page not on this list");
            self.tail = p;
        }
        self.len -= 1;
    }

    /// Removes and returns the first entry.
    #[inline]
    pub fn pop_first(&mut self, mem: &mut MemMap) -> Option<u32> {
        let h = self.first()?;
        self.del(mem, h);
        Some(h)
    }

    /// Removes and returns the last entry.
    #[inline]
    pub fn pop_last(&mut self, mem: &mut MemMap) -> Option<u32> {
        let t = self.last()?;
        self.del(mem, t);
        Some(t)
    }

    /// The entries from head to tail (for checks and dumps; O(len)).
    pub fn iter<'a>(&self, mem: &'a MemMap) -> impl Iterator<Item = u32> + 'a {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let p = cur;
            cur = mem.next(p);
            Some(p)
        })
    }
}

/// Converts a model pfn to the `u32` index used in [`MemMap`].
#[inline]
pub fn pfn_idx(pfn: Pfn) -> u32 {
    debug_assert!(pfn.0 < NIL as u64);
    pfn.0 as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_add_del_both_ends() {
        let mut mem = MemMap::new(8);
        let mut l = PageList::default();
        l.add(&mut mem, 1);
        l.add(&mut mem, 2);
        l.add_tail(&mut mem, 3);
        assert_eq!(l.iter(&mem).collect::<Vec<_>>(), vec![2, 1, 3]);
        l.del(&mut mem, 1);
        assert_eq!(l.iter(&mem).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(l.pop_last(&mut mem), Some(3));
        assert_eq!(l.pop_first(&mut mem), Some(2));
        assert!(l.is_empty());
        assert_eq!(l.first(), None);
        assert_eq!(l.last(), None);
    }
}
