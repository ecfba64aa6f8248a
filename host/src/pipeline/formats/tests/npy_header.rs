use super::super::npy::{parse_header, Dtype, Element, NpyArray};
use super::super::Bytes;
use super::{f64s, npy_file, npy_with_header};

fn array(bytes: Vec<u8>) -> NpyArray {
    NpyArray::new(Bytes::from_vec(bytes)).unwrap()
}

#[test]
fn reads_headers_of_every_version_and_numpy_spelling() {
    let data = 7i32.to_le_bytes();
    let v1 = parse_header(&npy_file("<i4", false, "(1,)", &data)).unwrap();
    assert_eq!(
        (v1.version, v1.data_offset, v1.shape.clone()),
        ((1, 0), 128, vec![1])
    );
    // numpy's own v1 header for zeros((2, 3), '<f4'), byte for byte.
    let mut numpy =
        b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
            .to_vec();
    numpy.resize(127, b' ');
    numpy.push(b'\n');
    assert_eq!(npy_file("<f4", false, "(2, 3)", &[]), numpy);

    for major in [2, 3] {
        let file = npy_with_header(
            major,
            "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }",
            &data,
        );
        let header = parse_header(&file).unwrap();
        assert_eq!((header.version.0, header.data_offset), (major, 128));
        assert_eq!(f64s(&array(file).item(0).unwrap()), [7.0]);
    }
    // Python 2 long integers, double quotes, other key order, no trailing comma, '?'.
    let odd = npy_with_header(
        1,
        "{\"shape\": (2L, 1L), 'fortran_order': False, 'descr': '?'}",
        &[1, 0],
    );
    let header = parse_header(&odd).unwrap();
    assert_eq!(header.shape, [2, 1]);
    assert_eq!(header.dtype.element, Element::Bool);
    // Header text only: the data may be missing when just the header is parsed.
    assert_eq!(
        parse_header(&npy_file("<f8", false, "(0, 5)", &[]))
            .unwrap()
            .shape,
        [0, 5]
    );
    let empty = array(npy_file("<f8", false, "(0, 5)", &[]));
    assert!(empty.is_empty());
    assert_eq!(empty.item_shape(), [5]);
    assert_eq!(
        Dtype {
            element: Element::U16,
            big_endian: true
        }
        .descr(),
        ">u2"
    );
    assert_eq!(
        Dtype {
            element: Element::U8,
            big_endian: false
        }
        .descr(),
        "|u1"
    );
}

#[test]
fn header_errors_say_what_is_wrong() {
    let h = |dict: &str| parse_header(&npy_with_header(1, dict, &[])).unwrap_err();
    let ok = "'fortran_order': False, 'shape': (1,)";
    let cases: Vec<(String, &str)> = vec![
        (h(&format!("{{'descr': [('a', '<i4')], {ok}}}")), "structured dtypes (a list as `descr`) are not supported"),
        (h(&format!("{{'descr': '<c8', {ok}}}")), "dtype `<c8` is not supported; supported: bool, int8/16/32/64, uint8/16/32/64, float16/32/64"),
        (h(&format!("{{'descr': '|O', {ok}}}")), "dtype `|O` is not supported (object arrays hold pickled Python objects); supported: bool, int8/16/32/64, uint8/16/32/64, float16/32/64"),
        (h(&format!("{{'descr': '<U5', {ok}}}")), "dtype `<U5` is not supported (strings: store them in a CSV file instead); supported: bool, int8/16/32/64, uint8/16/32/64, float16/32/64"),
        (h(&format!("{{'descr': 3, {ok}}}")), "header: `descr` is not a string"),
        (h("{'fortran_order': False, 'shape': (1,)}"), "header: missing key `descr`"),
        (h("{'descr': '<i4', 'shape': (1,)}"), "header: missing key `fortran_order`"),
        (h("{'descr': '<i4', 'fortran_order': False}"), "header: missing key `shape`"),
        (h("{'descr': '<i4', 'fortran_order': 0, 'shape': (1,)}"), "header: `fortran_order` is not True or False"),
        (h("{'descr': '<i4', 'fortran_order': False, 'shape': [1]}"), "header: `shape` is not a tuple"),
        (h("{'descr': '<i4', 'fortran_order': False, 'shape': (-1,)}"), "header: negative dimension -1 in `shape`"),
        (h("{'descr': '<i4', 'fortran_order': False, 'shape': ('a',)}"), "header: `shape` holds something other than integers"),
        (h(&format!("{{'descr': '<i4', {ok}, 'x': 1}}")), "header: unexpected key `x`"),
        (h(&format!("{{'descr': '<i4', 'descr': '<i4', {ok}}}")), "header: key `descr` appears twice"),
        (h(&format!("{{'descr': '<i4', {ok}}} junk")), "header: unexpected text after the dict at byte 56"),
        (h("('descr', 1)"), "header: expected a dict"),
        (h("{'descr': '<i4"), "header: unterminated string at byte 10"),
        (h("{'descr' '<i4'}"), "header: expected `:` at byte 9"),
        (h("{'descr': '<i4' 'x'}"), "header: expected `,` or `}` at byte 16"),
        (h("{'shape': (99999999999999999999,)}"), "header: integer out of range at byte 11"),
        (h("{'shape': (1, @)}"), "header: unexpected character at byte 14"),
        (h("{'shape': "), "header: unexpected end at byte 54"),
        (h(&format!("{{'s': {}1{}}}", "(".repeat(20), ")".repeat(20))), "header: nesting too deep at byte 14"),
    ];
    for (got, expected) in cases {
        assert_eq!(got, expected);
    }
    let short = |bytes: &[u8]| parse_header(bytes).unwrap_err();
    assert_eq!(
        short(b""),
        "not an NPY file: it does not start with the magic string \\x93NUMPY"
    );
    assert_eq!(short(b"PK\x03\x04 and more"), "not an NPY file: it does not start with the magic string \\x93NUMPY (it is a zip archive: an .npz file needs `type = \"npz\"`)");
    assert_eq!(
        short(b"\x93NUMPY\x01"),
        "truncated: the file ends after 7 bytes, inside the version"
    );
    assert_eq!(
        short(b"\x93NUMPY\x04\x01\x00\x00"),
        "unsupported NPY format version 4.1 (this reader knows 1.0, 2.0 and 3.0)"
    );
    assert_eq!(
        short(b"\x93NUMPY\x02\x00\x10\x00"),
        "truncated: the file ends after 10 bytes, inside the header length"
    );
    assert_eq!(
        short(b"\x93NUMPY\x01\x00\x10\x00{'descr'"),
        "truncated: the header declares 16 bytes but the file ends after 18"
    );
    assert_eq!(
        short(b"\x93NUMPY\x03\x00\x02\x00\x00\x00\xff\xfe"),
        "header is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0"
    );
}
