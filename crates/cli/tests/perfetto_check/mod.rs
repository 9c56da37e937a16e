//! Decodes a `--timeline` file with Perfetto's own protos (the
//! `perfetto_protos` crate, generated from Perfetto's `.proto` files) with
//! no field left unknown, and checks it against what Perfetto's trace
//! processor requires of TrackEvent traces: every event on a declared
//! track, slices balanced and nested per track in time order, counters only
//! on counter tracks. Shared by tests/timeline.rs and tests/results_doc.rs.

use perfetto_protos::trace::Trace;
use perfetto_protos::trace_packet::TracePacket;
use perfetto_protos::track_event::track_event::Type;
use protobuf::Message;
use std::collections::BTreeMap;
use std::path::Path;

/// A track as declared.
#[derive(Debug)]
pub struct Track {
    pub name: String,
    pub parent: Option<u64>,
    pub counter: bool,
}

/// What a checked timeline holds.
#[derive(Debug, Default)]
pub struct Summary {
    pub tracks: BTreeMap<u64, Track>,
    /// Slice names and how often each began.
    pub slices: BTreeMap<String, u64>,
    pub counters: u64,
    pub instants: Vec<String>,
    pub first_ts: u64,
    pub last_ts: u64,
}

fn no_unknown_fields(what: &str, m: &dyn protobuf::MessageDyn) {
    assert!(
        m.special_fields_dyn()
            .unknown_fields()
            .iter()
            .next()
            .is_none(),
        "{what} has fields Perfetto's protos do not define"
    );
}

/// Decodes and checks a timeline file (see the module doc).
#[allow(dead_code)]
pub fn check(path: &Path) -> Summary {
    check_bytes(&std::fs::read(path).expect("timeline file"))
}

/// As [`check`], of a timeline already read.
#[allow(dead_code)]
pub fn check_bytes(bytes: &[u8]) -> Summary {
    let trace = Trace::parse_from_bytes(bytes).expect("a Perfetto Trace message");
    no_unknown_fields("Trace", &trace);
    let mut s = Summary {
        first_ts: u64::MAX,
        ..Summary::default()
    };
    // Per track: the stack of open slices' names and the last timestamp.
    let mut open: BTreeMap<u64, (Vec<String>, u64)> = BTreeMap::new();
    for (i, p) in trace.packet.iter().enumerate() {
        no_unknown_fields("TracePacket", p);
        assert!(
            p.has_trusted_packet_sequence_id(),
            "packet {i} has no sequence"
        );
        if p.has_track_descriptor() {
            declare(&mut s, p);
        } else if p.has_track_event() {
            event(&mut s, &mut open, i, p);
        } else {
            panic!("packet {i} is neither a track descriptor nor a track event");
        }
    }
    for (t, (stack, _)) in &open {
        assert!(
            stack.is_empty(),
            "track {t} ends with open slices {stack:?}"
        );
    }
    for (u, t) in &s.tracks {
        if let Some(p) = t.parent {
            assert!(
                s.tracks.contains_key(&p),
                "track {u}'s parent {p} is not declared"
            );
        }
    }
    s
}

fn declare(s: &mut Summary, p: &TracePacket) {
    let d = p.track_descriptor();
    no_unknown_fields("TrackDescriptor", d);
    if let Some(c) = d.counter.as_ref() {
        no_unknown_fields("CounterDescriptor", c);
    }
    assert!(d.has_uuid() && d.has_name(), "{d:?}");
    let t = Track {
        name: d.name().to_string(),
        parent: d.has_parent_uuid().then(|| d.parent_uuid()),
        counter: d.counter.is_some(),
    };
    assert!(
        s.tracks.insert(d.uuid(), t).is_none(),
        "track {} declared twice",
        d.uuid()
    );
}

fn event(s: &mut Summary, open: &mut BTreeMap<u64, (Vec<String>, u64)>, i: usize, p: &TracePacket) {
    let e = p.track_event();
    no_unknown_fields("TrackEvent", e);
    for a in &e.debug_annotations {
        no_unknown_fields("DebugAnnotation", a);
    }
    assert!(p.has_timestamp(), "event {i} has no timestamp");
    let ts = p.timestamp();
    s.first_ts = s.first_ts.min(ts);
    s.last_ts = s.last_ts.max(ts);
    let track = s
        .tracks
        .get(&e.track_uuid())
        .unwrap_or_else(|| panic!("event {i} on undeclared track {}", e.track_uuid()));
    let (stack, last) = open.entry(e.track_uuid()).or_default();
    assert!(
        ts >= *last,
        "event {i} goes back in time on track {}",
        track.name
    );
    *last = ts;
    match e.type_() {
        Type::TYPE_SLICE_BEGIN => {
            assert!(!track.counter, "slice on counter track {}", track.name);
            assert!(e.has_name() && !e.name().is_empty(), "unnamed slice");
            stack.push(e.name().to_string());
            *s.slices.entry(e.name().to_string()).or_default() += 1;
        }
        Type::TYPE_SLICE_END => {
            assert!(stack.pop().is_some(), "end without begin on {}", track.name);
        }
        Type::TYPE_COUNTER => {
            assert!(track.counter, "counter value on slice track {}", track.name);
            assert!(e.has_counter_value());
            assert!(
                e.counter_value() >= 0,
                "negative {} on {}",
                e.counter_value(),
                track.name
            );
            s.counters += 1;
        }
        Type::TYPE_INSTANT => s.instants.push(e.name().to_string()),
        Type::TYPE_UNSPECIFIED => panic!("event {i} has no type"),
    }
}
