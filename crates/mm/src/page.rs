//! Per-page metadata (`struct page`, include/linux/mm_types.h) in sparse
//! memory sections (mm/sparse.c, `CONFIG_SPARSEMEM`), and the intrusive
//! lists that thread through it.
//!
//! # Sections: metadata only for memory that is used
//!
//! The kernel's SPARSEMEM divides physical memory into sections (128 MiB on
//! x86-64, `SECTION_SIZE_BITS` = 27) and gives each present section its own
//! `mem_map` and pageblock flags (`mem_section_usage`). The model does the
//! same, but lazily: a section's metadata exists only once a page of it is
//! needed (*materialised*). Boot materialises only the sections a zone
//! boundary cuts; the free memory of every other section stays a run of free
//! max-order blocks on its zone's free list ([`FreeList`]), described by two
//! numbers. When the allocator takes the first block of such a run (to split
//! it or to hand it out) the section is materialised and its blocks become
//! ordinary list entries in the same places. So a machine of 64 TiB on which
//! a workload touches 10 MiB costs a table of sections (4 bytes each) plus a
//! few sections of metadata, not 16 bytes for each of its 16 G pages.
//!
//! Deviation: the kernel materialises every present section's `mem_map` at
//! boot (`sparse_init()`) and hands each page to the buddy allocator
//! (`memblock_free_all()`), which takes seconds per terabyte; the model's
//! free lists keep unmaterialised runs instead, in the order the kernel's
//! lists would hold their blocks, so every allocation returns the pfn the
//! eager model returned. Sections are never dematerialised (the kernel frees
//! a `mem_map` only on memory hot-remove, which the model lacks).
//!
//! # Two index spaces: `Pfn` and `PfnIdx`
//!
//! A [`Pfn`] is a physical page frame number (up to 2^40: 52-bit physical
//! addresses). A [`PfnIdx`] is the compact index of a *materialised* page's
//! `struct page` in the memmap: sections get slots in the order they are
//! materialised, and `PfnIdx = slot * PAGES_PER_SECTION + offset`. It is 32
//! bits, so list links, PCP lists and tail-to-head pointers stay 4 bytes
//! each, and the allocator's list operations index one flat array with no
//! section lookup. Within one section the two spaces differ by a constant,
//! so buddy arithmetic (`idx ^ (1 << order)`, alignment, pageblock offsets)
//! is the same in both: a max-order block and a pageblock never cross a
//! section. Converting costs one table load either way ([`MemMap::idx`],
//! [`MemMap::pfn`]). The page allocator works in `PfnIdx`; the rest of `mm`
//! names pages by `Pfn` (page-table entries hold pfns, and orders of pfns
//! reach results), and reads the folio words through [`PageRef`], which
//! both implement.
//!
//! At most 2^32 pages (16 TiB) can be materialised at once; the machine can
//! be larger. Materialising more panics with a message saying so (its
//! metadata alone would be 64 GiB of host memory).
//!
//! # Layout of a page: 16 bytes
//!
//! | word      | while free (buddy or PCP)      | while allocated                  |
//! |-----------|--------------------------------|----------------------------------|
//! | `flags`   | order, PG_buddy/PG_pcp, migratetype | order, PG_head, later folio flags |
//! | `next`    | list link                      | head: folio refcount (see below) |
//! | `prev`    | list link                      | head: entire (PMD) mapcount      |
//! | `private` | reserved                       | head: extra references; tail: its head's `PfnIdx` |
//!
//! The folio words of an allocated head (`memory.rs`): `next` counts the
//! 4 KiB mappings of the folio's pages by user page tables, a PMD mapping
//! counting 512 (the kernel's `_refcount` with one reference per mapped
//! page); `prev` counts the PMD mappings (`_entire_mapcount`). A folio is
//! freed when its refcount reaches zero. The four words of a page sit side
//! by side (one cache line holds four pages), since a list operation reads
//! `flags`, `next` and `prev` of the same page.
//!
//! As in the kernel, the list links and the allocated-page fields share
//! storage (the kernel's `struct page` is a union of such views).
//!
//! Deviation: the kernel threads PCP pages through `page->pcp_list` and buddy
//! pages through `page->buddy_list`, which overlay the same words; so does the
//! model. The kernel has no "on a PCP list" flag; the model keeps one
//! (`PG_PCP`) so that the invariant checker can tell where every page is.

use crate::types::Pfn;
use std::collections::VecDeque;

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
/// Page tails carry this flag; their `private` word holds the head's
/// [`PfnIdx`] (the kernel's `compound_head` pointer).
pub const PG_TAIL: u32 = 1 << 11;
/// An allocated large anonymous folio that is partially unmapped and on the
/// deferred split queue (`folio_test_partially_mapped()`, kept in the head's
/// flags as the kernel keeps it in the folio's). Set and cleared by
/// `memory::anon_folio`.
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

/// log2 of the pages in a memory section (`PFN_SECTION_SHIFT` on x86-64:
/// `SECTION_SIZE_BITS` 27 less `PAGE_SHIFT` 12, 128 MiB sections).
pub const PFN_SECTION_SHIFT: u32 = 15;
/// Pages in a memory section (`PAGES_PER_SECTION`).
pub const PAGES_PER_SECTION: u64 = 1 << PFN_SECTION_SHIFT;
/// log2 of the pages of a pageblock (`pageblock_order`; repeated here so
/// that the memmap can keep the pageblock flags of its sections).
const PAGEBLOCK_SHIFT: u32 = 9;
/// Pageblocks in a section.
const PAGEBLOCKS_PER_SECTION: usize = 1 << (PFN_SECTION_SHIFT - PAGEBLOCK_SHIFT);
/// The most sections that can be materialised: `PfnIdx` is 32 bits and
/// [`NIL`] must stay free.
const MAX_SLOTS: u64 = (1u64 << 32) / PAGES_PER_SECTION - 1;

/// The memmap's first reservation, in sections (4 × 128 MiB of simulated
/// memory, 2 MiB of host memory). Small, because a large first block
/// (32 MiB and up) always comes from fresh host pages (glibc maps it anew),
/// which made `mmlab bench replay` of the small corpus recordings ~15 %
/// slower; later growth doubles (see `MemMap::reserve_sections`).
const RESERVE_MIN_SECTIONS: usize = 4;

/// The highest pfn the model can describe: 52-bit physical addresses
/// (`MAX_PHYSMEM_BITS` with 5-level paging).
pub const MAX_PFN: u64 = 1 << (52 - crate::types::PAGE_SHIFT);
/// Pageblock migratetype of memory never touched since boot
/// (`MIGRATE_MOVABLE`: `memmap_init_range()` marks every pageblock movable).
const BOOT_PAGEBLOCK_MT: u8 = 1;

/// The index of a materialised page's `struct page` in the memmap; see the
/// module doc. Within a section, `PfnIdx` arithmetic equals pfn arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PfnIdx(pub u32);

impl PfnIdx {
    /// The page `nr` pages further on (in the same section).
    #[inline]
    pub fn offset(self, nr: u32) -> PfnIdx {
        PfnIdx(self.0 + nr)
    }

    /// The buddy of the block of `order` at this index (`__find_buddy_pfn()`).
    #[inline]
    pub fn buddy(self, order: u8) -> PfnIdx {
        PfnIdx(self.0 ^ (1 << order))
    }

    /// The start of the aligned block of `order` holding this page.
    #[inline]
    pub fn align_down(self, order: u8) -> PfnIdx {
        PfnIdx(self.0 & !((1u32 << order) - 1))
    }

    /// True if this index starts an aligned block of `order`.
    #[inline]
    pub fn is_aligned(self, order: u8) -> bool {
        self.0 & ((1u32 << order) - 1) == 0
    }
}

impl std::fmt::Display for PfnIdx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "memmap[{:#x}]", self.0)
    }
}

/// One `struct page`: 16 bytes (see the module doc for what each word holds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Page {
    flags: u32,
    next: u32,
    prev: u32,
    private: u32,
}

/// A way to name a page of the memmap: its [`PfnIdx`] (no lookup) or its
/// [`Pfn`] (one section-table lookup; the page must be materialised).
pub trait PageRef: Copy {
    /// The page's index in the memmap.
    fn memmap_idx(self, mem: &MemMap) -> usize;
}

impl PageRef for PfnIdx {
    #[inline]
    fn memmap_idx(self, _: &MemMap) -> usize {
        self.0 as usize
    }
}

impl PageRef for Pfn {
    #[inline]
    fn memmap_idx(self, mem: &MemMap) -> usize {
        mem.idx(self).0 as usize
    }
}

/// The metadata of the simulated machine's pages, in sparse sections.
///
/// Invariants: `section_slot[s] == k + 1` iff section `s` is materialised
/// in slot `k`, and then `slot_section[k] == s`; `pages` and
/// `pageblock_mt` hold exactly the materialised slots; a page of an
/// unmaterialised section is free, in a max-order block of a lazy run of
/// some [`FreeList`], and its pageblock is movable.
#[derive(Clone, Debug)]
pub struct MemMap {
    pages: Vec<Page>,
    /// Per section of the machine: its slot + 1, or 0 while unmaterialised.
    /// (Zero for "absent" lets the host hand out the table lazily.)
    section_slot: Vec<u32>,
    /// Per slot: its section.
    slot_section: Vec<u32>,
    /// Per pageblock of the materialised slots, by `PfnIdx >> pageblock_order`:
    /// its migratetype (`get_pageblock_migratetype()`, kept in the section as
    /// the kernel's `mem_section_usage` keeps it).
    pageblock_mt: Vec<u8>,
    /// Pages the machine has.
    nr_pages: u64,
}

impl MemMap {
    /// The memmap of a machine of `nr_pages` pages, nothing materialised.
    ///
    /// Panics beyond [`MAX_PFN`] pages (the caller validates machines).
    pub fn new(nr_pages: u64) -> MemMap {
        assert!(
            nr_pages <= MAX_PFN,
            "mem_map of {nr_pages} pages: the model addresses at most {MAX_PFN} (52-bit physical addresses)"
        );
        MemMap {
            pages: Vec::new(),
            section_slot: vec![0; nr_pages.div_ceil(PAGES_PER_SECTION) as usize],
            slot_section: Vec::new(),
            pageblock_mt: Vec::new(),
            nr_pages,
        }
    }

    /// Number of pages of the machine (materialised or not).
    pub fn len(&self) -> u64 {
        self.nr_pages
    }

    /// True if the machine has no pages.
    pub fn is_empty(&self) -> bool {
        self.nr_pages == 0
    }

    /// Number of sections of the machine (`NR_MEM_SECTIONS` in use).
    pub fn nr_sections(&self) -> u64 {
        self.section_slot.len() as u64
    }

    /// Number of materialised pages (the memmap's length in `PfnIdx`).
    pub fn nr_materialised(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Bytes of host memory per materialised page.
    pub const BYTES_PER_PAGE: usize = std::mem::size_of::<Page>();

    /// Bytes of host memory per section of the machine whether materialised
    /// or not (its entry in the section table).
    pub const BYTES_PER_SECTION: usize = std::mem::size_of::<u32>();

    /// Host bytes of one materialised section: its pages and pageblock flags.
    pub const BYTES_PER_MATERIALISED_SECTION: u64 = PAGES_PER_SECTION * Self::BYTES_PER_PAGE as u64
        + PAGEBLOCKS_PER_SECTION as u64
        + std::mem::size_of::<u32>() as u64;

    /// Host bytes the memmap holds now (sections table and materialised
    /// sections; capacity not yet used is not counted).
    pub fn host_bytes(&self) -> u64 {
        self.nr_sections() * Self::BYTES_PER_SECTION as u64
            + (self.slot_section.len() as u64) * Self::BYTES_PER_MATERIALISED_SECTION
    }

    /// True if section `section` has metadata.
    #[inline]
    pub fn section_materialised(&self, section: u64) -> bool {
        self.section_slot[section as usize] != 0
    }

    /// Gives section `section` its metadata (every page zero, every
    /// pageblock movable) if it has none yet; returns the `PfnIdx` of its
    /// first page. Called by the page allocator only.
    pub(crate) fn materialise(&mut self, section: u64) -> PfnIdx {
        let s = self.section_slot[section as usize];
        if s != 0 {
            return PfnIdx((s - 1) << PFN_SECTION_SHIFT);
        }
        let slot = self.slot_section.len() as u64;
        assert!(
            slot < MAX_SLOTS,
            "cannot materialise section {section}: {MAX_SLOTS} sections ({} pages) are the most the model's \
             32-bit memmap index can describe at once",
            MAX_SLOTS * PAGES_PER_SECTION
        );
        self.section_slot[section as usize] = slot as u32 + 1;
        self.slot_section.push(section as u32);
        self.reserve_sections();
        self.pages.resize(
            self.pages.len() + PAGES_PER_SECTION as usize,
            Page::default(),
        );
        self.pageblock_mt.resize(
            self.pageblock_mt.len() + PAGEBLOCKS_PER_SECTION,
            BOOT_PAGEBLOCK_MT,
        );
        PfnIdx((slot as u32) << PFN_SECTION_SHIFT)
    }

    /// Before a section's pages are appended: if the memmap is full, grows
    /// its capacity by as many sections as are materialised already (at
    /// least [`RESERVE_MIN_SECTIONS`]), but never past the sections the
    /// machine has. Host speed only: `Vec`'s own doubling would copy the
    /// whole memmap at each step (and past the machine's size); capacity
    /// the host never writes costs address space, not memory, and
    /// [`MemMap::host_bytes`] does not count it.
    fn reserve_sections(&mut self) {
        let per = PAGES_PER_SECTION as usize;
        if self.pages.capacity() - self.pages.len() >= per {
            return;
        }
        let have = self.pages.len() / per;
        let left = self.section_slot.len() - have;
        let grow = have.max(RESERVE_MIN_SECTIONS).min(left);
        self.pages.reserve_exact(grow * per);
        self.pageblock_mt
            .reserve_exact(grow * PAGEBLOCKS_PER_SECTION);
    }

    /// The memmap index of `pfn` (`pfn_to_page()`), if its section is
    /// materialised.
    #[inline]
    pub fn try_idx(&self, pfn: Pfn) -> Option<PfnIdx> {
        let s = *self
            .section_slot
            .get((pfn.0 >> PFN_SECTION_SHIFT) as usize)?;
        (s != 0).then(|| {
            PfnIdx(((s - 1) << PFN_SECTION_SHIFT) | (pfn.0 as u32 & (PAGES_PER_SECTION as u32 - 1)))
        })
    }

    /// The memmap index of `pfn` (`pfn_to_page()`). Panics if the page has
    /// no metadata: only free memory the allocator never touched lacks it.
    #[inline]
    pub fn idx(&self, pfn: Pfn) -> PfnIdx {
        let s = self.section_slot[(pfn.0 >> PFN_SECTION_SHIFT) as usize];
        assert!(
            s != 0,
            "{pfn} is in a section never materialised (free since boot)"
        );
        PfnIdx(((s - 1) << PFN_SECTION_SHIFT) | (pfn.0 as u32 & (PAGES_PER_SECTION as u32 - 1)))
    }

    /// The pfn of the page at `idx` (`page_to_pfn()`).
    #[inline]
    pub fn pfn(&self, idx: PfnIdx) -> Pfn {
        let section = self.slot_section[(idx.0 >> PFN_SECTION_SHIFT) as usize] as u64;
        Pfn((section << PFN_SECTION_SHIFT) | (idx.0 as u64 & (PAGES_PER_SECTION - 1)))
    }

    /// The materialised sections, in slot order: `(first PfnIdx, section)`.
    pub fn materialised_sections(&self) -> impl Iterator<Item = (PfnIdx, u64)> + '_ {
        self.slot_section
            .iter()
            .enumerate()
            .map(|(slot, &s)| (PfnIdx((slot as u32) << PFN_SECTION_SHIFT), s as u64))
    }

    /// The flags word of a page.
    #[inline]
    pub fn flags(&self, p: impl PageRef) -> u32 {
        self.pages[p.memmap_idx(self)].flags
    }

    /// Sets the flags word of a page.
    #[inline]
    pub fn set_flags(&mut self, p: impl PageRef, flags: u32) {
        let i = p.memmap_idx(self);
        self.pages[i].flags = flags;
    }

    /// Sets `flag` in `pfn`'s flags word if it is clear, and then returns
    /// the word as it was (`TestSetPage*()`, with the other flags, which
    /// the caller would read next); `None` if the flag was already set. One
    /// section lookup for both.
    #[inline]
    pub fn test_and_set_flag(&mut self, pfn: Pfn, flag: u32) -> Option<u32> {
        let i = self.idx(pfn).0 as usize;
        let page = &mut self.pages[i];
        let f = page.flags;
        if f & flag != 0 {
            return None;
        }
        page.flags = f | flag;
        Some(f)
    }

    /// The private word of a page.
    #[inline]
    pub fn private(&self, p: impl PageRef) -> u32 {
        self.pages[p.memmap_idx(self)].private
    }

    /// Sets the private word of a page.
    #[inline]
    pub fn set_private(&mut self, p: impl PageRef, v: u32) {
        let i = p.memmap_idx(self);
        self.pages[i].private = v;
    }

    /// The head of the allocated block holding `pfn` (`compound_head()`):
    /// `pfn` itself unless it is a tail.
    #[inline]
    pub fn compound_head(&self, pfn: Pfn) -> Pfn {
        let i = self.idx(pfn);
        let page = self.pages[i.0 as usize];
        if page.flags & PG_TAIL != 0 {
            // Head and tail share a section: the offset is the same in both spaces.
            Pfn(pfn.0 - (i.0 - page.private) as u64)
        } else {
            pfn
        }
    }

    /// The folio refcount of an allocated head (its `next` word).
    #[inline]
    pub fn refcount(&self, head: impl PageRef) -> u32 {
        self.pages[head.memmap_idx(self)].next
    }

    /// Sets the folio refcount of an allocated head.
    #[inline]
    pub fn set_refcount(&mut self, head: impl PageRef, v: u32) {
        let i = head.memmap_idx(self);
        self.pages[i].next = v;
    }

    /// The entire (PMD) mapcount of an allocated head (its `prev` word).
    #[inline]
    pub fn entire_mapcount(&self, head: impl PageRef) -> u32 {
        self.pages[head.memmap_idx(self)].prev
    }

    /// Sets the entire mapcount of an allocated head.
    #[inline]
    pub fn set_entire_mapcount(&mut self, head: impl PageRef, v: u32) {
        let i = head.memmap_idx(self);
        self.pages[i].prev = v;
    }

    /// References to an allocated folio other than its mappings: GUP pins,
    /// transient `folio_get()`s (the head's `private` word; 0 for a folio
    /// only its page tables reference). Migration needs it to be 0
    /// (`folio_expected_ref_count()`).
    #[inline]
    pub fn folio_extra_refs(&self, head: impl PageRef) -> u32 {
        self.private(head)
    }

    /// Sets the extra references of an allocated folio (see
    /// [`MemMap::folio_extra_refs`]); must be 0 again before it is freed.
    #[inline]
    pub fn set_folio_extra_refs(&mut self, head: impl PageRef, v: u32) {
        self.set_private(head, v);
    }

    /// The order stored in a page's flags (`buddy_order()` for a free head).
    #[inline]
    pub fn order(&self, p: impl PageRef) -> u8 {
        (self.flags(p) & ORDER_MASK) as u8
    }

    /// The migratetype stored in a free block's head.
    #[inline]
    pub fn stored_mt(&self, p: PfnIdx) -> u8 {
        ((self.flags(p) >> MT_SHIFT) & MT_MASK) as u8
    }

    /// True if `p` heads a free block of exactly `order` on a buddy list
    /// (`page_is_buddy()` without the zone check, which the caller makes).
    #[inline]
    pub fn is_buddy_of_order(&self, p: PfnIdx, order: u8) -> bool {
        let f = self.flags(p);
        f & PG_BUDDY != 0 && (f & ORDER_MASK) as u8 == order
    }

    /// The migratetype number of the pageblock holding `p`
    /// (`get_pageblock_migratetype()`).
    #[inline]
    pub fn pageblock_mt(&self, p: PfnIdx) -> u8 {
        self.pageblock_mt[(p.0 >> PAGEBLOCK_SHIFT) as usize]
    }

    /// Sets the migratetype number of the pageblock holding `p`
    /// (`set_pageblock_migratetype()`).
    #[inline]
    pub fn set_pageblock_mt(&mut self, p: PfnIdx, mt: u8) {
        self.pageblock_mt[(p.0 >> PAGEBLOCK_SHIFT) as usize] = mt;
    }

    /// The next page on the list that `p` is on.
    #[inline]
    pub fn next(&self, p: PfnIdx) -> u32 {
        self.pages[p.0 as usize].next
    }

    /// The previous page on the list that `p` is on.
    #[inline]
    pub fn prev(&self, p: PfnIdx) -> u32 {
        self.pages[p.0 as usize].prev
    }

    #[inline]
    fn set_next(&mut self, p: u32, v: u32) {
        self.pages[p as usize].next = v;
    }

    #[inline]
    fn set_prev(&mut self, p: u32, v: u32) {
        self.pages[p as usize].prev = v;
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
    pub fn first(&self) -> Option<PfnIdx> {
        (self.head != NIL).then_some(PfnIdx(self.head))
    }

    /// The last entry (`list_last_entry()`).
    #[inline]
    pub fn last(&self) -> Option<PfnIdx> {
        (self.tail != NIL).then_some(PfnIdx(self.tail))
    }

    /// Adds `p` at the head (`list_add()`).
    #[inline]
    pub fn add(&mut self, mem: &mut MemMap, p: PfnIdx) {
        let p = p.0;
        mem.set_prev(p, NIL);
        mem.set_next(p, self.head);
        if self.head != NIL {
            mem.set_prev(self.head, p);
        } else {
            self.tail = p;
        }
        self.head = p;
        self.len += 1;
    }

    /// Adds `p` at the tail (`list_add_tail()`).
    #[inline]
    pub fn add_tail(&mut self, mem: &mut MemMap, p: PfnIdx) {
        let p = p.0;
        mem.set_next(p, NIL);
        mem.set_prev(p, self.tail);
        if self.tail != NIL {
            mem.set_next(self.tail, p);
        } else {
            self.head = p;
        }
        self.tail = p;
        self.len += 1;
    }

    /// Unlinks `p`, which must be on this list (`list_del()`).
    #[inline]
    pub fn del(&mut self, mem: &mut MemMap, p: PfnIdx) {
        let page = mem.pages[p.0 as usize];
        let (pr, n) = (page.prev, page.next);
        if pr != NIL {
            mem.set_next(pr, n);
        } else {
            debug_assert_eq!(self.head, p.0, "list_del of a page not on this list");
            self.head = n;
        }
        if n != NIL {
            mem.set_prev(n, pr);
        } else {
            debug_assert_eq!(self.tail, p.0, "list_del of a page not on this list");
            self.tail = pr;
        }
        self.len -= 1;
    }

    /// Removes and returns the first entry.
    #[inline]
    pub fn pop_first(&mut self, mem: &mut MemMap) -> Option<PfnIdx> {
        let h = self.first()?;
        self.del(mem, h);
        Some(h)
    }

    /// Removes and returns the last entry.
    #[inline]
    pub fn pop_last(&mut self, mem: &mut MemMap) -> Option<PfnIdx> {
        let t = self.last()?;
        self.del(mem, t);
        Some(t)
    }

    /// Moves every entry of `other` to the tail of this list
    /// (`list_splice_tail_init()`), in O(1).
    pub fn splice_tail(&mut self, mem: &mut MemMap, other: &mut PageList) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = *other;
        } else {
            mem.set_next(self.tail, other.head);
            mem.set_prev(other.head, self.tail);
            self.tail = other.tail;
            self.len += other.len;
        }
        *other = PageList::default();
    }

    /// True if `p` is on this list (O(len): for rare paths and checks).
    pub fn contains(&self, mem: &MemMap, p: PfnIdx) -> bool {
        self.iter(mem).any(|q| q == p)
    }

    /// The entries from head to tail (for checks and dumps; O(len)).
    pub fn iter<'a>(&self, mem: &'a MemMap) -> impl Iterator<Item = PfnIdx> + 'a {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let p = PfnIdx(cur);
            cur = mem.next(p);
            Some(p)
        })
    }
}

/// Free max-order blocks of whole unmaterialised sections `[lo, hi)`, in the
/// order `memblock_free_all()` leaves them on a free list: the highest
/// block first (each block freed at boot went to the list's head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LazyRun {
    /// First section of the run.
    pub lo: u64,
    /// One past the last section of the run.
    pub hi: u64,
}

impl LazyRun {
    /// Number of sections in the run.
    pub fn nr_sections(&self) -> u64 {
        self.hi - self.lo
    }
}

/// One free list of a zone (`free_area[order].free_list[mt]`): a
/// [`PageList`] of materialised blocks, possibly with lazy runs of
/// unmaterialised max-order blocks between its entries.
///
/// The list as the kernel would hold it is `head`, then for each entry of
/// `runs` the run's blocks (highest first) and then the entries after it.
/// Blocks are taken from the front of a free list only ([`FreeList::first`]
/// materialises a run's first section when it reaches the front), so runs
/// keep their place while blocks come and go around them.
///
/// Invariants: only max-order lists hold runs; a run is not empty; its
/// sections are unmaterialised, inside the zone and of no other run.
#[derive(Clone, Debug, Default)]
pub struct FreeList {
    head: PageList,
    runs: VecDeque<(LazyRun, PageList)>,
    /// Blocks in runs.
    nr_lazy_blocks: u64,
}

impl FreeList {
    /// True if the list has no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_empty() && self.runs.is_empty()
    }

    /// Number of blocks on the list, in runs or not.
    pub fn len(&self) -> u64 {
        self.materialised_len() as u64 + self.nr_lazy_blocks
    }

    /// Number of materialised blocks on the list.
    pub fn materialised_len(&self) -> u32 {
        self.head.len() + self.runs.iter().map(|(_, l)| l.len()).sum::<u32>()
    }

    /// Adds a block at the head (`list_add()`).
    #[inline]
    pub fn add(&mut self, mem: &mut MemMap, p: PfnIdx) {
        self.head.add(mem, p);
    }

    /// Adds a block at the tail (`list_add_tail()`).
    #[inline]
    pub fn add_tail(&mut self, mem: &mut MemMap, p: PfnIdx) {
        match self.runs.back_mut() {
            None => self.head.add_tail(mem, p),
            Some((_, after)) => after.add_tail(mem, p),
        }
    }

    /// Adds a lazy run at the head, as if its blocks had been freed one by
    /// one in ascending order (boot).
    pub fn add_run(&mut self, run: LazyRun, blocks_per_section: u64) {
        assert!(run.lo < run.hi, "empty lazy run");
        let before = std::mem::take(&mut self.head);
        self.runs.push_front((run, before));
        self.nr_lazy_blocks += run.nr_sections() * blocks_per_section;
    }

    /// The first block (`list_first_entry()`). If a lazy run is first, its
    /// first section is materialised and its blocks become entries in their
    /// place, flagged `block_flags` (`PG_buddy`, order and migratetype), each
    /// `block_pages` long.
    #[inline]
    pub fn first(
        &mut self,
        mem: &mut MemMap,
        block_flags: u32,
        block_pages: u64,
    ) -> Option<PfnIdx> {
        if let Some(p) = self.head.first() {
            return Some(p);
        }
        if self.runs.is_empty() {
            return None;
        }
        self.materialise_front(mem, block_flags, block_pages);
        self.head.first()
    }

    /// Materialises the highest section of the front run, appending its
    /// blocks to `head` (which is empty), highest first.
    #[cold]
    fn materialise_front(&mut self, mem: &mut MemMap, block_flags: u32, block_pages: u64) {
        let (run, after) = self.runs.front_mut().expect("a run");
        let section = run.hi - 1;
        let base = mem.materialise(section);
        let nr = PAGES_PER_SECTION / block_pages;
        for b in (0..nr).rev() {
            let p = base.offset((b * block_pages) as u32);
            mem.set_flags(p, block_flags);
            self.head.add_tail(mem, p);
        }
        self.nr_lazy_blocks -= nr;
        run.hi -= 1;
        if run.lo == run.hi {
            let mut after = std::mem::take(after);
            self.runs.pop_front();
            self.head.splice_tail(mem, &mut after);
        }
    }

    /// Unlinks block `p`, which must be on this list (`list_del()`).
    #[inline]
    pub fn del(&mut self, mem: &mut MemMap, p: PfnIdx) {
        if self.runs.is_empty() || self.head.first() == Some(p) {
            self.head.del(mem, p);
        } else {
            self.del_slow(mem, p);
        }
    }

    /// [`FreeList::del`] of a block that may lie after a lazy run. The
    /// allocator never does this (it unlinks max-order blocks only from the
    /// front), but a list must stay a list.
    #[cold]
    fn del_slow(&mut self, mem: &mut MemMap, p: PfnIdx) {
        if self.head.contains(mem, p) {
            self.head.del(mem, p);
            return;
        }
        for (_, after) in &mut self.runs {
            if after.contains(mem, p) {
                after.del(mem, p);
                return;
            }
        }
        panic!("list_del of {p}, which is not on this free list");
    }

    /// The pfn of the first block, without materialising anything (a lazy
    /// run's first block is the highest max-order block of its highest
    /// section): what `list_first_entry()` would read, for the cache-line
    /// model.
    pub fn first_pfn(&self, mem: &MemMap, block_pages: u64) -> Option<u64> {
        if let Some(p) = self.head.first() {
            return Some(mem.pfn(p).0);
        }
        let (run, _) = self.runs.front()?;
        Some(run.hi * PAGES_PER_SECTION - block_pages)
    }

    /// The pfn of the last block, without materialising anything (a lazy
    /// run's last block is the lowest block of its lowest section).
    pub fn last_pfn(&self, mem: &MemMap) -> Option<u64> {
        let Some((run, after)) = self.runs.back() else {
            return self.head.last().map(|p| mem.pfn(p).0);
        };
        match after.last() {
            Some(p) => Some(mem.pfn(p).0),
            None => Some(run.lo * PAGES_PER_SECTION),
        }
    }

    /// The materialised entries, in list order (for checks; O(len)).
    pub fn iter<'a>(&'a self, mem: &'a MemMap) -> impl Iterator<Item = PfnIdx> + 'a {
        self.head
            .iter(mem)
            .chain(self.runs.iter().flat_map(move |(_, l)| l.iter(mem)))
    }

    /// The lazy runs, front first.
    pub fn runs(&self) -> impl Iterator<Item = LazyRun> + '_ {
        self.runs.iter().map(|(r, _)| *r)
    }

    /// Blocks in lazy runs.
    pub fn nr_lazy_blocks(&self) -> u64 {
        self.nr_lazy_blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem_with(sections: u64) -> MemMap {
        let mut mem = MemMap::new(sections * PAGES_PER_SECTION);
        mem.materialise(0);
        mem
    }

    #[test]
    fn list_add_del_both_ends() {
        let mut mem = mem_with(1);
        let p = PfnIdx;
        let mut l = PageList::default();
        l.add(&mut mem, p(1));
        l.add(&mut mem, p(2));
        l.add_tail(&mut mem, p(3));
        assert_eq!(l.iter(&mem).collect::<Vec<_>>(), vec![p(2), p(1), p(3)]);
        l.del(&mut mem, p(1));
        assert_eq!(l.iter(&mem).collect::<Vec<_>>(), vec![p(2), p(3)]);
        assert_eq!(l.pop_last(&mut mem), Some(p(3)));
        assert_eq!(l.pop_first(&mut mem), Some(p(2)));
        assert!(l.is_empty());
        assert_eq!(l.first(), None);
        assert_eq!(l.last(), None);
    }

    #[test]
    fn sections_map_both_ways_in_materialisation_order() {
        let mut mem = MemMap::new(8 * PAGES_PER_SECTION);
        assert_eq!(mem.try_idx(Pfn(5)), None);
        let a = mem.materialise(6);
        let b = mem.materialise(2);
        assert_eq!((a, b), (PfnIdx(0), PfnIdx(PAGES_PER_SECTION as u32)));
        assert_eq!(mem.materialise(6), a, "materialising twice is a no-op");
        let pfn = Pfn(6 * PAGES_PER_SECTION + 77);
        assert_eq!(mem.idx(pfn), PfnIdx(77));
        assert_eq!(mem.pfn(PfnIdx(77)), pfn);
        let pfn = Pfn(2 * PAGES_PER_SECTION + 5);
        assert_eq!(mem.pfn(mem.idx(pfn)), pfn);
        assert_eq!(mem.nr_materialised(), 2 * PAGES_PER_SECTION);
        assert_eq!(
            mem.materialised_sections()
                .map(|(_, s)| s)
                .collect::<Vec<_>>(),
            vec![6, 2]
        );
    }

    #[test]
    fn compound_head_of_a_tail_in_a_later_slot() {
        let mut mem = MemMap::new(4 * PAGES_PER_SECTION);
        mem.materialise(0);
        let base = mem.materialise(3);
        let head = base.offset(512);
        mem.set_flags(head.offset(7), PG_TAIL);
        mem.set_private(head.offset(7), head.0);
        let head_pfn = Pfn(3 * PAGES_PER_SECTION + 512);
        assert_eq!(mem.compound_head(head_pfn.offset(7)), head_pfn);
        assert_eq!(mem.compound_head(head_pfn), head_pfn);
    }

    /// A lazy run behind two entries and before one: taking blocks from the
    /// front walks through the run in descending order, materialising one
    /// section at a time, and ends with the entry after it.
    #[test]
    fn free_list_walks_through_a_lazy_run_in_kernel_order() {
        const BLOCK: u64 = 1024;
        let per = PAGES_PER_SECTION / BLOCK;
        let mut mem = MemMap::new(4 * PAGES_PER_SECTION);
        let s0 = mem.materialise(0);
        let s3 = mem.materialise(3);
        let mut l = FreeList::default();
        // Boot order: section 0's two blocks, the run of sections 1-2, then
        // one block of section 3, each at the head.
        l.add(&mut mem, s0);
        l.add(&mut mem, s0.offset(BLOCK as u32));
        l.add_run(LazyRun { lo: 1, hi: 3 }, per);
        l.add(&mut mem, s3);
        assert_eq!(l.len(), 3 + 2 * per);
        let mut taken = Vec::new();
        while let Some(p) = l.first(&mut mem, PG_BUDDY | 10, BLOCK) {
            l.del(&mut mem, p);
            taken.push(mem.pfn(p).0 / BLOCK);
        }
        let mut want = vec![3 * per];
        want.extend((per..3 * per).rev());
        want.extend([1, 0]);
        assert_eq!(taken, want);
        assert!(l.is_empty());
        assert_eq!(l.nr_lazy_blocks(), 0);
        assert!(mem.section_materialised(1) && mem.section_materialised(2));
    }

    #[test]
    fn free_list_add_tail_goes_after_the_runs_and_del_finds_any_entry() {
        let mut mem = MemMap::new(3 * PAGES_PER_SECTION);
        let s0 = mem.materialise(0);
        let mut l = FreeList::default();
        l.add_run(LazyRun { lo: 1, hi: 3 }, 32);
        l.add(&mut mem, s0);
        l.add_tail(&mut mem, s0.offset(1024));
        l.add_tail(&mut mem, s0.offset(2048));
        assert_eq!(
            l.iter(&mem).collect::<Vec<_>>(),
            vec![s0, s0.offset(1024), s0.offset(2048)]
        );
        l.del(&mut mem, s0.offset(1024));
        assert_eq!(l.materialised_len(), 2);
        assert_eq!(l.len(), 2 + 64);
    }
}
