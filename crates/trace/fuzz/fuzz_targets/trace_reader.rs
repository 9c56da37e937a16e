//! Any bytes given to the mmlab trace reader give events and then at most one
//! error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reader) = trace::TraceReader::new(data) {
        for item in reader {
            if item.is_err() {
                break;
            }
        }
    }
});
