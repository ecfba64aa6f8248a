//! Any bytes given to the NPY header parser give a header or an error, never a panic; when
//! the header parses, the whole-file check and reading samples must not panic either.
#![no_main]

use fe_host::pipeline::formats::npy::{parse_header, NpyArray};
use fe_host::pipeline::formats::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = parse_header(data) else {
        return;
    };
    assert!(header.data_offset <= data.len());
    if let Ok(array) = NpyArray::new(Bytes::from_vec(data.to_vec())) {
        for index in 0..array.len().min(16) {
            // A uint64 value above i64::MAX is a legitimate error, not a crash.
            let _ = array.item(index);
        }
        assert!(array.item(array.len()).is_err());
    }
});
