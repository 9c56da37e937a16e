//! The mappings of each exec, gathered from perf's mapping records: what
//! `mmlab record` (`record/exec_maps.rs`) and an importer of `perf record
//! -d` files have in common.
//!
//! The kernel reports every mapping it makes to perf (`PERF_RECORD_MMAP2`),
//! those of `execve()` included, which no system call announces. An exec's
//! mappings are the records of its process between the `PERF_RECORD_COMM`
//! flagged `PERF_RECORD_MISC_COMM_EXEC` (`begin_new_exec()`, before the
//! loader maps anything) and the `sched_process_exec` tracepoint (after it
//! is done). Feed the records in time order with
//! [`ExecWindows::comm_exec`] and [`ExecWindows::mmap2`]; when writing a
//! `sched_process_exec` event, [`exec_layout_event`] gives the
//! `ExecLayout` event to write after it.
//!
//! # Bounds
//!
//! A window keeps at most [`MAX_WINDOW_VMAS`] records (a real exec makes a
//! few dozen; the records after the exec are the process's own `mmap`s,
//! which the trace has as system calls), and a process at most
//! [`MAX_WINDOWS_PER_PID`] windows, so memory grows with the number of
//! execs, not with the trace.

use std::collections::BTreeMap;

use crate::event::{Event, EventKind, ExecVma};

/// Records kept per exec window.
pub const MAX_WINDOW_VMAS: usize = 256;
/// Exec windows kept per process id before the oldest goes.
pub const MAX_WINDOWS_PER_PID: usize = 8;

/// One exec's window: the time of its `PERF_RECORD_COMM` and the mappings
/// after it, each with its time.
type Window = (u64, Vec<(u64, ExecVma)>);

/// The `PERF_RECORD_MMAP2` records of each exec, by process id.
#[derive(Debug, Default)]
pub struct ExecWindows {
    /// Per process: its exec windows, oldest first: the time of the exec's
    /// `PERF_RECORD_COMM` and the mappings after it, with their times.
    windows: BTreeMap<i32, Vec<Window>>,
    /// Records the kernel could not store (`PERF_RECORD_LOST`).
    pub nr_lost: u64,
    /// Records that did not parse.
    pub nr_malformed: u64,
}

impl ExecWindows {
    /// A `PERF_RECORD_COMM` with `PERF_RECORD_MISC_COMM_EXEC` of process
    /// `pid` at `ts`: an exec's window opens.
    pub fn comm_exec(&mut self, pid: i32, ts: u64) {
        let w = self.windows.entry(pid).or_default();
        if w.len() >= MAX_WINDOWS_PER_PID {
            w.remove(0);
        }
        w.push((ts, Vec::new()));
    }

    /// A `PERF_RECORD_MMAP2` of process `pid` at `ts`.
    pub fn mmap2(&mut self, pid: i32, ts: u64, vma: ExecVma) {
        if let Some((_, vmas)) = self.windows.get_mut(&pid).and_then(|w| w.last_mut()) {
            if vmas.len() < MAX_WINDOW_VMAS {
                vmas.push((ts, vma));
            }
        }
    }

    /// The mappings of the exec of `pid` that `sched_process_exec` reported
    /// at `exec_ts`: those of the latest window that opened at or before
    /// it, up to `exec_ts`. `None` if no window opened before it (the
    /// records were lost, or perf was not available).
    pub fn take(&mut self, pid: i32, exec_ts: u64) -> Option<Vec<ExecVma>> {
        let w = self.windows.get_mut(&pid)?;
        let i = w.iter().rposition(|(t, _)| *t <= exec_ts)?;
        let (_, vmas) = w.remove(i);
        // Older windows of this pid can no longer match an exec.
        w.drain(..i);
        Some(
            vmas.into_iter()
                .filter(|(t, _)| *t <= exec_ts)
                .map(|(_, v)| v)
                .collect(),
        )
    }
}

/// The `ExecLayout` event that follows `ev` if it is a `sched_process_exec`
/// whose mappings were recorded: at the same time, on the same CPU.
pub fn exec_layout_event(ev: &Event, windows: &mut ExecWindows) -> Option<Event> {
    let EventKind::Exec { pid, .. } = ev.kind else {
        return None;
    };
    let vmas = windows.take(pid, ev.ts_ns)?;
    Some(Event {
        kind: EventKind::ExecLayout { pid, vmas },
        ..ev.clone()
    })
}
