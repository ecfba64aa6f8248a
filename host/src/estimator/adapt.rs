//! Traces that change the course of a run: `EarlyStopping`, `TerminateOnNaN`, and `Timer`
//! (which only measures, but belongs with them as FastEstimator's adapt traces do).

use std::time::Instant;

use serde::Deserialize;

use super::data::Logged;
use super::lr_traces::Better;
use super::traces::{Cx, HostTrace};
use crate::error::Result;
use crate::network::{Batch, KeyId};

/// `[[traces]] trace = "EarlyStopping"` (FastEstimator's arguments and defaults).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyStoppingConfig {
    /// The value watched; absent: the loss the network trains on (one UpdateOp loss).
    #[serde(default)]
    pub monitor: Option<String>,
    /// Changes smaller than this are no improvement.
    #[serde(default)]
    pub min_delta: f64,
    /// Epochs without improvement before stopping.
    #[serde(default)]
    pub patience: u32,
    /// `min` or `max`.
    #[serde(default)]
    pub compare: Better,
    /// A value the monitor must improve on from the start.
    #[serde(default)]
    pub baseline: Option<f64>,
}

/// Stops training when `monitor` has not improved for `patience` epochs.
pub struct EarlyStopping {
    config: EarlyStoppingConfig,
    monitor: String,
    best: Option<f64>,
    best_epoch: u32,
    wait: u32,
}

impl EarlyStopping {
    /// A fresh watcher of `monitor` (the configured one, or the loss the builder chose).
    pub fn new(config: EarlyStoppingConfig, monitor: String) -> Self {
        let best = config.baseline;
        Self {
            config,
            monitor,
            best,
            best_epoch: 0,
            wait: 0,
        }
    }

    /// Feeds one epoch's value; `true` when training must stop.
    pub fn observe(&mut self, value: f64, epoch: u32) -> bool {
        let delta = self.config.min_delta.abs();
        let improved = match (self.config.compare, self.best) {
            (_, None) => true,
            (Better::Min, Some(best)) => value + delta < best,
            (Better::Max, Some(best)) => value - delta > best,
        };
        if improved {
            self.best = Some(value);
            self.best_epoch = epoch;
            self.wait = 0;
            return false;
        }
        self.wait += 1;
        self.wait >= self.config.patience
    }
}

impl HostTrace for EarlyStopping {
    fn inputs_key(&self) -> &'static str {
        "monitor"
    }

    fn input_names(&self) -> Vec<String> {
        vec![self.monitor.clone()]
    }

    fn on_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.wait = 0;
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let Some(value) = cx.data.get(&self.monitor).and_then(Logged::as_f64) else {
            return Ok(());
        };
        if self.observe(value, cx.system.epoch_idx) {
            cx.system.stop_training = true;
            let best = self
                .best
                .map_or("none".to_owned(), super::data::format_number);
            cx.notes.push(format!(
                "EarlyStopping: `{}` has not improved for {} epoch(s): stopping; its best value was {best} at epoch {}",
                self.monitor, self.wait, self.best_epoch
            ));
        }
        Ok(())
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({ "best": self.best, "best_epoch": self.best_epoch, "wait": self.wait })
    }

    fn load_state(&mut self, state: serde_json::Value) -> std::result::Result<(), String> {
        self.best = state["best"].as_f64();
        self.best_epoch = state["best_epoch"].as_u64().unwrap_or(0) as u32;
        self.wait = state["wait"].as_u64().unwrap_or(0) as u32;
        Ok(())
    }
}

/// Stops training as soon as a monitored value is NaN or infinite: by default every loss, read
/// from the batch after each step, and any trace output named in `monitor_names`.
pub struct TerminateOnNaN {
    batch_keys: Vec<(KeyId, String)>,
    logged_keys: Vec<String>,
}

/// `[[traces]] trace = "TerminateOnNaN"`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TerminateOnNaNConfig {
    /// Keys to watch (losses and trace outputs); default: every loss.
    #[serde(default)]
    pub monitor_names: Option<Vec<String>>,
}

impl TerminateOnNaN {
    /// Watches the batch keys `batch_keys` and the trace outputs `logged_keys`.
    pub fn new(batch_keys: Vec<(KeyId, String)>, logged_keys: Vec<String>) -> Self {
        Self {
            batch_keys,
            logged_keys,
        }
    }

    fn stop(&self, cx: &mut Cx<'_>, key: &str) {
        cx.system.stop_training = true;
        cx.notes.push(format!(
            "TerminateOnNaN: `{key}` is not finite at step {}: stopping",
            cx.system.global_step
        ));
    }

    fn check_logged(&self, cx: &mut Cx<'_>) {
        for key in &self.logged_keys {
            if let Some(value) = cx.data.get(key).and_then(Logged::as_f64) {
                if !value.is_finite() {
                    self.stop(cx, key);
                    return;
                }
            }
        }
    }
}

fn all_finite(tensor: &tch::Tensor) -> bool {
    // A failed check counts as finite: the op that made the tensor reports its own errors.
    tensor
        .f_isfinite()
        .and_then(|t| t.f_all())
        .map(|t| t.int64_value(&[]) != 0)
        .unwrap_or(true)
}

impl HostTrace for TerminateOnNaN {
    fn inputs(&self) -> Vec<KeyId> {
        self.batch_keys.iter().map(|(k, _)| *k).collect()
    }

    fn may_stop_between_steps(&self) -> bool {
        true
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, batch: &Batch) -> Result<()> {
        for (key, name) in &self.batch_keys {
            if batch.get(*key).is_some_and(|t| !all_finite(t)) {
                self.stop(cx, name);
                return Ok(());
            }
        }
        self.check_logged(cx);
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        self.check_logged(cx);
        Ok(())
    }
}

/// Measures every mode's epochs: writes `<mode>_epoch_time(sec)` and `<mode>_samples/sec` at
/// each epoch end and `total_time(sec)` at the end.
pub struct Timer {
    started: Option<Instant>,
    epoch_started: Option<Instant>,
    samples: u64,
}

impl Timer {
    /// A timer that has not started.
    pub fn new() -> Self {
        Self {
            started: None,
            epoch_started: None,
            samples: 0,
        }
    }
}

impl Default for Timer {
    fn default() -> Self {
        Self::new()
    }
}

impl HostTrace for Timer {
    fn output_names(&self) -> Vec<String> {
        ["train", "eval", "test"]
            .iter()
            .flat_map(|m| [format!("{m}_epoch_time(sec)"), format!("{m}_samples/sec")])
            .chain(["total_time(sec)".to_owned()])
            .collect()
    }

    fn on_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.started = Some(Instant::now());
        Ok(())
    }

    fn on_epoch_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        self.epoch_started = Some(Instant::now());
        self.samples = 0;
        Ok(())
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, _batch: &Batch) -> Result<()> {
        self.samples += cx.batch_size.max(0) as u64;
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let (Some(started), Some(mode)) = (self.epoch_started.take(), cx.system.mode) else {
            return Ok(());
        };
        let seconds = started.elapsed().as_secs_f64();
        cx.data.write(
            &format!("{mode}_epoch_time(sec)"),
            Logged::Scalar(seconds),
            true,
        );
        if seconds > 0.0 {
            let rate = self.samples as f64 / seconds;
            cx.data
                .write(&format!("{mode}_samples/sec"), Logged::Scalar(rate), true);
        }
        Ok(())
    }

    fn on_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        if let Some(started) = self.started {
            let seconds = started.elapsed().as_secs_f64();
            cx.data
                .write("total_time(sec)", Logged::Scalar(seconds), true);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopping(
        patience: u32,
        compare: Better,
        min_delta: f64,
        baseline: Option<f64>,
    ) -> EarlyStopping {
        EarlyStopping::new(
            EarlyStoppingConfig {
                monitor: None,
                min_delta,
                patience,
                compare,
                baseline,
            },
            "loss".into(),
        )
    }

    /// The epoch (from 1) at which `values` make the trace stop, if any.
    fn stops_at(trace: &mut EarlyStopping, values: &[f64]) -> Option<u32> {
        (1..)
            .zip(values)
            .find(|(epoch, v)| trace.observe(**v, *epoch))
            .map(|(e, _)| e)
    }

    #[test]
    fn stops_after_patience_epochs_without_improvement() {
        let values = [1.0, 0.8, 0.7, 0.71, 0.69, 0.75, 0.8, 0.9];
        assert_eq!(
            stops_at(&mut stopping(2, Better::Min, 0.0, None), &values),
            Some(7)
        );
        // FastEstimator's patience 0 stops at the first epoch that does not improve.
        assert_eq!(
            stops_at(&mut stopping(0, Better::Min, 0.0, None), &values),
            Some(4)
        );
        // min_delta: 0.69 is not 0.05 better than 0.7, so epochs 4.. are all non-improving.
        assert_eq!(
            stops_at(&mut stopping(2, Better::Min, 0.05, None), &values),
            Some(5)
        );
    }

    #[test]
    fn max_mode_and_baseline() {
        let accuracy = [0.5, 0.6, 0.65, 0.64];
        assert_eq!(
            stops_at(&mut stopping(1, Better::Max, 0.0, None), &accuracy),
            Some(4)
        );
        // Nothing beats a baseline of 0.9.
        assert_eq!(
            stops_at(&mut stopping(2, Better::Max, 0.0, Some(0.9)), &accuracy),
            Some(2)
        );
    }
}
