//! Where a pipeline spends its time, op by op (FastEstimator's `Pipeline.benchmark`
//! breakdown): batches built on one thread, every step timed on its own.

use std::time::Instant;

use super::collate::Stacked;
use super::ops::Flow;
use super::work::EpochWork;
use crate::error::{Error, Result};

/// Time spent in one step of the pipeline.
#[derive(Debug, Clone, Default)]
pub struct StepTime {
    /// `<read dataset>`, `<collate>`, or an op's label.
    pub name: String,
    /// Calls (per sample, or per batch for ops that run on batches).
    pub visits: u64,
    /// Samples that went through it.
    pub samples: u64,
    /// Seconds spent in it.
    pub seconds: f64,
}

impl StepTime {
    fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    fn add(&mut self, samples: usize, since: Instant) {
        self.visits += 1;
        self.samples += samples as u64;
        self.seconds += since.elapsed().as_secs_f64();
    }

    /// Samples per second through this step alone.
    pub fn rate(&self) -> f64 {
        self.samples as f64 / self.seconds.max(1e-12)
    }
}

impl EpochWork {
    /// Builds up to `batches` batches from the start of the epoch on this thread, timing the
    /// dataset reads, each op and the collation. Samples a filter drops are not replaced.
    pub fn profile(&self, batches: usize) -> Result<Vec<StepTime>> {
        let split = self.split();
        let mut read = StepTime::new("<read dataset>");
        let mut ops: Vec<StepTime> = self.ops.iter().map(|op| StepTime::new(&op.label)).collect();
        let mut collate = StepTime::new("<collate batch>");
        let mut batch_ops: Vec<StepTime> = self
            .batch_ops
            .iter()
            .map(|op| StepTime::new(&op.label))
            .collect();
        let collator = self.collator();
        for b in 0..batches {
            let start = (b * self.batch_size) as u64;
            let len = (self.to_yield.saturating_sub(start) as usize).min(self.batch_size);
            let indices = self.positions.indices(start, len);
            if indices.is_empty() {
                break;
            }
            let mut samples = Vec::new();
            let mut kept = Vec::new();
            'samples: for &index in &indices {
                let since = Instant::now();
                let mut sample = self.read_sample(index)?;
                read.add(1, since);
                for (i, time) in ops.iter_mut().enumerate().take(split) {
                    let since = Instant::now();
                    let flow = self.run_ops(&mut sample, &self.ops[i..=i], i, index, false)?;
                    time.add(1, since);
                    if flow != Flow::Keep {
                        continue 'samples;
                    }
                }
                samples.push(sample);
                kept.push(index);
            }
            if samples.is_empty() {
                continue;
            }
            let first = kept[0];
            let since = Instant::now();
            let stacked = collator.stack(
                samples,
                &self.needed(),
                &kept,
                b + 1,
                split == self.ops.len(),
            )?;
            collate.add(kept.len(), since);
            let mut batch = match stacked {
                Stacked::Batch(batch) => {
                    let mut batch = batch;
                    for (i, time) in ops.iter_mut().enumerate().skip(split) {
                        let since = Instant::now();
                        self.run_ops(&mut batch, &self.ops[i..=i], i, first, true)?;
                        time.add(kept.len(), since);
                    }
                    batch
                }
                Stacked::Ragged(mut samples) => {
                    for (sample, &index) in samples.iter_mut().zip(&kept) {
                        for (i, time) in ops.iter_mut().enumerate().skip(split) {
                            let since = Instant::now();
                            self.run_ops(sample, &self.ops[i..=i], i, index, false)?;
                            time.add(1, since);
                        }
                    }
                    let since = Instant::now();
                    let stacked = collator.stack(samples, &self.needed(), &kept, b + 1, true)?;
                    collate.add(0, since);
                    match stacked {
                        Stacked::Batch(batch) => batch,
                        Stacked::Ragged(_) => {
                            return Err(Error::Internal(
                                "strict stacking returned ragged samples".into(),
                            ))
                        }
                    }
                }
            };
            batch.size = kept.len() as i64;
            let position = self.ops.len() + 1;
            for (i, time) in batch_ops.iter_mut().enumerate() {
                let since = Instant::now();
                let flow = self.run_ops(
                    &mut batch,
                    &self.batch_ops[i..=i],
                    position + i,
                    first,
                    true,
                )?;
                time.add(kept.len(), since);
                if flow != Flow::Keep {
                    break;
                }
            }
        }
        let mut out = vec![read];
        out.extend(ops);
        out.push(collate);
        out.extend(batch_ops);
        Ok(out)
    }
}
