//! Any stream of address-space events (decoded from the bytes by
//! `trace::aspace::replay_fuzz_input`) replays under three kernels without a
//! panic in the replay or the model.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = trace::aspace::replay_fuzz_input(data);
});
