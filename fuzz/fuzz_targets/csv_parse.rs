//! Any bytes given to the CSV parser, with any delimiter and header setting, give a table or
//! an error, never a panic; a parsed table is rectangular.
#![no_main]

use fe_host::pipeline::formats::csv::{parse, Column, CsvOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the options, so one corpus explores them all.
    let Some((&choice, input)) = data.split_first() else {
        return;
    };
    let options = CsvOptions {
        delimiter: [b',', b';', b'\t', b'|'][usize::from(choice & 3)],
        header: choice & 4 == 0,
        columns: (choice & 8 != 0).then(|| vec!["0".to_owned()]),
        paths: if choice & 16 != 0 {
            vec!["0".to_owned()]
        } else {
            Vec::new()
        },
    };
    if let Ok(table) = parse(input, &options) {
        assert_eq!(table.names.len(), table.columns.len());
        for column in &table.columns {
            let rows = match column {
                Column::Int(v) => v.len(),
                Column::Float(v) => v.len(),
                Column::Text(v) => v.len(),
            };
            assert_eq!(rows, table.rows);
        }
    }
});
