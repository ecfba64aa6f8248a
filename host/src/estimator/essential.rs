//! The traces every run has (FastEstimator's TrainEssential and EvalEssential): training loss
//! and speed every `log_steps`, and evaluation losses averaged over the epoch.

use std::time::Instant;

use fe_plugin_api::Mode;

use super::data::Logged;
use super::traces::{Cx, HostTrace};
use crate::error::{Error, Result};
use crate::network::{Batch, KeyId};

/// Logs the training losses and steps/sec every `log_steps` steps, and epoch times.
pub struct TrainEssential {
    losses: Vec<(KeyId, String)>,
    /// `<model>_lr` of every trained model.
    lr_keys: Vec<String>,
    last_log: Option<(Instant, u64)>,
    epoch_start: Option<Instant>,
}

impl TrainEssential {
    /// Tracks the given loss keys, and the learning rates of `models`.
    pub fn new(losses: Vec<(KeyId, String)>, models: &[String]) -> Self {
        Self {
            losses,
            lr_keys: models.iter().map(|m| format!("{m}_lr")).collect(),
            last_log: None,
            epoch_start: None,
        }
    }
}

/// Whether train step `step` (1-based, global) logs its losses: the first step and every
/// `every`-th; never when `every` is 0 (FastEstimator's `log_steps`).
pub fn is_log_step(step: u64, every: u64) -> bool {
    every != 0 && (step == 1 || step % every == 0)
}

fn loss_value(batch: &Batch, key: KeyId, name: &str) -> Result<Option<f64>> {
    let Some(loss) = batch.get(key) else {
        return Ok(None);
    };
    let value = loss
        .f_mean(tch::Kind::Double)
        .map(|m| m.double_value(&[]))
        .map_err(|e| {
            Error::Run(format!(
                "cannot read loss `{name}`: {}",
                crate::tch_message(e)
            ))
        })?;
    Ok(Some(value))
}

impl HostTrace for TrainEssential {
    fn inputs(&self) -> Vec<KeyId> {
        self.losses.iter().map(|(k, _)| *k).collect()
    }

    fn input_names(&self) -> Vec<String> {
        self.losses.iter().map(|(_, n)| n.clone()).collect()
    }

    fn output_names(&self) -> Vec<String> {
        let mut out = self.input_names();
        out.extend(["steps/sec".to_owned(), "epoch_time(sec)".to_owned()]);
        out.extend(self.lr_keys.iter().cloned());
        out
    }

    fn essential(&self) -> bool {
        true
    }

    fn reads_batch_only_at_log_steps(&self) -> bool {
        true
    }

    fn collective_in_batch_hooks(&self) -> bool {
        true
    }

    fn on_epoch_begin(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        self.epoch_start = Some(Instant::now());
        if self.last_log.is_none() {
            self.last_log = Some((Instant::now(), cx.system.global_step));
        }
        Ok(())
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, batch: &Batch) -> Result<()> {
        let step = cx.system.global_step;
        if !is_log_step(step, cx.system.log_steps) {
            return Ok(());
        }
        let mut values = Vec::with_capacity(self.losses.len());
        for (key, name) in &self.losses {
            values.push(loss_value(batch, *key, name)?);
        }
        // Data parallel: the loss of the step is the mean over the ranks' batches (what one
        // process computes over the global batch, when the loss is a mean over samples), each
        // weighed by its share of the step's samples where the shares differ.
        // Alone, the weight is 1 and the sum over one rank divided by one is the value itself.
        let weight = cx.strategy.contribution();
        let local: Vec<f64> = values
            .iter()
            .map(|v| match v {
                Some(_) if weight == 0.0 => 0.0,
                Some(value) => value * weight,
                None => f64::NAN,
            })
            .collect();
        let summed = cx.strategy.sum(&local)?;
        let world = cx.strategy.world() as f64;
        for (value, total) in values.iter_mut().zip(summed) {
            if value.is_some() {
                *value = Some(total / world);
            }
        }
        for ((_, name), value) in self.losses.iter().zip(values) {
            if let Some(value) = value {
                cx.data.write(name, Logged::Scalar(value), true);
            }
        }
        let now = Instant::now();
        if let Some((since, at_step)) = self.last_log {
            let elapsed = now.duration_since(since).as_secs_f64();
            if step > at_step && elapsed > 0.0 {
                cx.data.write(
                    "steps/sec",
                    Logged::Scalar((step - at_step) as f64 / elapsed),
                    true,
                );
            }
        }
        self.last_log = Some((now, step));
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        if let Some(start) = self.epoch_start.take() {
            let seconds = start.elapsed().as_secs_f64();
            cx.data
                .write("epoch_time(sec)", Logged::Scalar(seconds), true);
        }
        for model in &cx.network.models {
            if let Some(optimizer) = model.optimizer() {
                cx.data.write(
                    &format!("{}_lr", model.name),
                    Logged::Scalar(optimizer.lr()),
                    true,
                );
            }
        }
        Ok(())
    }
}

/// Averages each loss over the evaluation epoch, weighting every batch by its number of
/// samples (so the result is the mean over samples; FastEstimator averages batch means, which
/// differs when the last batch is smaller), and tracks the best value so far.
pub struct EvalEssential {
    losses: Vec<(KeyId, String)>,
    sums: Vec<f64>,
    /// Each batch weighs 1 rather than its size (FastEstimator's average of batch means).
    per_batch: bool,
    /// Samples each loss was seen for (a scheduled loss is absent in some epochs).
    samples: Vec<f64>,
    best: Vec<Option<(f64, u32)>>,
}

impl EvalEssential {
    /// Tracks the given loss keys; `per_batch` averages batch means instead of samples.
    pub fn new(losses: Vec<(KeyId, String)>, per_batch: bool) -> Self {
        let n = losses.len();
        Self {
            losses,
            per_batch,
            sums: vec![0.0; n],
            samples: vec![0.0; n],
            best: vec![None; n],
        }
    }
}

impl HostTrace for EvalEssential {
    fn inputs(&self) -> Vec<KeyId> {
        self.losses.iter().map(|(k, _)| *k).collect()
    }

    fn input_names(&self) -> Vec<String> {
        self.losses.iter().map(|(_, n)| n.clone()).collect()
    }

    fn output_names(&self) -> Vec<String> {
        self.losses
            .iter()
            .flat_map(|(_, n)| [n.clone(), format!("min_{n}"), format!("since_best_{n}")])
            .collect()
    }

    fn essential(&self) -> bool {
        true
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({ "best": self.best })
    }

    fn load_state(&mut self, state: serde_json::Value) -> std::result::Result<(), String> {
        let best: Vec<Option<(f64, u32)>> = serde_json::from_value(state["best"].clone())
            .map_err(|e| format!("invalid EvalEssential state: {e}"))?;
        if best.len() != self.best.len() {
            return Err(format!(
                "EvalEssential tracked {} losses, this run tracks {}",
                best.len(),
                self.best.len()
            ));
        }
        self.best = best;
        Ok(())
    }

    fn on_epoch_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.sums.iter_mut().for_each(|s| *s = 0.0);
        self.samples.iter_mut().for_each(|s| *s = 0.0);
        Ok(())
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, batch: &Batch) -> Result<()> {
        let weight = if self.per_batch {
            1.0
        } else {
            cx.batch_size.max(1) as f64
        };
        for (i, (key, name)) in self.losses.iter().enumerate() {
            if let Some(value) = loss_value(batch, *key, name)? {
                self.sums[i] += value * weight;
                self.samples[i] += weight;
            }
        }
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        // The test epoch reports its losses too (FastEstimator's test line has none); the
        // best so far is an evaluation's, across epochs, so test leaves it alone.
        let testing = match cx.system.mode {
            Some(Mode::Eval) => false,
            Some(Mode::Test) => true,
            _ => return Ok(()),
        };
        let epoch = cx.system.epoch_idx;
        // Data parallel: each rank saw its share of the evaluation data; the sums over all
        // ranks give the mean over every sample, as one process computes it.
        self.sums = cx.strategy.sum(&self.sums)?;
        self.samples = cx.strategy.sum(&self.samples)?;
        for (i, (_, name)) in self.losses.iter().enumerate() {
            if self.samples[i] == 0.0 {
                continue;
            }
            let mean = self.sums[i] / self.samples[i];
            cx.data.write(name, Logged::Scalar(mean), true);
            if testing {
                continue;
            }
            let best = match self.best[i] {
                Some((value, at)) if value <= mean => (value, at),
                _ => (mean, epoch),
            };
            self.best[i] = Some(best);
            cx.data
                .write(&format!("min_{name}"), Logged::Scalar(best.0), true);
            cx.data.write(
                &format!("since_best_{name}"),
                Logged::Scalar((epoch - best.1) as f64),
                true,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::is_log_step;

    #[test]
    fn the_first_step_and_every_nth_are_logged_and_none_with_zero() {
        let logged: Vec<u64> = (1..=10).filter(|&s| is_log_step(s, 4)).collect();
        assert_eq!(logged, [1, 4, 8]);
        assert!((1..=10).all(|s| !is_log_step(s, 0)));
        assert!((1..=3).all(|s| is_log_step(s, 1)));
    }
}
