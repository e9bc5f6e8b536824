//! Fuzz target: `kestrel_model::fuzz_entry::chat_template` (see that module for the input format).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Ok or a typed error are both fine; a panic, hang or huge allocation is a finding.
    let _ = kestrel_model::fuzz_entry::chat_template(data);
});
