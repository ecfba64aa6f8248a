//! Any bytes given to the IDX parser give an array or an error, never a panic; a parsed array
//! must hand out every item it claims to have.
#![no_main]

use fe_host::pipeline::idx;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(array) = idx::parse(data) {
        // Bounded so a header declaring millions of empty items does not stall the fuzzer.
        for index in 0..array.len().min(64) {
            assert!(array.item(index).is_ok());
        }
        assert!(array.item(array.len()).is_err());
    }
});
