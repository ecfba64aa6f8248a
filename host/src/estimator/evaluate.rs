//! `fe-host evaluate`: the losses and metrics of the weights the network holds, on one mode's
//! data, without training (Keras' `evaluate`, Lightning's `trainer.test`). Each dataset of the
//! mode (`ds_id`) is one epoch of its own, so each gets its own numbers.

use std::collections::BTreeMap;

use fe_plugin_api::ffi::TraceHook;
use fe_plugin_api::Mode;

use super::Estimator;
use crate::error::{Error, Result};
use crate::pipeline::Dataset;

/// The values one dataset of the evaluated mode gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    /// Its `ds_id` (empty when the mode has one unnamed dataset).
    pub ds_id: String,
    /// Samples evaluated.
    pub samples: u64,
    /// Every value logged at the epoch's end: losses and metrics, by key.
    pub values: BTreeMap<String, f64>,
}

/// Names the traces `evaluate` leaves out: they save, log to files, or steer training, none of
/// which an evaluation does.
pub const LEFT_OUT: [&str; 10] = [
    "LRScheduler",
    "ReduceLROnPlateau",
    "EarlyStopping",
    "TerminateOnNaN",
    "Timer",
    "BestModelSaver",
    "ModelSaver",
    "CSVLogger",
    "JSONLLogger",
    "TensorBoard",
];

impl Estimator {
    /// Runs `mode` over each of its datasets in force in `epoch` with the network as it is,
    /// between the traces' `on_begin` and `on_end`; returns what each dataset's epoch logged.
    pub fn evaluate(&mut self, mode: Mode, epoch: u32) -> Result<Vec<Evaluated>> {
        let ds_ids = self.pipeline.ds_ids(mode, epoch);
        if ds_ids.is_empty() {
            return Err(Error::Usage(format!(
                "the manifest has no {mode} dataset in epoch {epoch}; choose another --mode, or give the data with --input"
            )));
        }
        self.test = false;
        self.system.epoch_idx = epoch;
        self.network.enter_epoch(epoch);
        let outcome = self.evaluate_each(mode, epoch, &ds_ids);
        let closing = self.close_trial();
        outcome.and_then(|evaluated| closing.map(|()| evaluated))
    }

    fn evaluate_each(
        &mut self,
        mode: Mode,
        epoch: u32,
        ds_ids: &[String],
    ) -> Result<Vec<Evaluated>> {
        self.hooks(TraceHook::Begin)?;
        let all = std::mem::take(&mut self.pipeline.datasets);
        let mut evaluated = Vec::new();
        for ds_id in ds_ids {
            // Only this dataset of the mode: the epoch's metrics are its own.
            self.pipeline.datasets = all
                .iter()
                .filter(|d| d.mode != mode || &d.ds_id == ds_id)
                .map(copy)
                .collect();
            self.system.summary.history.remove(mode.as_str());
            let steps = self.system.steps_per_epoch(mode);
            let batches = self.pipeline.batches(mode, epoch, ds_id, steps) as u64;
            let size = self.pipeline.batch_size_at(epoch) as u64;
            let samples = self
                .pipeline
                .samples(mode, epoch, ds_id)
                .min(batches * size);
            let ran = self.run_epoch(mode, None);
            let values = self
                .system
                .summary
                .history
                .get(mode.as_str())
                .map(last_values)
                .unwrap_or_default();
            ran?;
            evaluated.push(Evaluated {
                ds_id: ds_id.clone(),
                samples,
                values,
            });
        }
        self.pipeline.datasets = all;
        self.hooks(TraceHook::End)?;
        Ok(evaluated)
    }
}

fn copy(dataset: &Dataset) -> Dataset {
    Dataset {
        mode: dataset.mode,
        ds_id: dataset.ds_id.clone(),
        epochs: dataset.epochs.clone(),
        source: dataset.source.clone(),
        keys: dataset.keys.clone(),
    }
}

/// The last value of every key, less what only a run over several epochs means (the best so
/// far, epochs since the best) and timings.
fn last_values(history: &BTreeMap<String, BTreeMap<u64, f64>>) -> BTreeMap<String, f64> {
    let over_epochs = |key: &str| {
        ["min_", "max_", "since_best_"].iter().any(|prefix| {
            key.strip_prefix(prefix)
                .is_some_and(|base| history.contains_key(base))
        })
    };
    history
        .iter()
        .filter(|(key, _)| !over_epochs(key) && !key.contains("/sec") && !key.ends_with("_time"))
        .filter_map(|(key, steps)| steps.values().next_back().map(|v| (key.clone(), *v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_kept_are_the_last_of_each_key_without_run_long_ones() {
        let mut history = BTreeMap::new();
        for (key, value) in [
            ("ce", 0.5),
            ("min_ce", 0.4),
            ("since_best_ce", 1.0),
            ("accuracy", 0.9),
            ("max_accuracy", 0.95),
            ("min_lr", 0.1),
            ("steps/sec", 10.0),
        ] {
            history.insert(key.to_owned(), BTreeMap::from([(0, 0.0), (7, value)]));
        }
        let kept = last_values(&history);
        let keys: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(keys, ["accuracy", "ce", "min_lr"]);
        assert_eq!(kept["ce"], 0.5);
    }
}
