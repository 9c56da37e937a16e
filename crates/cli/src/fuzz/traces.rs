//! The trace fuzz target: damaged mmlab traces and perf.data files, and
//! well-formed traces of impossible events, each read, imported and
//! replayed as `mmlab replay` and `mmlab validate` would.
//!
//! Three kinds of input, from the seed:
//!
//! - **byte damage** (flips, truncations, insertions, chunks copied over
//!   others) of a valid mmlab trace: a synthetic one or a recorded fixture.
//!   Most are stopped by the chunk checksums; those that get through test
//!   what a checksum cannot see.
//! - **byte damage of a perf.data file**, which has no checksums at all:
//!   every damaged field reaches the importer, and what it accepts reaches
//!   the replays (two flipped bytes made an 11-day timestamp gap).
//! - **impossible events** in a well-formed trace: a header with odd zones
//!   and CPU counts, timestamps that jump by days or run backwards, pfns
//!   and orders beyond the machine, address-space calls with any
//!   arguments, unknown pids.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use trace::event::{ExecVma, Machine, Pageset, Zone};
use trace::{Event, EventKind, Header, TraceWriter, Trailer};

use super::{check_error, Budget, Outcome, Rng, Target};
use crate::replay::{self, ReplayMode};

const CC_C: &[u8] = include_bytes!("../../../trace/tests/fixtures/cc-c.mmtrace");
const DD_GZIP: &[u8] = include_bytes!("../../../trace/tests/fixtures/dd-gzip.mmtrace");
const KMEM_PERF: &[u8] = include_bytes!("../../../trace/tests/fixtures/kmem.perf.data");
const MIXED_PERF: &[u8] = include_bytes!("../../../trace/tests/fixtures/mixed.perf.data");

/// The trace target.
pub struct Traces;

impl Target for Traces {
    fn make(&self, seed: u64) -> (Vec<u8>, &'static str) {
        let mut rng = Rng::new(seed);
        match rng.below(10) {
            0..=2 => {
                let mut b = if rng.pct(50) {
                    impossible_trace(&mut rng, false)
                } else {
                    rng.pick(&[CC_C, DD_GZIP]).to_vec()
                };
                damage(&mut rng, &mut b);
                (b, "mmtrace")
            }
            3..=5 => {
                let mut b = rng.pick(&[KMEM_PERF, MIXED_PERF]).to_vec();
                damage(&mut rng, &mut b);
                (b, "perf.data")
            }
            _ => (impossible_trace(&mut rng, true), "mmtrace"),
        }
    }

    fn run(&self, input: &[u8], budget: &Budget) -> Outcome {
        let trace_bytes = if input.starts_with(b"PERFILE") {
            let r = trace::perf::import_from(
                std::io::Cursor::new(input),
                Path::new("fuzz.perf.data"),
                "fuzz",
                Vec::new(),
                Path::new("fuzz.mmtrace"),
            );
            match r {
                Ok((_, out)) => out,
                Err(e) => {
                    let msg = e.to_string();
                    if !msg.contains("fuzz.perf.data") && !msg.contains("fuzz.mmtrace") {
                        return Outcome::Failed(format!("an import error naming no file: {msg}"));
                    }
                    return Outcome::Rejected(msg);
                }
            }
        } else {
            input.to_vec()
        };
        read_all(&trace_bytes);
        if budget.front_only {
            return Outcome::Ran;
        }
        replay_all(&trace_bytes)
    }
}

/// Reads every event, as `mmlab trace-stats` does.
fn read_all(bytes: &[u8]) {
    if let Ok(r) = trace::TraceReader::new(bytes) {
        for ev in r {
            if ev.is_err() {
                break;
            }
        }
    }
}

/// Both replays (cold and warm lists) and `validate`'s comparison, on the
/// trace in a file that has no name (`/proc/self/fd/N` names it).
fn replay_all(bytes: &[u8]) -> Outcome {
    let mut guard = SCRATCH.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        match Scratch::new() {
            Ok(s) => *guard = Some(s),
            Err(e) => return Outcome::Failed(format!("no scratch file: {e}")),
        }
    }
    let scratch = guard.as_mut().expect("made above");
    if let Err(e) = scratch.put_trace(bytes) {
        return Outcome::Failed(format!("cannot write the scratch file: {e}"));
    }
    let path = fd_path(&scratch.trace);
    let name = path.display().to_string();
    match replay_path(&path, &fd_path(&scratch.experiment)) {
        Ok(()) => Outcome::Ran,
        Err(e) => check_error(&e, &name),
    }
}

/// The two unnamed scratch files of the replays, made once per process:
/// making two files per input cost more kernel time (ext4 inode
/// allocation) than many inputs' replays.
static SCRATCH: std::sync::Mutex<Option<Scratch>> = std::sync::Mutex::new(None);

struct Scratch {
    /// The input trace, rewritten for each input.
    trace: std::fs::File,
    /// [`REPLAY_EXPERIMENT`], written once.
    experiment: std::fs::File,
}

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        let trace = host::output::unnamed_file_in(&std::env::temp_dir())?;
        let mut experiment = host::output::unnamed_file_in(&std::env::temp_dir())?;
        experiment.write_all(REPLAY_EXPERIMENT.as_bytes())?;
        Ok(Scratch { trace, experiment })
    }

    /// Makes the trace file hold `bytes` and nothing else. (Readers open
    /// `/proc/self/fd/N` afresh, so this descriptor's offset is not theirs.)
    fn put_trace(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.trace.set_len(0)?;
        self.trace.seek(SeekFrom::Start(0))?;
        self.trace.write_all(bytes)
    }
}

fn fd_path(f: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// The machine and kernels a trace without zones replays on (two CPUs:
/// traces of more fold, which is warned about).
const REPLAY_EXPERIMENT: &str = "name = \"fuzz-replay\"\nprofile = \"host-epyc-zen3\"\n\
[machine]\nname = \"m\"\nnodes = 1\ncpus_per_node = 2\nmemory_per_node = \"256MiB\"\n\
[[kernel]]\nname = \"a\"\npreset = \"linux-6.18\"\n\
[[kernel]]\nname = \"b\"\npreset = \"linux-6.6\"\nknobs = { \"mmlab.vmacache\" = \"pmd\" }\n";

fn replay_path(path: &Path, exp_path: &Path) -> anyhow::Result<()> {
    let prep = replay::open_alloc(path, ReplayMode::Both)?;
    let header = match &prep {
        Some(p) => p.header.clone(),
        None => replay::read_header(path)?,
    };
    let min_cpus = prep
        .as_ref()
        .and_then(|p| p.recorded.cpus.last().map(|c| c.saturating_add(1)))
        .unwrap_or(1);
    let given = header.machine.zones.is_empty().then_some(exp_path);
    let exp = replay::replay_experiment(path, &header, min_cpus, given)?;
    let _ = replay::cpu_fold_warning(&header, min_cpus, &exp);
    // A warm-up refused for its size (`mmlab replay --warm-pcp` says so)
    // still leaves the cold replays and mode (b) to run.
    let mut warm_refused = Ok(());
    if let Some(prep) = &prep {
        warm_refused = replay::check_warm_fits(path, &exp, prep);
        for k in &exp.kernels {
            for warm in [false, true] {
                if warm && warm_refused.is_err() {
                    continue;
                }
                let _ = replay::replay_one(&exp, k, prep, exp.seed, warm, None);
            }
        }
    }
    let aspace = crate::aspace::run(path, &exp, false)?;
    let _ = crate::aspace::warnings(&header, &exp, aspace.as_ref());
    warm_refused
}

/// Damage: bit flips, overwritten words, truncation, insertion, a span
/// copied over another (as a torn write would leave).
fn damage(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            return;
        }
        let at = rng.below(b.len() as u64) as usize;
        match rng.below(6) {
            0 | 1 => b[at] ^= 1 << rng.below(8),
            2 => {
                let v = *rng.pick(&[0u64, u64::MAX, 1 << 40, 0x7fff_ffff, 1 << 63]);
                for (i, byte) in v.to_le_bytes().iter().enumerate() {
                    if let Some(x) = b.get_mut(at + i) {
                        *x = *byte;
                    }
                }
            }
            3 => b.truncate(at),
            4 => {
                let n = 1 + rng.below(64) as usize;
                let junk: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                b.splice(at..at, junk);
            }
            _ => {
                let len = (1 + rng.below(256) as usize).min(b.len() - at);
                let to = rng.below((b.len() - len) as u64 + 1) as usize;
                let span = b[at..at + len].to_vec();
                b[to..to + len].copy_from_slice(&span);
            }
        }
    }
}

/// An interesting number: small, a power of two near a limit, or huge.
fn odd(rng: &mut Rng) -> u64 {
    *rng.pick(&[
        0,
        1,
        7,
        4096,
        1 << 20,
        1 << 32,
        (1 << 32) - 1,
        1 << 47,
        1 << 63,
        u64::MAX,
        u64::MAX - 4095,
    ])
}

fn header(rng: &mut Rng) -> Header {
    let mut h = Header::synthetic("fuzz");
    let nr_cpus = if rng.pct(95) {
        1 + rng.below(8) as u32
    } else {
        *rng.pick(&[0, 1024, 1_000_000, u32::MAX])
    };
    let nr_zones = if rng.pct(90) { 1 + rng.below(3) } else { 0 };
    let zones = (0..nr_zones)
        .map(|_| {
            let managed = if rng.pct(90) {
                1 << (14 + rng.below(8))
            } else {
                odd(rng)
            };
            let min = if rng.pct(90) {
                managed >> (6 + rng.below(6))
            } else {
                odd(rng)
            };
            Zone {
                node: if rng.pct(95) { 0 } else { rng.below(4) as u32 },
                start_pfn: None,
                name: (*rng.pick(&["DMA", "DMA32", "Normal", "Movable", ""])).into(),
                managed,
                present: managed,
                spanned: if rng.pct(90) { managed } else { odd(rng) },
                min,
                low: min.saturating_add(min / 4),
                high: min.saturating_add(min / 2),
                pagesets: (0..rng.below(3))
                    .map(|c| Pageset {
                        cpu: c as u32,
                        count: if rng.pct(90) {
                            rng.below(1000)
                        } else {
                            odd(rng)
                        },
                        high: if rng.pct(90) {
                            rng.below(5000)
                        } else {
                            odd(rng)
                        },
                        batch: 63,
                        high_min: rng.pct(50).then(|| rng.below(5000)),
                        high_max: rng.pct(50).then(|| rng.below(50_000)),
                    })
                    .collect(),
            }
        })
        .collect();
    h.machine = Machine { nr_cpus, zones };
    h.knobs.percpu_pagelist_high_fraction = match rng.below(4) {
        0 => None,
        1 => Some(8 + rng.below(100)),
        2 => Some(odd(rng)),
        _ => Some(0),
    };
    if rng.pct(50) {
        h.knobs.thp_enabled = Some((*rng.pick(&["always", "madvise", "never", "bogus"])).into());
    }
    if rng.pct(30) {
        let size = *rng.pick(&["hugepages-64kB", "hugepages-2048kB", "hugepages-7kB", "x"]);
        let v = *rng.pick(&["always", "inherit", "madvise", "never", "bogus"]);
        h.knobs.thp_sizes_enabled.insert(size.into(), v.into());
    }
    h
}

/// An address near the places programs map memory, or anywhere.
fn addr(rng: &mut Rng) -> u64 {
    match rng.below(8) {
        0 => odd(rng),
        1 => rng.next_u64(),
        _ => {
            0x7f00_0000_0000
                + (rng.below(1 << 16) << 12)
                + if rng.pct(10) { rng.below(4096) } else { 0 }
        }
    }
}

fn len(rng: &mut Rng) -> u64 {
    if rng.pct(90) {
        (1 + rng.below(1 << 10)) << 12
    } else {
        odd(rng)
    }
}

/// A system call's result: mostly success, sometimes an error or nonsense,
/// sometimes none (a trace with only the entry tracepoints).
fn ret(rng: &mut Rng, ok: u64) -> Option<i64> {
    match rng.below(20) {
        0 => None,
        1..=3 => Some(*rng.pick(&[-12, -22, -1, 0, i64::MAX, i64::MIN])),
        _ => Some(ok as i64),
    }
}

fn event_kind(rng: &mut Rng, managed: u64) -> EventKind {
    let pfn = |rng: &mut Rng| {
        if rng.pct(90) {
            rng.below(managed.max(1).saturating_mul(2))
        } else {
            odd(rng)
        }
    };
    let order = |rng: &mut Rng| {
        if rng.pct(90) {
            rng.below(4) as u32
        } else {
            *rng.pick(&[9, 10, 11, 40, u32::MAX])
        }
    };
    match rng.below(17) {
        0..=2 => EventKind::PageAlloc {
            pfn: pfn(rng),
            order: order(rng),
            migratetype: rng.below(6) as i32 - 1,
            gfp_flags: *rng.pick(&[0xcc0, 0x140cca, 0, u64::MAX]),
        },
        3..=5 => EventKind::PageFree {
            pfn: pfn(rng),
            order: order(rng),
        },
        6 => EventKind::PageAllocZoneLocked {
            pfn: pfn(rng),
            order: order(rng),
            migratetype: rng.below(4) as i32,
            percpu_refill: rng.pct(50),
        },
        // The vmstat work's runs (replayed as Op::VmstatUpdate in mode a)
        // share the drains' draw.
        7 if rng.pct(25) => EventKind::VmstatWork {},
        7 => EventKind::PagePcpuDrain {
            pfn: pfn(rng),
            order: order(rng),
            migratetype: rng.below(4) as i32,
        },
        8..=10 => EventKind::PageFaultUser {
            address: addr(rng),
            ip: 0x401000,
            error_code: *rng.pick(&[4, 6, 7, 0x15, u64::MAX]),
        },
        11 => {
            let a = addr(rng);
            EventKind::Mmap {
                addr: if rng.pct(70) { 0 } else { a },
                len: len(rng),
                prot: rng.below(8),
                flags: *rng.pick(&[0x22, 0x32, 0x02, 0x40022, 0x01, 0]),
                fd: if rng.pct(80) { u64::MAX } else { rng.below(10) },
                off: 0,
                ret: ret(rng, a),
            }
        }
        12 => EventKind::Munmap {
            addr: addr(rng),
            len: len(rng),
            ret: ret(rng, 0),
        },
        13 => {
            let b = addr(rng);
            EventKind::Brk {
                brk: if rng.pct(30) { 0 } else { b },
                ret: ret(rng, b),
            }
        }
        14 => {
            let (a, n) = (addr(rng), addr(rng));
            if rng.pct(50) {
                EventKind::Mremap {
                    addr: a,
                    old_len: len(rng),
                    new_len: len(rng),
                    flags: rng.below(8),
                    new_addr: n,
                    ret: ret(rng, n),
                }
            } else {
                EventKind::Mprotect {
                    start: a,
                    len: len(rng),
                    prot: rng.below(8),
                    ret: ret(rng, 0),
                }
            }
        }
        15 => EventKind::Madvise {
            start: addr(rng),
            len_in: len(rng),
            behavior: *rng.pick(&[4, 8, 14, 15, 25, -1, 1000]),
            ret: ret(rng, 0),
        },
        _ => process_event(rng),
    }
}

/// A process event: fork, exec, exit, an exec's layout, a kernel fault.
fn process_event(rng: &mut Rng) -> EventKind {
    match rng.below(5) {
        0 => EventKind::Fork {
            parent: 1 + rng.below(4) as i32,
            child: 1 + rng.below(8) as i32,
        },
        1 => EventKind::Exec {
            pid: 1 + rng.below(4) as i32,
            filename: "/bin/sh".into(),
        },
        2 => EventKind::Exit {
            pid: 1 + rng.below(8) as i32,
        },
        3 => EventKind::ExecLayout {
            pid: 1 + rng.below(4) as i32,
            vmas: (0..rng.below(4))
                .map(|_| ExecVma {
                    start: addr(rng),
                    len: len(rng),
                    pgoff: 0,
                    prot: rng.below(8) as u32,
                    flags: *rng.pick(&[1, 2]),
                    name: (*rng.pick(&["//anon", "[stack]", "[heap]", "/bin/sh", ""])).into(),
                })
                .collect(),
        },
        _ => EventKind::PageFaultKernel {
            address: addr(rng),
            ip: 0xffff_ffff_8100_0000,
            error_code: 2,
        },
    }
}

/// A well-formed trace of impossible events (see the module doc); with
/// `gaps`, timestamps that jump by up to centuries or run backwards.
fn impossible_trace(rng: &mut Rng, gaps: bool) -> Vec<u8> {
    let h = header(rng);
    let managed = h
        .machine
        .zones
        .iter()
        .map(|z| z.managed)
        .max()
        .unwrap_or(1 << 16);
    let nr_cpus = h.machine.nr_cpus.max(1);
    let mut w = match TraceWriter::new(Vec::new(), &h) {
        Ok(w) => w,
        Err(_) => return Vec::new(),
    };
    let mut ts = rng.below(1 << 40);
    for _ in 0..rng.below(400) {
        ts = if gaps && rng.pct(2) {
            match rng.below(3) {
                0 => ts.wrapping_add(11 * 86_400 * 1_000_000_000),
                1 => ts.wrapping_add(odd(rng)),
                _ => ts.saturating_sub(rng.below(1 << 40)),
            }
        } else {
            ts.wrapping_add(rng.below(100_000))
        };
        let cpu = if rng.pct(97) {
            rng.below(nr_cpus as u64) as u32
        } else {
            odd(rng) as u32
        };
        let pid = 1 + rng.below(4) as i32;
        let ev = Event {
            ts_ns: ts,
            cpu,
            pid,
            tid: pid + if rng.pct(10) { 100 } else { 0 },
            kind: event_kind(rng, managed),
        };
        if w.write(&ev).is_err() {
            break;
        }
    }
    w.finish(&Trailer::default())
        .map(|(b, _)| b)
        .unwrap_or_default()
}
