//! `fe-host pipeline`: the data pipeline alone, without the network. It shows a few batches
//! (each key's shape, dtype and value range), or with `--benchmark` measures how fast the
//! pipeline delivers samples, overall and op by op (FastEstimator's `Pipeline.benchmark`).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use fe_plugin_api::Mode;
use tch::{Kind, Tensor};

use super::{OverrideArgs, PluginArgs};
use crate::components::load_manifest_registry;
use crate::error::{Error, Result};
use crate::network::{Batch, KeyId, Keys};
use crate::pipeline::order::Positions;
use crate::pipeline::Pipeline;
use crate::plugins::default_search_path;

/// Batches shown when `--batches` is not given.
const SHOW_BATCHES: usize = 3;
/// Batches benchmarked when `--batches` is not given.
const BENCHMARK_BATCHES: usize = 200;

/// `fe-host pipeline`
#[derive(Args, Debug)]
pub struct PipelineArgs {
    /// The manifest.
    pub manifest: PathBuf,
    /// The mode whose data and pipeline ops run (train, eval, test or infer).
    #[arg(long, default_value = "train")]
    pub mode: String,
    /// The epoch whose schedules are in force.
    #[arg(long, default_value_t = 1)]
    pub epoch: u32,
    /// Batches to show (default 3) or to benchmark (default 200).
    #[arg(long)]
    pub batches: Option<usize>,
    /// Measure samples/s of the whole pipeline and of each op instead of showing batches.
    #[arg(long)]
    pub benchmark: bool,
    /// Only this dataset of the mode (default: each one in force).
    #[arg(long = "ds-id", value_name = "ID")]
    pub ds_id: Option<String>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// Runs `fe-host pipeline`.
pub fn run(args: PipelineArgs) -> Result<()> {
    let manifest = args.overrides.load(&args.manifest)?;
    let mode: Mode = args.mode.parse().map_err(Error::Usage)?;
    let epoch = args.epoch;
    if epoch == 0 {
        return Err(Error::Usage("--epoch must be at least 1".into()));
    }
    let batches = args.batches.unwrap_or(if args.benchmark {
        BENCHMARK_BATCHES
    } else {
        SHOW_BATCHES
    });
    if batches == 0 {
        return Err(Error::Usage("--batches must be at least 1".into()));
    }
    crate::runtime::tune_malloc();
    crate::runtime::set_threads(manifest.run.threads);
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let mut keys = Keys::default();
    let mut pipeline = Pipeline::build(&manifest, &registry, &mut keys)?;
    // Showing batches should not fail on text of different lengths, which only the network
    // could object to; a benchmark measures exactly what training would run.
    pipeline.pad_text = !args.benchmark;
    let keys = Arc::new(keys);
    let ds_ids = chosen_datasets(&pipeline, mode, epoch, args.ds_id.as_deref())?;
    let steps = match mode {
        Mode::Train => manifest.run.train_steps_per_epoch,
        Mode::Eval => manifest.run.eval_steps_per_epoch,
        _ => None,
    };
    for ds_id in ds_ids {
        let context = Context {
            pipeline: &pipeline,
            keys: &keys,
            mode,
            epoch,
            ds_id: &ds_id,
        };
        say(&context.header(steps));
        if args.benchmark {
            context.benchmark(batches)?;
        } else {
            context.show(batches, steps)?;
        }
    }
    Ok(())
}

fn chosen_datasets(
    pipeline: &Pipeline,
    mode: Mode,
    epoch: u32,
    wanted: Option<&str>,
) -> Result<Vec<String>> {
    let ds_ids = pipeline.ds_ids(mode, epoch);
    if ds_ids.is_empty() {
        return Err(Error::Usage(format!(
            "the manifest has no {mode} data in epoch {epoch}; pass --mode with a mode that has some"
        )));
    }
    match wanted {
        None => Ok(ds_ids),
        Some(id) if ds_ids.iter().any(|d| d == id) => Ok(vec![id.to_owned()]),
        Some(id) => {
            let named: Vec<String> = ds_ids
                .iter()
                .map(|d| {
                    if d.is_empty() {
                        "(unnamed)".to_owned()
                    } else {
                        format!("`{d}`")
                    }
                })
                .collect();
            Err(Error::Usage(format!(
                "no {mode} dataset `{id}` in epoch {epoch}; {mode} has {}",
                named.join(", ")
            )))
        }
    }
}

/// Prints `text` now (a benchmark's lines should not wait for the end), ignoring a closed
/// stdout as the other commands do.
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// One dataset of one mode and epoch.
struct Context<'a> {
    pipeline: &'a Pipeline,
    keys: &'a Arc<Keys>,
    mode: Mode,
    epoch: u32,
    ds_id: &'a str,
}

impl Context<'_> {
    fn wanted(&self) -> BTreeSet<KeyId> {
        self.pipeline
            .available_keys(self.mode, self.epoch, self.ds_id)
    }

    /// `train data, epoch 1: 96 samples, 3 batches of 32, 2 workers` and the ops in force.
    fn header(&self, steps: Option<u64>) -> String {
        let (mode, epoch, ds_id) = (self.mode, self.epoch, self.ds_id);
        let which = if ds_id.is_empty() {
            format!("{mode} data")
        } else {
            format!("{mode} dataset `{ds_id}`")
        };
        let (batch_size, drop_last, _) = self.pipeline.batching(mode, epoch, ds_id);
        let ops: Vec<&str> = self
            .pipeline
            .ops_at(mode, epoch, ds_id)
            .iter()
            .map(|op| op.label.as_str())
            .collect();
        format!(
            "{which}, epoch {epoch}: {} samples, {} batches of {batch_size}{}, {} workers\nops: {}\n",
            self.pipeline.samples(mode, epoch, ds_id),
            self.pipeline.batches(mode, epoch, ds_id, steps),
            if drop_last { " (drop_last)" } else { "" },
            self.pipeline.workers.max(1),
            if ops.is_empty() {
                "none".to_owned()
            } else {
                ops.join(", ")
            },
        )
    }

    /// The first `count` batches of the epoch, key by key.
    fn show(&self, count: usize, steps: Option<u64>) -> Result<()> {
        let wanted = self.wanted();
        let loader = self
            .pipeline
            .epoch(self.mode, self.epoch, self.ds_id, &wanted, steps, self.keys)?;
        for (number, batch) in loader.take(count).enumerate() {
            say(&describe_batch(&batch?, number + 1, self.keys)?);
        }
        Ok(())
    }

    /// Samples/s of the real loader (all workers), then of each step on one thread.
    fn benchmark(&self, count: usize) -> Result<()> {
        let (mode, epoch, ds_id) = (self.mode, self.epoch, self.ds_id);
        let wanted = self.wanted();
        // One batch first, so starting threads and first-touch allocations are not measured.
        for batch in self
            .pipeline
            .epoch(mode, epoch, ds_id, &wanted, Some(1), self.keys)?
        {
            batch?;
        }
        let start = Instant::now();
        let (mut batches, mut samples) = (0u64, 0u64);
        let loader =
            self.pipeline
                .epoch(mode, epoch, ds_id, &wanted, Some(count as u64), self.keys)?;
        for batch in loader {
            batches += 1;
            samples += batch?.size.max(0) as u64;
        }
        let seconds = start.elapsed().as_secs_f64().max(1e-9);
        say(&format!(
            "pipeline: {batches} batches, {samples} samples in {seconds:.3} s: {:.1} samples/s ({:.1} batches/s)\n",
            samples as f64 / seconds,
            batches as f64 / seconds,
        ));
        if let Some(bytes) = crate::runtime::peak_resident_bytes() {
            say(&format!(
                "peak resident memory: {:.0} MiB (the whole process: libtorch, plugins, workers)\n",
                bytes as f64 / f64::from(1 << 20)
            ));
        }
        // Per op: the same batches built on this thread with every step timed on its own,
        // one libtorch thread as a worker has (the label says "on one thread").
        crate::runtime::keep_ops_on_this_thread();
        let order = self.pipeline.order(mode, epoch, ds_id, Some(count as u64));
        let to_yield = order.len() as u64;
        let work = self.pipeline.work(
            mode,
            epoch,
            ds_id,
            &wanted,
            Positions::List(Arc::new(order)),
            to_yield,
            count,
            self.keys,
        )?;
        let times = work.profile(count)?;
        let total: f64 = times.iter().map(|t| t.seconds).sum::<f64>().max(1e-12);
        let width = times.iter().map(|t| t.name.len()).max().unwrap_or(0);
        let mut text = format!("per op, on one thread ({count} batches):\n");
        for time in &times {
            text.push_str(&format!(
                "  {:<width$}  {:>9} samples  {:>8.4} s  {:>12.1} samples/s  {:>5.1}%\n",
                time.name,
                time.samples,
                time.seconds,
                time.rate(),
                100.0 * time.seconds / total,
            ));
        }
        say(&text);
        Ok(())
    }
}

/// `batch 1: 32 samples` and a line per key: name, shape, dtype, and the value range (for
/// text, the range of lengths).
fn describe_batch(batch: &Batch, number: usize, keys: &Keys) -> Result<String> {
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut present: Vec<KeyId> = batch.present().collect();
    present.sort_by_key(|k| keys.name(*k));
    for key in present {
        let Some(tensor) = batch.get(key) else {
            continue;
        };
        let name = keys.name(key).to_owned();
        let size = tensor.size();
        let row = match text_lengths(tensor) {
            Some(lengths) => {
                let (min, max) = (lengths.iter().min(), lengths.iter().max());
                let range = match (min, max) {
                    (Some(min), Some(max)) => format!("length min {min}  max {max}"),
                    _ => "empty".to_owned(),
                };
                [name, format!("{:?}", &size[..1]), "str".to_owned(), range]
            }
            None => [
                name,
                format!("{size:?}"),
                dtype(tensor.kind()).to_owned(),
                value_range(tensor).map_err(|e| {
                    Error::Run(format!("cannot read key `{}`: {e}", keys.name(key)))
                })?,
            ],
        };
        rows.push(row);
    }
    let widths: Vec<usize> = (0..3)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut text = format!("batch {number}: {} samples\n", batch.size);
    for [name, shape, kind, range] in &rows {
        text.push_str(&format!(
            "  {name:<w0$}  {shape:<w1$}  {kind:<w2$}  {range}\n",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        ));
    }
    Ok(text)
}

/// The lengths of a batch of text, or `None` when it is not text. Text is a 1-D uint8 tensor
/// per sample, collated into `[batch, longest]` with zero bytes after the shorter ones. Images
/// and other byte data can look alike, so a batch counts as text only when every row, less
/// its trailing zeros, is UTF-8 without control characters, and some row is not empty.
fn text_lengths(tensor: &Tensor) -> Option<Vec<usize>> {
    if tensor.kind() != Kind::Uint8 || tensor.dim() != 2 {
        return None;
    }
    let width = usize::try_from(tensor.size()[1]).ok()?;
    let bytes = Vec::<u8>::try_from(tensor.f_contiguous().ok()?.f_flatten(0, -1).ok()?).ok()?;
    let mut lengths = Vec::new();
    for row in bytes.chunks(width.max(1)) {
        let len = row.iter().rposition(|&b| b != 0).map_or(0, |last| last + 1);
        let text = std::str::from_utf8(&row[..len]).ok()?;
        if text.chars().any(|c| c.is_control() && c != '\t') {
            return None;
        }
        lengths.push(text.chars().count());
    }
    lengths.iter().any(|&l| l > 0).then_some(lengths)
}

/// numpy's name of a tensor kind.
fn dtype(kind: Kind) -> &'static str {
    match kind {
        Kind::Uint8 => "uint8",
        Kind::Int8 => "int8",
        Kind::Int16 => "int16",
        Kind::Int => "int32",
        Kind::Int64 => "int64",
        Kind::Half => "float16",
        Kind::BFloat16 => "bfloat16",
        Kind::Float => "float32",
        Kind::Double => "float64",
        Kind::Bool => "bool",
        Kind::ComplexFloat => "complex64",
        Kind::ComplexDouble => "complex128",
        _ => "other",
    }
}

/// `min 0  max 1` (`empty` for a tensor without elements).
fn value_range(tensor: &Tensor) -> std::result::Result<String, String> {
    if tensor.numel() == 0 {
        return Ok("empty".to_owned());
    }
    if matches!(
        tensor.kind(),
        Kind::ComplexHalf | Kind::ComplexFloat | Kind::ComplexDouble
    ) {
        return Ok("complex".to_owned());
    }
    let values = tensor.f_to_kind(Kind::Double).map_err(crate::tch_message)?;
    let min = values
        .f_min()
        .and_then(|t| t.f_double_value(&[]))
        .map_err(crate::tch_message)?;
    let max = values
        .f_max()
        .and_then(|t| t.f_double_value(&[]))
        .map_err(crate::tch_message)?;
    Ok(format!("min {}  max {}", number(min), number(max)))
}

/// A value as short as it reads: integers without a fraction, others to 6 decimals.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else if value.is_finite() {
        let text = format!("{value:.6}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_short() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1.0 / 3.0), "0.333333");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn text_is_told_apart_from_bytes() {
        let text = Tensor::from_slice(b"cat\0\0dogs\0tiger").reshape([3, 5]);
        assert_eq!(text_lengths(&text), Some(vec![3, 4, 5]));
        let pixels = Tensor::from_slice(&[0u8, 255, 3, 0, 7, 9]).reshape([2, 3]);
        assert_eq!(text_lengths(&pixels), None);
        assert_eq!(
            text_lengths(&Tensor::zeros([2, 3], (Kind::Uint8, tch::Device::Cpu))),
            None
        );
        assert_eq!(text_lengths(&Tensor::from_slice(b"abc")), None);
    }

    #[test]
    fn dtypes_use_numpy_names() {
        assert_eq!(dtype(Kind::Float), "float32");
        assert_eq!(dtype(Kind::Int), "int32");
        assert_eq!(dtype(Kind::Uint8), "uint8");
    }

    #[test]
    fn batches_are_described_key_by_key() {
        let mut keys = Keys::default();
        let (x, name) = (keys.intern("x"), keys.intern("name"));
        let mut batch = Batch::with_keys(keys.len());
        batch.size = 2;
        batch.set(
            x,
            Tensor::from_slice(&[0.0f32, 0.25, 1.0, 0.5]).reshape([2, 1, 2]),
        );
        batch.set(name, Tensor::from_slice(b"ab\0xyz").reshape([2, 3]));
        let text = describe_batch(&batch, 1, &keys).unwrap();
        assert_eq!(
            text,
            "batch 1: 2 samples\n  name  [2]        str      length min 2  max 3\n  x     [2, 1, 2]  float32  min 0  max 1\n"
        );
    }
}
