use tch::Kind;

use super::super::csv::{parse, Column, CsvConfig, CsvOptions, CsvSource};
use super::super::Source;
use super::{f64s, i64s, open_error, text, write};

fn table(input: &str) -> super::super::csv::CsvTable {
    parse(input.as_bytes(), &CsvOptions::default()).unwrap()
}

fn error(input: &[u8], options: &CsvOptions) -> String {
    parse(input, options).unwrap_err()
}

#[test]
fn infers_one_type_per_column() {
    let t = table("id,score,name,mixed,spaced\n1,0.5,cat,1,  3 \n-2,2,dog,x, +4\n30,-1e3,,2.5,5\n");
    assert_eq!(t.names, ["id", "score", "name", "mixed", "spaced"]);
    assert_eq!(t.rows, 3);
    assert_eq!(t.columns[0], Column::Int(vec![1, -2, 30]));
    assert_eq!(t.columns[1], Column::Float(vec![0.5, 2.0, -1000.0]));
    assert_eq!(
        t.columns[2],
        Column::Text(vec!["cat".into(), "dog".into(), "".into()])
    );
    assert_eq!(
        t.columns[3],
        Column::Text(vec!["1".into(), "x".into(), "2.5".into()])
    );
    assert_eq!(t.columns[4], Column::Int(vec![3, 4, 5]));
}

#[test]
fn empty_numbers_are_nan_and_make_a_float_column() {
    let t = table("a,b,c,d\n1,,inf,\n2,2.5,-Infinity,\n,1,nan,\n");
    let Column::Float(a) = &t.columns[0] else {
        panic!("{:?}", t.columns[0])
    };
    assert_eq!(a[..2], [1.0, 2.0]);
    assert!(a[2].is_nan());
    let Column::Float(b) = &t.columns[1] else {
        panic!("{:?}", t.columns[1])
    };
    assert!(b[0].is_nan());
    assert_eq!(b[1..], [2.5, 1.0]);
    let Column::Float(c) = &t.columns[2] else {
        panic!("{:?}", t.columns[2])
    };
    assert_eq!(c[..2], [f32::INFINITY, f32::NEG_INFINITY]);
    assert!(c[2].is_nan());
    // Nothing but empty values: no number to infer from, so text.
    assert_eq!(t.columns[3], Column::Text(vec!["".into(); 3]));
    // Integers too large for int64 are still numbers.
    assert_eq!(
        table("a\n99999999999999999999\n").columns[0],
        Column::Float(vec![1e20])
    );
}

#[test]
fn a_float_beyond_float32_is_an_error() {
    assert_eq!(
        error(b"a\n1\n\"1e39\"\n", &CsvOptions::default()),
        "line 3, column `a`: 1e39 is out of the range of float32, the type of numeric columns"
    );
}

#[test]
fn options_pick_delimiter_header_columns_and_paths() {
    let input = b"1;a.png;x\n2;b/c.png;y\n";
    let options = CsvOptions {
        delimiter: b';',
        header: false,
        columns: Some(vec!["1".into(), "0".into()]),
        paths: vec!["1".into()],
    };
    let t = parse(input, &options).unwrap();
    assert_eq!(t.names, ["1", "0"]);
    assert_eq!(
        t.columns,
        [
            Column::Text(vec!["a.png".into(), "b/c.png".into()]),
            Column::Int(vec![1, 2])
        ]
    );
    // A path column is text even when its values look like numbers.
    let numeric_paths = CsvOptions {
        paths: vec!["f".into()],
        ..CsvOptions::default()
    };
    assert_eq!(
        parse(b"f\n1\n2\n", &numeric_paths).unwrap().columns[0],
        Column::Text(vec!["1".into(), "2".into()])
    );
    // Quoting, a delimiter and a line break inside quotes, CRLF, blank lines, a BOM.
    let t = table("\u{feff}name,n\r\n\"a, \"\"b\"\"\nc\",1\r\n\r\nz,2\r\n");
    assert_eq!(t.names, ["name", "n"]);
    assert_eq!(
        t.columns,
        [
            Column::Text(vec!["a, \"b\"\nc".into(), "z".into()]),
            Column::Int(vec![1, 2])
        ]
    );
    // Header names are trimmed.
    assert_eq!(table(" a , b\n1,2\n").names, ["a", "b"]);
}

#[test]
fn errors_name_the_line_and_column() {
    let d = CsvOptions::default();
    assert_eq!(
        error(b"a,b\n1,2\n3\n", &d),
        "line 3: 1 fields, expected 2 (the header has 2)"
    );
    // Line numbers count the lines inside quoted fields.
    assert_eq!(
        error(b"a,b\n\"x\ny\",2\n1,2,3\n", &d),
        "line 4: 3 fields, expected 2 (the header has 2)"
    );
    let no_header = CsvOptions {
        header: false,
        ..CsvOptions::default()
    };
    assert_eq!(
        error(b"1,2\n3\n", &no_header),
        "line 2: 1 fields, expected 2 (the first row has 2)"
    );
    assert_eq!(
        error(b"a,b\n1,\xff\n", &d),
        "line 2, column `b`: not valid UTF-8 (invalid utf-8 sequence of 1 bytes from index 0)"
    );
    // Columns not asked for are not checked.
    let only_a = CsvOptions {
        columns: Some(vec!["a".into()]),
        ..CsvOptions::default()
    };
    assert_eq!(
        parse(b"a,b\n1,\xff\n", &only_a).unwrap().columns,
        [Column::Int(vec![1])]
    );
    assert_eq!(
        error(b"a,\xc3\n", &d),
        "line 1: the name of column 2 is not valid UTF-8 (incomplete utf-8 byte sequence from index 0)"
    );
    assert_eq!(
        error(b"a,,c\n1,2,3\n", &d),
        "line 1: column 2 has an empty name; every column needs one to be a key"
    );
    assert_eq!(
        error(b"a,b,a\n1,2,3\n", &d),
        "line 1: column `a` appears twice (columns 1 and 3)"
    );
    assert_eq!(error(b"", &d), "empty file: there is no header line");
    assert_eq!(error(b"\n\n", &no_header), "empty file: there are no rows");
    assert_eq!(
        error(b"a,b\n", &d),
        "no data rows: the file has only a header line"
    );
    let unknown = CsvOptions {
        columns: Some(vec!["b".into(), "z".into()]),
        ..CsvOptions::default()
    };
    assert_eq!(
        error(b"a,b\n1,2\n", &unknown),
        "`columns` names `z`, which is not a column of the file (its columns: a, b)"
    );
    let twice = CsvOptions {
        columns: Some(vec!["b".into(), "b".into()]),
        ..CsvOptions::default()
    };
    assert_eq!(error(b"a,b\n1,2\n", &twice), "`columns` names `b` twice");
    let path_unknown = CsvOptions {
        paths: vec!["img".into()],
        ..CsvOptions::default()
    };
    assert_eq!(
        error(b"a,b\n1,2\n", &path_unknown),
        "`paths` names `img`, which is not a column of the file (its columns: a, b)"
    );
    let path_unselected = CsvOptions {
        columns: Some(vec!["a".into()]),
        paths: vec!["b".into()],
        ..CsvOptions::default()
    };
    assert_eq!(
        error(b"a,b\n1,2\n", &path_unselected),
        "`paths` names `b`, which is not among `columns`"
    );
    let paths = CsvOptions {
        paths: vec!["b".into()],
        ..CsvOptions::default()
    };
    assert_eq!(
        error(b"a,b\n1,x\n2,\n", &paths),
        "line 3, column `b`: empty path"
    );
}

#[test]
fn source_gives_typed_samples_and_resolved_paths() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "sets/train.csv",
        b"img,label,weight,note\nimages/a.png,3,0.5,first\n/abs/b.png,1,2,second\n",
    );
    let config: CsvConfig =
        fe_plugin_api::parse_config("file = 'sets/train.csv'\npaths = ['img']").unwrap();
    assert_eq!(
        (config.delimiter, config.header, config.columns.is_none()),
        (b',', true, true)
    );
    let source = CsvSource::open(&config, dir.path()).unwrap();
    assert_eq!(source.keys(), ["img", "label", "weight", "note"]);
    assert_eq!(source.len(), 2);
    let row = source.get(0).unwrap();
    let base = dir.path().join("sets");
    assert_eq!(text(&row[0]), format!("{}/images/a.png", base.display()));
    assert_eq!(
        (row[1].kind(), row[1].size(), i64s(&row[1])),
        (Kind::Int64, vec![], vec![3])
    );
    assert_eq!(
        (row[2].kind(), row[2].size(), f64s(&row[2])),
        (Kind::Float, vec![], vec![0.5])
    );
    assert_eq!(text(&row[3]), "first");
    assert_eq!(
        text(&source.get(1).unwrap()[0]),
        "/abs/b.png",
        "absolute paths stay as they are"
    );

    let numbers: CsvConfig =
        fe_plugin_api::parse_config("file = 'sets/train.csv'\ncolumns = ['weight', 'label']")
            .unwrap();
    let numbers = CsvSource::open(&numbers, dir.path()).unwrap();
    let batch = numbers.get_batch(&[1, 0, 1]).unwrap();
    assert_eq!(
        (batch[0].kind(), batch[0].size(), f64s(&batch[0])),
        (Kind::Float, vec![3], vec![2.0, 0.5, 2.0])
    );
    assert_eq!((batch[1].size(), i64s(&batch[1])), (vec![3], vec![1, 3, 1]));
    assert!(source
        .get_batch(&[0, 1])
        .unwrap_err()
        .starts_with("cannot batch key `img`: text values of different lengths"));
    let same_length = source.get_batch(&[1, 1]).unwrap();
    assert_eq!(
        (same_length[3].kind(), same_length[3].size()),
        (Kind::Uint8, vec![2, 6])
    );
    assert_eq!(
        source.get(2).unwrap_err(),
        "sample 2 is out of range (the file has 2 rows)"
    );
    assert!(source.get_batch(&[0, 5]).is_err());

    let tsv: CsvConfig =
        fe_plugin_api::parse_config("file = 't.tsv'\ndelimiter = \"\\t\"\ncolumns = ['b']")
            .unwrap();
    write(dir.path(), "t.tsv", b"a\tb\n1\t2.5\n");
    let source = CsvSource::open(&tsv, dir.path()).unwrap();
    assert_eq!(
        (source.keys(), source.columns()),
        (&["b".to_owned()][..], &[Column::Float(vec![2.5])][..])
    );
}

#[test]
fn open_errors_name_the_file_or_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    write(dir.path(), "bad.csv", b"a,b\n1,2\n3,4,5\n");
    assert_eq!(
        open_error("csv", "file = 'bad.csv'", dir.path()),
        format!("{d}/bad.csv: line 3: 3 fields, expected 2 (the header has 2)")
    );
    assert_eq!(
        open_error("csv", "file = 'none.csv'", dir.path()),
        format!("{d}/none.csv: cannot read: No such file or directory (os error 2)")
    );
    assert_eq!(
        open_error("csv", "file = 'bad.csv'\ndelimiter = ';;'", dir.path()),
        "delimiter: the delimiter must be one ASCII character other than a quote or a line break, got \";;\""
    );
    assert!(
        open_error("csv", "file = 'bad.csv'\ndelimiter = '\"'", dir.path())
            .starts_with("delimiter: ")
    );
    assert!(
        open_error("csv", "file = 'bad.csv'\ndelimiter = 'é'", dir.path())
            .starts_with("delimiter: ")
    );
    assert!(
        open_error("csv", "file = 'bad.csv'\nheader = 'yes'", dir.path()).starts_with("header: ")
    );
    assert_eq!(open_error("csv", "", dir.path()), ": missing field `file`");
}

/// What the `csv_parse` fuzz target checks, over awkward inputs: an error or a value, never a
/// panic, and a parsed table is rectangular.
#[test]
fn awkward_inputs_give_errors_not_panics() {
    let inputs: [&[u8]; 10] = [
        b"\"",
        b"a\n\"",
        b",\n,",
        b"a,b\r\n1,\"2\r\n",
        b"\xef\xbb\xbf",
        b"a\n\xff\xfe",
        b"a\n1e400\n",
        b"a\n-\n",
        b"a\n\"\"\"\n",
        b"\n\n\na\n\n1\n",
    ];
    for input in inputs {
        for header in [true, false] {
            for paths in [vec![], vec!["a".to_owned()], vec!["0".to_owned()]] {
                let options = CsvOptions {
                    header,
                    paths,
                    ..CsvOptions::default()
                };
                if let Ok(t) = parse(input, &options) {
                    assert_eq!(t.names.len(), t.columns.len());
                    for column in &t.columns {
                        let rows = match column {
                            Column::Int(v) => v.len(),
                            Column::Float(v) => v.len(),
                            Column::Text(v) => v.len(),
                        };
                        assert_eq!(rows, t.rows, "{input:?}");
                    }
                }
            }
        }
    }
}
