//! `--timeline FILE`: the runs' timelines (`sim::timeline`) as a Perfetto
//! trace (the protobuf `Trace` of `perfetto/trace/trace.proto`, TrackEvent
//! packets), which ui.perfetto.dev and Perfetto's trace processor open.
//!
//! # Layout
//!
//! One root track per run (`kernel × workload, seed`), under it one track
//! per simulated CPU (`vCPU 3`) holding what it ran as slices: each
//! operation (a task's `Op`, the kworker's vmstat or copy work), and inside
//! it the locks it waited for and held and the page clears and copies it
//! played; slices that would not nest on one track go to a sibling track
//! (`vCPU 3 (2)`). A `zone->lock` hold inside an operation that refilled
//! or drained a PCP list is named after that (`rmqueue_bulk`,
//! `free_pcppages_bulk`); an `mmap_lock` read hold inside a user access is
//! the page fault. Counter tracks: each vCPU's PCP `count` and `high` per
//! zone, and each zone's free pages.
//!
//! # Encoding
//!
//! The protobuf wire format is written by hand (varints and
//! length-delimited fields) for the few messages used; the field numbers
//! are those of Perfetto's `.proto` files (v51), and the tests decode the
//! file with Perfetto's own protos.

use mm::cost::LockClass;
use sim::timeline::{MemKind, Record, Timeline};
use std::io::Write;

/// One run's timeline and what to call it.
pub struct RunTimeline {
    pub label: String,
    pub timeline: std::sync::Arc<Timeline>,
}

/// The timelines of an experiment's runs (those that recorded one).
pub fn of_results(experiment: &str, results: &[crate::report::RunResult]) -> Vec<RunTimeline> {
    results
        .iter()
        .filter_map(|r| {
            let t = r.timeline.clone()?;
            Some(RunTimeline {
                label: format!(
                    "{experiment}: {} × {} (seed {})",
                    r.kernel, r.workload, r.seed
                ),
                timeline: t,
            })
        })
        .collect()
}

/// What was written.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    pub packets: u64,
    pub bytes: u64,
    pub slices: u64,
    pub counters: u64,
    pub truncated_runs: u64,
}

// Field numbers (perfetto/trace/trace.proto and the messages it includes).
const TRACE_PACKET: u32 = 1;
const PKT_TIMESTAMP: u32 = 8;
const PKT_SEQ_ID: u32 = 10;
const PKT_TRACK_EVENT: u32 = 11;
const PKT_TRACK_DESCRIPTOR: u32 = 60;
const TD_UUID: u32 = 1;
const TD_NAME: u32 = 2;
const TD_PARENT_UUID: u32 = 5;
const TD_COUNTER: u32 = 8;
const TD_CHILD_ORDERING: u32 = 11;
const TD_SIBLING_RANK: u32 = 12;
const CD_UNIT: u32 = 3;
const CD_UNIT_NAME: u32 = 6;
const TE_DEBUG_ANNOTATIONS: u32 = 4;
const TE_TYPE: u32 = 9;
const TE_TRACK_UUID: u32 = 11;
const TE_NAME: u32 = 23;
const TE_COUNTER_VALUE: u32 = 30;
const DA_UINT_VALUE: u32 = 3;
const DA_NAME: u32 = 10;
// Enum values.
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;
const UNIT_COUNT: u64 = 2;
const ORDERING_EXPLICIT: u64 = 3;
/// All packets are on one sequence of this id.
const SEQ_ID: u64 = 1;

const VARINT: u32 = 0;
const LEN: u32 = 2;

/// A protobuf message being built.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn uint(&mut self, field: u32, v: u64) -> &mut Msg {
        self.key(field, VARINT);
        self.varint(v);
        self
    }

    /// An int64 (negative values take ten bytes, as protobuf says).
    fn int(&mut self, field: u32, v: i64) -> &mut Msg {
        self.uint(field, v as u64)
    }

    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Msg {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn str(&mut self, field: u32, s: &str) -> &mut Msg {
        self.bytes(field, s.as_bytes())
    }

    fn msg(&mut self, field: u32, m: &Msg) -> &mut Msg {
        self.bytes(field, &m.0)
    }
}

/// Writes packets into the `Trace` stream (each is its field 1).
struct Out<'w> {
    w: &'w mut dyn Write,
    n: Written,
}

impl Out<'_> {
    fn packet(&mut self, ts: Option<u64>, body_field: u32, body: &Msg) -> std::io::Result<()> {
        let mut p = Msg::default();
        if let Some(ts) = ts {
            p.uint(PKT_TIMESTAMP, ts);
        }
        p.uint(PKT_SEQ_ID, SEQ_ID);
        p.msg(body_field, body);
        let mut outer = Msg::default();
        outer.msg(TRACE_PACKET, &p);
        self.w.write_all(&outer.0)?;
        self.n.packets += 1;
        self.n.bytes += outer.0.len() as u64;
        Ok(())
    }

    fn track(
        &mut self,
        uuid: u64,
        parent: Option<u64>,
        name: &str,
        rank: i64,
        counter_unit: Option<&str>,
    ) -> std::io::Result<()> {
        debug_assert!(
            i32::try_from(rank).is_ok(),
            "sibling_order_rank is an int32"
        );
        let mut td = Msg::default();
        td.uint(TD_UUID, uuid).str(TD_NAME, name);
        if let Some(p) = parent {
            td.uint(TD_PARENT_UUID, p);
        }
        if let Some(unit) = counter_unit {
            let mut cd = Msg::default();
            cd.uint(CD_UNIT, UNIT_COUNT).str(CD_UNIT_NAME, unit);
            td.msg(TD_COUNTER, &cd);
        }
        td.uint(TD_CHILD_ORDERING, ORDERING_EXPLICIT);
        td.int(TD_SIBLING_RANK, rank);
        self.packet(None, PKT_TRACK_DESCRIPTOR, &td)
    }
}

/// A slice to place: its track (vCPU), time span, name and annotations.
#[derive(Clone, Debug)]
struct Slice {
    from: u64,
    to: u64,
    /// Lower draws outside: operations 0, lock waits and holds 1, memory 2.
    depth: u8,
    name: String,
    args: Vec<(&'static str, u64)>,
}

/// A timeline event, ready to encode.
#[derive(Clone, Debug)]
enum Ev {
    Begin {
        track: u64,
        name: String,
        args: Vec<(&'static str, u64)>,
    },
    End {
        track: u64,
    },
    Counter {
        track: u64,
        value: i64,
    },
    Instant {
        track: u64,
        name: String,
    },
}

fn lock_name(c: LockClass) -> &'static str {
    match c {
        LockClass::Zone => "zone->lock",
        LockClass::MmapLock => "mmap_lock",
        LockClass::Ptl => "page-table lock",
    }
}

/// The operation (if any) of `ops` (sorted by start) that contains `[from, to)`.
fn enclosing(ops: &[Slice], from: u64, to: u64) -> Option<&Slice> {
    let i = ops.partition_point(|o| o.from <= from);
    ops[..i].iter().rev().find(|o| o.to >= to)
}

/// The name of a lock hold, from its class and the operation around it.
fn hold_name(class: LockClass, read: bool, op: Option<&Slice>) -> String {
    let arg = |k: &str| {
        op.and_then(|o| o.args.iter().find(|a| a.0 == k))
            .map_or(0, |a| a.1)
    };
    match class {
        LockClass::Zone if arg("pcp_refills") > 0 && arg("pcp_drains") > 0 => {
            "zone->lock: PCP refill and drain".into()
        }
        LockClass::Zone if arg("pcp_refills") > 0 => "zone->lock: rmqueue_bulk (PCP refill)".into(),
        LockClass::Zone if arg("pcp_drains") > 0 => {
            "zone->lock: free_pcppages_bulk (PCP drain)".into()
        }
        LockClass::MmapLock if read && op.is_some_and(|o| o.name == "touch") => {
            "page fault (do_user_addr_fault, mmap_lock read)".into()
        }
        c => format!("{}{}", lock_name(c), if read { " (read)" } else { "" }),
    }
}

/// The slices of each vCPU, from the records.
fn slices(t: &Timeline, nr_cpus: usize) -> Vec<Vec<Slice>> {
    let mut per: Vec<Vec<Slice>> = vec![Vec::new(); nr_cpus];
    for r in t.records() {
        if let Record::Op {
            v,
            from,
            to,
            name,
            counts,
        } = r
        {
            let args = [
                ("pcp_refills", counts.pcp_refills),
                ("pcp_drains", counts.pcp_drains),
                ("zone_locked_allocs", counts.zone_locked_allocs),
                ("faults", counts.faults),
            ]
            .into_iter()
            .filter(|a| a.1 > 0)
            .collect();
            per[v.0 as usize].push(Slice {
                from: from.0,
                to: to.0,
                depth: 0,
                name: name.to_string(),
                args,
            });
        }
    }
    for ops in &mut per {
        ops.sort_by_key(|s| s.from);
    }
    let ops = per.clone();
    for r in t.records() {
        let (v, s) = match *r {
            Record::LockWait { v, class, from, to } => (
                v,
                Slice {
                    from: from.0,
                    to: to.0,
                    depth: 1,
                    name: format!("wait {}", lock_name(class)),
                    args: vec![],
                },
            ),
            Record::LockHold {
                v,
                class,
                read,
                from,
                to,
            } => {
                let op = enclosing(&ops[v.0 as usize], from.0, to.0);
                (
                    v,
                    Slice {
                        from: from.0,
                        to: to.0,
                        depth: 1,
                        name: hold_name(class, read, op),
                        args: vec![],
                    },
                )
            }
            Record::Mem {
                v,
                kind,
                pages,
                from,
                to,
            } => {
                let what = match kind {
                    MemKind::Clear => "clear_page",
                    MemKind::Copy => "copy_page",
                };
                (
                    v,
                    Slice {
                        from: from.0,
                        to: to.0,
                        depth: 2,
                        name: format!("{what} ×{pages}"),
                        args: vec![("pages", u64::from(pages))],
                    },
                )
            }
            _ => continue,
        };
        per[v.0 as usize].push(s);
    }
    per
}

/// Places one vCPU's slices on as few properly nested lanes as it can
/// (outer first), and returns each lane's begin/end events with times.
fn lanes(mut s: Vec<Slice>) -> Vec<Vec<(u64, Ev)>> {
    s.retain(|x| x.to > x.from);
    s.sort_by(|a, b| {
        a.from
            .cmp(&b.from)
            .then(b.to.cmp(&a.to))
            .then(a.depth.cmp(&b.depth))
    });
    // Per lane: the stack of open slices' ends, and its events.
    type Lane = (Vec<u64>, Vec<(u64, Ev)>);
    let mut lanes: Vec<Lane> = Vec::new();
    for x in s {
        let fit = lanes.iter_mut().position(|(stack, evs)| {
            while stack.last().is_some_and(|&end| end <= x.from) {
                let end = stack.pop().unwrap_or(0);
                evs.push((end, Ev::End { track: 0 }));
            }
            stack.last().is_none_or(|&end| end >= x.to)
        });
        let i = fit.unwrap_or_else(|| {
            lanes.push((Vec::new(), Vec::new()));
            lanes.len() - 1
        });
        let (stack, evs) = &mut lanes[i];
        evs.push((
            x.from,
            Ev::Begin {
                track: 0,
                name: x.name,
                args: x.args,
            },
        ));
        stack.push(x.to);
    }
    lanes
        .into_iter()
        .map(|(mut stack, mut evs)| {
            while let Some(end) = stack.pop() {
                evs.push((end, Ev::End { track: 0 }));
            }
            evs
        })
        .collect()
}

fn set_track(e: Ev, t: u64) -> Ev {
    match e {
        Ev::Begin { name, args, .. } => Ev::Begin {
            track: t,
            name,
            args,
        },
        Ev::End { .. } => Ev::End { track: t },
        Ev::Counter { value, .. } => Ev::Counter { track: t, value },
        Ev::Instant { name, .. } => Ev::Instant { track: t, name },
    }
}

/// Track ids of run `r`: unique across runs, stable across writes.
fn uuid(run: usize, local: u64) -> u64 {
    ((run as u64 + 1) << 40) | local
}

/// Writes the descriptors and events of one run; returns its events.
fn run_events(out: &mut Out, ri: usize, run: &RunTimeline) -> std::io::Result<Vec<(u64, Ev)>> {
    let root = uuid(ri, 0);
    out.track(root, None, &run.label, ri as i64, None)?;
    let mut evs: Vec<(u64, Ev)> = Vec::new();
    cpu_tracks(out, ri, run, &mut evs)?;
    counter_tracks(out, ri, run, &mut evs)?;
    if run.timeline.truncated() {
        out.n.truncated_runs += 1;
        let at = evs.iter().map(|e| e.0).max().unwrap_or(0);
        evs.push((
            at,
            Ev::Instant {
                track: root,
                name: format!(
                    "timeline truncated here: {} records (raise --timeline-max)",
                    run.timeline.records().len()
                ),
            },
        ));
    }
    Ok(evs)
}

/// One track per simulated CPU (more where its slices overlap) under the
/// run's root, with its slices.
fn cpu_tracks(
    out: &mut Out,
    ri: usize,
    run: &RunTimeline,
    evs: &mut Vec<(u64, Ev)>,
) -> std::io::Result<()> {
    let root = uuid(ri, 0);
    for (v, s) in slices(&run.timeline, run.timeline.nr_cpus())
        .into_iter()
        .enumerate()
    {
        for (li, lane) in lanes(s).into_iter().enumerate() {
            let t = uuid(ri, 1 + (v as u64) * 64 + li as u64);
            let name = if li == 0 {
                format!("vCPU {v}")
            } else {
                format!("vCPU {v} ({})", li + 1)
            };
            out.track(t, Some(root), &name, (v * 64 + li) as i64, None)?;
            out.n.slices += lane.len() as u64 / 2;
            evs.extend(lane.into_iter().map(|(ts, e)| (ts, set_track(e, t))));
        }
    }
    Ok(())
}

/// The counter tracks (each CPU's PCP `high` and `count` per zone, each
/// zone's free pages), declared in the order they first appear.
fn counter_tracks(
    out: &mut Out,
    ri: usize,
    run: &RunTimeline,
    evs: &mut Vec<(u64, Ev)>,
) -> std::io::Result<()> {
    let root = uuid(ri, 0);
    let zones = run.timeline.zone_names();
    let nz = zones.len().max(1) as u64;
    let mut declared = std::collections::BTreeSet::new();
    for r in run.timeline.records() {
        let (local, name, unit, at, value) = match *r {
            Record::Pcp {
                v,
                zone,
                at,
                count,
                high,
            } => {
                let base = (1 << 30) | ((u64::from(v.0) * nz + u64::from(zone)) * 2);
                let z = zones.get(zone as usize).map_or("?", String::as_str);
                evs.push((
                    at.0,
                    Ev::Counter {
                        track: uuid(ri, base + 1),
                        value: i64::from(high),
                    },
                ));
                if declared.insert(base + 1) {
                    // Ranks are int32: counters after the vCPU tracks, in
                    // the order they first appear.
                    let rank = 100_000 + declared.len() as i64;
                    out.track(
                        uuid(ri, base + 1),
                        Some(root),
                        &format!("vCPU {} PCP high ({z})", v.0),
                        rank,
                        Some("pages"),
                    )?;
                }
                (
                    base,
                    format!("vCPU {} PCP count ({z})", v.0),
                    "pages",
                    at.0,
                    i64::from(count),
                )
            }
            Record::FreePages { zone, at, pages } => {
                let z = zones.get(zone as usize).map_or("?", String::as_str);
                (
                    (2 << 30) | u64::from(zone),
                    format!("free pages ({z})"),
                    "pages",
                    at.0,
                    pages as i64,
                )
            }
            _ => continue,
        };
        if declared.insert(local) {
            let rank = 100_000 + declared.len() as i64;
            out.track(uuid(ri, local), Some(root), &name, rank, Some(unit))?;
        }
        evs.push((
            at,
            Ev::Counter {
                track: uuid(ri, local),
                value,
            },
        ));
        out.n.counters += 1;
    }
    Ok(())
}

fn encode(out: &mut Out, ts: u64, e: &Ev) -> std::io::Result<()> {
    let mut te = Msg::default();
    match e {
        Ev::Begin { track, name, args } => {
            te.uint(TE_TYPE, TYPE_SLICE_BEGIN)
                .uint(TE_TRACK_UUID, *track)
                .str(TE_NAME, name);
            for (k, v) in args {
                let mut da = Msg::default();
                da.str(DA_NAME, k).uint(DA_UINT_VALUE, *v);
                te.msg(TE_DEBUG_ANNOTATIONS, &da);
            }
        }
        Ev::End { track } => {
            te.uint(TE_TYPE, TYPE_SLICE_END).uint(TE_TRACK_UUID, *track);
        }
        Ev::Counter { track, value } => {
            te.uint(TE_TYPE, TYPE_COUNTER)
                .uint(TE_TRACK_UUID, *track)
                .int(TE_COUNTER_VALUE, *value);
        }
        Ev::Instant { track, name } => {
            te.uint(TE_TYPE, TYPE_INSTANT)
                .uint(TE_TRACK_UUID, *track)
                .str(TE_NAME, name);
        }
    }
    out.packet(Some(ts), PKT_TRACK_EVENT, &te)
}

/// Writes the timelines of `runs` as one Perfetto trace.
pub fn write(runs: &[RunTimeline], w: &mut dyn Write) -> std::io::Result<Written> {
    let mut out = Out {
        w,
        n: Written::default(),
    };
    let mut evs = Vec::new();
    for (ri, run) in runs.iter().enumerate() {
        evs.extend(run_events(&mut out, ri, run)?);
    }
    // Time order; a stable sort keeps each track's own order at equal times
    // (an end before the next begin, outer begins before inner ones).
    evs.sort_by_key(|e| e.0);
    for (ts, e) in &evs {
        encode(&mut out, *ts, e)?;
    }
    Ok(out.n)
}
