//! Random, truncated and bit-flipped input to both readers must give errors,
//! never panics. The inputs come from a fixed seed (xorshift64*, Vigna 2016),
//! so a failure reproduces.

use std::io::Cursor;
use std::path::Path;

use trace::event::{Event, EventKind, Header, Trailer};
use trace::{TraceReader, TraceWriter};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn valid_trace() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &Header::synthetic("robustness")).expect("vec");
    for i in 0..3000u64 {
        let kind = if i % 3 == 0 {
            EventKind::PageAlloc {
                pfn: i * 7,
                order: (i % 4) as u32,
                migratetype: 1,
                gfp_flags: 0xcc0,
            }
        } else if i % 3 == 1 {
            EventKind::Exec {
                pid: 5,
                filename: "/bin/sh".into(),
            }
        } else {
            EventKind::PageFaultUser {
                address: i << 12,
                ip: 0x401000,
                error_code: 6,
            }
        };
        w.write(&Event {
            ts_ns: i * 100,
            cpu: (i % 2) as u32,
            pid: 5,
            tid: 6,
            kind,
        })
        .expect("vec");
    }
    w.finish(&Trailer::default()).expect("vec").0
}

/// Reads everything; returns (events, whether it ended in an error).
fn drain_trace(bytes: &[u8]) -> (usize, bool) {
    match TraceReader::new(bytes) {
        Err(_) => (0, true),
        Ok(r) => {
            let mut n = 0;
            for item in r {
                match item {
                    Ok(_) => n += 1,
                    Err(e) => {
                        assert!(!e.to_string().is_empty());
                        return (n, true);
                    }
                }
            }
            (n, false)
        }
    }
}

fn import(bytes: &[u8]) -> bool {
    trace::perf::import_from(
        Cursor::new(bytes),
        Path::new("fuzz.perf.data"),
        "fuzz",
        Vec::new(),
        Path::new("o"),
    )
    .is_ok()
}

#[test]
fn trace_reader_survives_random_truncated_and_flipped_input() {
    let good = valid_trace();
    assert_eq!(drain_trace(&good), (3000, false));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..300 {
        let len = (rng.next() % 4096) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        assert!(drain_trace(&junk).1, "random bytes read as a whole trace");
        // Random bytes behind a valid magic and version exercise the framing.
        let mut framed = good[..12].to_vec();
        framed.extend_from_slice(&junk);
        assert!(drain_trace(&framed).1);
    }
    for cut in (0..good.len()).step_by(97) {
        let (n, err) = drain_trace(&good[..cut]);
        assert!(err, "a trace cut at {cut} read as whole");
        assert!(n <= 3000);
    }
    for _ in 0..300 {
        let mut bad = good.clone();
        let at = (rng.next() as usize) % bad.len();
        bad[at] ^= 1 << (rng.next() % 8);
        drain_trace(&bad);
    }
}

#[test]
fn perf_importer_survives_random_truncated_and_flipped_input() {
    let good =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kmem.perf.data"))
            .expect("fixture present");
    assert!(import(&good));
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for _ in 0..200 {
        let len = (rng.next() % 2048) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        assert!(!import(&junk), "random bytes imported");
        let mut framed = good[..16].to_vec();
        framed.extend_from_slice(&junk);
        assert!(!import(&framed));
    }
    for cut in (0..good.len()).step_by(211) {
        import(&good[..cut]);
    }
    for _ in 0..300 {
        let mut bad = good.clone();
        let at = (rng.next() as usize) % bad.len();
        bad[at] ^= 1 << (rng.next() % 8);
        import(&bad);
    }
}

/// Every input that crashed a fuzz target (`crates/trace/fuzz`), kept in
/// `tests/fixtures/fuzz/` named after its target, gives a result or an
/// error now.
#[test]
fn inputs_that_crashed_the_fuzzers_are_handled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("fuzz fixtures")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for path in names {
        let bytes = std::fs::read(&path).expect("read");
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        println!("{name}");
        if name.starts_with("perf_import-") {
            // A panic of the parser crate is caught and reported as this
            // error: the input must be refused before it gets there.
            if let Err(e) = trace::perf::import_from(
                Cursor::new(&bytes[..]),
                Path::new("fuzz.perf.data"),
                "fuzz",
                Vec::new(),
                Path::new("o"),
            ) {
                assert!(
                    !e.to_string().contains("parser failed"),
                    "{name}: the parser panicked: {e}"
                );
            }
        } else if name.starts_with("trace_reader-") {
            drain_trace(&bytes);
        } else if name.starts_with("aspace_replay-") {
            trace::aspace::replay_fuzz_input(&bytes);
        } else {
            panic!("{name}: not named after a fuzz target");
        }
    }
}
