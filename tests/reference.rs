//! The manifest reference (docs/manifest.md) against the schema the host really reads: a key
//! added to the schema without a row, or a row left behind by a removed key, fails here.

use fe_host::manifest::reference::{schema_keys, OPEN_TABLE_KEYS};

use crate::util::root;

/// The key of each table row of the reference: its first cell, in backticks.
fn documented_keys() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("docs/manifest.md")).expect("docs/manifest.md");
    text.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect()
}

#[test]
fn every_schema_key_has_a_row_in_the_manifest_reference() {
    let documented = documented_keys();
    let schema = schema_keys();
    assert!(
        schema.len() > 40,
        "the schema walk found too little: {schema:?}"
    );
    let missing: Vec<&str> = schema
        .iter()
        .map(|k| k.path.as_str())
        .chain(OPEN_TABLE_KEYS.iter().copied())
        .filter(|key| !documented.iter().any(|d| d == key))
        .collect();
    assert!(
        missing.is_empty(),
        "keys with no row in docs/manifest.md: {missing:?}"
    );
}

#[test]
fn every_row_of_the_manifest_reference_names_a_key_the_host_reads() {
    let schema = schema_keys();
    let stale: Vec<String> = documented_keys()
        .into_iter()
        .filter(|key| {
            !schema.iter().any(|k| &k.path == key) && !OPEN_TABLE_KEYS.contains(&key.as_str())
        })
        .collect();
    assert!(
        stale.is_empty(),
        "rows for keys the host does not read: {stale:?}"
    );
    // The README points readers at it.
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    assert_contains!(readme, "(docs/manifest.md)");
}
