//! The run's state (seed 002's `System`): where training is, what was logged; and the files
//! it is saved in.

pub mod tensors;
pub mod weights;

use std::collections::BTreeMap;

use fe_plugin_api::Mode;
use serde::{Deserialize, Serialize};

/// Logged scalars: `{mode: {key: {step: value}}}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// The history.
    pub history: BTreeMap<String, BTreeMap<String, BTreeMap<u64, f64>>>,
}

impl Summary {
    /// Records `value` for `key` in `mode` at `step`.
    pub fn record(&mut self, mode: Mode, key: &str, step: u64, value: f64) {
        self.history
            .entry(mode.as_str().to_owned())
            .or_default()
            .entry(key.to_owned())
            .or_default()
            .insert(step, value);
    }

    /// The value of `key` in `mode` logged at `step`.
    pub fn at(&self, mode: Mode, key: &str, step: u64) -> Option<f64> {
        self.history
            .get(mode.as_str())?
            .get(key)?
            .get(&step)
            .copied()
    }

    /// The last value of `key` in `mode`.
    pub fn last(&self, mode: Mode, key: &str) -> Option<f64> {
        self.history
            .get(mode.as_str())?
            .get(key)?
            .values()
            .next_back()
            .copied()
    }
}

/// Where the run is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct System {
    /// The current mode (`None` before the run starts).
    pub mode: Option<Mode>,
    /// The current dataset id.
    pub ds_id: String,
    /// A random id for this experiment.
    pub exp_id: u64,
    /// Training steps so far.
    pub global_step: u64,
    /// The current epoch, from 1 (0 before training).
    pub epoch_idx: u32,
    /// The current batch within the epoch, from 1 (0 outside epochs).
    pub batch_idx: u64,
    /// Set by traces to end training after the current epoch.
    pub stop_training: bool,
    /// Training log interval (0: no training logs).
    pub log_steps: u64,
    /// Epochs the run is configured for.
    pub total_epochs: u32,
    /// Fixed training steps per epoch.
    pub train_steps_per_epoch: Option<u64>,
    /// Fixed evaluation steps per epoch.
    pub eval_steps_per_epoch: Option<u64>,
    /// When the experiment started (`YYYYmmdd-HHMMSS`, UTC).
    pub experiment_time: String,
    /// Logged history.
    pub summary: Summary,
}

impl System {
    /// The state of a run about to start.
    pub fn new(
        total_epochs: u32,
        log_steps: u64,
        train_steps: Option<u64>,
        eval_steps: Option<u64>,
    ) -> Self {
        Self {
            mode: None,
            ds_id: String::new(),
            exp_id: fresh_id(),
            global_step: 0,
            epoch_idx: 0,
            batch_idx: 0,
            stop_training: false,
            log_steps,
            total_epochs,
            train_steps_per_epoch: train_steps,
            eval_steps_per_epoch: eval_steps,
            experiment_time: timestamp(),
            summary: Summary::default(),
        }
    }

    /// Fixed steps per epoch for `mode`, if any.
    pub fn steps_per_epoch(&self, mode: Mode) -> Option<u64> {
        match mode {
            Mode::Train => self.train_steps_per_epoch,
            Mode::Eval => self.eval_steps_per_epoch,
            _ => None,
        }
    }
}

fn fresh_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    crate::rng::mix(nanos, std::process::id() as u64)
}

/// `YYYYmmdd-HHMMSS` in UTC, without a date-time dependency.
pub fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_records_by_mode_key_and_step() {
        let mut summary = Summary::default();
        summary.record(Mode::Eval, "accuracy", 100, 0.9);
        summary.record(Mode::Eval, "accuracy", 200, 0.95);
        assert_eq!(summary.last(Mode::Eval, "accuracy"), Some(0.95));
        assert_eq!(summary.last(Mode::Train, "accuracy"), None);
    }

    #[test]
    fn timestamp_has_the_fastestimator_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 15);
        assert_eq!(&t[8..9], "-");
        assert!(t.starts_with("20"));
    }
}
