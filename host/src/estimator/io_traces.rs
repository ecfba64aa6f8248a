//! Traces that write a run's logs: `CSVLogger`, `JSONLLogger` and `TensorBoard` (the model
//! files are saver_traces.rs'). Paths are relative to the manifest.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use tch::Tensor;

use super::data::{Data, Logged};
use super::traces::{Cx, HostTrace};
use crate::error::Result;
use crate::network::{Batch, KeyId};
use crate::report::{
    tb_image, CsvLogger, EpochRow, EventWriter, InstanceId, InstanceRow, JsonlLogger, SampleValue,
};

/// The scalars of `data` worth a log row: every logged number, or only `monitor` keys.
fn scalars(data: &Data, monitor: &Option<Vec<String>>) -> BTreeMap<String, f64> {
    data.logged()
        .filter(|e| monitor.as_ref().is_none_or(|keys| keys.contains(&e.key)))
        .filter_map(|e| e.value.as_f64().map(|v| (e.key.clone(), v)))
        .collect()
}

fn epoch_row(cx: &Cx<'_>, values: BTreeMap<String, f64>) -> EpochRow {
    EpochRow {
        mode: cx.system.mode.map_or("train".to_owned(), |m| m.to_string()),
        epoch: cx.system.epoch_idx,
        step: cx.system.global_step,
        values,
    }
}

/// `[[traces]] trace = "CSVLogger"` or `"JSONLLogger"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggerConfig {
    /// The log file (relative to the manifest).
    pub filename: PathBuf,
    /// Only these keys (default: everything logged).
    #[serde(default)]
    pub monitor_names: Option<Vec<String>>,
    /// JSONL only: the batch key identifying each sample, for per-instance rows.
    #[serde(default)]
    pub instance_id_key: Option<String>,
    /// JSONL only: per-sample batch keys written in per-instance rows.
    #[serde(default)]
    pub instance_keys: Vec<String>,
}

/// Where a logger writes.
#[derive(Debug, Clone)]
pub enum LogFile {
    /// A CSV file: one row per (mode, epoch).
    Csv(PathBuf),
    /// A JSONL file: one row per (mode, epoch), and per instance when asked.
    Jsonl(PathBuf),
}

/// A log file, open.
enum OpenLog {
    Csv(CsvLogger),
    Jsonl(JsonlLogger),
}

impl LogFile {
    /// Opens the log when the run begins (never at build, so `fe-host render` touches no
    /// file): a fresh run starts it empty, a resumed run keeps the rows up to its checkpoint.
    fn open(&self, resumed_at: Option<u64>) -> Result<OpenLog> {
        Ok(match (self, resumed_at) {
            (Self::Csv(path), None) => OpenLog::Csv(CsvLogger::create(path)?),
            (Self::Csv(path), Some(step)) => OpenLog::Csv(CsvLogger::resume(path, step)?),
            (Self::Jsonl(path), None) => OpenLog::Jsonl(JsonlLogger::create(path)?),
            (Self::Jsonl(path), Some(step)) => OpenLog::Jsonl(JsonlLogger::resume(path, step)?),
        })
    }
}

/// Writes one row per epoch and mode with everything logged in it (FastEstimator's
/// `CSVLogger`), and with JSONL optionally one row per sample.
pub struct EpochLogger {
    target: LogFile,
    file: Option<OpenLog>,
    /// What was logged after batches this epoch (the last value of each key), so the epoch's
    /// row has the training loss logged every `log_steps` too.
    logged: BTreeMap<String, f64>,
    monitor: Option<Vec<String>>,
    /// `(id key, [(value key, name)])`.
    instances: Option<(KeyId, Vec<(KeyId, String)>)>,
    /// Instance keys already warned about for not holding a value per sample.
    not_per_sample: std::collections::BTreeSet<String>,
    /// A row at every step that logged something, not only one per epoch (the run log, so
    /// that `fe-host logs` re-plots the curves the run's own plot has).
    every_step: bool,
    /// Data parallel: this epoch's instance rows, as lines, until the ranks gather them at
    /// its end (every rank's samples are logged, not only rank 0's).
    pending: String,
}

impl EpochLogger {
    /// Logs into `file`.
    pub fn new(
        file: LogFile,
        monitor: Option<Vec<String>>,
        instances: Option<(KeyId, Vec<(KeyId, String)>)>,
    ) -> Self {
        Self {
            target: file,
            file: None,
            logged: BTreeMap::new(),
            monitor,
            instances,
            not_per_sample: Default::default(),
            every_step: false,
            pending: String::new(),
        }
    }

    /// The run log (`run.log_dir`): into `file`, a row at every step that logged a value and
    /// at every epoch's end, each with what was logged then.
    pub fn every_step(file: LogFile) -> Self {
        Self {
            every_step: true,
            ..Self::new(file, None, None)
        }
    }

    fn instance_rows(&mut self, cx: &Cx<'_>, batch: &Batch) -> Result<Vec<InstanceRow>> {
        let Some((id_key, keys)) = &self.instances else {
            return Ok(Vec::new());
        };
        // A mode without the id writes no rows; the estimator checked at start that some mode
        // the logger runs in has it, and that every mode with it has the keys too.
        let Some(ids) = batch.get(*id_key) else {
            return Ok(Vec::new());
        };
        let n = batch.size.max(0) as usize;
        let Some((_, ids)) = per_sample(ids, n).filter(|(shape, _)| shape.is_empty()) else {
            return Err(crate::error::Error::Run(format!(
                "JSONLLogger: the instance_id_key `{}` is shaped {:?}, not one id per sample of a batch of {n}",
                cx.network.keys.name(*id_key),
                ids.size()
            )));
        };
        let mut columns = Vec::new();
        for (key, name) in keys {
            let Some(tensor) = batch.get(*key) else {
                continue;
            };
            match per_sample(tensor, n) {
                Some(column) => columns.push((name.clone(), column)),
                None => {
                    if self.not_per_sample.insert(name.clone()) {
                        eprintln!(
                            "warning: JSONLLogger: `{name}` is shaped {:?} in a batch of {n}, not a value per sample; it is left out of the per-instance rows",
                            tensor.size()
                        );
                    }
                }
            }
        }
        let base = epoch_row(cx, BTreeMap::new());
        Ok(ids
            .iter()
            .enumerate()
            .map(|(i, &id)| InstanceRow {
                mode: base.mode.clone(),
                epoch: base.epoch,
                step: base.step,
                id: InstanceId::Int(id as i64),
                values: columns
                    .iter()
                    .map(|(name, (shape, numbers))| {
                        let size = shape.iter().product::<usize>();
                        let value = SampleValue {
                            shape: shape.clone(),
                            numbers: numbers[i * size..(i + 1) * size].to_vec(),
                        };
                        (name.clone(), value)
                    })
                    .collect(),
            })
            .collect())
    }
}

/// The values of each of a batch's `n` samples in `tensor` (`[n, ...]`): the shape of one
/// sample's value, and all of them row-major; `None` for a tensor that is not one value (or
/// array) per sample, such as a batch-mean loss.
fn per_sample(tensor: &Tensor, n: usize) -> Option<(Vec<usize>, Vec<f64>)> {
    let size = tensor.size();
    let (&rows, rest) = size.split_first()?;
    if rows != n as i64 {
        return None;
    }
    let shape = rest.iter().map(|&d| d as usize).collect();
    let numbers = tensor
        .f_to_kind(tch::Kind::Double)
        .and_then(|t| t.f_reshape([-1]))
        .ok()
        .and_then(|t| Vec::<f64>::try_from(&t).ok())?;
    Some((shape, numbers))
}

impl HostTrace for EpochLogger {
    fn writes_files_only(&self) -> bool {
        // Per-instance rows come from every rank: each takes part in gathering them.
        self.instances.is_none()
    }

    fn written_logs(&self) -> Vec<PathBuf> {
        // The run log is in the closing lines already, beside its plot.
        if self.every_step || self.file.is_none() {
            return Vec::new();
        }
        let (LogFile::Csv(path) | LogFile::Jsonl(path)) = &self.target;
        vec![path.clone()]
    }

    fn inputs(&self) -> Vec<KeyId> {
        match &self.instances {
            Some((id, keys)) => std::iter::once(*id)
                .chain(keys.iter().map(|(k, _)| *k))
                .collect(),
            None => Vec::new(),
        }
    }

    fn per_sample_keys(&self) -> Option<(KeyId, Vec<KeyId>)> {
        self.instances
            .as_ref()
            .map(|(id, keys)| (*id, keys.iter().map(|(k, _)| *k).collect()))
    }

    fn reads_everything(&self) -> bool {
        true
    }

    fn on_begin(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let resumed_at = (cx.system.global_step > 0).then_some(cx.system.global_step);
        if cx.strategy.writes_outputs() {
            self.file = Some(self.target.open(resumed_at)?);
        }
        Ok(())
    }

    fn on_epoch_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.logged.clear();
        Ok(())
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, batch: &Batch) -> Result<()> {
        if self.every_step {
            let values = scalars(cx.data, &self.monitor);
            return match &mut self.file {
                Some(OpenLog::Jsonl(file)) if !values.is_empty() => {
                    file.write_step(&epoch_row(cx, values))
                }
                _ => Ok(()),
            };
        }
        self.logged.extend(scalars(cx.data, &self.monitor));
        let rows = self.instance_rows(cx, batch)?;
        if cx.strategy.is_data_parallel() {
            self.pending
                .extend(rows.iter().map(crate::report::instance_line));
            return Ok(());
        }
        if let Some(OpenLog::Jsonl(file)) = &mut self.file {
            for row in &rows {
                file.write_instance(row)?;
            }
        }
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        if let (true, Some(_)) = (cx.strategy.is_data_parallel(), &self.instances) {
            let pending = std::mem::take(&mut self.pending);
            let every_rank = cx.strategy.all_gather_bytes(pending.as_bytes())?;
            if let Some(OpenLog::Jsonl(file)) = &mut self.file {
                for lines in every_rank {
                    file.write_lines(&String::from_utf8_lossy(&lines))?;
                }
            }
        }
        let mut values = std::mem::take(&mut self.logged);
        values.extend(scalars(cx.data, &self.monitor));
        if values.is_empty() {
            return Ok(());
        }
        let row = epoch_row(cx, values);
        match &mut self.file {
            Some(OpenLog::Csv(file)) => file.write_epoch(&row),
            Some(OpenLog::Jsonl(file)) => file.write_epoch(&row),
            None => Ok(()),
        }
    }

    fn on_end(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.flush()
    }

    fn flush(&mut self) -> Result<()> {
        match &mut self.file {
            Some(OpenLog::Jsonl(file)) => file.flush(),
            _ => Ok(()),
        }
    }
}

/// `[[traces]] trace = "TensorBoard"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorBoardConfig {
    /// The TensorBoard log directory (relative to the manifest); each mode writes into its own
    /// subdirectory, so TensorBoard overlays their curves.
    pub log_dir: PathBuf,
}

/// Writes every logged scalar as a TensorBoard event, per mode, at the step it was logged, and
/// at epoch ends every image value (uint8 `[H, W, C]`, logged or not) as an image summary.
pub struct TensorBoard {
    dir: PathBuf,
    writers: BTreeMap<String, EventWriter>,
}

impl TensorBoard {
    /// Writes under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            writers: BTreeMap::new(),
        }
    }

    fn write(&mut self, cx: &Cx<'_>, flush: bool) -> Result<()> {
        let mode = cx.system.mode.map_or("train".to_owned(), |m| m.to_string());
        let values = scalars(cx.data, &None);
        // Images (uint8 [H, W, C] values, see report::tb_image) only at epoch ends: a montage
        // per batch would swamp the event file.
        let images: Vec<_> = cx
            .data
            .entries()
            .filter(|_| flush)
            .filter_map(|e| match &e.value {
                Logged::Tensor(t) if tb_image::is_image(t) => Some((e.key.as_str(), t)),
                _ => None,
            })
            .collect();
        if values.is_empty() && images.is_empty() {
            return Ok(());
        }
        let writer = match self.writers.entry(mode.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(EventWriter::create(&self.dir.join(&mode))?)
            }
        };
        let step = cx.system.global_step;
        for (key, value) in &values {
            writer.add_scalar(key, step, *value)?;
        }
        for (key, tensor) in images {
            writer.add_image(key, step, tb_image::summary_image(key, tensor)?)?;
        }
        if flush {
            writer.flush()?;
        }
        Ok(())
    }
}

impl HostTrace for TensorBoard {
    fn writes_files_only(&self) -> bool {
        true
    }

    fn written_logs(&self) -> Vec<PathBuf> {
        if self.writers.is_empty() {
            Vec::new()
        } else {
            vec![self.dir.clone()]
        }
    }

    fn reads_everything(&self) -> bool {
        true
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, _batch: &Batch) -> Result<()> {
        self.write(cx, false)
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        self.write(cx, true)
    }

    fn on_end(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.flush()
    }

    fn flush(&mut self) -> Result<()> {
        for writer in self.writers.values_mut() {
            writer.flush()?;
        }
        Ok(())
    }
}
