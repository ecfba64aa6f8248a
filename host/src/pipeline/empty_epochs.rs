//! Datasets that give an epoch no batch at all: fewer samples than one batch, with
//! `drop_last`. Such an epoch used to run no step without a word: evaluation logged
//! `accuracy: NaN`, and the savers and early stopping that watch it never acted.

use std::ops::RangeInclusive;

use fe_plugin_api::Mode;

use super::Pipeline;

impl Pipeline {
    /// The first dataset of `mode` that yields no batch in one of `epochs`, described in one
    /// line (dataset, samples, batch size, drop_last, and what would fill a batch). `steps`,
    /// the mode's steps-per-epoch setting, repeats the data until its batches are full, so
    /// with it no epoch is empty. Batch sizes are the whole run's: a data-parallel run
    /// divides the samples and the batch alike.
    pub fn epoch_without_batches(
        &self,
        mode: Mode,
        epochs: RangeInclusive<u32>,
        steps: Option<u64>,
    ) -> Option<String> {
        if steps.is_some() {
            return None;
        }
        for epoch in epochs {
            for ds_id in self.ds_ids(mode, epoch) {
                let (batch_size, drop_last, _) = self.whole_batching(mode, epoch, &ds_id);
                let samples = self.samples(mode, epoch, &ds_id);
                if !drop_last || samples >= batch_size as u64 {
                    continue;
                }
                let dataset = if ds_id.is_empty() {
                    format!("the {mode} dataset")
                } else {
                    format!("the {mode} dataset `{ds_id}`")
                };
                let steps_setting = match mode {
                    Mode::Train | Mode::Eval => format!(", or set run.{mode}_steps_per_epoch"),
                    _ => String::new(),
                };
                return Some(format!(
                    "{dataset} has {samples} samples, fewer than one batch of {batch_size} with drop_last = true: epoch {epoch} would run no {mode} step (its metrics would be NaN); use a batch size of at most {samples}, drop_last = false{steps_setting}"
                ));
            }
        }
        None
    }
}
