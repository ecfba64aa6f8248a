//! The per-epoch log as CSV: `mode,epoch,step` then one column per key, for spreadsheets.
//!
//! FastEstimator's `CSVLogger` takes its header from the first row, so keys that first appear
//! later (eval metrics after a train epoch, a trace switched on in epoch 5) are lost. Here the
//! columns are every key seen so far, in order of first appearance; a row with a new key widens
//! the header by rewriting the file (rows are few — one per mode and epoch — so the logger keeps
//! them). The rewrite goes to a temporary file renamed over the log, so a crash mid-rewrite
//! leaves the previous complete log. Rows without a key leave its cell empty.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{format_value, record_row, EpochRow, History};
use crate::error::{Error, Result};

/// The columns every log starts with.
const FIXED: [&str; 3] = ["mode", "epoch", "step"];

/// Writes a CSV log, one row per [`EpochRow`]; each row is on disk when `write_epoch` returns.
#[derive(Debug)]
pub struct CsvLogger {
    path: PathBuf,
    columns: Vec<String>,
    rows: Vec<EpochRow>,
    /// The file may not hold `rows` under the current header (a write failed, or a key is
    /// new): the next write rewrites it whole rather than appending to a stale file.
    stale: bool,
}

impl CsvLogger {
    /// Creates (or truncates) the log at `path`, creating its directory.
    pub fn create(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        std::fs::write(path, "").map_err(|e| Error::io(path, e))?;
        Ok(Self {
            path: path.to_owned(),
            columns: Vec::new(),
            rows: Vec::new(),
            stale: true,
        })
    }

    /// Opens the log of a run resumed at global step `step`, keeping the rows up to it (rows
    /// after it were written by the attempt that crashed after its last checkpoint). A missing
    /// log is created. The log must be one this logger wrote (`mode,epoch,step,...`).
    pub fn resume(path: &Path, step: u64) -> Result<Self> {
        let (header, rows) = match read_rows(path) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Self::create(path)
            }
            read => read?,
        };
        if !header.is_empty() && header.get(..3) != Some(&FIXED.map(String::from)[..]) {
            return Err(Error::data(
                path,
                "line 1: not a log fe-host wrote: the header must start with mode,epoch,step",
            ));
        }
        let logger = Self {
            path: path.to_owned(),
            columns: header.get(3..).map(<[String]>::to_vec).unwrap_or_default(),
            rows: rows.into_iter().filter(|row| row.step <= step).collect(),
            stale: false,
        };
        logger.rewrite()?;
        Ok(logger)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value columns so far, in order of first appearance.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Writes one row: appended, or the whole file rewritten when the row brings new keys.
    ///
    /// A row whose write fails is not logged (the caller may retry it), and the next write
    /// rewrites the whole file, repairing whatever the failure left.
    pub fn write_epoch(&mut self, row: &EpochRow) -> Result<()> {
        let written = self.try_write(row);
        if written.is_err() {
            self.rows.pop();
            self.stale = true;
        }
        written
    }

    fn try_write(&mut self, row: &EpochRow) -> Result<()> {
        for key in row.values.keys() {
            if !self.columns.contains(key) {
                self.columns.push(key.clone());
                self.stale = true;
            }
        }
        self.rows.push(row.clone());
        let was_stale = std::mem::replace(&mut self.stale, true);
        if was_stale {
            self.rewrite()?;
        } else {
            let line = self.line(row);
            let mut file = OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(|e| Error::io(&self.path, e))?;
            file.write_all(line.as_bytes())
                .map_err(|e| Error::io(&self.path, e))?;
        }
        self.stale = false;
        Ok(())
    }

    fn rewrite(&self) -> Result<()> {
        let header: Vec<&str> = FIXED
            .into_iter()
            .chain(self.columns.iter().map(String::as_str))
            .collect();
        let mut text = join_fields(header);
        for row in &self.rows {
            text.push_str(&self.line(row));
        }
        super::replace_file(&self.path, text.as_bytes())
    }

    fn line(&self, row: &EpochRow) -> String {
        let fixed = [
            row.mode.clone(),
            row.epoch.to_string(),
            row.step.to_string(),
        ];
        let values = self.columns.iter().map(|key| {
            row.values
                .get(key)
                .map(|v| format_value(*v))
                .unwrap_or_default()
        });
        join_fields(fixed.into_iter().chain(values))
    }
}

/// One CSV record (with its newline), quoting fields as RFC 4180 asks.
fn join_fields<S: AsRef<str>>(fields: impl IntoIterator<Item = S>) -> String {
    let quoted: Vec<String> = fields
        .into_iter()
        .map(|field| {
            let field = field.as_ref();
            if field.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", field.replace('"', "\"\""))
            } else {
                field.to_owned()
            }
        })
        .collect();
    let mut line = quoted.join(",");
    line.push('\n');
    line
}

/// Reads a CSV log into a [`History`]. The header must name `mode` and `step` (in any order, so
/// FastEstimator's `mode,step,epoch,...` logs read too); every other column except `epoch` is a
/// key, and empty cells are absent values. Errors name the file and line.
pub fn read_csv(path: &Path) -> Result<History> {
    let mut history = History::new();
    for row in read_rows(path)?.1 {
        record_row(&mut history, &row);
    }
    Ok(history)
}

/// A CSV log's header and its rows (`epoch` 0 where the log has no such column).
fn read_rows(path: &Path) -> Result<(Vec<String>, Vec<EpochRow>)> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let at = |line: usize, message: String| Error::data(path, format!("line {line}: {message}"));
    let mut records = parse_records(&text)
        .map_err(|(line, e)| at(line, e))?
        .into_iter();
    let Some((header_line, header)) = records.next() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let find = |name: &str| header.iter().position(|h| h == name);
    let (Some(mode_col), Some(step_col)) = (find("mode"), find("step")) else {
        return Err(at(
            header_line,
            "the header must name `mode` and `step`".into(),
        ));
    };
    let mut seen = BTreeMap::new();
    for (i, name) in header.iter().enumerate() {
        if let Some(first) = seen.insert(name, i) {
            let message = format!(
                "column {name:?} appears twice (fields {} and {})",
                first + 1,
                i + 1
            );
            return Err(at(header_line, message));
        }
    }
    let epoch_col = find("epoch");
    let mut rows = Vec::new();
    for (line, fields) in records {
        if fields.len() != header.len() {
            let message = format!(
                "{} fields, but the header has {}",
                fields.len(),
                header.len()
            );
            return Err(at(line, message));
        }
        let step = fields[step_col].parse::<u64>().map_err(|_| {
            at(
                line,
                format!("step {:?} is not a non-negative integer", fields[step_col]),
            )
        })?;
        let epoch = match epoch_col {
            Some(col) => fields[col].parse::<u32>().map_err(|_| {
                at(
                    line,
                    format!("epoch {:?} is not an epoch number", fields[col]),
                )
            })?,
            None => 0,
        };
        let mut values = BTreeMap::new();
        for (i, (name, cell)) in header.iter().zip(&fields).enumerate() {
            if i == mode_col || i == step_col || Some(i) == epoch_col || cell.is_empty() {
                continue;
            }
            let value = cell
                .parse::<f64>()
                .map_err(|_| at(line, format!("{name}: {cell:?} is not a number")))?;
            values.insert(name.clone(), value);
        }
        rows.push(EpochRow {
            mode: fields[mode_col].clone(),
            epoch,
            step,
            values,
        });
    }
    Ok((header, rows))
}

/// Splits CSV text into records, each with the line it starts on; blank lines are skipped.
/// A record's fields, with the line the record starts on.
type Record = (usize, Vec<String>);

fn parse_records(text: &str) -> Result<Vec<Record>, (usize, String)> {
    let mut records = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let start = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        loop {
            match chars.next() {
                None => {
                    if quoted {
                        return Err((start, "unterminated quoted field".into()));
                    }
                    break;
                }
                Some('"') if quoted => {
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        field.push('"');
                    } else {
                        quoted = false;
                        if !matches!(chars.peek(), None | Some(',' | '\n' | '\r')) {
                            return Err((line, "text after a closing quote".into()));
                        }
                    }
                }
                Some('"') if field.is_empty() => quoted = true,
                Some(c) if quoted => {
                    line += usize::from(c == '\n');
                    field.push(c);
                }
                Some(',') => fields.push(std::mem::take(&mut field)),
                Some('\r') if chars.peek() == Some(&'\n') => {}
                Some('\n') => {
                    line += 1;
                    break;
                }
                Some('"') => return Err((line, "quote inside an unquoted field".into())),
                Some(c) => field.push(c),
            }
        }
        fields.push(field);
        if !(fields.len() == 1 && fields[0].is_empty()) {
            records.push((start, fields));
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::record_row;
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
    fn a_failed_write_leaves_the_row_out_and_the_next_write_repairs_the_file() {
        let dir = TestDir::new("csv-repair");
        let path = dir.path().join("log.csv");
        let mut log = CsvLogger::create(&path).unwrap();
        log.write_epoch(&row("train", 1, 10, &[("ce", 1.0)]))
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let failed = log.write_epoch(&row("train", 2, 20, &[("ce", 0.5)]));
        assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
        std::fs::remove_dir(&path).unwrap();
        log.write_epoch(&row("train", 3, 30, &[("ce", 0.25)]))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "mode,epoch,step,ce\ntrain,1,10,1\ntrain,3,30,0.25\n"
        );
    }

    #[test]
    fn a_new_key_widens_the_header_and_keeps_earlier_rows() {
        let dir = TestDir::new("csv-widen");
        let path = dir.path().join("run/log.csv");
        let rows = [
            row("train", 1, 100, &[("ce", 0.5)]),
            row("eval", 1, 100, &[("ce", 0.25), ("accuracy", 0.875)]),
            row("train", 2, 200, &[("ce", 0.1 + 0.2)]),
            row("eval", 2, 200, &[("accuracy", f64::NAN), ("a,\"b\"", 1e-7)]),
        ];
        let mut log = CsvLogger::create(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        let mut texts = Vec::new();
        for r in &rows {
            log.write_epoch(r).unwrap();
            texts.push(std::fs::read_to_string(&path).unwrap());
        }
        assert_eq!(texts[0], "mode,epoch,step,ce\ntrain,1,100,0.5\n");
        assert_eq!(
            texts[2],
            "mode,epoch,step,ce,accuracy\ntrain,1,100,0.5,\neval,1,100,0.25,0.875\n\
             train,2,200,0.30000000000000004,\n"
        );
        assert_eq!(
            texts[3],
            "mode,epoch,step,ce,accuracy,\"a,\"\"b\"\"\"\ntrain,1,100,0.5,,\n\
             eval,1,100,0.25,0.875,\ntrain,2,200,0.30000000000000004,,\neval,2,200,,NaN,1e-7\n"
        );
        assert_eq!(log.columns(), ["ce", "accuracy", "a,\"b\""]);
        assert!(!dir.path().join("run/log.csv.tmp").exists());

        let read = read_csv(&path).unwrap();
        assert!(read["eval"]["accuracy"][&200].is_nan());
        let mut expected = History::new();
        for r in &rows {
            record_row(&mut expected, r);
        }
        let without_nan = |mut h: History| {
            h.get_mut("eval")
                .unwrap()
                .get_mut("accuracy")
                .unwrap()
                .remove(&200);
            h
        };
        assert_eq!(without_nan(read), without_nan(expected));
    }

    #[test]
    fn fastestimator_column_order_and_quoted_newlines_read() {
        let dir = TestDir::new("csv-fe");
        let path = dir.path().join("fe.csv");
        std::fs::write(
            &path,
            "mode,step,epoch,\"multi\nline\",ce\r\neval,10,1,,2.5\r\n\r\ntrain,10,1,1,-inf\r\n",
        )
        .unwrap();
        let history = read_csv(&path).unwrap();
        assert_eq!(history["eval"]["ce"][&10], 2.5);
        assert!(!history["eval"].contains_key("multi\nline"));
        assert_eq!(history["train"]["multi\nline"][&10], 1.0);
        assert_eq!(history["train"]["ce"][&10], f64::NEG_INFINITY);
        assert!(!history["train"].contains_key("epoch"));
    }

    #[test]
    fn malformed_logs_are_errors_naming_file_and_line() {
        let dir = TestDir::new("csv-errors");
        let path = dir.path().join("bad.csv");
        for (text, expected) in [
            (
                "mode,epoch,ce\n",
                "line 1: the header must name `mode` and `step`",
            ),
            ("mode,step,ce,ce\n", "line 1: column \"ce\" appears twice"),
            (
                "mode,step,ce\ntrain,1,0.5\n\ntrain,2\n",
                "line 4: 2 fields, but the header has 3",
            ),
            ("mode,step,ce\ntrain,x,0.5\n", "line 2: step \"x\" is not"),
            (
                "mode,step,ce\n\"tr\nain\",1,0.5\ntrain,2,abc\n",
                "line 4: ce: \"abc\" is not a number",
            ),
            (
                "mode,step,ce\ntrain,1,\"0.5\n",
                "line 2: unterminated quoted field",
            ),
            (
                "mode,step,ce\ntrain,1,\"0.5\"x\n",
                "line 2: text after a closing quote",
            ),
            (
                "mode,step,ce\ntrain,1,0\"5\n",
                "line 2: quote inside an unquoted field",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = read_csv(&path).unwrap_err().to_string();
            let prefix = format!("{}: ", path.display());
            assert!(
                error.starts_with(&prefix) && error.contains(expected),
                "{text:?}: {error}"
            );
        }
        std::fs::write(&path, "").unwrap();
        assert!(read_csv(&path).unwrap().is_empty());
    }

    #[test]
    fn a_resumed_log_keeps_the_rows_up_to_the_checkpoint_and_continues() {
        let dir = TestDir::new("csv-resume");
        let path = dir.path().join("log.csv");
        let mut log = CsvLogger::create(&path).unwrap();
        for r in [
            row("train", 1, 10, &[("ce", 1.0)]),
            row("eval", 1, 10, &[("acc", 0.5)]),
            row("train", 2, 20, &[("ce", 0.5)]),
        ] {
            log.write_epoch(&r).unwrap();
        }
        drop(log);
        let mut log = CsvLogger::resume(&path, 10).unwrap();
        log.write_epoch(&row("train", 2, 20, &[("ce", 0.25)]))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "mode,epoch,step,ce,acc\ntrain,1,10,1,\neval,1,10,,0.5\ntrain,2,20,0.25,\n"
        );
        let missing = dir.path().join("new.csv");
        CsvLogger::resume(&missing, 5).unwrap();
        assert!(missing.exists());
    }

    #[test]
    fn resuming_a_foreign_csv_is_refused_naming_the_file() {
        let dir = TestDir::new("csv-resume-foreign");
        let path = dir.path().join("log.csv");
        std::fs::write(&path, "step,mode,ce\n1,train,2\n").unwrap();
        let error = CsvLogger::resume(&path, 5).unwrap_err().to_string();
        assert!(
            error.contains("log.csv") && error.contains("mode,epoch,step"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "step,mode,ce\n1,train,2\n"
        );
    }
}
