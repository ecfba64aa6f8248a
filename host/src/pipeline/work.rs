//! What it takes to build any batch of an epoch: the dataset, the ops in force, the batching,
//! and how a sample or a batch goes through them.
//!
//! Ops run in three places. Ops before the `Batch` op (all of them without one) run on each
//! sample, except a trailing run of batchable ops, which is *deferred*: it runs once on the
//! stacked batch (same result, far fewer calls). Ops after the `Batch` op run on the batch.
//! Every op gets a seed from the sample (or the batch's first sample) and its position, so the
//! same epoch gives the same batches whichever worker builds them.

use std::sync::Arc;

use fe_plugin_api::{Mode, StepContext};
use tch::Device;

use super::collate::{Collator, Stacked};
use super::ops::{Flow, OpFailure, PipelineOp};
use super::order::Positions;
use super::Source;
use crate::batch::{Batch, KeyId, Keys};
use crate::error::{Error, Result};

/// Everything the workers need to build any batch of the epoch.
pub struct EpochWork {
    /// The dataset.
    pub source: Arc<dyn Source>,
    /// Key id of each of the dataset's keys.
    pub source_keys: Vec<KeyId>,
    /// Ops before the `Batch` op (all ops without one), in order, less the leading ones the
    /// pipeline cache ran already.
    pub ops: Vec<Arc<PipelineOp>>,
    /// Ops the cache ran (`ops[0]` is the epoch's op at this position): seeds come from
    /// positions among all of the epoch's ops, so a cache leaves every later op's draws as
    /// they are without it.
    pub first_op: usize,
    /// Ops after the `Batch` op, run on batches.
    pub batch_ops: Vec<Arc<PipelineOp>>,
    /// Keys to deliver.
    pub wanted: Vec<KeyId>,
    /// The dataset index at each position of the epoch's sample stream.
    pub positions: Positions,
    /// Samples the epoch delivers (FastEstimator's `samples_to_yield`); samples a filter
    /// drops without replacement count too.
    pub to_yield: u64,
    /// Samples per batch.
    pub batch_size: usize,
    /// Drop the last, incomplete batch.
    pub drop_last: bool,
    /// Pad ragged keys with this value when collating.
    pub pad_value: Option<f64>,
    /// Pad ragged text keys with zero bytes (for showing batches).
    pub pad_text: bool,
    /// Batches in the epoch: exact without filters, an upper bound with filters that
    /// shorten the epoch.
    pub batches: usize,
    /// The first batch to deliver (a run resumed mid-epoch skips the ones it trained on).
    pub first_batch: usize,
    /// Mode, for op contexts and messages.
    pub mode: Mode,
    /// Epoch.
    pub epoch: u32,
    /// Dataset id.
    pub ds_id: String,
    /// Run seed.
    pub seed: u64,
    /// Key slots of a batch.
    pub width: usize,
    /// Key names, for messages.
    pub keys: Arc<Keys>,
    /// Copy finished batches into page-locked memory for this (CUDA) device.
    pub pin: Option<Device>,
}

/// A sample after the per-sample ops: kept (with its data unless only scanned) or dropped.
pub enum Outcome {
    /// Kept: its dataset index and, unless scanning, the processed sample.
    Kept(u64, Option<Batch>),
    /// A filter dropped it.
    Removed {
        /// Whether another sample takes its place.
        replacement: bool,
    },
}

/// A finished batch, or the news that a filter after the `Batch` op dropped it.
pub enum Finished {
    /// Ready for the network.
    Batch(Batch),
    /// Dropped by a filter on the batch.
    Removed {
        /// Whether other samples take its place.
        replacement: bool,
    },
}

/// The seed of dataset sample `index` in `epoch` of `mode`'s dataset `ds_id`: the same sample
/// read in another mode, under another ds_id or in another epoch gets other randomness.
pub fn sample_seed(run_seed: u64, mode: Mode, ds_id: &str, epoch: u32, index: u64) -> u64 {
    let stream = crate::rng::mix(crate::rng::hash_str(ds_id), mode as u64);
    crate::rng::mix(
        crate::rng::mix(run_seed, stream),
        crate::rng::mix(epoch as u64, index),
    )
}

impl EpochWork {
    /// Index of the first deferred op: the trailing run of batchable ops before the `Batch`
    /// op, which runs once per batch; the ones before it run per sample.
    pub fn split(&self) -> usize {
        self.ops.len()
            - self
                .ops
                .iter()
                .rev()
                .take_while(|op| op.batchable())
                .count()
    }

    /// `true` when some op in force can drop samples or batches.
    pub fn filters(&self) -> bool {
        self.ops
            .iter()
            .chain(&self.batch_ops)
            .any(|op| op.filters())
    }

    /// `true` when some op in force drops samples or batches without replacement, so that
    /// the data decides how many batches the epoch has.
    pub fn shortens(&self) -> bool {
        self.ops
            .iter()
            .chain(&self.batch_ops)
            .any(|op| op.shortens_epochs())
    }

    /// `true` when an op after the `Batch` op can drop whole batches.
    pub fn filters_batches(&self) -> bool {
        self.batch_ops.iter().any(|op| op.filters())
    }

    /// Ops up to the last one that filters samples: what decides whether a sample is kept.
    pub fn deciding_ops(&self) -> usize {
        self.ops
            .iter()
            .rposition(|op| op.filters())
            .map_or(0, |i| i + 1)
    }

    /// Keys a batch must hold when stacked: the wanted ones and every input of the ops that
    /// run on the batch.
    pub(super) fn needed(&self) -> Vec<KeyId> {
        let mut needed = self.wanted.clone();
        for op in self.ops[self.split()..].iter().chain(&self.batch_ops) {
            needed.extend(op.inputs.iter().copied());
        }
        needed
    }

    /// `train epoch 1` (with the ds_id), for messages.
    pub fn context_text(&self) -> String {
        if self.ds_id.is_empty() {
            format!("{} epoch {}", self.mode, self.epoch)
        } else {
            format!("{} epoch {}, ds_id {}", self.mode, self.epoch, self.ds_id)
        }
    }

    pub(super) fn collator(&self) -> Collator<'_> {
        Collator {
            keys: &self.keys,
            width: self.width,
            pad_value: self.pad_value,
            pad_text: self.pad_text,
            context: self.context_text(),
        }
    }

    fn step(&self, seed: u64) -> StepContext<'_> {
        StepContext {
            mode: self.mode,
            epoch: self.epoch,
            global_step: 0,
            batch_idx: 0,
            ds_id: self.ds_id.as_str().into(),
            warmup: false,
            seed,
        }
    }

    fn sample_seed(&self, index: u64) -> u64 {
        sample_seed(self.seed, self.mode, &self.ds_id, self.epoch, index)
    }

    /// Runs `ops` (whose first sits at `position` among the epoch's ops) on a sample, or on a
    /// batch whose first sample is `index`.
    pub fn run_ops(
        &self,
        data: &mut Batch,
        ops: &[Arc<PipelineOp>],
        position: usize,
        index: u64,
        batched: bool,
    ) -> Result<Flow> {
        let seed = self.sample_seed(index);
        for (offset, op) in ops.iter().enumerate() {
            let at = self.first_op + position + offset;
            let ctx = self.step(crate::rng::mix(seed, at as u64));
            let flow = op
                .run(data, &ctx, batched, &self.keys)
                .map_err(|failure| self.op_error(failure, index, batched))?;
            if flow != Flow::Keep {
                return Ok(flow);
            }
        }
        Ok(Flow::Keep)
    }

    fn op_error(&self, failure: OpFailure, index: u64, batched: bool) -> Error {
        let what = if batched {
            format!("the batch starting at dataset sample {index}")
        } else {
            format!("dataset sample {index}")
        };
        Error::Component {
            error: failure.error,
            during: format!(
                "pipeline, {}, {}, {what}",
                failure.label,
                self.context_text()
            ),
        }
    }

    pub(super) fn read_sample(&self, index: u64) -> Result<Batch> {
        let values = self.source.get(index).map_err(|message| {
            Error::Run(format!(
                "pipeline ({}): dataset sample {index}: {message}",
                self.context_text()
            ))
        })?;
        let mut sample = Batch::with_keys(self.width);
        for (key, value) in self.source_keys.iter().zip(values) {
            sample.set(*key, value);
        }
        Ok(sample)
    }

    /// Reads sample `index` and runs the per-sample ops on it; with `scan`, only the ops that
    /// decide whether it is kept, and without keeping the data.
    pub fn sample(&self, index: u64, scan: bool) -> Result<Outcome> {
        let mut sample = self.read_sample(index)?;
        let end = if scan {
            self.deciding_ops()
        } else {
            self.split()
        };
        match self.run_ops(&mut sample, &self.ops[..end], 0, index, false)? {
            Flow::Keep => Ok(Outcome::Kept(index, (!scan).then_some(sample))),
            Flow::Remove { replacement } => Ok(Outcome::Removed { replacement }),
        }
    }

    /// Builds batch `number - 1` of an epoch without filters: the samples at positions
    /// `b * batch_size ..` up to the epoch's end.
    pub fn fixed_batch(&self, b: usize) -> Result<Batch> {
        let start = (b * self.batch_size) as u64;
        let len = (self.to_yield.saturating_sub(start) as usize).min(self.batch_size);
        let indices = self.positions.indices(start, len);
        let finished = if self.split() == 0 {
            // Every per-sample op can run on the batch: read it in one go when the dataset
            // can stack its samples (it cannot when they differ in shape).
            match self.source.get_batch(&indices) {
                Ok(values) => {
                    let mut batch = Batch::with_keys(self.width);
                    batch.size = indices.len() as i64;
                    for (key, value) in self.source_keys.iter().zip(values) {
                        batch.set(*key, value);
                    }
                    self.finish_stacked(batch, &indices, true)?
                }
                Err(_) => self.finish(self.read_all(&indices)?, &indices, b + 1)?,
            }
        } else {
            let samples = indices
                .iter()
                .map(|&i| match self.sample(i, false)? {
                    Outcome::Kept(_, Some(sample)) => Ok(sample),
                    _ => Err(Error::Internal(
                        "a filter ran in an epoch planned without filters".into(),
                    )),
                })
                .collect::<Result<Vec<_>>>()?;
            self.finish(samples, &indices, b + 1)?
        };
        match finished {
            Finished::Batch(batch) => Ok(batch),
            Finished::Removed { .. } => Err(Error::Internal(
                "a batch was filtered in an epoch planned without filters".into(),
            )),
        }
    }

    fn read_all(&self, indices: &[u64]) -> Result<Vec<Batch>> {
        indices.iter().map(|&i| self.read_sample(i)).collect()
    }

    /// Collates processed samples (dataset `indices`) into batch `number` and runs the ops
    /// that work on batches.
    pub fn finish(&self, samples: Vec<Batch>, indices: &[u64], number: usize) -> Result<Finished> {
        let split = self.split();
        let deferred = split < self.ops.len();
        let collator = self.collator();
        match collator.stack(samples, &self.needed(), indices, number, !deferred)? {
            Stacked::Batch(batch) => self.finish_stacked(batch, indices, deferred),
            Stacked::Ragged(mut samples) => {
                // Shapes still differ: the deferred ops run per sample after all, and the
                // stacking (or padding) comes after them.
                for (sample, &index) in samples.iter_mut().zip(indices) {
                    self.run_ops(sample, &self.ops[split..], split, index, false)?;
                }
                match collator.stack(samples, &self.needed(), indices, number, true)? {
                    Stacked::Batch(batch) => self.finish_stacked(batch, indices, false),
                    Stacked::Ragged(_) => Err(Error::Internal(
                        "strict stacking returned ragged samples".into(),
                    )),
                }
            }
        }
    }

    /// Runs the deferred ops (when `deferred`) and the batch ops on a stacked batch, then
    /// keeps the wanted keys.
    fn finish_stacked(
        &self,
        mut batch: Batch,
        indices: &[u64],
        deferred: bool,
    ) -> Result<Finished> {
        let first = indices.first().copied().unwrap_or(0);
        batch.size = indices.len() as i64;
        if deferred {
            let split = self.split();
            self.run_ops(&mut batch, &self.ops[split..], split, first, true)?;
        }
        let position = self.ops.len() + 1;
        if let Flow::Remove { replacement } =
            self.run_ops(&mut batch, &self.batch_ops, position, first, true)?
        {
            return Ok(Finished::Removed { replacement });
        }
        let mut out = Batch::with_keys(self.width);
        out.size = batch.size;
        for key in &self.wanted {
            if let Some(tensor) = batch.take(*key) {
                out.set(*key, tensor);
            }
        }
        if let Some(device) = self.pin {
            super::collate::pin(&mut out, &self.wanted, device)?;
        }
        Ok(Finished::Batch(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_of_a_sample_seed_changes_it() {
        let base = sample_seed(7, Mode::Train, "", 1, 3);
        assert_eq!(base, sample_seed(7, Mode::Train, "", 1, 3));
        for other in [
            sample_seed(8, Mode::Train, "", 1, 3),
            sample_seed(7, Mode::Eval, "", 1, 3),
            sample_seed(7, Mode::Train, "a", 1, 3),
            sample_seed(7, Mode::Train, "", 2, 3),
            sample_seed(7, Mode::Train, "", 1, 4),
        ] {
            assert_ne!(base, other);
        }
        // Epoch and index do not trade places.
        assert_ne!(
            sample_seed(7, Mode::Train, "", 1, 2),
            sample_seed(7, Mode::Train, "", 2, 1)
        );
    }
}
