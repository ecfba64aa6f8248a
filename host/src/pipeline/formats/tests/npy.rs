use tch::Kind;

use super::super::npy::{ArraySource, Dtype, Element, NpyArray, NpyConfig};
use super::super::{Bytes, Source};
use super::{f64s, i64s, npy_file, npy_with_header, open_error, write};

fn array(bytes: Vec<u8>) -> NpyArray {
    NpyArray::new(Bytes::from_vec(bytes)).unwrap()
}

fn error(bytes: Vec<u8>) -> String {
    NpyArray::new(Bytes::from_vec(bytes)).err().unwrap()
}

/// One sample of each dtype, written in `order`, read back: (descr code, bytes of the values
/// in little-endian order, width, expected kind, expected values).
#[allow(clippy::type_complexity)]
fn cases() -> Vec<(&'static str, Vec<u8>, usize, Kind, Vec<f64>)> {
    fn le<const N: usize>(values: &[[u8; N]]) -> Vec<u8> {
        values.iter().flatten().copied().collect()
    }
    vec![
        ("b1", vec![0, 1, 7], 1, Kind::Bool, vec![0.0, 1.0, 1.0]),
        (
            "i1",
            vec![0xff, 5, 0x80],
            1,
            Kind::Int8,
            vec![-1.0, 5.0, -128.0],
        ),
        ("u1", vec![255, 0, 9], 1, Kind::Uint8, vec![255.0, 0.0, 9.0]),
        (
            "i2",
            le(&[
                (-300i16).to_le_bytes(),
                7i16.to_le_bytes(),
                i16::MIN.to_le_bytes(),
            ]),
            2,
            Kind::Int16,
            vec![-300.0, 7.0, -32768.0],
        ),
        (
            "u2",
            le(&[
                65535u16.to_le_bytes(),
                1u16.to_le_bytes(),
                40000u16.to_le_bytes(),
            ]),
            2,
            Kind::Int,
            vec![65535.0, 1.0, 40000.0],
        ),
        (
            "i4",
            le(&[
                (-70000i32).to_le_bytes(),
                0i32.to_le_bytes(),
                i32::MAX.to_le_bytes(),
            ]),
            4,
            Kind::Int,
            vec![-70000.0, 0.0, 2147483647.0],
        ),
        (
            "u4",
            le(&[
                4_000_000_000u32.to_le_bytes(),
                3u32.to_le_bytes(),
                u32::MAX.to_le_bytes(),
            ]),
            4,
            Kind::Int64,
            vec![4e9, 3.0, 4294967295.0],
        ),
        (
            "i8",
            le(&[
                (-(1i64 << 40)).to_le_bytes(),
                2i64.to_le_bytes(),
                1i64.to_le_bytes(),
            ]),
            8,
            Kind::Int64,
            vec![-1099511627776.0, 2.0, 1.0],
        ),
        (
            "u8",
            le(&[
                (1u64 << 40).to_le_bytes(),
                0u64.to_le_bytes(),
                12u64.to_le_bytes(),
            ]),
            8,
            Kind::Int64,
            vec![1099511627776.0, 0.0, 12.0],
        ),
        // 1.5 = 0x3e00, -2 = 0xc000, 65504 (the largest half) = 0x7bff.
        (
            "f2",
            le(&[
                0x3e00u16.to_le_bytes(),
                0xc000u16.to_le_bytes(),
                0x7bffu16.to_le_bytes(),
            ]),
            2,
            Kind::Half,
            vec![1.5, -2.0, 65504.0],
        ),
        (
            "f4",
            le(&[
                1.25f32.to_le_bytes(),
                (-0.5f32).to_le_bytes(),
                1e30f32.to_le_bytes(),
            ]),
            4,
            Kind::Float,
            vec![1.25, -0.5, 1e30f32 as f64],
        ),
        (
            "f8",
            le(&[
                std::f64::consts::PI.to_le_bytes(),
                (-1e-300f64).to_le_bytes(),
                0f64.to_le_bytes(),
            ]),
            8,
            Kind::Double,
            vec![std::f64::consts::PI, -1e-300, 0.0],
        ),
    ]
}

#[test]
fn reads_every_dtype_in_both_byte_orders() {
    for (code, little, width, kind, expected) in cases() {
        let big: Vec<u8> = little
            .chunks(width)
            .flat_map(|c| c.iter().rev().copied().collect::<Vec<_>>())
            .collect();
        let orders: &[(&str, &Vec<u8>)] = if width == 1 {
            &[("|", &little), ("<", &little), (">", &little)]
        } else {
            &[("<", &little), (">", &big)]
        };
        for (order, data) in orders {
            let descr = format!("{order}{code}");
            let a = array(npy_file(&descr, false, "(3,)", data));
            assert_eq!(a.len(), 3, "{descr}");
            assert_eq!(a.item_shape(), [] as [i64; 0]);
            let all = a.items(&[0, 1, 2]).unwrap();
            assert_eq!((all.kind(), all.size()), (kind, vec![3]), "{descr}");
            assert_eq!(f64s(&all), expected, "{descr}");
            let one = a.item(2).unwrap();
            assert_eq!((one.kind(), one.size()), (kind, vec![]), "{descr}");
            assert_eq!(f64s(&one), expected[2..], "{descr}");
        }
    }
}

#[test]
fn wide_integers_keep_every_bit() {
    let data: Vec<u8> = [i64::MIN, i64::MAX]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    assert_eq!(
        i64s(
            &array(npy_file(">i8", false, "(2,)", &data))
                .items(&[0, 1])
                .unwrap()
        ),
        [i64::MIN, i64::MAX]
    );
    let data: Vec<u8> = [i64::MAX as u64, 5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(
        i64s(
            &array(npy_file("<u8", false, "(2,)", &data))
                .items(&[0, 1])
                .unwrap()
        ),
        [i64::MAX, 5]
    );
}

#[test]
fn uint64_beyond_int64_fails_the_sample_that_holds_it() {
    let data: Vec<u8> = [1u64, u64::MAX]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let a = array(npy_file("<u8", false, "(2,)", &data));
    assert_eq!(i64s(&a.item(0).unwrap()), [1]);
    assert_eq!(
        a.item(1).unwrap_err(),
        "sample 1: uint64 value 18446744073709551615 does not fit in int64, the kind uint64 arrays are read as"
    );
    assert!(a
        .items(&[0, 1])
        .unwrap_err()
        .starts_with("sample 1: uint64 value"));
}

#[test]
fn samples_are_rows_along_axis_0() {
    let data: Vec<u8> = (0..12).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let a = array(npy_file("<f4", false, "(3, 2, 2)", &data));
    assert_eq!((a.len(), a.item_shape()), (3, &[2i64, 2][..]));
    let one = a.item(1).unwrap();
    assert_eq!(one.size(), [2, 2]);
    assert_eq!(f64s(&one), [4.0, 5.0, 6.0, 7.0]);
    let picked = a.items(&[2, 0, 2]).unwrap();
    assert_eq!(picked.size(), [3, 2, 2]);
    assert_eq!(
        f64s(&picked),
        [8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0]
    );
    assert_eq!(a.items(&[]).unwrap().size(), [0, 2, 2]);
    assert_eq!(
        a.item(3).unwrap_err(),
        "sample 3: out of range (the array has 3)"
    );
}

#[test]
fn fortran_order_gives_the_same_samples_as_c_order() {
    // a[i][j] = 10 i + j, shape (2, 3), stored column by column.
    let mut data = Vec::new();
    for j in 0..3i16 {
        for i in 0..2i16 {
            data.extend_from_slice(&(10 * i + j).to_le_bytes());
        }
    }
    let a = array(npy_file("<i2", true, "(2, 3)", &data));
    assert_eq!(f64s(&a.item(0).unwrap()), [0.0, 1.0, 2.0]);
    assert_eq!(f64s(&a.item(1).unwrap()), [10.0, 11.0, 12.0]);
    assert_eq!(
        f64s(&a.items(&[1, 0]).unwrap()),
        [10.0, 11.0, 12.0, 0.0, 1.0, 2.0]
    );

    // Written by numpy: asfortranarray(arange(24, dtype='>i4').reshape(2, 3, 4)).
    let numpy = array(include_bytes!("fixtures/fortran.npy").to_vec());
    assert!(numpy.header().fortran_order);
    assert_eq!(
        numpy.header().dtype,
        Dtype {
            element: Element::I32,
            big_endian: true
        }
    );
    let second = numpy.item(1).unwrap();
    assert_eq!((second.kind(), second.size()), (Kind::Int, vec![3, 4]));
    assert_eq!(f64s(&second), (12..24).map(f64::from).collect::<Vec<_>>());
    let both = numpy.items(&[0, 1]).unwrap();
    assert_eq!(f64s(&both), (0..24).map(f64::from).collect::<Vec<_>>());
}

#[test]
fn data_errors_say_what_is_wrong() {
    assert_eq!(
        error(npy_file("<f4", false, "(2, 3)", &[0; 20])),
        "truncated: header says shape (2, 3) of <f4 (24 bytes of data) but there are 20 bytes after the header"
    );
    assert_eq!(
        error(npy_file("|u1", false, "(2,)", &[1, 2, 3])),
        "1 unexpected bytes after the data the header declares"
    );
    assert_eq!(
        error(npy_file("<f8", false, "()", &[0; 8])),
        "the array is a single scalar (shape ()); samples are taken along axis 0"
    );
    assert_eq!(
        error(npy_file("<f8", false, "(4611686018427387904, 4)", &[])),
        "shape (4611686018427387904, 4) is too large"
    );
    // No data at all, yet a sample would not fit in memory.
    assert_eq!(
        error(npy_file("<f8", false, "(0, 4611686018427387904, 4)", &[])),
        "shape (0, 4611686018427387904, 4) is too large"
    );
    let huge_empty = array(npy_file("<u2", false, "(0, 4611686018427387904)", &[]));
    assert_eq!(
        huge_empty.items(&[]).unwrap().size(),
        [0, 4611686018427387904]
    );
}

#[test]
fn npy_source_maps_files_and_checks_their_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let x: Vec<u8> = (0..6).flat_map(|v| (v as f32).to_le_bytes()).collect();
    write(dir.path(), "x.npy", &npy_file("<f4", false, "(3, 2)", &x));
    let y: Vec<u8> = [4i64, 5, 6].iter().flat_map(|v| v.to_be_bytes()).collect();
    write(
        dir.path(),
        "data/y.npy",
        &npy_file(">i8", false, "(3,)", &y),
    );
    write(
        dir.path(),
        "short.npy",
        &npy_file(">i8", false, "(2,)", &y[..16]),
    );

    let config: NpyConfig =
        fe_plugin_api::parse_config("files = { y = 'data/y.npy', x = 'x.npy' }").unwrap();
    let source = ArraySource::open_npy(&config, dir.path()).unwrap();
    assert_eq!(source.keys(), ["x", "y"]);
    assert_eq!(source.len(), 3);
    let sample = source.get(2).unwrap();
    assert_eq!(
        (sample[0].size(), f64s(&sample[0])),
        (vec![2], vec![4.0, 5.0])
    );
    assert_eq!(i64s(&sample[1]), [6]);
    let batch = source.get_batch(&[1, 0]).unwrap();
    assert_eq!((batch[0].size(), batch[1].size()), (vec![2, 2], vec![2]));
    assert_eq!(i64s(&batch[1]), [5, 4]);
    assert_eq!(
        source.get(3).unwrap_err(),
        "key `x`: sample 3: out of range (the array has 3)"
    );

    let d = dir.path().display();
    assert_eq!(
        open_error("npy", "files = { x = 'x.npy', y = 'short.npy' }", dir.path()),
        format!("{d}/short.npy: `y` ({d}/short.npy) has 2 samples along axis 0 but `x` ({d}/x.npy) has 3; every key needs one sample per row")
    );
    assert_eq!(
        open_error("npy", "files = { x = 'nope.npy' }", dir.path()),
        format!("{d}/nope.npy: cannot read: No such file or directory (os error 2)")
    );
    write(dir.path(), "empty.npy", b"");
    assert_eq!(
        open_error("npy", "files = { x = 'empty.npy' }", dir.path()),
        format!(
            "{d}/empty.npy: not an NPY file: it does not start with the magic string \\x93NUMPY"
        )
    );
    assert_eq!(open_error("npy", "", dir.path()), ": missing field `files`");
    assert_eq!(
        open_error("npy", "files = { x = 3 }", dir.path())
            .split(':')
            .next(),
        Some("files.x")
    );
}

/// What the `npy_header` fuzz target checks, over every truncation and many byte changes of
/// real files: an error or a value, never a panic.
#[test]
fn damaged_files_give_errors_not_panics() {
    let x: Vec<u8> = (0..6).flat_map(|v| (v as u16).to_be_bytes()).collect();
    let files = [
        include_bytes!("fixtures/fortran.npy").to_vec(),
        npy_with_header(
            2,
            "{'descr': '>u2', 'fortran_order': True, 'shape': (3, 2), }",
            &x,
        ),
        npy_file("<u8", false, "(2,)", &[0xff; 16]),
    ];
    let read_all = |bytes: Vec<u8>| {
        if let Ok(a) = NpyArray::new(Bytes::from_vec(bytes)) {
            for i in 0..a.len().min(8) {
                let _ = a.item(i);
            }
            let _ = a.items(&(0..a.len().min(8)).collect::<Vec<_>>());
            assert!(a.item(a.len()).is_err());
        }
    };
    for file in &files {
        for len in 0..file.len() {
            assert!(NpyArray::new(Bytes::from_vec(file[..len].to_vec())).is_err());
        }
        for position in 0..file.len() {
            for value in [
                0x00,
                0xff,
                b'(',
                b'\'',
                b'9',
                b' ',
                b'-',
                file[position] ^ 1,
            ] {
                let mut damaged = file.clone();
                damaged[position] = value;
                read_all(damaged);
            }
        }
    }
}
