//! The mappings each `execve()` of the recorded process tree makes, from
//! the kernel's own `PERF_RECORD_MMAP2` records.
//!
//! # Why perf records, and not `/proc/PID/maps`
//!
//! What `execve()` maps (the stack, the program's and the interpreter's
//! segments and `.bss`, the vDSO) is announced by no system call, so the
//! tracepoints miss it. Reading `/proc/PID/maps` when the exec is seen
//! races with the process: a short-lived compiler pass may have mapped its
//! libraries, or exited, by then. The kernel itself reports every mapping
//! it makes to perf, synchronously, from `mmap_region()`, `do_brk_flags()`,
//! `expand_downwards()` and `__install_special_mapping()`: one dummy
//! software event per CPU on the command (`pid`, `inherit`, as `perf
//! record -d` does) with `mmap2`, `mmap_data` and `comm_exec` gives them,
//! on the clock of the trace (`use_clockid`, `CLOCK_MONOTONIC`, the
//! `mono` trace clock) and at no cost between mappings.
//!
//! An exec's mappings are the `PERF_RECORD_MMAP2` records of its process
//! between the `PERF_RECORD_COMM` flagged `PERF_RECORD_MISC_COMM_EXEC`
//! (`begin_new_exec()`, before the loader maps anything) and the
//! `sched_process_exec` tracepoint (after it is done): the merge step takes
//! them from `ExecWindows::take` when it writes that tracepoint's event.
//!
//!
//! The windows themselves are [`ExecWindows`] (`crate::exec_layout`),
//! which an importer of perf.data files shares.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::ExecVma;
use crate::exec_layout::ExecWindows;

/// Data pages of each CPU's ring buffer (a power of two): 256 KiB holds
/// thousands of mapping records between two polls.
const RING_DATA_PAGES: usize = 64;
const PAGE: usize = 4096;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
/// `perf_event_attr` bit flags (the bitfield after `read_format`).
const ATTR_INHERIT: u64 = 1 << 1;
const ATTR_MMAP: u64 = 1 << 8;
const ATTR_COMM: u64 = 1 << 9;
const ATTR_TASK: u64 = 1 << 13;
const ATTR_MMAP_DATA: u64 = 1 << 17;
const ATTR_SAMPLE_ID_ALL: u64 = 1 << 18;
const ATTR_MMAP2: u64 = 1 << 23;
const ATTR_COMM_EXEC: u64 = 1 << 24;
const ATTR_USE_CLOCKID: u64 = 1 << 25;
/// `PERF_ATTR_SIZE_VER7`: every field this code sets.
const ATTR_SIZE: usize = 128;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_MMAP2: u32 = 10;
const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;

impl ExecWindows {
    /// Parses one record of the ring buffer of [`ExecMapsRecorder`]'s
    /// events (`bytes` is the whole record, header included; its sample id
    /// is `{ pid, tid, time }`, the event's `sample_type`).
    pub fn parse_record(&mut self, bytes: &[u8]) {
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        if bytes.len() < 8 {
            self.nr_malformed += 1;
            return;
        }
        let (kind, misc) = (u32_at(0), u16_at(4));
        // sample_id_all with TID and TIME: { pid, tid, time } at the end.
        let id_at = bytes.len().saturating_sub(16);
        match kind {
            PERF_RECORD_LOST if bytes.len() >= 24 => self.nr_lost += u64_at(16),
            PERF_RECORD_COMM
                if bytes.len() >= 16 + 16 && misc & PERF_RECORD_MISC_COMM_EXEC != 0 =>
            {
                self.comm_exec(u32_at(8) as i32, u64_at(id_at + 8));
            }
            PERF_RECORD_COMM if bytes.len() >= 16 + 16 => {}
            // header 8, pid/tid 8, addr/len/pgoff 24, maj/min/ino/gen or
            // the build id 24, prot/flags 8, name, sample id 16.
            PERF_RECORD_MMAP2 if bytes.len() >= 72 + 16 => {
                let name = &bytes[72..id_at];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                let vma = ExecVma {
                    start: u64_at(16),
                    len: u64_at(24),
                    pgoff: u64_at(32),
                    prot: u32_at(64),
                    flags: u32_at(68),
                    name: String::from_utf8_lossy(name).into_owned(),
                };
                self.mmap2(u32_at(8) as i32, u64_at(id_at + 8), vma);
            }
            PERF_RECORD_LOST | PERF_RECORD_COMM | PERF_RECORD_MMAP2 => self.nr_malformed += 1,
            _ => {}
        }
    }
}

/// One CPU's perf event and its mapped ring buffer.
struct Ring {
    fd: i32,
    base: *mut u8,
    len: usize,
}

/// The perf events of the recorded tree, one per CPU. Closed on drop.
pub struct ExecMapsRecorder {
    rings: Vec<Ring>,
    scratch: Vec<u8>,
}

/// `perf_event_attr` for the dummy event that reports mappings.
fn attr_bytes() -> [u8; ATTR_SIZE] {
    let mut a = [0u8; ATTR_SIZE];
    a[0..4].copy_from_slice(&PERF_TYPE_SOFTWARE.to_le_bytes());
    a[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_le_bytes());
    a[8..16].copy_from_slice(&PERF_COUNT_SW_DUMMY.to_le_bytes());
    a[24..32].copy_from_slice(&(PERF_SAMPLE_TID | PERF_SAMPLE_TIME).to_le_bytes());
    let flags = ATTR_INHERIT
        | ATTR_MMAP
        | ATTR_COMM
        | ATTR_TASK
        | ATTR_MMAP_DATA
        | ATTR_SAMPLE_ID_ALL
        | ATTR_MMAP2
        | ATTR_COMM_EXEC
        | ATTR_USE_CLOCKID;
    a[40..48].copy_from_slice(&flags.to_le_bytes());
    a[92..96].copy_from_slice(&libc::CLOCK_MONOTONIC.to_le_bytes());
    a
}

impl ExecMapsRecorder {
    /// Opens one event per CPU of `cpus` on `pid` and its future
    /// descendants. Fails as `perf_event_open()` or `mmap()` does (no perf
    /// support, a restrictive `perf_event_paranoid` without root).
    pub fn open(pid: i32, cpus: &[u32]) -> io::Result<ExecMapsRecorder> {
        let attr = attr_bytes();
        let mut rec = ExecMapsRecorder {
            rings: Vec::new(),
            scratch: Vec::new(),
        };
        for &cpu in cpus {
            // SAFETY: attr is a valid perf_event_attr of ATTR_SIZE bytes
            // that outlives the call.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    attr.as_ptr(),
                    pid,
                    cpu as libc::c_int,
                    -1 as libc::c_int,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = fd as i32;
            let len = (1 + RING_DATA_PAGES) * PAGE;
            // SAFETY: mapping our own perf fd; the kernel checks the length.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                let e = io::Error::last_os_error();
                // SAFETY: closing the fd opened above.
                unsafe { libc::close(fd) };
                return Err(e);
            }
            rec.rings.push(Ring {
                fd,
                base: base as *mut u8,
                len,
            });
        }
        Ok(rec)
    }

    /// Reads every record available now into `out`.
    pub fn drain(&mut self, out: &mut ExecWindows) {
        for i in 0..self.rings.len() {
            self.drain_ring(i, out);
        }
    }

    fn drain_ring(&mut self, i: usize, out: &mut ExecWindows) {
        let ring = &self.rings[i];
        let size = (RING_DATA_PAGES * PAGE) as u64;
        // SAFETY: the first page of the mapping is the kernel's
        // perf_event_mmap_page: data_head at byte 1024, data_tail at 1032,
        // both 8-byte aligned in a page-aligned mapping. The kernel writes
        // data_head; we publish data_tail.
        let (head, tail) = unsafe {
            (
                &*(ring.base.add(1024) as *const AtomicU64),
                &*(ring.base.add(1032) as *const AtomicU64),
            )
        };
        let end = head.load(Ordering::Acquire);
        let mut pos = tail.load(Ordering::Relaxed);
        // SAFETY: the data area follows the metadata page and is `size`
        // bytes long; bytes between tail and head are the kernel's records.
        let data = unsafe { std::slice::from_raw_parts(ring.base.add(PAGE), size as usize) };
        while pos + 8 <= end {
            let at = |p: u64| data[(p % size) as usize];
            let rec_size = u16::from_le_bytes([at(pos + 6), at(pos + 7)]) as u64;
            if rec_size < 8 || pos + rec_size > end {
                out.nr_malformed += 1;
                pos = end;
                break;
            }
            self.scratch.clear();
            self.scratch.extend((pos..pos + rec_size).map(at));
            out.parse_record(&self.scratch);
            pos += rec_size;
        }
        tail.store(pos, Ordering::Release);
    }
}

impl Drop for ExecMapsRecorder {
    fn drop(&mut self) {
        for r in &self.rings {
            // SAFETY: unmapping and closing what open() created.
            unsafe {
                libc::munmap(r.base as *mut libc::c_void, r.len);
                libc::close(r.fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8], pid: i32, ts: u64) -> Vec<u8> {
        let size = 8 + body.len() + 16;
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_le_bytes());
        r.extend_from_slice(&misc.to_le_bytes());
        r.extend_from_slice(&(size as u16).to_le_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&pid.to_le_bytes());
        r.extend_from_slice(&pid.to_le_bytes());
        r.extend_from_slice(&ts.to_le_bytes());
        r
    }

    fn mmap2(pid: i32, start: u64, len: u64, prot: u32, name: &str, ts: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&start.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&[0u8; 24]);
        b.extend_from_slice(&prot.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        let mut n = name.as_bytes().to_vec();
        n.resize((name.len() + 8) & !7, 0);
        b.extend_from_slice(&n);
        record(PERF_RECORD_MMAP2, 0, &b, pid, ts)
    }

    fn comm(pid: i32, exec: bool, ts: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(b"cc1\0\0\0\0\0");
        let misc = if exec { PERF_RECORD_MISC_COMM_EXEC } else { 0 };
        record(PERF_RECORD_COMM, misc, &b, pid, ts)
    }

    #[test]
    fn an_exec_window_is_the_mappings_between_comm_exec_and_the_exec() {
        let mut w = ExecWindows::default();
        w.parse_record(&mmap2(7, 0x1000, 0x1000, 3, "//anon", 5)); // before any exec
        w.parse_record(&comm(7, false, 9)); // prctl(PR_SET_NAME): no window
        w.parse_record(&comm(7, true, 10));
        w.parse_record(&mmap2(7, 0x7ff0_0000, 0x21000, 3, "[stack]", 11));
        w.parse_record(&mmap2(7, 0x5555_0000, 0x3000, 1, "/usr/bin/cc1", 12));
        w.parse_record(&mmap2(8, 0x6000, 0x1000, 3, "//anon", 13)); // another process
        w.parse_record(&mmap2(7, 0x7f00_0000, 0x2000, 3, "//anon", 30)); // ld.so's mmap
        assert_eq!(w.take(7, 9), None, "no window before the exec");
        let vmas = w.take(7, 20).expect("window");
        let names: Vec<&str> = vmas.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["[stack]", "/usr/bin/cc1"]);
        assert_eq!(
            (vmas[0].start, vmas[0].len, vmas[0].prot),
            (0x7ff0_0000, 0x21000, 3)
        );
        assert_eq!(w.take(7, 20), None, "taken once");
        assert_eq!(w.nr_malformed, 0);
        w.parse_record(&[1, 2, 3]);
        assert_eq!(w.nr_malformed, 1);
    }
}
