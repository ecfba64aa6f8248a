//! The host's learning-rate traces: `LRScheduler` (a schedule applied per step or per epoch)
//! and `ReduceLROnPlateau` (shrink the rate when a monitored value stops improving). They
//! change the model's optimizer, so they live in the host rather than behind the plugin ABI.

use serde::Deserialize;

use super::data::Logged;
use super::lr_sources::{How, LrControl};
use super::traces::{Cx, HostTrace};
use crate::error::Result;
use crate::network::Network;
use crate::schedule::{By, LrSchedule};

/// Applies a learning-rate schedule to a model's optimizer in force, before each training
/// step (`by = "step"`) or epoch (`by = "epoch"`), and logs `<model>_lr`.
pub struct LrScheduler {
    model: usize,
    log_key: String,
    /// `None`: the schedule written in the optimizer in force (`lr = { schedule = ... }`).
    schedule: Option<LrSchedule>,
}

/// `[[traces]] trace = "LRScheduler"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LrSchedulerConfig {
    /// The model whose learning rate follows the schedule.
    pub model: String,
    /// The schedule.
    pub lr: LrSchedule,
}

impl LrScheduler {
    /// Follows `schedule`, or the optimizer's own schedule when `None`.
    pub fn new(network: &Network, model: usize, schedule: Option<LrSchedule>) -> Self {
        Self {
            model,
            log_key: format!("{}_lr", network.models[model].name),
            schedule,
        }
    }

    fn schedule<'a>(&'a self, network: &'a Network) -> Option<&'a LrSchedule> {
        match &self.schedule {
            Some(schedule) => Some(schedule),
            None => network.models[self.model]
                .current_slot()
                .and_then(|slot| slot.lr_schedule.as_ref()),
        }
    }

    fn apply(&self, cx: &mut Cx<'_>, by: By, time: u64) {
        let Some(lr) = self
            .schedule(cx.network)
            .filter(|s| s.by() == by)
            .map(|s| s.lr_at(time))
        else {
            return;
        };
        if let Some(optimizer) = cx.network.models[self.model].optimizer_mut() {
            optimizer.set_lr(lr);
        }
    }
}

impl HostTrace for LrScheduler {
    fn output_names(&self) -> Vec<String> {
        vec![self.log_key.clone()]
    }

    fn lr_control(&self) -> Option<LrControl> {
        // The optimizer's own schedule is counted from the optimizer (see `lr_sources`).
        self.schedule.as_ref().map(|schedule| LrControl {
            model: self.model,
            how: How::Schedule(schedule.by()),
        })
    }

    fn on_epoch_begin(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let epoch = cx.system.epoch_idx as u64;
        self.apply(cx, By::Epoch, epoch);
        Ok(())
    }

    fn on_batch_begin(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let step = cx.system.global_step;
        self.apply(cx, By::Step, step);
        Ok(())
    }

    fn on_batch_end(&mut self, cx: &mut Cx<'_>, _batch: &crate::network::Batch) -> Result<()> {
        let (step, every) = (cx.system.global_step, cx.system.log_steps);
        if every == 0 || (step != 1 && step % every != 0) {
            return Ok(());
        }
        if let Some(optimizer) = cx.network.models[self.model].optimizer() {
            cx.data
                .write(&self.log_key, Logged::Scalar(optimizer.lr()), true);
        }
        Ok(())
    }
}

/// Whether smaller or larger is better.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Smaller values are better (losses).
    #[default]
    Min,
    /// Larger values are better (accuracy).
    Max,
}

impl Better {
    /// Whether `value` improves on `best` by more than `min_delta`.
    pub fn improves(self, value: f64, best: Option<f64>, min_delta: f64) -> bool {
        match (self, best) {
            (_, None) => true,
            (Better::Min, Some(best)) => value < best - min_delta,
            (Better::Max, Some(best)) => value > best + min_delta,
        }
    }
}

/// `[[traces]] trace = "ReduceLROnPlateau"` (FastEstimator's defaults).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceLrConfig {
    /// The model whose learning rate is reduced.
    pub model: String,
    /// The monitored value; by default the evaluation loss the model is trained on.
    #[serde(default)]
    pub metric: Option<String>,
    /// Epochs without improvement before the rate is reduced.
    #[serde(default = "ten")]
    pub patience: u32,
    /// Factor applied to the rate.
    #[serde(default = "tenth")]
    pub factor: f64,
    /// The rate never goes below this.
    #[serde(default = "tiny")]
    pub min_lr: f64,
    /// `min` or `max`.
    #[serde(default)]
    pub best_mode: Better,
    /// Improvements smaller than this do not count.
    #[serde(default)]
    pub min_delta: f64,
}

fn ten() -> u32 {
    10
}

fn tenth() -> f64 {
    0.1
}

fn tiny() -> f64 {
    1e-6
}

/// Reduces a model's learning rate by `factor` when `metric` has not improved for `patience`
/// evaluation epochs, then waits another `patience` epochs.
pub struct ReduceLrOnPlateau {
    model: usize,
    metric: String,
    log_key: String,
    config: ReduceLrConfig,
    best: Option<f64>,
    wait: u32,
}

impl ReduceLrOnPlateau {
    /// Watches `metric` for `model`.
    pub fn new(network: &Network, model: usize, metric: String, config: ReduceLrConfig) -> Self {
        Self {
            model,
            metric,
            log_key: format!("{}_lr", network.models[model].name),
            config,
            best: None,
            wait: 0,
        }
    }

    /// The monitored key.
    pub fn metric(&self) -> &str {
        &self.metric
    }

    /// Feeds one epoch's value; returns the new learning rate when it is time to reduce.
    pub fn observe(&mut self, value: f64, lr: f64) -> Option<f64> {
        if self
            .config
            .best_mode
            .improves(value, self.best, self.config.min_delta)
        {
            self.best = Some(value);
            self.wait = 0;
            return None;
        }
        self.wait += 1;
        if self.wait < self.config.patience {
            return None;
        }
        self.wait = 0;
        Some((lr * self.config.factor).max(self.config.min_lr))
    }
}

impl HostTrace for ReduceLrOnPlateau {
    fn inputs_key(&self) -> &'static str {
        "metric"
    }

    fn input_names(&self) -> Vec<String> {
        vec![self.metric.clone()]
    }

    fn lr_control(&self) -> Option<LrControl> {
        Some(LrControl {
            model: self.model,
            how: How::Plateau,
        })
    }

    fn output_names(&self) -> Vec<String> {
        vec![self.log_key.clone()]
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({ "best": self.best, "wait": self.wait })
    }

    fn load_state(&mut self, state: serde_json::Value) -> std::result::Result<(), String> {
        self.best = state["best"].as_f64();
        self.wait = state["wait"]
            .as_u64()
            .ok_or("ReduceLROnPlateau state has no `wait`")? as u32;
        Ok(())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let Some(value) = cx.data.get(&self.metric).and_then(Logged::as_f64) else {
            return Ok(());
        };
        let Some(lr) = cx.network.models[self.model].optimizer().map(|o| o.lr()) else {
            return Ok(());
        };
        if let Some(new_lr) = self.observe(value, lr) {
            if let Some(optimizer) = cx.network.models[self.model].optimizer_mut() {
                optimizer.set_lr(new_lr);
            }
            cx.data.write(&self.log_key, Logged::Scalar(new_lr), true);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plateau(patience: u32, best_mode: Better) -> ReduceLrOnPlateau {
        ReduceLrOnPlateau {
            model: 0,
            metric: "loss".to_owned(),
            log_key: "m_lr".to_owned(),
            config: ReduceLrConfig {
                model: "m".to_owned(),
                metric: None,
                patience,
                factor: 0.5,
                min_lr: 0.1,
                best_mode,
                min_delta: 0.0,
            },
            best: None,
            wait: 0,
        }
    }

    #[test]
    fn reduces_after_patience_epochs_without_improvement_then_waits_again() {
        let mut trace = plateau(2, Better::Min);
        let mut lr = 1.0;
        let mut reduced_at = Vec::new();
        for (epoch, value) in [3.0, 2.0, 2.5, 2.1, 2.0, 1.0, 1.5, 1.5, 1.5, 1.5]
            .iter()
            .enumerate()
        {
            if let Some(new) = trace.observe(*value, lr) {
                lr = new;
                reduced_at.push((epoch + 1, lr));
            }
        }
        // epochs 3-4 do not improve on 2.0 -> reduce at 4; 5 ties (no improvement), 6 improves;
        // 7-8 do not -> reduce at 8; 9-10 -> reduce at 10.
        assert_eq!(reduced_at, [(4, 0.5), (8, 0.25), (10, 0.125)]);
    }

    #[test]
    fn max_mode_and_the_floor() {
        let mut trace = plateau(1, Better::Max);
        assert_eq!(trace.observe(0.5, 0.15), None);
        assert_eq!(trace.observe(0.4, 0.15), Some(0.1));
        assert_eq!(trace.observe(0.6, 0.1), None);
    }
}
