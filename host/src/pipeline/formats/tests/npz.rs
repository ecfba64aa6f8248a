use std::io::Write;
use std::path::Path;

use tch::Kind;

use super::super::npz::{open, NpzConfig};
use super::super::Source;
use super::{f64s, i64s, npy_file, open_error, write};

fn config(text: &str) -> NpzConfig {
    fe_plugin_api::parse_config(text).unwrap()
}

/// A zip archive of `members` (name, bytes, deflated?).
fn archive(path: &Path, members: &[(&str, Vec<u8>, bool)]) {
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    for (name, bytes, deflated) in members {
        let method = if *deflated {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        zip.start_file(
            *name,
            zip::write::FileOptions::default().compression_method(method),
        )
        .unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

fn ints(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn reads_archives_numpy_wrote() {
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pipeline/formats/tests/fixtures");
    for (file, mapped) in [("savez.npz", true), ("savez_compressed.npz", false)] {
        let source = open(&config(&format!("file = '{file}'")), &fixtures).unwrap();
        assert_eq!(source.keys(), ["mask", "x", "y"], "{file}");
        assert_eq!(source.len(), 3);
        assert!(
            source.arrays().iter().all(|a| a.is_mapped() == mapped),
            "{file}"
        );
        let sample = source.get(1).unwrap();
        assert_eq!(
            (sample[0].kind(), f64s(&sample[0])),
            (Kind::Bool, vec![0.0])
        );
        assert_eq!(
            (sample[1].kind(), sample[1].size(), f64s(&sample[1])),
            (Kind::Int16, vec![2], vec![2.0, 3.0])
        );
        assert_eq!(
            (sample[2].kind(), f64s(&sample[2])),
            (Kind::Double, vec![-2.0])
        );
        let batch = source.get_batch(&[2, 0]).unwrap();
        assert_eq!(f64s(&batch[1]), [4.0, 5.0, 0.0, 1.0]);
        assert_eq!(f64s(&batch[2]), [3.25, 1.5]);
    }
}

#[test]
fn keys_pick_and_rename_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.npz");
    archive(
        &path,
        &[
            (
                "arr_0.npy",
                npy_file("<i4", false, "(2,)", &ints(&[10, 20])),
                false,
            ),
            (
                "arr_1.npy",
                npy_file("<i4", false, "(2, 1)", &ints(&[30, 40])),
                true,
            ),
            ("README.txt", b"not an array".to_vec(), false),
            ("sub/", Vec::new(), false),
        ],
    );
    let all = open(&config("file = 'd.npz'"), dir.path()).unwrap();
    assert_eq!(all.keys(), ["arr_0", "arr_1"]);
    assert_eq!(
        all.arrays()
            .iter()
            .map(|a| a.is_mapped())
            .collect::<Vec<_>>(),
        [true, false],
        "stored members are mapped in place, deflated ones decompressed"
    );
    let renamed = open(
        &config("file = 'd.npz'\nkeys = { y = 'arr_0.npy', x = 'arr_1' }"),
        dir.path(),
    )
    .unwrap();
    assert_eq!(renamed.keys(), ["x", "y"]);
    let sample = renamed.get(1).unwrap();
    assert_eq!((sample[0].size(), f64s(&sample[0])), (vec![1], vec![40.0]));
    assert_eq!(sample[1].size(), [] as [i64; 0]);
    assert_eq!(f64s(&sample[1]), [20.0]);
    let same_twice = open(
        &config("file = 'd.npz'\nkeys = { a = 'arr_0', b = 'arr_0' }"),
        dir.path(),
    )
    .unwrap();
    assert_eq!(
        i64s(&same_twice.get_batch(&[0]).unwrap()[0].to_kind(Kind::Int64)),
        [10]
    );
}

#[test]
fn errors_name_the_archive_and_the_member() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let err = |text: &str| open_error("npz", text, dir.path());
    archive(
        &dir.path().join("d.npz"),
        &[
            (
                "a.npy",
                npy_file("<i4", false, "(2,)", &ints(&[1, 2])),
                false,
            ),
            (
                "b.npy",
                npy_file("<i4", false, "(3,)", &ints(&[1, 2, 3])),
                true,
            ),
            ("bad.npy", npy_file("<i4", false, "(3,)", &ints(&[1])), true),
            ("odd.npy", npy_file("<c8", false, "(1,)", &[0; 8]), false),
        ],
    );
    assert_eq!(
        err("file = 'd.npz'\nkeys = { x = 'c' }"),
        format!("{d}/d.npz: `keys.x` names array `c`, which the archive does not hold (its arrays: a, b, bad, odd)")
    );
    assert_eq!(
        err("file = 'd.npz'\nkeys = { x = 'a', y = 'b' }"),
        format!("{d}/d.npz: array `b` has 3 samples along axis 0 but array `a` has 2; every key needs one sample per row")
    );
    assert_eq!(
        err("file = 'd.npz'\nkeys = { x = 'bad' }"),
        format!("{d}/d.npz: member `bad.npy`: truncated: header says shape (3,) of <i4 (12 bytes of data) but there are 4 bytes after the header")
    );
    assert!(
        err("file = 'd.npz'\nkeys = { x = 'odd' }").starts_with(&format!(
            "{d}/d.npz: member `odd.npy`: dtype `<c8` is not supported"
        ))
    );

    archive(
        &dir.path().join("none.npz"),
        &[("x.txt", b"1".to_vec(), false)],
    );
    assert_eq!(
        err("file = 'none.npz'"),
        format!("{d}/none.npz: the archive holds no .npy arrays")
    );
    archive(
        &dir.path().join("twice.npz"),
        &[("x.npy", vec![], false), ("x.npy", vec![], false)],
    );
    assert_eq!(
        err("file = 'twice.npz'"),
        format!("{d}/twice.npz: member `x.npy` appears twice in the archive")
    );
    write(
        dir.path(),
        "plain.npy",
        &npy_file("<i4", false, "(1,)", &ints(&[1])),
    );
    assert_eq!(
        err("file = 'plain.npy'"),
        format!("{d}/plain.npy: not an NPZ (zip) archive: it is a single NPY file, which needs `type = \"npy\"`")
    );
    write(dir.path(), "empty.npz", b"");
    assert_eq!(
        err("file = 'empty.npz'"),
        format!("{d}/empty.npz: not an NPZ (zip) archive: invalid Zip archive: Invalid zip header")
    );
    assert_eq!(
        err("file = 'missing.npz'"),
        format!("{d}/missing.npz: cannot read: No such file or directory (os error 2)")
    );
    assert_eq!(
        err("file = 'd.npz'\nkeys = ['a']").split(':').next(),
        Some("keys")
    );

    // A byte flipped inside the deflated member `b.npy`: the stream or its CRC no longer fits.
    let mut corrupt = std::fs::read(dir.path().join("d.npz")).unwrap();
    let start = corrupt.windows(5).position(|w| w == b"b.npy").unwrap() + 5 + 10;
    corrupt[start] ^= 0xff;
    write(dir.path(), "corrupt.npz", &corrupt);
    assert_eq!(
        err("file = 'corrupt.npz'\nkeys = { x = 'b' }"),
        format!("{d}/corrupt.npz: member `b.npy`: cannot decompress: corrupt deflate stream")
    );
    // A deflated member whose central-directory CRC does not match its contents.
    let mut bad_crc = std::fs::read(dir.path().join("d.npz")).unwrap();
    let central = bad_crc.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    let b_entry = central
        + bad_crc[central..]
            .windows(5)
            .position(|w| w == b"b.npy")
            .unwrap()
        - 46;
    bad_crc[b_entry + 16] ^= 0xff;
    write(dir.path(), "crc.npz", &bad_crc);
    assert_eq!(
        err("file = 'crc.npz'\nkeys = { x = 'b' }"),
        format!("{d}/crc.npz: member `b.npy`: cannot decompress: Invalid checksum")
    );
    // Only the members asked for are read.
    let a = open(&config("file = 'crc.npz'\nkeys = { x = 'a' }"), dir.path()).unwrap();
    assert_eq!(f64s(&a.get(1).unwrap()[0]), [2.0]);
}
