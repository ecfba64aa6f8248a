//! Run reports: what a run logged, written where people and tools look for it.
//!
//! - [`tensorboard`]: TensorBoard event files ([`EventWriter`]), and a reader for them.
//! - [`jsonl`] and [`csv_log`]: one row per (mode, epoch) with every key logged that epoch
//!   ([`EpochRow`]), plus per-instance rows in JSONL; each with a reader back to a [`History`].
//! - [`plot`]: one panel per metric, one line per (run, mode), as SVG or PNG.
//! - [`compare_runs`]: logs of several runs → one comparison plot (`fe-host logs DIR...`).
//!
//! Everything here is pure I/O on plain data — a [`History`] is the shape of
//! [`Summary::history`](crate::system::Summary) — so the estimator's traces decide when to call
//! it. Values are written losslessly ([`format_value`]) and read back bit for bit.

pub mod csv_log;
mod json;
pub mod jsonl;
pub mod plot;
mod png_text;
mod proto;
mod sample_value;
pub mod tb_image;
pub mod tensorboard;

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

pub use csv_log::{read_csv, CsvLogger};
pub use jsonl::{instance_line, read_jsonl, InstanceId, InstanceRow, JsonlLogger};
pub use plot::{render_svg, write_plot, PlotOptions, RunHistory};
pub use proto::{crc32c, masked_crc32c};
pub use sample_value::SampleValue;
pub use tensorboard::{hostname, read_events, Event, EventWriter, SummaryImage, SummaryValue};

use crate::error::{Error, Result};

/// Writes `bytes` to `path` through a temporary sibling renamed over it, so a crash leaves the
/// old file or the new one, never half of either.
fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    crate::replace::through_temp(path, &tmp, |tmp| {
        std::fs::write(tmp, bytes).map_err(|e| Error::io(tmp, e))
    })
}

/// Logged scalars: `{mode: {key: {step: value}}}`, as in [`Summary`](crate::system::Summary).
pub type History = BTreeMap<String, BTreeMap<String, BTreeMap<u64, f64>>>;

/// One epoch of one mode: the row the per-epoch logs write.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochRow {
    /// `train`, `eval`, `test`, ...
    pub mode: String,
    /// The epoch, from 1.
    pub epoch: u32,
    /// The global step at the end of the epoch.
    pub step: u64,
    /// Every key logged during the epoch, with its last value.
    pub values: BTreeMap<String, f64>,
}

impl EpochRow {
    /// The row for `mode`'s epoch `epoch`, which covered global steps `steps`: each key's last
    /// value in that range. The row's step is the end of the range.
    pub fn from_history(
        history: &History,
        mode: &str,
        epoch: u32,
        steps: RangeInclusive<u64>,
    ) -> Self {
        let step = *steps.end();
        let values = history
            .get(mode)
            .into_iter()
            .flatten()
            .filter_map(|(key, series)| {
                let (_, value) = series.range(steps.clone()).next_back()?;
                Some((key.clone(), *value))
            })
            .collect();
        Self {
            mode: mode.to_owned(),
            epoch,
            step,
            values,
        }
    }
}

/// Adds `row` to `history` under its mode and step.
pub fn record_row(history: &mut History, row: &EpochRow) {
    let keys = history.entry(row.mode.clone()).or_default();
    for (key, value) in &row.values {
        keys.entry(key.clone())
            .or_default()
            .insert(row.step, *value);
    }
}

/// `value` as the shortest text that parses back to the same `f64` (`NaN`, `inf` and `-inf`
/// included), with an exponent only where plain digits would be long.
pub fn format_value(value: f64) -> String {
    if value == 0.0 || !value.is_finite() || (1e-5..1e16).contains(&value.abs()) {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// Writes a plot comparing the runs logged at `paths` to `out` (`.svg` or `.png`).
///
/// Each path is a `.jsonl` or `.csv` log, a run's version directory (its `log.jsonl` is the run), or a
/// directory whose `.jsonl` and `.csv` files are each a run (a `.csv` with the same name as a
/// `.jsonl` is the same run and is skipped). Runs are named after their files.
pub fn compare_runs(paths: &[PathBuf], out: &Path) -> Result<()> {
    let runs = load_runs(paths)?;
    write_plot(&runs, out)
}

/// The run log in a run's `log_dir` (its version directory in a versioned run).
const RUN_LOG: &str = "log.jsonl";

/// Loads the runs logged at `paths` (see [`compare_runs`]), named after their files; names two
/// runs share get their directory as a prefix. A run's version directory (its `run.json` and
/// run log, [`RUN_LOG`]) is that one run.
pub fn load_runs(paths: &[PathBuf]) -> Result<Vec<RunHistory>> {
    let mut files = Vec::new();
    for path in paths {
        let run_log = path.join(RUN_LOG);
        if path.join(crate::run_dir::RUN_FILE).is_file() && run_log.is_file() {
            // A run's version directory: its run log is the run; the other logs in it are its
            // loggers' outputs (predictions, per-sample rows), not runs of their own.
            files.push(run_log);
        } else if path.is_dir() {
            let found = log_files(path)?;
            if found.is_empty() {
                return Err(Error::data(
                    path,
                    "no .jsonl or .csv logs in this directory",
                ));
            }
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    let stems: Vec<String> = files.iter().map(|f| run_name(f)).collect();
    files
        .iter()
        .zip(&stems)
        .map(|(file, stem)| {
            let name = if stems.iter().filter(|s| *s == stem).count() > 1 {
                match file.parent().and_then(Path::file_name) {
                    Some(dir) => format!("{}/{stem}", dir.to_string_lossy()),
                    None => file.display().to_string(),
                }
            } else {
                stem.clone()
            };
            Ok(RunHistory {
                name,
                history: read_log(file)?,
            })
        })
        .collect()
}

/// Reads a `.jsonl` or `.csv` log into a [`History`].
pub fn read_log(path: &Path) -> Result<History> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => read_jsonl(path),
        Some("csv") => read_csv(path),
        _ => Err(Error::data(
            path,
            "not a log: expected a .jsonl or .csv file",
        )),
    }
}

/// A run's name: its log's file stem, or for `log.jsonl`/`log.csv` (a run's `log_dir`) its
/// directory's name, with its root's for a version directory (`lenet/version_2`).
pub fn run_name(path: &Path) -> String {
    let stem = file_stem(path);
    let dir = path.parent();
    match dir.and_then(Path::file_name).map(|d| d.to_string_lossy()) {
        Some(name) if stem == "log" && crate::run_dir::parse_version(&name).is_some() => {
            match dir.and_then(Path::parent).and_then(Path::file_name) {
                Some(root) => format!("{}/{name}", root.to_string_lossy()),
                None => name.into_owned(),
            }
        }
        Some(name) if stem == "log" => name.into_owned(),
        _ => stem,
    }
}

/// Whether `key` is a rate (`steps/sec`, `steps/sec (overall)`): how fast a run went, not how
/// it learned, so plots leave it out unless asked.
pub fn is_rate(key: &str) -> bool {
    key.contains("/sec")
}

/// `history` without its rates ([`is_rate`]).
pub fn without_rates(mut history: History) -> History {
    for keys in history.values_mut() {
        keys.retain(|key, _| !is_rate(key));
    }
    history.retain(|_, keys| !keys.is_empty());
    history
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn log_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        let ext = path.extension().and_then(|e| e.to_str());
        if path.is_file() && matches!(ext, Some("jsonl" | "csv")) {
            files.push(path);
        }
    }
    let jsonl_stems: Vec<String> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
        .map(|f| file_stem(f))
        .collect();
    files.retain(|f| {
        f.extension().is_some_and(|e| e == "jsonl") || !jsonl_stems.contains(&file_stem(f))
    });
    // read_dir's order is the file system's; runs must come out in the same order every time.
    files.sort();
    Ok(files)
}

#[cfg(test)]
pub(crate) mod test_dir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh directory under the system temp dir, removed on drop.
    pub struct TestDir(PathBuf);

    impl TestDir {
        pub fn new(name: &str) -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("fe-report-{name}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_dir::TestDir;
    use super::*;

    fn history(entries: &[(&str, &str, u64, f64)]) -> History {
        let mut history = History::new();
        for &(mode, key, step, value) in entries {
            history
                .entry(mode.into())
                .or_default()
                .entry(key.into())
                .or_default()
                .insert(step, value);
        }
        history
    }

    #[test]
    fn a_replace_that_fails_leaves_no_temporary() {
        let dir = TestDir::new("replace-fails");
        // The target is a directory: the temporary is written, the rename onto it fails.
        let path = dir.path().join("log.csv");
        std::fs::create_dir_all(path.join("x")).unwrap();
        let error = replace_file(&path, b"a,b\n").unwrap_err().to_string();
        assert!(error.contains("log.csv"), "{error}");
        assert!(!dir.path().join("log.csv.tmp").exists());
        replace_file(&dir.path().join("ok.csv"), b"a,b\n").unwrap();
        assert_eq!(std::fs::read(dir.path().join("ok.csv")).unwrap(), b"a,b\n");
    }

    #[test]
    fn an_epoch_row_takes_each_keys_last_value_within_the_epoch() {
        let h = history(&[
            ("train", "ce", 100, 0.9),
            ("train", "ce", 200, 0.7),
            ("train", "ce", 300, 0.5),
            ("train", "lr", 100, 0.01),
            ("train", "steps/sec", 300, 40.0),
            ("eval", "accuracy", 200, 0.8),
        ]);
        let row = EpochRow::from_history(&h, "train", 2, 201..=300);
        assert_eq!((row.mode.as_str(), row.epoch, row.step), ("train", 2, 300));
        assert_eq!(
            row.values.into_iter().collect::<Vec<_>>(),
            [("ce".to_owned(), 0.5), ("steps/sec".to_owned(), 40.0)]
        );
        let first = EpochRow::from_history(&h, "train", 1, 1..=200);
        assert_eq!(first.values.get("ce"), Some(&0.7));
        assert_eq!(first.values.get("lr"), Some(&0.01));
        assert!(EpochRow::from_history(&h, "test", 1, 1..=200)
            .values
            .is_empty());
    }

    #[test]
    fn values_format_to_the_shortest_text_that_parses_back_exactly() {
        for (value, text) in [
            (0.98, "0.98"),
            (3.0, "3"),
            (-0.0, "-0"),
            (1e-7, "1e-7"),
            (2.5e20, "2.5e20"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(format_value(value), text);
        }
        for bits in [
            1u64,
            0x3FB9_9999_9999_999A,
            0x7FEF_FFFF_FFFF_FFFF,
            0xBFF0_0000_0000_0001,
        ] {
            let value = f64::from_bits(bits);
            assert_eq!(format_value(value).parse::<f64>().unwrap().to_bits(), bits);
        }
    }

    #[test]
    fn compare_runs_loads_files_and_directories_and_names_runs_after_them() {
        let dir = TestDir::new("compare");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let row = |step, value| EpochRow {
            mode: "eval".into(),
            epoch: 1,
            step,
            values: [("ce".to_owned(), value)].into(),
        };
        let mut jsonl = JsonlLogger::create(&a.join("log.jsonl")).unwrap();
        jsonl.write_epoch(&row(10, 0.5)).unwrap();
        let mut csv = CsvLogger::create(&a.join("log.csv")).unwrap();
        csv.write_epoch(&row(10, 0.5)).unwrap();
        let mut other = CsvLogger::create(&b.join("log.csv")).unwrap();
        other.write_epoch(&row(20, 0.25)).unwrap();
        drop((jsonl, csv, other));

        // In a run's version directory (it has a run.json), a logger's output beside the run
        // log (predictions, say) is not a run of its own.
        std::fs::write(a.join(crate::run_dir::RUN_FILE), "{}").unwrap();
        let mut predictions = JsonlLogger::create(&a.join("preds.jsonl")).unwrap();
        predictions.write_epoch(&row(10, 0.75)).unwrap();
        drop(predictions);

        let runs = load_runs(&[a.clone(), b.join("log.csv")]).unwrap();
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "a run's log_dir names it");
        assert_eq!(runs[0].history, history(&[("eval", "ce", 10, 0.5)]));
        assert_eq!(runs[1].history, history(&[("eval", "ce", 20, 0.25)]));

        let out = dir.path().join("cmp.svg");
        compare_runs(&[a.clone(), b.clone()], &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.contains("\nce\n</text>"), "{svg}");

        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let error = compare_runs(&[empty], &out).unwrap_err().to_string();
        assert!(error.contains("no .jsonl or .csv logs"), "{error}");
        let error = read_log(&dir.path().join("log.txt"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("expected a .jsonl or .csv file"), "{error}");
    }
}
