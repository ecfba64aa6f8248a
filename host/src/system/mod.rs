//! The run's state (FastEstimator's `fe.summary.system.System`): where training is, what was logged; and the files
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
    /// Evaluation batches after which progress is printed, as asked in the manifest.
    #[serde(default)]
    pub eval_log_steps_request: Vec<u64>,
    /// The evaluation batches of the current epoch progress is printed after, and the number
    /// of evaluation batches in it (FastEstimator's `(steps, total)`).
    #[serde(default)]
    pub eval_log_steps: (Vec<u64>, u64),
    /// When the experiment started (`YYYYmmdd-HHMMSS`, UTC).
    pub experiment_time: String,
    /// Logged history.
    pub summary: Summary,
    /// Histories too rich for the summary (per-class curves, label tracking), by name; traces
    /// add them and they are checkpointed with the run.
    #[serde(default)]
    pub custom_graphs: BTreeMap<String, Vec<Summary>>,
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
            eval_log_steps_request: Vec::new(),
            eval_log_steps: (Vec::new(), 0),
            experiment_time: timestamp(),
            summary: Summary::default(),
            custom_graphs: BTreeMap::new(),
        }
    }

    /// Starts a new round of training (FastEstimator's `reset`): training mode, step and epoch
    /// back to zero, a fresh summary, custom graphs and experiment time.
    pub fn reset(&mut self) {
        self.experiment_time = timestamp();
        self.mode = Some(Mode::Train);
        self.ds_id.clear();
        self.global_step = 0;
        self.epoch_idx = 0;
        self.batch_idx = 0;
        self.stop_training = false;
        self.summary = Summary::default();
        self.custom_graphs.clear();
    }

    /// Prepares a test round after training (FastEstimator's `reset_for_test`): test mode;
    /// the epoch becomes the last one unless training stopped early (then it stays where it
    /// stopped); `stop_training` is cleared so the test runs; earlier test results are
    /// dropped from the summary and the custom graphs, training and evaluation history kept.
    pub fn reset_for_test(&mut self) {
        if self.experiment_time.is_empty() {
            self.experiment_time = timestamp();
        }
        self.mode = Some(Mode::Test);
        self.ds_id.clear();
        if !self.stop_training {
            self.epoch_idx = self.total_epochs;
        }
        self.stop_training = false;
        self.summary.history.remove(Mode::Test.as_str());
        for graph in self.custom_graphs.values_mut().flatten() {
            graph.history.remove(Mode::Test.as_str());
        }
    }

    /// Adds (or replaces) the custom graph `name`.
    pub fn add_graph(&mut self, name: &str, graphs: Vec<Summary>) {
        self.custom_graphs.insert(name.to_owned(), graphs);
    }

    /// Sets the evaluation progress steps of an epoch of `total` batches: the requested ones
    /// within it.
    pub fn set_eval_log_steps(&mut self, total: u64) {
        let steps = self
            .eval_log_steps_request
            .iter()
            .copied()
            .filter(|&s| s >= 1 && s <= total)
            .collect();
        self.eval_log_steps = (steps, total);
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

/// The `--summary` file: the logged history, when traces added any the custom graphs
/// (FastEstimator keeps both on its `System` for the run's report), and in a data-parallel run
/// the `data_parallel` section its caller describes.
pub fn summary_json(
    system: &System,
    data_parallel: Option<serde_json::Value>,
) -> serde_json::Result<String> {
    let mut json = serde_json::to_value(&system.summary)?;
    if let Some(object) = json.as_object_mut() {
        if !system.custom_graphs.is_empty() {
            object.insert(
                "custom_graphs".to_owned(),
                serde_json::to_value(&system.custom_graphs)?,
            );
        }
        if let Some(data_parallel) = data_parallel {
            object.insert("data_parallel".to_owned(), data_parallel);
        }
    }
    serde_json::to_string_pretty(&json)
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

    fn trained() -> System {
        let mut system = System::new(5, 10, None, None);
        system.mode = Some(Mode::Eval);
        system.ds_id = "a".into();
        system.global_step = 500;
        system.epoch_idx = 3;
        system.batch_idx = 7;
        system.summary.record(Mode::Train, "ce", 500, 0.1);
        system.summary.record(Mode::Test, "accuracy", 500, 0.9);
        let mut graph = Summary::default();
        graph.record(Mode::Test, "curve", 1, 0.5);
        graph.record(Mode::Eval, "curve", 1, 0.4);
        system.add_graph("pr", vec![graph]);
        system
    }

    #[test]
    fn reset_starts_a_new_round_of_training() {
        let mut system = trained();
        system.stop_training = true;
        system.reset();
        assert_eq!(system.mode, Some(Mode::Train));
        assert_eq!(
            (system.global_step, system.epoch_idx, system.batch_idx),
            (0, 0, 0)
        );
        assert!(system.ds_id.is_empty() && !system.stop_training);
        assert!(system.summary.history.is_empty() && system.custom_graphs.is_empty());
        assert_eq!(
            (system.total_epochs, system.log_steps),
            (5, 10),
            "configuration stays"
        );
    }

    #[test]
    fn reset_for_test_keeps_training_history_and_moves_to_the_last_epoch() {
        let mut system = trained();
        system.reset_for_test();
        assert_eq!(system.mode, Some(Mode::Test));
        assert_eq!(
            system.epoch_idx, 5,
            "a finished run tests at its last epoch"
        );
        assert_eq!(system.global_step, 500);
        assert!(system.ds_id.is_empty());
        assert_eq!(system.summary.last(Mode::Train, "ce"), Some(0.1));
        assert_eq!(system.summary.last(Mode::Test, "accuracy"), None);
        let graph = &system.custom_graphs["pr"][0];
        assert_eq!(graph.last(Mode::Test, "curve"), None);
        assert_eq!(graph.last(Mode::Eval, "curve"), Some(0.4));
    }

    #[test]
    fn reset_for_test_after_an_early_stop_keeps_the_epoch_it_stopped_in() {
        let mut system = trained();
        system.stop_training = true;
        system.reset_for_test();
        assert_eq!(system.epoch_idx, 3);
        assert!(!system.stop_training, "the test still runs");
    }

    #[test]
    fn eval_log_steps_are_the_requested_ones_inside_the_epoch() {
        let mut system = System::new(1, 10, None, None);
        system.eval_log_steps_request = vec![0, 1, 5, 40];
        system.set_eval_log_steps(20);
        assert_eq!(system.eval_log_steps, (vec![1, 5], 20));
    }

    #[test]
    fn a_checkpoint_of_an_older_system_without_the_new_fields_loads() {
        let mut json = serde_json::to_value(System::new(2, 1, None, None)).unwrap();
        let object = json.as_object_mut().unwrap();
        for key in ["eval_log_steps_request", "eval_log_steps", "custom_graphs"] {
            object.remove(key);
        }
        let system: System = serde_json::from_value(json).unwrap();
        assert!(system.custom_graphs.is_empty());
    }

    #[test]
    fn timestamp_has_the_fastestimator_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 15);
        assert_eq!(&t[8..9], "-");
        assert!(t.starts_with("20"));
    }
}
