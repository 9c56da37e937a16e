//! Which processes of a `perf record` file are the recorded command's.
//!
//! # Why
//!
//! `perf record -a -- CMD` records every process on the machine, and a
//! replay of every process would predict the whole host's faults, not the
//! command's. The allocator events stay system-wide (the zone and PCP
//! lists are the whole machine's: `validate --mode alloc` wants them all),
//! but the faults, the memory calls and the task events are kept only for
//! the command's process tree, as `mmlab record` traces them.
//!
//! # How the command is found
//!
//! perf forks the command's process, which names itself `perf-exec`
//! (`prctl(PR_SET_NAME)` in perf's `evlist__prepare_workload()`) and waits
//! for perf to open its events before it execs; perf then synthesizes the
//! `PERF_RECORD_COMM`/`MMAP` records of the threads it records, at time 0,
//! so the `perf-exec` comm record names the command's pid before any of its
//! samples. Its descendants join the tree by their fork events. A file
//! without a `perf-exec` process (`perf record -a` stopped with Ctrl-C,
//! `perf record -p PID`) keeps every process, and the import says so.
//!
//! # perf's own child before the exec
//!
//! Between its fork and its exec the `perf-exec` process runs perf's code
//! (closing descriptors, waiting on a pipe): a handful of copy-on-write
//! faults on perf's memory, which no folio setting changes for the
//! command. With `-a` the events are already on and record them; without
//! `-a` perf enables its events at the exec (`enable_on_exec`) and they
//! are not in the file. So that both lines replay the same workload, the
//! root's faults and memory calls before its exec
//! (`PERF_RECORD_COMM` with `PERF_RECORD_MISC_COMM_EXEC`, or
//! `sched_process_exec`, whichever comes first) are left out and counted
//! ([`WorkloadTree::nr_before_exec`]).

use std::collections::BTreeSet;

use crate::event::{Event, EventKind};

/// The comm perf gives the command's process until it execs.
pub const PERF_EXEC_COMM: &str = "perf-exec";

/// Where the search for the command's process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Still in the records perf synthesized at time 0.
    Searching,
    /// The command's process is known: keep its tree.
    Tree,
    /// The file has no `perf-exec` process: keep every process.
    All,
}

/// The filter: [`WorkloadTree::keeps`] each event in file order.
#[derive(Clone, Debug)]
pub struct WorkloadTree {
    state: State,
    /// The command's process (the `perf-exec` pid) and its descendants.
    members: BTreeSet<i32>,
    root: Option<i32>,
    /// Events of other processes left out (allocator events are never).
    pub nr_dropped: u64,
    /// True once the root has exec'd the command.
    root_execd: bool,
    /// Faults and memory calls of the root before its exec: perf's own.
    pub nr_before_exec: u64,
}

impl Default for WorkloadTree {
    fn default() -> Self {
        WorkloadTree {
            state: State::Searching,
            members: BTreeSet::new(),
            root: None,
            nr_dropped: 0,
            root_execd: false,
            nr_before_exec: 0,
        }
    }
}

impl WorkloadTree {
    /// Whether `ev` belongs in the trace; learns the tree as it goes.
    pub fn keeps(&mut self, ev: &Event) -> bool {
        // The machine's allocator events are kept for every process.
        if ev.kind.is_allocator() {
            return true;
        }
        if self.state == State::Searching {
            match &ev.kind {
                EventKind::Comm { comm, exec: false } if comm == PERF_EXEC_COMM => {
                    self.state = State::Tree;
                    self.root = Some(ev.pid);
                    self.members.insert(ev.pid);
                }
                // Another process's synthesized records: not the command's.
                _ if ev.ts_ns == 0 => {
                    self.nr_dropped += 1;
                    return false;
                }
                _ => self.state = State::All,
            }
        }
        if self.state == State::All {
            return true;
        }
        if !self.members.contains(&ev.pid) {
            self.nr_dropped += 1;
            return false;
        }
        if let EventKind::Fork { child, .. } = ev.kind {
            self.members.insert(child);
        }
        if self.root == Some(ev.pid) && !self.root_execd {
            match &ev.kind {
                EventKind::Comm { exec: true, .. } | EventKind::Exec { .. } => {
                    self.root_execd = true
                }
                EventKind::Comm { .. } | EventKind::Fork { .. } => {}
                _ => {
                    self.nr_before_exec += 1;
                    return false;
                }
            }
        }
        true
    }

    /// The command's pid and the number of processes and threads in its
    /// tree, or None when every process was kept.
    pub fn tree(&self) -> Option<(i32, usize)> {
        Some((self.root?, self.members.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts_ns: u64, pid: i32, kind: EventKind) -> Event {
        Event {
            ts_ns,
            cpu: 0,
            pid,
            tid: pid,
            kind,
        }
    }

    fn comm(name: &str) -> EventKind {
        EventKind::Comm {
            comm: name.to_string(),
            exec: false,
        }
    }

    fn fault() -> EventKind {
        EventKind::PageFaultUser {
            address: 0x1000,
            ip: 0,
            error_code: 6,
        }
    }

    #[test]
    fn keeps_the_command_tree_and_every_allocator_event() {
        let mut w = WorkloadTree::default();
        // perf's synthesized records of the machine, then the command's.
        assert!(!w.keeps(&ev(0, 7, comm("sshd"))));
        assert!(w.keeps(&ev(0, 40, comm(PERF_EXEC_COMM))));
        assert!(!w.keeps(&ev(0, 8, comm("bash"))));
        // perf's child before its exec runs perf's code: not the command.
        assert!(!w.keeps(&ev(4, 40, fault())));
        assert!(w.keeps(&ev(
            5,
            40,
            EventKind::Comm {
                comm: "gzip".to_string(),
                exec: true
            }
        )));
        assert!(w.keeps(&ev(5, 40, fault())));
        assert!(!w.keeps(&ev(6, 7, fault())));
        let alloc = EventKind::PageAlloc {
            pfn: 1,
            order: 0,
            migratetype: 0,
            gfp_flags: 0,
        };
        assert!(w.keeps(&ev(7, 7, alloc)));
        assert!(w.keeps(&ev(
            8,
            40,
            EventKind::Fork {
                parent: 40,
                child: 41
            }
        )));
        assert!(w.keeps(&ev(9, 41, fault())));
        assert_eq!(w.tree(), Some((40, 2)));
        assert_eq!(w.nr_dropped, 3);
        assert_eq!(w.nr_before_exec, 1);
    }

    #[test]
    fn without_perf_exec_every_process_is_kept() {
        let mut w = WorkloadTree::default();
        assert!(!w.keeps(&ev(0, 7, comm("sshd"))));
        assert!(w.keeps(&ev(5, 7, fault())));
        assert!(w.keeps(&ev(6, 8, fault())));
        assert_eq!(w.tree(), None);
    }
}
