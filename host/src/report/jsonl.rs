//! The per-epoch log as JSON Lines: one object per line, so a run that stops mid-way leaves
//! every finished epoch readable, and tools can stream it.
//!
//! ```text
//! {"mode":"eval","epoch":3,"step":375,"values":{"accuracy":0.98,"ce":0.061}}
//! {"mode":"eval","epoch":3,"step":375,"instance":{"id":17,"values":{"ce":2.31,"y_pred":[0.1,0.9]}}}
//! ```
//!
//! Epoch rows carry every key logged that epoch (the run log, `run.log_dir/log.jsonl`, writes
//! such a row at every step that logged something, with what was logged then); instance rows
//! carry one sample's values (FastEstimator's `instance_id_key`), keyed by the sample's id: a
//! number for a key with one value per sample, nested arrays in the sample's shape for one
//! with several ([`SampleValue`]). Numbers are written losslessly; NaN and the infinities,
//! which JSON lacks, are the strings `"NaN"`, `"inf"` and `"-inf"`. Readers ignore members
//! they do not know, so rows can grow fields.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::json::{self, Json};
use super::sample_value::{self, number_from_json, number_json, SampleValue};
use super::{record_row, EpochRow, History};
use crate::error::{Error, Result};

/// A sample's id in an instance row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum InstanceId {
    /// A numeric id (written as a JSON number).
    Int(i64),
    /// Any other id (written as a JSON string).
    Text(String),
}

/// One sample's values, logged during an epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRow {
    /// The mode.
    pub mode: String,
    /// The epoch, from 1.
    pub epoch: u32,
    /// The global step when the values were logged.
    pub step: u64,
    /// The sample's id.
    pub id: InstanceId,
    /// The sample's values.
    pub values: BTreeMap<String, SampleValue>,
}

/// One line of a JSONL log.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonlRow {
    /// A per-epoch row.
    Epoch(EpochRow),
    /// A per-instance row.
    Instance(InstanceRow),
}

/// Writes a JSONL log.
///
/// Epoch rows are flushed as they are written, so the file is complete after every epoch;
/// instance rows are buffered until the next epoch row, [`flush`](Self::flush) or drop.
#[derive(Debug)]
pub struct JsonlLogger {
    path: PathBuf,
    file: BufWriter<File>,
}

impl JsonlLogger {
    /// Creates (or truncates) the log at `path`, creating its directory.
    pub fn create(path: &Path) -> Result<Self> {
        Self::open(path, false)
    }

    /// Opens the log at `path` to add rows after the existing ones (a resumed run).
    pub fn append(path: &Path) -> Result<Self> {
        Self::open(path, true)
    }

    /// Opens the log of a run resumed at global step `step`: rows written after it (by the
    /// attempt that crashed after its last checkpoint) are dropped, as is a line a crash left
    /// half-written, so the log reads as if the run had never stopped. A missing log is
    /// created.
    pub fn resume(path: &Path, step: u64) -> Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Self::create(path),
            Err(e) => return Err(Error::io(path, e)),
        };
        let mut kept = String::with_capacity(text.len());
        for (n, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') || line.trim().is_empty() {
                continue;
            }
            let row = parse_row(line.trim_end())
                .map_err(|e| Error::data(path, format!("line {}: {e}", n + 1)))?;
            let row_step = match &row {
                JsonlRow::Epoch(row) => row.step,
                JsonlRow::Instance(row) => row.step,
            };
            if row_step <= step {
                kept.push_str(line);
            }
        }
        super::replace_file(path, kept.as_bytes())?;
        Self::append(path)
    }

    fn open(path: &Path, append: bool) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        Ok(Self {
            path: path.to_owned(),
            file: BufWriter::new(file),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one epoch row and flushes.
    pub fn write_epoch(&mut self, row: &EpochRow) -> Result<()> {
        self.write_step(row)?;
        self.flush()
    }

    /// Writes one row logged after a step (buffered; the epoch's row flushes it).
    pub fn write_step(&mut self, row: &EpochRow) -> Result<()> {
        let line = format!(
            "{{{},\"values\":{}}}\n",
            head(&row.mode, row.epoch, row.step),
            values_object(&row.values)
        );
        self.write_line(&line)
    }

    /// Writes one instance row (buffered).
    pub fn write_instance(&mut self, row: &InstanceRow) -> Result<()> {
        self.write_line(&instance_line(row))
    }

    /// Writes lines [`instance_line`] made (buffered): another rank's rows.
    pub fn write_lines(&mut self, lines: &str) -> Result<()> {
        self.write_line(lines)
    }

    fn write_line(&mut self, line: &str) -> Result<()> {
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Pushes buffered rows to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(&self.path, e))
    }
}

/// One instance row as a line of JSONL.
pub fn instance_line(row: &InstanceRow) -> String {
    let id = match &row.id {
        InstanceId::Int(n) => n.to_string(),
        InstanceId::Text(text) => quote(text),
    };
    let members: Vec<String> = row
        .values
        .iter()
        .map(|(key, value)| format!("{}:{}", quote(key), value.to_json()))
        .collect();
    format!(
        "{{{},\"instance\":{{\"id\":{id},\"values\":{{{}}}}}}}\n",
        head(&row.mode, row.epoch, row.step),
        members.join(",")
    )
}

impl Drop for JsonlLogger {
    fn drop(&mut self) {
        // Best effort: a drop cannot report errors; callers who care call `flush` first.
        let _ = self.file.flush();
    }
}

fn head(mode: &str, epoch: u32, step: u64) -> String {
    format!("\"mode\":{},\"epoch\":{epoch},\"step\":{step}", quote(mode))
}

fn values_object(values: &BTreeMap<String, f64>) -> String {
    let members: Vec<String> = values
        .iter()
        .map(|(key, &value)| format!("{}:{}", quote(key), number_json(value)))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// `text` as a JSON string.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Reads a JSONL log's epoch rows into a [`History`] (instance rows are not scalars of the run
/// and are left out). Errors name the file and line.
pub fn read_jsonl(path: &Path) -> Result<History> {
    let mut history = History::new();
    for row in read_jsonl_rows(path)? {
        if let JsonlRow::Epoch(row) = row {
            record_row(&mut history, &row);
        }
    }
    Ok(history)
}

/// Reads every row of a JSONL log, in order. Blank lines are skipped, and so is a last line
/// cut short (no newline, not a whole row: a crash or a full disk stopped its write), as a
/// resumed run drops it.
pub fn read_jsonl_rows(path: &Path) -> Result<Vec<JsonlRow>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut rows = Vec::new();
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_row(line.trim_end()) {
            Ok(row) => rows.push(row),
            Err(_) if !line.ends_with('\n') => break,
            Err(e) => return Err(Error::data(path, format!("line {}: {e}", n + 1))),
        }
    }
    Ok(rows)
}

fn parse_row(line: &str) -> Result<JsonlRow, String> {
    let Json::Object(members) = json::parse(line)? else {
        return Err("expected a JSON object".into());
    };
    let get = |name: &str| members.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let mode = match get("mode") {
        Some(Json::String(mode)) => mode.clone(),
        Some(other) => return Err(format!("`mode` is {}, expected a string", other.kind())),
        None => return Err("missing `mode`".into()),
    };
    let epoch = u32::try_from(integer(get("epoch"), "epoch")?)
        .map_err(|_| "`epoch` is out of range".to_owned())?;
    let step = integer(get("step"), "step")?;
    match (get("values"), get("instance")) {
        (Some(values), None) => Ok(JsonlRow::Epoch(EpochRow {
            mode,
            epoch,
            step,
            values: parse_values(values, "values")?,
        })),
        (None, Some(Json::Object(instance))) => {
            let field = |name: &str| instance.iter().find(|(k, _)| k == name).map(|(_, v)| v);
            let id = match field("id") {
                Some(Json::Number(n)) => InstanceId::Int(
                    n.parse()
                        .map_err(|_| format!("`instance.id` {n} is not an integer"))?,
                ),
                Some(Json::String(text)) => InstanceId::Text(text.clone()),
                Some(other) => {
                    return Err(format!(
                        "`instance.id` is {}, expected a number or string",
                        other.kind()
                    ))
                }
                None => return Err("missing `instance.id`".into()),
            };
            let values = match field("values") {
                Some(values) => sample_value::parse_all(values)?,
                None => BTreeMap::new(),
            };
            Ok(JsonlRow::Instance(InstanceRow {
                mode,
                epoch,
                step,
                id,
                values,
            }))
        }
        (None, Some(other)) => Err(format!(
            "`instance` is {}, expected an object",
            other.kind()
        )),
        (Some(_), Some(_)) => Err("a row has `values` or `instance`, not both".into()),
        (None, None) => Err("missing `values` (or `instance`)".into()),
    }
}

fn integer(value: Option<&Json<'_>>, name: &str) -> Result<u64, String> {
    match value {
        Some(Json::Number(n)) => n
            .parse()
            .map_err(|_| format!("`{name}` is {n}, expected a non-negative integer")),
        Some(other) => Err(format!("`{name}` is {}, expected an integer", other.kind())),
        None => Err(format!("missing `{name}`")),
    }
}

fn parse_values(values: &Json<'_>, name: &str) -> Result<BTreeMap<String, f64>, String> {
    let Json::Object(members) = values else {
        return Err(format!("`{name}` is {}, expected an object", values.kind()));
    };
    members
        .iter()
        .map(|(key, value)| {
            let parsed = number_from_json(value)
                .ok_or_else(|| format!("`{name}.{key}` is {}, expected a number", value.kind()))?;
            Ok((key.clone(), parsed))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_dir::TestDir;

    fn row(mode: &str, epoch: u32, step: u64, values: &[(&str, f64)]) -> EpochRow {
        EpochRow {
            mode: mode.into(),
            epoch,
            step,
            values: values.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
        }
    }

    #[test]
    fn rows_are_written_in_the_documented_shape() {
        let dir = TestDir::new("jsonl-shape");
        let path = dir.path().join("logs/run.jsonl");
        let mut log = JsonlLogger::create(&path).unwrap();
        log.write_epoch(&row(
            "eval",
            3,
            375,
            &[("accuracy", 0.98), ("ce", f64::NAN)],
        ))
        .unwrap();
        log.write_instance(&InstanceRow {
            mode: "eval".into(),
            epoch: 3,
            step: 375,
            id: InstanceId::Text("img \"7\"\n".into()),
            values: [
                ("ce".to_owned(), SampleValue::scalar(2.5)),
                (
                    "p".to_owned(),
                    SampleValue {
                        shape: vec![2, 2],
                        numbers: vec![0.5, f64::NAN, 1.0, 0.25],
                    },
                ),
            ]
            .into(),
        })
        .unwrap();
        log.flush().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            concat!(
                r#"{"mode":"eval","epoch":3,"step":375,"values":{"accuracy":0.98,"ce":"NaN"}}"#,
                "\n",
                r#"{"mode":"eval","epoch":3,"step":375,"instance":{"id":"img \"7\"\n","values":{"ce":2.5,"p":[[0.5,"NaN"],[1,0.25]]}}}"#,
                "\n"
            )
        );
    }

    #[test]
    fn a_last_line_cut_short_is_skipped_but_a_bad_line_before_it_is_an_error() {
        let dir = TestDir::new("jsonl-cut");
        let path = dir.path().join("run.jsonl");
        let whole = r#"{"mode":"train","epoch":1,"step":1,"values":{"ce":2.5}}"#;
        std::fs::write(&path, format!("{whole}\n{}", &whole[..20])).unwrap();
        let rows = read_jsonl_rows(&path).unwrap();
        assert_eq!(rows.len(), 1);
        std::fs::write(&path, format!("{}\n{whole}\n", &whole[..20])).unwrap();
        let error = read_jsonl_rows(&path).unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
    }

    #[test]
    fn logs_read_back_exactly_including_awkward_values() {
        let dir = TestDir::new("jsonl-round-trip");
        let path = dir.path().join("run.jsonl");
        let awkward = [
            0.1 + 0.2,
            1.0 / 3.0,
            f64::from_bits(0x3FEF_6666_6666_6667),
            f64::MIN_POSITIVE / 3.0,
            -1.7976931348623157e308,
            9007199254740993.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let rows = vec![
            row(
                "train",
                1,
                100,
                &[("ce", 0.5), ("weird \"key\"\\\u{1}", 1.0)],
            ),
            row("eval", 1, 100, &[("ce", 0.25)]),
            row("train", 2, 200, &[("ce", 0.125), ("lr", 1e-4)]),
        ];
        {
            let mut log = JsonlLogger::create(&path).unwrap();
            for r in &rows[..2] {
                log.write_epoch(r).unwrap();
            }
            log.write_instance(&InstanceRow {
                mode: "eval".into(),
                epoch: 1,
                step: 100,
                id: InstanceId::Int(-4),
                values: awkward
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (format!("v{i}"), SampleValue::scalar(v)))
                    .chain(std::iter::once((
                        "scores".to_owned(),
                        SampleValue {
                            shape: vec![3],
                            numbers: awkward[..3].to_vec(),
                        },
                    )))
                    .collect(),
            })
            .unwrap();
        }
        JsonlLogger::append(&path)
            .unwrap()
            .write_epoch(&rows[2])
            .unwrap();

        let read = read_jsonl_rows(&path).unwrap();
        assert_eq!(read.len(), 4);
        assert_eq!(read[0], JsonlRow::Epoch(rows[0].clone()));
        assert_eq!(read[3], JsonlRow::Epoch(rows[2].clone()));
        let JsonlRow::Instance(instance) = &read[2] else {
            panic!("{:?}", read[2])
        };
        assert_eq!(instance.id, InstanceId::Int(-4));
        let scores = &instance.values["scores"];
        assert_eq!(scores.shape, [3]);
        let bits: Vec<u64> = scores.numbers.iter().map(|v| v.to_bits()).collect();
        let expected: Vec<u64> = awkward[..3].iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, expected);
        let bits: Vec<u64> = (0..awkward.len())
            .map(|i| instance.values[&format!("v{i}")].numbers[0].to_bits())
            .collect();
        assert_eq!(bits, awkward.map(f64::to_bits));

        let history = read_jsonl(&path).unwrap();
        let mut expected = History::new();
        for r in &rows {
            record_row(&mut expected, r);
        }
        assert_eq!(history, expected);
        assert_eq!(history["train"]["ce"].len(), 2);
    }

    #[test]
    fn malformed_lines_are_errors_naming_file_and_line() {
        let dir = TestDir::new("jsonl-errors");
        let path = dir.path().join("bad.jsonl");
        let good = r#"{"mode":"train","epoch":1,"step":1,"values":{}}"#;
        for (line, expected) in [
            (r#"[1]"#, "expected a JSON object"),
            (r#"{"epoch":1,"step":1,"values":{}}"#, "missing `mode`"),
            (
                r#"{"mode":"t","epoch":1,"step":-1,"values":{}}"#,
                "`step` is -1",
            ),
            (
                r#"{"mode":"t","epoch":1.5,"step":1,"values":{}}"#,
                "`epoch` is 1.5",
            ),
            (
                r#"{"mode":"t","epoch":1,"step":1,"values":{"a":"x"}}"#,
                "`values.a` is a string",
            ),
            (
                r#"{"mode":"t","epoch":1,"step":1,"values":{"a":"1.5"}}"#,
                "`values.a` is a string",
            ),
            (r#"{"mode":"t","epoch":1,"step":1}"#, "missing `values`"),
            (
                r#"{"mode":"t","epoch":1,"step":1,"instance":{"values":{}}}"#,
                "missing `instance.id`",
            ),
            (
                r#"{"mode":"t","epoch":1,"step":1,"values":{"a":1"#,
                "column",
            ),
        ] {
            std::fs::write(&path, format!("{good}\n\n{line}\n")).unwrap();
            let error = read_jsonl(&path).unwrap_err().to_string();
            let prefix = format!("{}: line 3: ", path.display());
            assert!(
                error.starts_with(&prefix) && error.contains(expected),
                "{line}: {error}"
            );
        }
        let missing = dir.path().join("missing.jsonl");
        assert!(matches!(read_jsonl(&missing), Err(Error::Io { .. })));
    }

    #[test]
    fn a_resumed_log_drops_rows_after_the_checkpoint_and_a_torn_last_line() {
        let dir = TestDir::new("jsonl-resume");
        let path = dir.path().join("log.jsonl");
        let mut log = JsonlLogger::create(&path).unwrap();
        log.write_epoch(&row("train", 1, 10, &[("ce", 1.0)]))
            .unwrap();
        log.write_epoch(&row("train", 2, 20, &[("ce", 0.5)]))
            .unwrap();
        drop(log);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"mode\":\"eval\",\"epo");
        std::fs::write(&path, text).unwrap();
        let mut log = JsonlLogger::resume(&path, 10).unwrap();
        log.write_epoch(&row("train", 2, 20, &[("ce", 0.25)]))
            .unwrap();
        drop(log);
        let rows = read_jsonl_rows(&path).unwrap();
        assert_eq!(
            rows,
            vec![
                JsonlRow::Epoch(row("train", 1, 10, &[("ce", 1.0)])),
                JsonlRow::Epoch(row("train", 2, 20, &[("ce", 0.25)])),
            ]
        );
    }
}
