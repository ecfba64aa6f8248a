//! The manifest as a run read it, and its settings as flat `key = value` lines to compare.

use std::collections::BTreeMap;

use toml::{Table, Value};

use crate::manifest::Manifest;

/// `manifest`'s effective text (`--set` applied) with `run.epochs` as the run trains it
/// (`--epochs` included) and the `[run]` and `[pipeline]` defaults the run used written out,
/// so that a default changed in a later fe-host cannot change what a rerun computes.
pub fn text(manifest: &Manifest) -> String {
    let text = manifest.effective_text();
    let Ok(mut document) = text.parse::<Table>() else {
        return text;
    };
    let run = &manifest.run;
    let mut run_table = Table::new();
    run_table.insert("epochs".into(), Value::Integer(i64::from(run.epochs)));
    run_table.insert("seed".into(), integer(run.seed));
    run_table.insert("log_steps".into(), integer(run.log_steps));
    run_table.insert("warmup".into(), Value::Boolean(run.warmup));
    run_table.insert("deterministic".into(), Value::Boolean(run.deterministic));
    run_table.insert(
        "cudnn_benchmark".into(),
        Value::Boolean(run.cudnn_benchmark),
    );
    let pipeline = &manifest.pipeline;
    let mut pipeline_table = Table::new();
    pipeline_table.insert("shuffle".into(), Value::Boolean(pipeline.shuffle));
    pipeline_table.insert("drop_last".into(), Value::Boolean(pipeline.drop_last));
    write_out(&mut document, "run", run_table, &["epochs"]);
    write_out(&mut document, "pipeline", pipeline_table, &[]);
    match toml::to_string(&document) {
        Ok(resolved) => format!(
            "# The manifest as the run read it (`--set`, `--epochs` and defaults written out),\n\
             # recorded by fe-host {}. Relative paths resolve against {}.\n\n{resolved}",
            env!("CARGO_PKG_VERSION"),
            crate::record::absolute(&manifest.dir()).display()
        ),
        Err(_) => text,
    }
}

fn integer(value: u64) -> Value {
    Value::Integer(i64::try_from(value).unwrap_or(i64::MAX))
}

/// Inserts `values` into table `name` of `document` where missing (`replace`: always).
fn write_out(document: &mut Table, name: &str, values: Table, replace: &[&str]) {
    let entry = document
        .entry(name.to_owned())
        .or_insert_with(|| Value::Table(Table::new()));
    let Value::Table(table) = entry else { return };
    for (key, value) in values {
        if replace.contains(&key.as_str()) || !table.contains_key(&key) {
            table.insert(key, value);
        }
    }
}

/// Every leaf of a manifest's text as `key path → TOML value`: tables by `.`, arrays of
/// tables by their `name` when every entry has one (`models.lenet.optimizer.lr`, as `--set`
/// names them), else by index (`network.ops[2].inputs`).
pub fn flatten(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(document) = text.parse::<Table>() {
        flatten_table("", &document, &mut out);
    }
    out
}

fn flatten_table(prefix: &str, table: &Table, out: &mut BTreeMap<String, String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        flatten_value(&path, value, out);
    }
}

fn flatten_value(path: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Table(table) => flatten_table(path, table, out),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_table) => {
            let names: Option<Vec<&str>> = items
                .iter()
                .map(|item| item.get("name").and_then(Value::as_str))
                .collect();
            for (i, item) in items.iter().enumerate() {
                let at = match &names {
                    Some(names) => format!("{path}.{}", names[i]),
                    None => format!("{path}[{i}]"),
                };
                flatten_value(&at, item, out);
            }
        }
        other => {
            out.insert(path.to_owned(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_flatten_by_name_where_entries_have_one_else_by_index() {
        let flat = flatten(
            r#"
[run]
epochs = 2
[[models]]
name = "lenet"
optimizer = { type = "adam", lr = 0.001 }
[[network.ops]]
op = "ModelOp"
inputs = ["x"]
"#,
        );
        assert_eq!(flat["run.epochs"], "2");
        assert_eq!(flat["models.lenet.optimizer.lr"], "0.001");
        assert_eq!(flat["models.lenet.optimizer.type"], "\"adam\"");
        assert_eq!(flat["network.ops[0].inputs"], "[\"x\"]");
    }
}
