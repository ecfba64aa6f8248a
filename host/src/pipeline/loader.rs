//! One epoch of batches, prepared on worker threads ahead of the network.
//!
//! Batch `b` is built entirely by worker `b % W` and handed over through that worker's own
//! bounded queue; the consumer reads the queues in turn. Batches therefore come out in order
//! and identical for any number of workers: every random choice is seeded by the sample index,
//! never by which thread did the work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver};
use fe_plugin_api::{Mode, StepContext};
use tch::Tensor;

use super::{PipelineOp, Source};
use crate::error::{Error, Result};
use crate::network::{Batch, KeyId};

/// What the workers need to build any batch of the epoch.
pub struct EpochWork {
    /// The dataset.
    pub source: Arc<dyn Source>,
    /// Key id of each of the dataset's keys.
    pub source_keys: Vec<KeyId>,
    /// Ops active in this epoch, in order.
    pub ops: Vec<Arc<PipelineOp>>,
    /// Keys to collate into the batch.
    pub wanted: Vec<KeyId>,
    /// Dataset indices in epoch order, already cut into batches of `batch_size`.
    pub order: Vec<u64>,
    /// Samples per batch.
    pub batch_size: usize,
    /// Batches in the epoch.
    pub batches: usize,
    /// The first batch to build (a run resumed mid-epoch skips the ones it already trained on).
    pub first_batch: usize,
    /// Mode, epoch and dataset id, for op contexts and messages.
    pub mode: Mode,
    /// Epoch.
    pub epoch: u32,
    /// Dataset id.
    pub ds_id: String,
    /// Run seed.
    pub seed: u64,
    /// Number of key slots.
    pub width: usize,
    /// Key names, for messages.
    pub keys: Arc<crate::network::Keys>,
}

impl EpochWork {
    /// Index of the first op of the trailing run of batchable ops: those run once per batch,
    /// the ones before once per sample.
    fn batched_from(&self) -> usize {
        self.ops.len()
            - self
                .ops
                .iter()
                .rev()
                .take_while(|op| op.handle.batchable())
                .count()
    }

    fn context(&self, seed: u64) -> StepContext<'_> {
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

    fn during(&self, what: String) -> String {
        format!("pipeline, {} epoch {}, {what}", self.mode, self.epoch)
    }

    /// Builds batch `index`: per-sample ops on each sample, then the batchable ops once on the
    /// stacked batch. Same result as running every op per sample.
    pub fn batch(&self, index: usize) -> Result<Batch> {
        let start = index * self.batch_size;
        let end = (start + self.batch_size).min(self.order.len());
        let indices = &self.order[start..end];
        let split = self.batched_from();
        let mut batch = if split == 0 {
            let values = self.source.get_batch(indices).map_err(|message| {
                Error::Run(self.during(format!("batch {}: {message}", index + 1)))
            })?;
            let mut batch = Batch::with_keys(self.width);
            for (key, value) in self.source_keys.iter().zip(values) {
                batch.set(*key, value);
            }
            batch
        } else {
            let samples = indices
                .iter()
                .map(|&i| self.sample(i, &self.ops[..split]))
                .collect::<Result<Vec<_>>>()?;
            let mut needed: Vec<KeyId> = self.wanted.clone();
            needed.extend(
                self.ops[split..]
                    .iter()
                    .flat_map(|op| op.inputs.iter().copied()),
            );
            let strict = split == self.ops.len();
            match self.stack(samples, &needed, indices, index, strict)? {
                Stacked::Batch(batch) => batch,
                Stacked::Ragged(mut samples) => {
                    // Samples still differ in shape: run the rest per sample too.
                    for (sample, &i) in samples.iter_mut().zip(indices) {
                        self.run_ops(sample, &self.ops[split..], i, false)?;
                    }
                    return match self.stack(samples, &self.wanted, indices, index, true)? {
                        Stacked::Batch(mut batch) => {
                            batch.size = indices.len() as i64;
                            Ok(batch)
                        }
                        Stacked::Ragged(_) => Err(Error::Internal(
                            "strict stacking returned ragged samples".into(),
                        )),
                    };
                }
            }
        };
        batch.size = indices.len() as i64;
        let first = indices.first().copied().unwrap_or(0);
        self.run_ops(&mut batch, &self.ops[split..], first, true)?;
        Ok(self.keep_wanted(batch))
    }

    fn keep_wanted(&self, mut batch: Batch) -> Batch {
        let mut out = Batch::with_keys(self.width);
        out.size = batch.size;
        for key in &self.wanted {
            if let Some(tensor) = batch.take(*key) {
                out.set(*key, tensor);
            }
        }
        out
    }

    /// Reads sample `index` and runs `ops` on it.
    fn sample(&self, index: u64, ops: &[Arc<PipelineOp>]) -> Result<Batch> {
        let values = self.source.get(index).map_err(|message| {
            Error::Run(self.during(format!("dataset sample {index}: {message}")))
        })?;
        let mut sample = Batch::with_keys(self.width);
        for (key, value) in self.source_keys.iter().zip(values) {
            sample.set(*key, value);
        }
        self.run_ops(&mut sample, ops, index, false)?;
        Ok(sample)
    }

    /// Runs `ops` on a sample (`batched == false`) or on a batch whose first sample is `index`.
    fn run_ops(
        &self,
        data: &mut Batch,
        ops: &[Arc<PipelineOp>],
        index: u64,
        batched: bool,
    ) -> Result<()> {
        let sample_seed = crate::rng::mix(crate::rng::mix(self.seed, self.epoch as u64), index);
        let what = || {
            if batched {
                format!("the batch starting at dataset sample {index}")
            } else {
                format!("dataset sample {index}")
            }
        };
        for (position, op) in ops.iter().enumerate() {
            let ctx = self.context(crate::rng::mix(sample_seed, position as u64));
            let outputs = {
                let mut inputs = Vec::with_capacity(op.inputs.len());
                for key in &op.inputs {
                    match data.get(*key) {
                        Some(t) => inputs.push(t),
                        None => {
                            return Err(Error::Run(format!(
                                "{} needs key `{}`, which {} does not have ({})",
                                op.label,
                                self.keys.name(*key),
                                what(),
                                self.during(String::new()).trim_end_matches(", ")
                            )))
                        }
                    }
                }
                if batched {
                    op.handle.forward_batch(&inputs, &ctx)
                } else {
                    op.handle.forward(&inputs, &ctx)
                }
            }
            .map_err(|error| Error::Component {
                error,
                during: self.during(what()),
            })?;
            if outputs.len() != op.outputs.len() {
                return Err(Error::Run(format!(
                    "{} returned {} tensor(s) for {} output key(s)",
                    op.label,
                    outputs.len(),
                    op.outputs.len()
                )));
            }
            for (key, value) in op.outputs.iter().zip(outputs) {
                data.set(*key, value);
            }
        }
        Ok(())
    }

    /// Stacks the `keys` the samples hold (others are dropped). When shapes differ, `strict`
    /// reports the offending samples; otherwise the samples come back as `Ragged`.
    fn stack(
        &self,
        mut samples: Vec<Batch>,
        keys: &[KeyId],
        indices: &[u64],
        index: usize,
        strict: bool,
    ) -> Result<Stacked> {
        let mut keys: Vec<KeyId> = keys
            .iter()
            .copied()
            .filter(|k| samples.first().is_some_and(|s| s.get(*k).is_some()))
            .collect();
        keys.sort();
        keys.dedup();
        for key in &keys {
            let shapes: Vec<Vec<i64>> = samples
                .iter()
                .map(|s| s.get(*key).map(Tensor::size).unwrap_or_default())
                .collect();
            if shapes.iter().any(|shape| shape != &shapes[0]) {
                if strict {
                    let odd = shapes.iter().position(|s| s != &shapes[0]).unwrap_or(0);
                    return Err(Error::Run(format!(
                        "pipeline ({} epoch {}): cannot batch key `{}` in batch {}: dataset sample {} has shape {:?} but sample {} has {:?}",
                        self.mode,
                        self.epoch,
                        self.keys.name(*key),
                        index + 1,
                        indices[0],
                        shapes[0],
                        indices[odd],
                        shapes[odd]
                    )));
                }
                return Ok(Stacked::Ragged(samples));
            }
        }
        let mut batch = Batch::with_keys(self.width);
        for key in keys {
            let column: Vec<Tensor> = samples.iter_mut().filter_map(|s| s.take(key)).collect();
            if column.len() != indices.len() {
                return Err(Error::Run(format!(
                    "pipeline ({} epoch {}): key `{}` is missing from some samples of batch {}",
                    self.mode,
                    self.epoch,
                    self.keys.name(key),
                    index + 1
                )));
            }
            let stacked =
                Tensor::f_stack(&column, 0).map_err(|e| Error::Run(crate::tch_message(e)))?;
            batch.set(key, stacked);
        }
        Ok(Stacked::Batch(batch))
    }
}

enum Stacked {
    Batch(Batch),
    Ragged(Vec<Batch>),
}

/// Iterates over the batches of one epoch while workers prepare the next ones.
pub struct EpochLoader {
    receivers: Vec<Receiver<Result<Batch>>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    first: usize,
    next: usize,
    batches: usize,
}

impl EpochLoader {
    /// Starts `workers` threads, each keeping up to `prefetch` batches ready.
    pub fn start(work: EpochWork, workers: usize, prefetch: usize) -> Result<Self> {
        let (first, batches) = (work.first_batch.min(work.batches), work.batches);
        let workers = workers.clamp(1, (batches - first).max(1));
        let work = Arc::new(work);
        let stop = Arc::new(AtomicBool::new(false));
        let mut receivers = Vec::with_capacity(workers);
        let mut threads = Vec::with_capacity(workers);
        for worker in 0..workers {
            let (sender, receiver) = bounded(prefetch.max(1));
            let (work, halt) = (Arc::clone(&work), Arc::clone(&stop));
            let thread = std::thread::Builder::new()
                .name(format!("fe-pipeline-{worker}"))
                .spawn(move || {
                    let _no_grad = tch::no_grad_guard();
                    for index in (first + worker..batches).step_by(workers) {
                        if halt.load(Ordering::Relaxed) {
                            break;
                        }
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                work.batch(index)
                            }))
                            .unwrap_or_else(|payload| {
                                Err(Error::Internal(format!(
                                    "pipeline worker panicked: {}",
                                    fe_plugin_api::panic_message(payload.as_ref())
                                )))
                            });
                        let failed = outcome.is_err();
                        if sender.send(outcome).is_err() || failed {
                            break;
                        }
                    }
                });
            match thread {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    return Err(Error::Run(format!(
                        "cannot start pipeline worker {worker}: {e}"
                    )));
                }
            }
            receivers.push(receiver);
        }
        Ok(Self {
            receivers,
            threads,
            stop,
            first,
            next: first,
            batches,
        })
    }

    /// Batches this loader yields.
    pub fn len(&self) -> usize {
        self.batches - self.first
    }

    /// `true` when it yields no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Iterator for EpochLoader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.next >= self.batches || self.receivers.is_empty() {
            return None;
        }
        let receiver = &self.receivers[(self.next - self.first) % self.receivers.len()];
        self.next += 1;
        match receiver.recv() {
            Ok(item) => Some(item),
            Err(_) => Some(Err(Error::Internal(
                "a pipeline worker stopped without reporting why".into(),
            ))),
        }
    }
}

impl Drop for EpochLoader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receivers unblocks workers waiting to send.
        self.receivers.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
