//! Models mm/memory.c of Linux 6.x: the anonymous fault path, copy-on-write and
//! the order in which the sub-pages of a huge page are cleared and copied.
//!
//! For now it holds only [`huge_order`]; the fault path (`handle_mm_fault()`,
//! `do_anonymous_page()`, `do_wp_page()`) will live here too.

pub mod huge_order;
