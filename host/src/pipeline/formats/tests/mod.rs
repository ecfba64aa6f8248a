//! Tests of the built-in dataset readers, on real files in temporary directories.
//!
//! `fixtures/` holds files written by numpy 2.4 itself, to check the readers against the real
//! thing and not only against our reading of the format:
//!
//! ```python
//! np.save("fortran.npy", np.asfortranarray(np.arange(24, dtype=">i4").reshape(2, 3, 4)))
//! x = np.arange(6, dtype="<i2").reshape(3, 2); y = np.array([1.5, -2.0, 3.25], ">f8")
//! m = np.array([True, False, True])
//! np.savez("savez.npz", x=x, y=y, mask=m)
//! np.savez_compressed("savez_compressed.npz", x=x, y=y, mask=m)
//! ```

mod csv;
mod folder;
mod npy;
mod npy_header;
mod npz;

use std::path::Path;

use tch::{Kind, Tensor};

use super::{open, Bytes, OpenError, KINDS};

/// An NPY v1 file, header padded to 64 bytes as numpy does.
pub(super) fn npy_file(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    npy_with_header(1, &dict, data)
}

/// An NPY file of format `major` with `dict` as its header text.
pub(super) fn npy_with_header(major: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let len_bytes = if major == 1 { 2 } else { 4 };
    let mut text = dict.to_owned();
    while (8 + len_bytes + text.len() + 1) % 64 != 0 {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Every value of a tensor as f64, row-major.
pub(super) fn f64s(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
}

/// Every value of an int64 tensor, exactly.
pub(super) fn i64s(t: &Tensor) -> Vec<i64> {
    assert_eq!(t.kind(), Kind::Int64);
    Vec::<i64>::try_from(t.flatten(0, -1)).unwrap()
}

/// The text a text tensor holds.
pub(super) fn text(t: &Tensor) -> String {
    fe_plugin_api::tensor_text(t).unwrap()
}

pub(super) fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

/// The message of a failed open: `Display` of a data error, `field: message` of a config one.
pub(super) fn open_error(kind: &str, config: &str, dir: &Path) -> String {
    match open(kind, config, dir).expect("a built-in kind") {
        Ok(_) => panic!("expected {kind} with {config:?} to fail"),
        Err(OpenError::Data(e)) => {
            assert_eq!(e.exit_code(), 5, "{e}");
            e.to_string()
        }
        Err(OpenError::Config(e)) => format!("{}: {}", e.field(), e.message()),
    }
}

#[test]
fn open_dispatches_only_the_builtin_kinds() {
    let dir = tempfile::tempdir().unwrap();
    assert!(open("idx", "", dir.path()).is_none());
    assert!(open("Csv", "", dir.path()).is_none());
    for (kind, doc) in KINDS {
        assert!(!doc.is_empty());
        // Every kind parses its config before touching files: an unknown field says so.
        let err = open_error(kind, "colour = 1", dir.path());
        assert!(
            err.starts_with("colour: unknown field `colour`"),
            "{kind}: {err}"
        );
    }
}

#[test]
fn bytes_slices_share_and_bound_the_storage() {
    let bytes = Bytes::from_vec(vec![1, 2, 3, 4, 5]);
    assert!(!bytes.is_mapped());
    let middle = bytes.slice(1, 4).unwrap();
    assert_eq!(middle.as_slice(), [2, 3, 4]);
    assert_eq!(middle.slice(1, 3).unwrap().as_slice(), [3, 4]);
    assert!(middle.slice(2, 4).is_none(), "past the end of the slice");
    assert!(middle.slice(2, 1).is_none());
    assert_eq!(middle.slice(3, 3).unwrap().as_slice(), [] as [u8; 0]);

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "f", b"abcdef");
    let mapped = Bytes::map(&dir.path().join("f")).unwrap();
    assert!(mapped.is_mapped());
    assert_eq!(mapped.slice(2, 5).unwrap().as_slice(), b"cde");
    write(dir.path(), "empty", b"");
    assert!(Bytes::map(&dir.path().join("empty"))
        .unwrap()
        .as_slice()
        .is_empty());
    let missing = Bytes::map(&dir.path().join("nope"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        missing.ends_with("nope: cannot read: No such file or directory (os error 2)"),
        "{missing}"
    );
    let is_dir = Bytes::map(dir.path()).err().unwrap().to_string();
    assert!(is_dir.ends_with(": is a directory, not a file"), "{is_dir}");
}

#[test]
fn tensor_from_bytes_refuses_a_length_that_does_not_match() {
    let t = super::tensor_from_bytes(&[1, 0, 0, 0, 2, 0, 0, 0], &[2], Kind::Int).unwrap();
    assert_eq!(t.size(), [2]);
    let err = super::tensor_from_bytes(&[1, 2, 3], &[2], Kind::Int).unwrap_err();
    assert!(err.starts_with("internal error: 3 bytes"), "{err}");
}

#[test]
fn stack_key_explains_ragged_text() {
    let a = fe_plugin_api::text_tensor("ab");
    let b = fe_plugin_api::text_tensor("abc");
    let err = super::stack_key("img", &[a.shallow_clone(), b]).unwrap_err();
    assert_eq!(
        err,
        "cannot batch key `img`: text values of different lengths ([2] and [3]); add a pipeline op that turns them into tensors of one shape"
    );
    let stacked = super::stack_key("img", &[a.shallow_clone(), a]).unwrap();
    assert_eq!(stacked.size(), [2, 2]);
    let err = super::stack_key(
        "v",
        &[
            Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)),
            Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)),
        ],
    )
    .unwrap_err();
    assert!(err.contains("values of different shapes"), "{err}");
}
