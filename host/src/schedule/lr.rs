//! Learning-rate schedules, usable wherever an optimizer takes `lr`:
//!
//! ```toml
//! optimizer = { type = "adam", lr = { schedule = "cosine_decay", init_lr = 1e-3, cycle_length = 3750 } }
//! ```
//!
//! Time counts from 1: the global training step (`by = "step"`, the default) or the epoch
//! (`by = "epoch"`). The host's `LRScheduler` trace applies the schedule before each step (or
//! epoch) and logs `<model>_lr`.

use serde::{Deserialize, Serialize};

/// What a schedule's time counts.
#[derive(Deserialize, Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// Global training steps.
    #[default]
    Step,
    /// Epochs.
    Epoch,
}

/// How `linear_warmup` continues after warming up.
#[derive(Deserialize, Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Decay {
    /// Stay at `init_lr`.
    #[default]
    None,
    /// Straight down to `min_lr` at `total`.
    Linear,
    /// Half a cosine down to `min_lr` at `total`.
    Cosine,
}

/// A learning-rate schedule.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "schedule", rename_all = "snake_case", deny_unknown_fields)]
pub enum LrSchedule {
    /// FastEstimator's `cosine_decay` (SGDR): half-cosine cycles from `init_lr` to `min_lr`,
    /// each `cycle_multiplier` times longer than the last, starting at `start` (before it:
    /// `init_lr`, or a linear ramp from 0 with `warmup`).
    CosineDecay {
        /// Learning rate at the top of each cycle.
        init_lr: f64,
        /// Length of the first cycle.
        cycle_length: u64,
        /// Learning rate at the bottom of each cycle.
        #[serde(default = "tiny")]
        min_lr: f64,
        /// When the decay starts.
        #[serde(default = "one")]
        start: u64,
        /// Growth of each cycle's length.
        #[serde(default = "one")]
        cycle_multiplier: u64,
        /// Ramp linearly from 0 to `init_lr` before `start`.
        #[serde(default)]
        warmup: bool,
        /// Steps or epochs.
        #[serde(default)]
        by: By,
    },
    /// `init_lr * gamma ^ floor((t - 1) / step_size)` (PyTorch's StepLR).
    StepDecay {
        /// Starting learning rate.
        init_lr: f64,
        /// Period of the decay.
        step_size: u64,
        /// Factor per period.
        #[serde(default = "tenth")]
        gamma: f64,
        /// Steps or epochs.
        #[serde(default)]
        by: By,
    },
    /// `init_lr * gamma ^ (t - 1)` (PyTorch's ExponentialLR).
    Exponential {
        /// Starting learning rate.
        init_lr: f64,
        /// Factor per step or epoch.
        gamma: f64,
        /// Steps or epochs.
        #[serde(default)]
        by: By,
    },
    /// Linear ramp from `init_lr / warmup` to `init_lr` over `warmup`, then `decay` to `min_lr`
    /// at `total`.
    LinearWarmup {
        /// Learning rate at the end of the warm-up.
        init_lr: f64,
        /// Length of the warm-up.
        warmup: u64,
        /// What follows the warm-up.
        #[serde(default)]
        decay: Decay,
        /// Where the decay ends (needed for `linear` and `cosine`).
        #[serde(default)]
        total: Option<u64>,
        /// Learning rate at the end of the decay.
        #[serde(default)]
        min_lr: f64,
        /// Steps or epochs.
        #[serde(default)]
        by: By,
    },
}

fn tiny() -> f64 {
    1e-6
}

fn one() -> u64 {
    1
}

fn tenth() -> f64 {
    0.1
}

impl LrSchedule {
    /// Whether time counts steps or epochs.
    pub fn by(&self) -> By {
        match self {
            LrSchedule::CosineDecay { by, .. }
            | LrSchedule::StepDecay { by, .. }
            | LrSchedule::Exponential { by, .. }
            | LrSchedule::LinearWarmup { by, .. } => *by,
        }
    }

    /// Checks the parameters, naming the field that is wrong.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let positive = |name: &'static str, v: u64| {
            if v == 0 {
                Err((name, "must be at least 1".to_owned()))
            } else {
                Ok(())
            }
        };
        match self {
            LrSchedule::CosineDecay {
                cycle_length,
                cycle_multiplier,
                start,
                ..
            } => {
                positive("cycle_length", *cycle_length)?;
                positive("cycle_multiplier", *cycle_multiplier)?;
                positive("start", *start)
            }
            LrSchedule::StepDecay { step_size, .. } => positive("step_size", *step_size),
            LrSchedule::Exponential { .. } => Ok(()),
            LrSchedule::LinearWarmup {
                warmup,
                decay,
                total,
                ..
            } => {
                positive("warmup", *warmup)?;
                match (decay, total) {
                    (Decay::None, _) => Ok(()),
                    (_, Some(total)) if total > warmup => Ok(()),
                    _ => Err((
                        "total",
                        "must be given, and after the warm-up, for a linear or cosine decay"
                            .to_owned(),
                    )),
                }
            }
        }
    }

    /// The learning rate at time `t` (from 1).
    pub fn lr_at(&self, t: u64) -> f64 {
        match *self {
            LrSchedule::CosineDecay {
                init_lr,
                cycle_length,
                min_lr,
                start,
                cycle_multiplier,
                warmup,
                ..
            } => cosine_decay(
                t,
                cycle_length,
                init_lr,
                min_lr,
                start,
                cycle_multiplier,
                warmup,
            ),
            LrSchedule::StepDecay {
                init_lr,
                step_size,
                gamma,
                ..
            } => init_lr * gamma.powi((t.saturating_sub(1) / step_size) as i32),
            LrSchedule::Exponential { init_lr, gamma, .. } => {
                init_lr * gamma.powi(t.saturating_sub(1) as i32)
            }
            LrSchedule::LinearWarmup {
                init_lr,
                warmup,
                decay,
                total,
                min_lr,
                ..
            } => {
                if t <= warmup {
                    return init_lr * t as f64 / warmup as f64;
                }
                let Some(total) = total else { return init_lr };
                let progress = ((t - warmup) as f64 / (total - warmup).max(1) as f64).min(1.0);
                match decay {
                    Decay::None => init_lr,
                    Decay::Linear => init_lr + (min_lr - init_lr) * progress,
                    Decay::Cosine => {
                        min_lr
                            + (init_lr - min_lr)
                                * 0.5
                                * (1.0 + (std::f64::consts::PI * progress).cos())
                    }
                }
            }
        }
    }
}

/// FastEstimator's `cosine_decay(time, cycle_length, init_lr, min_lr, start, cycle_multiplier,
/// warmup)`.
pub fn cosine_decay(
    time: u64,
    cycle_length: u64,
    init_lr: f64,
    min_lr: f64,
    start: u64,
    cycle_multiplier: u64,
    warmup: bool,
) -> f64 {
    if time < start {
        return if warmup {
            init_lr * time as f64 / start as f64
        } else {
            init_lr
        };
    }
    let time = (time - start + 1) as f64;
    let (length, multiplier) = (cycle_length as f64, cycle_multiplier as f64);
    let (index, cumulative) = if cycle_multiplier > 1 {
        let index =
            ((time * (multiplier - 1.0) / length + 1.0).ln() / multiplier.ln()).ceil() - 1.0;
        (
            index,
            length * (multiplier.powf(index) - 1.0) / (multiplier - 1.0),
        )
    } else {
        let index = (time / length).ceil() - 1.0;
        (index, index * length)
    };
    let current_length = length * multiplier.powf(index);
    let in_cycle = (time - cumulative) / current_length;
    (init_lr - min_lr) / 2.0 * (in_cycle * std::f64::consts::PI).cos() + (init_lr + min_lr) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_decay_matches_fastestimator() {
        // FastEstimator's tests: cosine_decay(5, 10, 0.01, 0) == 0.005
        assert!((cosine_decay(5, 10, 0.01, 0.0, 1, 1, false) - 0.005).abs() < 1e-12);
        // cosine_decay(1001, 1000, 0.01) ≈ 0.01: a new cycle has started
        assert!((cosine_decay(1001, 1000, 0.01, 1e-6, 1, 1, false) - 0.01).abs() < 1e-6);
        // cycle_multiplier 2: t = 10 is the end of the first (10-long) cycle
        assert!(cosine_decay(10, 10, 0.01, 0.0, 1, 2, false).abs() < 1e-12);
        // ... and the second cycle is twice as long: its middle is t = 20
        assert!((cosine_decay(20, 10, 0.01, 0.0, 1, 2, false) - 0.005).abs() < 1e-12);
        // before `start`: init_lr, or a linear warm-up
        assert_eq!(cosine_decay(3, 10, 0.01, 0.0, 5, 1, false), 0.01);
        assert!((cosine_decay(3, 10, 0.01, 0.0, 5, 1, true) - 0.006).abs() < 1e-12);
    }

    fn parse(text: &str) -> LrSchedule {
        fe_plugin_api::parse_config(text).unwrap()
    }

    #[test]
    fn step_exponential_and_warmup_schedules() {
        let step = parse("schedule = 'step_decay'\ninit_lr = 1.0\nstep_size = 2\ngamma = 0.5");
        let at: Vec<f64> = (1..=5).map(|t| step.lr_at(t)).collect();
        assert_eq!(at, [1.0, 1.0, 0.5, 0.5, 0.25]);
        let exp = parse("schedule = 'exponential'\ninit_lr = 1.0\ngamma = 0.9\nby = 'epoch'");
        assert_eq!(exp.by(), By::Epoch);
        assert!((exp.lr_at(3) - 0.81).abs() < 1e-12);
        let warm = parse("schedule = 'linear_warmup'\ninit_lr = 1.0\nwarmup = 4\ndecay = 'linear'\ntotal = 8\nmin_lr = 0.0");
        let at: Vec<f64> = [1, 4, 6, 8, 20].iter().map(|&t| warm.lr_at(t)).collect();
        assert_eq!(at, [0.25, 1.0, 0.5, 0.0, 0.0]);
        let cosine = parse(
            "schedule = 'linear_warmup'\ninit_lr = 1.0\nwarmup = 2\ndecay = 'cosine'\ntotal = 4",
        );
        assert!((cosine.lr_at(3) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn invalid_schedules_name_the_field() {
        let bad = parse("schedule = 'cosine_decay'\ninit_lr = 1.0\ncycle_length = 0");
        assert_eq!(bad.validate().unwrap_err().0, "cycle_length");
        let bad = parse("schedule = 'linear_warmup'\ninit_lr = 1.0\nwarmup = 4\ndecay = 'cosine'");
        assert_eq!(bad.validate().unwrap_err().0, "total");
        let err = fe_plugin_api::parse_config::<LrSchedule>("schedule = 'cosine'\ninit_lr = 1.0")
            .unwrap_err();
        assert!(err.message().contains("unknown variant `cosine`"), "{err}");
        let err = fe_plugin_api::parse_config::<LrSchedule>(
            "schedule = 'exponential'\ninit_lr = 1.0\ngamma = 0.5\nstep = 2",
        )
        .unwrap_err();
        assert!(err.message().contains("unknown field `step`"), "{err}");
    }
}
