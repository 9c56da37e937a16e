//! Probes of single operations done one at a time among other work, as the
//! kernel does them inside a fault or a scheduler path, where the
//! streaming loops of [`super::hw`] would let the hardware overlap and
//! prefetch across operations: the copy of one cold page (a COW fault's
//! `copy_mc_user_highpage()`), two context switches on one CPU, and the
//! instructions of one buddy free-list operation.
//!
//! # Why a COW copy is not a streaming copy
//!
//! `wp_page_copy()` (mm/memory.c, 6.18) copies the old page with
//! `__wp_page_copy_user()` → `copy_mc_user_highpage()`, which on x86 with
//! ERMS is `copy_mc_enhanced_fast_string` (one `rep movsb` of 4 KiB). Its
//! source page was last written before the fork and its destination was
//! just taken off a free list: both are cold, and the copy starts after a
//! microsecond of other kernel work, so the hardware prefetchers have no
//! stream to follow. A perf profile of a 256 MiB fork-COW on this host put
//! half of the child's time in that function. [`copy_isolated_ns`] times the
//! same instruction on random cold pages with other memory traffic between
//! copies, and subtracts that traffic timed alone.

use super::cpu_ns_of;
use crate::error::NativeError;
use crate::rng::SplitMix64;
use crate::sys::{pin_to_cpu, CACHE_LINE, PAGE_SIZE};
use std::sync::atomic::{AtomicU64, Ordering};

/// Copies per sample of [`copy_isolated_ns`].
pub const ISOLATED_COPIES: usize = 8192;
/// Lines of other memory touched between two isolated copies (16 KiB, in
/// L2: a stand-in for the fault path's own work).
const STIR_LINES: usize = 256;
/// The buffer those lines come from (1 MiB, inside L2 and L3).
pub const STIR_BYTES: usize = 1 << 20;

/// `copy_mc_enhanced_fast_string`: `rep movsb` of one 4 KiB page.
fn copy_movsb(dst: &mut [u8], src: &[u8]) {
    assert!(dst.len() == PAGE_SIZE && src.len() == PAGE_SIZE);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdi/rsi point at a live exclusive 4 KiB slice and a live
    // shared 4 KiB slice that do not overlap (one &mut, one &), and rcx
    // counts exactly their bytes; the direction flag is clear per the ABI.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") PAGE_SIZE => _,
            inout("rdi") dst.as_mut_ptr() => _,
            inout("rsi") src.as_ptr() => _,
            options(nostack)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Touches `STIR_LINES` lines of `stir`, the `i`th group of them.
fn stir_lines(stir: &mut [u8], i: usize) {
    let lines = stir.len() / CACHE_LINE;
    for k in 0..STIR_LINES {
        let at = ((i * STIR_LINES + k) % lines) * CACHE_LINE;
        stir[at] = stir[at].wrapping_add(1);
    }
    std::hint::black_box(&mut *stir);
}

/// ns per page of copying [`ISOLATED_COPIES`] random pages of the first
/// half of `buf` to random pages of its second half (no page twice), each
/// copy after [`STIR_LINES`] lines of `stir`; less the same stirring
/// alone. `buf` should be many times the LLC so that the pages are cold.
pub fn copy_isolated_ns(buf: &mut [u8], stir: &mut [u8], seed: u64) -> f64 {
    let half = buf.len() / PAGE_SIZE / 2;
    let n = ISOLATED_COPIES.min(half);
    let mut rng = SplitMix64::new(seed);
    let mut src: Vec<u32> = (0..half as u32).collect();
    let mut dst: Vec<u32> = (0..half as u32).collect();
    rng.shuffle(&mut src);
    rng.shuffle(&mut dst);
    let alone = cpu_ns_of(|| (0..n).for_each(|i| stir_lines(stir, i)));
    let (from, to) = buf.split_at_mut(half * PAGE_SIZE);
    let with = cpu_ns_of(|| {
        for i in 0..n {
            stir_lines(stir, i);
            let s = src[i] as usize * PAGE_SIZE;
            let d = dst[i] as usize * PAGE_SIZE;
            copy_movsb(&mut to[d..d + PAGE_SIZE], &from[s..s + PAGE_SIZE]);
        }
    });
    (with as f64 - alone as f64) / n as f64
}

/// Round trips of [`context_switch_ns`] per sample.
const SWITCH_ROUNDS: u64 = 2000;

/// Two threads pinned to `cpu` hand a turn back and forth, each waking the
/// other (`unpark`, a futex wake) and sleeping (`park`, a futex wait) until
/// its turn: every round trip is two wake-ups and two context switches,
/// what a `flush_work()` of a work item queued on its own CPU costs (wake
/// the kworker, switch to it, it completes and wakes the waiter, switch
/// back). ns per round trip, the sum of both threads' CPU time (other
/// tenants of the CPU do not count).
pub fn context_switch_ns(cpu: usize) -> Result<f64, NativeError> {
    let turn = AtomicU64::new(0);
    let other_ns = AtomicU64::new(0);
    let main = std::thread::current();
    let mine = std::thread::scope(|s| -> Result<u64, NativeError> {
        let partner = s.spawn(|| -> Result<(), NativeError> {
            pin_to_cpu(cpu)?;
            let ns = cpu_ns_of(|| {
                for r in 0..SWITCH_ROUNDS {
                    while turn.load(Ordering::Acquire) != 2 * r + 1 {
                        std::thread::park();
                    }
                    turn.store(2 * r + 2, Ordering::Release);
                    main.unpark();
                }
            });
            other_ns.store(ns, Ordering::Relaxed);
            Ok(())
        });
        pin_to_cpu(cpu)?;
        let ns = cpu_ns_of(|| {
            for r in 0..SWITCH_ROUNDS {
                turn.store(2 * r + 1, Ordering::Release);
                partner.thread().unpark();
                while turn.load(Ordering::Acquire) != 2 * r + 2 {
                    std::thread::park();
                }
            }
        });
        partner.join().map_err(|_| NativeError::ThreadPanicked {
            what: "context-switch partner",
        })??;
        Ok(ns)
    })?;
    Ok((mine + other_ns.load(Ordering::Relaxed)) as f64 / SWITCH_ROUNDS as f64)
}

/// A `struct page` as a buddy free list sees it: the list links, the
/// flags word and `private` (the order), one cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct PageNode {
    next: u32,
    prev: u32,
    flags: u64,
    private: u64,
}

/// `del_page_from_free_list()` of the first page of list `from`, then
/// `add_to_free_list()` of it at the head of list `to` (heads are nodes 0
/// and 1).
fn move_first(n: &mut [PageNode], nr_free: &mut [u64; 2], from: usize, to: usize) {
    let p = n[from].next as usize;
    let (nx, pv) = (n[p].next as usize, n[p].prev as usize);
    n[pv].next = nx as u32;
    n[nx].prev = pv as u32;
    n[p].flags &= !PG_BUDDY;
    n[p].private = 0;
    nr_free[from] -= 1;
    let head_next = n[to].next as usize;
    n[p].next = head_next as u32;
    n[p].prev = to as u32;
    n[head_next].prev = p as u32;
    n[to].next = p as u32;
    n[p].flags |= PG_BUDDY;
    n[p].private = 3;
    nr_free[to] += 1;
}

/// Operations per sample of [`buddy_list_insn_ns`].
const LIST_OPS: usize = 1_000_000;
/// `PG_buddy`, as a flag bit of the replica.
const PG_BUDDY: u64 = 1 << 6;

/// The instructions of `del_page_from_free_list()` followed by
/// `add_to_free_list()` in user space: unlink the first page of one
/// circular list (two neighbours' links rewritten), clear its buddy flag and
/// order, count the list down; then link it at the head of the other list
/// with the flag and order set, count it up. Eight pages on two lists, all
/// in L1 (the misses are what the ownership model charges per line). ns
/// per list operation (half a move).
pub fn buddy_list_insn_ns() -> f64 {
    let (mut n, mut nr_free) = two_lists();
    let ns = cpu_ns_of(|| {
        let n = std::hint::black_box(&mut n);
        for i in 0..LIST_OPS / 2 {
            let (from, to) = if (i / 8) % 2 == 0 { (0, 1) } else { (1, 0) };
            move_first(n, &mut nr_free, from, to);
        }
    });
    std::hint::black_box((&n, &nr_free));
    ns as f64 / LIST_OPS as f64
}

/// Two circular lists: nodes 0 and 1 are the heads; the pages 2..10 all
/// on list 0.
fn two_lists() -> ([PageNode; 10], [u64; 2]) {
    let mut n = [PageNode {
        next: 0,
        prev: 0,
        flags: 0,
        private: 0,
    }; 10];
    let nr_free = [8u64, 0];
    let mut prev = 0u32;
    for p in 2..10u32 {
        n[prev as usize].next = p;
        n[p as usize].prev = prev;
        n[p as usize].flags = PG_BUDDY;
        prev = p;
    }
    n[prev as usize].next = 0;
    n[0].prev = prev;
    n[1].next = 1;
    n[1].prev = 1;
    (n, nr_free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolated_copy_copies_and_takes_time() {
        let mut buf = vec![0u8; 64 * PAGE_SIZE];
        buf[..32 * PAGE_SIZE].fill(7);
        let mut stir = vec![0u8; STIR_BYTES];
        let ns = copy_isolated_ns(&mut buf, &mut stir, 1);
        assert!(ns.is_finite());
        // Every destination page got a copy of a source page.
        assert!(buf[32 * PAGE_SIZE..].iter().all(|&b| b == 7));
    }

    #[test]
    fn buddy_list_replica_keeps_the_lists_whole() {
        let (mut n, mut nr) = two_lists();
        for i in 0..100 {
            let (from, to) = if (i / 8) % 2 == 0 { (0, 1) } else { (1, 0) };
            move_first(&mut n, &mut nr, from, to);
            // Walk both lists: every page once, counts as recorded.
            let mut seen = 0;
            for head in 0..2 {
                let (mut at, mut len) = (n[head].next as usize, 0);
                while at != head {
                    assert_eq!(n[n[at].next as usize].prev as usize, at);
                    assert_ne!(n[at].flags & PG_BUDDY, 0);
                    at = n[at].next as usize;
                    len += 1;
                }
                assert_eq!(len, nr[head], "list {head} after {i} moves");
                seen += len;
            }
            assert_eq!(seen, 8);
        }
        assert!(buddy_list_insn_ns() > 0.0);
    }

    #[test]
    fn context_switches_take_time() {
        let cpu = crate::sys::allowed_cpus().unwrap()[0];
        let _a = crate::sys::AffinityGuard::save().unwrap();
        assert!(context_switch_ns(cpu).unwrap() > 0.0);
    }
}
