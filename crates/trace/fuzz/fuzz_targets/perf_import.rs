//! Any bytes given to the perf.data importer give a summary or an error,
//! never a panic.
#![no_main]

use std::io::Cursor;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = trace::perf::import_from(
        Cursor::new(data),
        Path::new("fuzz.perf.data"),
        "fuzz",
        Vec::new(),
        Path::new("fuzz.mmtrace"),
    );
});
