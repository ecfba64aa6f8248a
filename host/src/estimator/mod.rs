//! The fit loop (FastEstimator's Estimator): epochs of training and evaluation, traces around
//! every batch and epoch, checks before the first step.

pub mod adapt;
pub mod checkpointing;
mod checks;
pub mod data;
mod epoch;
pub mod essential;
pub mod evaluate;
pub mod host_traces;
pub mod io_traces;
pub mod lr_sources;
pub mod lr_traces;
mod metric_state;
pub mod order;
mod parallel;
pub mod plugin_traces;
mod progress;
mod report;
pub mod saver_traces;
pub mod schedule_changes;
pub mod traces;
mod uneven;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use fe_plugin_api::ffi::{TraceHook, TrialEvent};
use fe_plugin_api::Mode;
use tch::Device;

pub use data::{Data, Logged};
pub use report::{describe_context, describe_device};
pub use traces::{Cx, HostTrace, TraceSlot};

use crate::checkpoint::{policy, Cursor};
use crate::error::{Error, Result};
use crate::estimator::lr_traces::LrScheduler;
use crate::manifest::Manifest;
use crate::network::{KeyId, Keys, Network};
use crate::pipeline::Pipeline;
use crate::plugins::Registry;
use crate::schedule::ModeFilter;
use crate::system::System;
use epoch::{Epoch, Flow};

/// Options the command line adds to the manifest.
pub struct RunOptions {
    /// Print nothing but errors.
    pub quiet: bool,
    /// Where log lines go.
    pub out: Box<dyn Write>,
    /// Draw progress bars on stdout (a person is watching it).
    pub progress: bool,
}

/// A run, built and ready to fit.
pub struct Estimator {
    /// The network.
    pub network: Network,
    /// The pipeline.
    pub pipeline: Pipeline,
    /// Traces in the order they run.
    pub traces: Vec<TraceSlot>,
    /// Run state.
    pub system: System,
    /// Every key of the run.
    pub keys: Arc<Keys>,
    /// What the run prints.
    out: Box<dyn Write>,
    quiet: bool,
    train_seconds: f64,
    warmup: bool,
    /// The epochs checks and warm-up visit (FastEstimator's signature epochs).
    signature_epochs: Vec<u32>,
    /// What switches at each epoch, for the log.
    schedule_changes: BTreeMap<u32, Vec<String>>,
    /// Checkpoint settings and the resume point.
    pub checkpointing: checkpointing::Checkpointing,
    /// Run the test epoch after training (when there is test data).
    pub test: bool,
    /// Whether a signal asked the run to stop, read between steps.
    pub stop: crate::stop::StopRequest,
    /// `run.log_dir`: the run log and the end-of-run plot go here.
    log_dir: Option<PathBuf>,
    progress: progress::Progress,
    /// How this process trains with others: alone until a data-parallel start-up hands it a
    /// group (see [`crate::dist::startup`]). Declared last so that it is dropped last: the
    /// models' gradient hooks go before the connections they use.
    pub strategy: crate::dist::Strategy,
}

/// The per-epoch log written into `run.log_dir`.
pub const LOG_FILE: &str = "log.jsonl";
/// The plot of every logged value written into `run.log_dir` at the end of a run.
pub const PLOT_FILE: &str = "metrics.svg";

impl Estimator {
    /// Builds network, pipeline and traces from `manifest` on `device`, and checks every
    /// signature epoch for missing keys.
    pub fn build(
        manifest: &Manifest,
        registry: &Registry,
        device: Device,
        options: RunOptions,
    ) -> Result<Self> {
        let mut keys = Keys::default();
        tch::manual_seed(manifest.run.seed as i64);
        let pipeline = Pipeline::build(manifest, registry, &mut keys)?;
        let mut network = crate::network::build::build(manifest, registry, &mut keys, device)?;
        network.keys = keys.clone();
        let user_traces = traces::build_traces(manifest, registry, &network, &mut keys)?;
        let total_epochs = manifest.run.epochs;

        let monitored = monitored_keys(manifest, &network, &keys)?;
        let loss_names = |mode: Mode| -> Vec<(KeyId, String)> {
            let mut written = network.loss_keys_written_in(mode);
            for &k in &monitored {
                if !written.contains(&k) && network.writes_in(k, mode) {
                    written.push(k);
                }
            }
            written
                .into_iter()
                .map(|k| (k, keys.name(k).to_owned()))
                .collect()
        };
        let mut all = Vec::new();
        let train_losses = loss_names(Mode::Train);
        let shown_losses = train_losses.iter().map(|(_, name)| name.clone()).collect();
        if pipeline.has_mode(Mode::Train, total_epochs) {
            all.push(TraceSlot::host(
                "TrainEssential",
                ModeFilter::only(Mode::Train),
                Box::new(essential::TrainEssential::new(
                    train_losses,
                    &network
                        .models
                        .iter()
                        .filter(|m| !m.optimizers.is_empty())
                        .map(|m| m.name.clone())
                        .collect::<Vec<_>>(),
                )),
            ));
        }
        let eval_losses = loss_names(Mode::Eval);
        if !eval_losses.is_empty() {
            let mut modes = ModeFilter::only(Mode::Eval);
            if pipeline.has_mode(Mode::Test, total_epochs) {
                modes = ModeFilter::parse(&["eval", "test"]).unwrap_or(modes);
            }
            all.push(TraceSlot::host(
                "EvalEssential",
                modes,
                Box::new(essential::EvalEssential::new(
                    eval_losses,
                    manifest.run.eval_loss == crate::manifest::schema::EvalLoss::PerBatch,
                )),
            ));
        }
        // A learning rate written as a schedule in the optimizer is applied like FastEstimator's
        // LRScheduler trace, labelled with where the manifest writes it.
        for (index, model) in network.models.iter().enumerate() {
            if model.optimizers.iter().any(|o| o.lr_schedule.is_some()) {
                all.push(TraceSlot::host(
                    &format!("LRScheduler (models[{index}].optimizer.lr)"),
                    ModeFilter::only(Mode::Train),
                    Box::new(LrScheduler::new(&network, index, None)),
                ));
            }
        }
        all.extend(user_traces);
        if let Some(dir) = &manifest.run.log_dir {
            all.push(TraceSlot::host(
                "RunLog (run.log_dir)",
                ModeFilter::ALL,
                Box::new(io_traces::EpochLogger::every_step(
                    io_traces::LogFile::Jsonl(dir.join(LOG_FILE)),
                )),
            ));
        }
        let deps: Vec<order::Deps> = all.iter().map(TraceSlot::deps).collect();
        let sorted = order::sort_traces(&deps, None)
            .map_err(|e| Error::Manifest(format!("{}: {e}", manifest.file.display())))?;
        let mut slots: Vec<Option<TraceSlot>> = all.into_iter().map(Some).collect();
        let all: Vec<TraceSlot> = sorted.into_iter().filter_map(|i| slots[i].take()).collect();
        network.keys = keys.clone();
        let mut system = System::new(
            total_epochs,
            manifest.run.log_steps,
            manifest.run.train_steps_per_epoch,
            manifest.run.eval_steps_per_epoch,
        );
        system.eval_log_steps_request = manifest.run.eval_log_steps.clone();
        let entries = schedule_changes::scheduled_entries(manifest);
        let schedule_changes = (2..=total_epochs)
            .map(|epoch| (epoch, schedule_changes::changes_at(&entries, epoch)))
            .filter(|(_, changes)| !changes.is_empty())
            .collect();
        let checkpointing = checkpointing::Checkpointing {
            config: manifest.checkpoint.clone(),
            manifest_text: manifest.effective_text(),
            plugins: registry
                .plugins
                .plugins
                .iter()
                .map(crate::checkpoint::PluginRecord::of)
                .collect::<Result<_>>()?,
            fallback_dir: crate::checkpoint::default_root(manifest),
            run_id: format!("{}-{}", crate::system::timestamp(), std::process::id()),
            ..Default::default()
        };
        let estimator = Self {
            network,
            pipeline,
            traces: all,
            system,
            keys: Arc::new(keys),
            out: options.out,
            quiet: options.quiet,
            train_seconds: 0.0,
            warmup: manifest.run.warmup,
            signature_epochs: manifest.signature_epochs(),
            schedule_changes,
            checkpointing,
            test: true,
            stop: crate::stop::StopRequest::default(),
            strategy: crate::dist::Strategy::single(),
            log_dir: manifest.run.log_dir.clone(),
            progress: progress::Progress::new(
                options.progress && !options.quiet,
                total_epochs,
                shown_losses,
            ),
        };
        estimator.check_keys(manifest)?;
        Ok(estimator)
    }

    /// Trains for the configured epochs, evaluating after each; then tests if there is test
    /// data. Traces see `on_trial_close` whether the run succeeds or fails.
    pub fn fit(&mut self) -> Result<()> {
        self.fit_then(|_| Ok(()))
    }

    /// [`Estimator::fit`], with `then` run after a successful fit and before the trial closes,
    /// so that what it does (`--smoke` reloading its checkpoint) still belongs to the trial:
    /// `on_trial_close` is the last call a trace sees, as in Determined.
    pub fn fit_then(&mut self, then: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let mut outcome = self.fit_inner();
        // A checkpoint still being written completes before the trial closes, even when the
        // run failed: it was a consistent snapshot, and it is what a resume will continue from.
        let written = self.finish_checkpoint().map(|_| ());
        if let (Err(_), Err(e)) = (&outcome, &written) {
            // The run's own error is the one reported; the failed write must not go unseen.
            eprintln!("warning: the last checkpoint was not written: {e}");
        }
        if outcome.is_ok() && written.is_ok() {
            outcome = then(self);
        }
        let closing = self.close_trial();
        outcome.and(written).and(closing)
    }

    fn fit_inner(&mut self) -> Result<()> {
        let start = Instant::now();
        self.check_outputs()?;
        if let Some(config) = &self.checkpointing.config {
            // Rank 0 alone writes checkpoints; the others never touch the folder.
            if self.strategy.writes_outputs() {
                crate::checkpoint::check_owner(&config.dir, &self.checkpointing.run_id)?;
                crate::checkpoint::store::remove_leftovers(&config.dir)?;
            }
        }
        if self.warmup {
            self.run_warmup()?;
        }
        self.print_start();
        let mut stopped = self.hooks(TraceHook::Begin)? == Flow::Stop;
        let resume = self.checkpointing.resume.take();
        let first_epoch = resume.map_or(1, |cursor| cursor.next_epoch());
        let mut inside = match resume {
            Some(Cursor::InEpoch {
                ds_index,
                batches_done,
                ..
            }) => Some((ds_index, batches_done)),
            _ => None,
        };
        let total = self.system.total_epochs;
        for epoch in first_epoch..=total {
            if stopped {
                break;
            }
            self.system.epoch_idx = epoch;
            self.network.enter_epoch(epoch);
            if inside.is_none() {
                self.log_schedule_changes(epoch);
            }
            let started = Instant::now();
            let train = self.run_epoch(Mode::Train, inside.take())?;
            if train != Epoch::NoData {
                self.train_seconds += started.elapsed().as_secs_f64();
            }
            if train == Epoch::Interrupted {
                return self.stopped();
            }
            if train == Epoch::Stopped {
                // Stopped inside training (a NaN loss, say): nothing of this epoch is kept.
                break;
            }
            self.network.sync_buffers(&self.strategy)?;
            let eval = self.run_epoch(Mode::Eval, None)?;
            stopped = eval == Epoch::Stopped;
            // A stop asked for during evaluation takes effect once it is done: a checkpoint
            // can only be taken between training steps or at an epoch's end.
            let interrupted = self.signal_agreed()?.is_some() && epoch < total && !stopped;
            let due = self
                .checkpointing
                .config
                .as_ref()
                .is_some_and(|c| policy::due_at_epoch_end(c, epoch, epoch == total || stopped));
            if due || interrupted {
                self.save_checkpoint(Cursor::EpochEnd { epoch })?;
            }
            if interrupted {
                return self.stopped();
            }
        }
        if self.test && self.pipeline.has_mode(Mode::Test, total) {
            self.network.sync_buffers(&self.strategy)?;
            self.system.reset_for_test();
            self.run_epoch(Mode::Test, None)?;
        }
        // The last checkpoint was written while testing; traces hear of it before `on_end`.
        self.finish_checkpoint()?;
        self.hooks(TraceHook::End)?;
        self.print_finish(start.elapsed().as_secs_f64());
        self.write_plot()
    }

    /// What must hold before the run writes its first file, so that a run refused at start
    /// leaves nothing behind: there is data to train or evaluate on, and `run.log_dir` is not
    /// a file.
    fn check_outputs(&self) -> Result<()> {
        let total = self.system.total_epochs;
        if ![Mode::Train, Mode::Eval, Mode::Test]
            .iter()
            .any(|&mode| self.pipeline.has_mode(mode, total))
        {
            return Err(Error::Usage(
                "the manifest has no dataset in any mode ([pipeline.data.train], .eval or .test): nothing to run".into(),
            ));
        }
        // An epoch without a single batch is refused, not run as NaN metrics. Test runs
        // once, on the last epoch's data.
        let mut checked = vec![(Mode::Train, 1..=total), (Mode::Eval, 1..=total)];
        if self.test {
            checked.push((Mode::Test, total..=total));
        }
        for (mode, epochs) in checked {
            let steps = self.system.steps_per_epoch(mode);
            if let Some(problem) = self.pipeline.epoch_without_batches(mode, epochs, steps) {
                return Err(Error::Usage(problem));
            }
        }
        if let Some(dir) = &self.log_dir {
            if dir.exists() && !dir.is_dir() {
                return Err(Error::Usage(format!(
                    "run.log_dir: {} is a file, not a directory",
                    dir.display()
                )));
            }
        }
        Ok(())
    }

    /// Plots every logged value against steps into `run.log_dir`, next to the run log.
    fn write_plot(&mut self) -> Result<()> {
        let Some(dir) = &self.log_dir else {
            return Ok(());
        };
        if !self.strategy.writes_outputs() {
            return Ok(());
        }
        // Named and filtered as `fe-host logs` names and filters the run log, so re-plotting
        // the log draws this plot again.
        let run = crate::report::RunHistory {
            name: crate::report::run_name(&dir.join(LOG_FILE)),
            history: crate::report::without_rates(self.system.summary.history.clone()),
        };
        let path = dir.join(PLOT_FILE);
        // The run's closing summary names the plot (cli/summary.rs).
        crate::report::write_plot(&[run], &path)
    }

    fn close_trial(&mut self) -> Result<()> {
        let mut first_error = None;
        for trace in &mut self.traces {
            if let Err(e) = trace.event(TrialEvent::TrialClose, "") {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Seconds this process spent in training epochs (evaluation excluded).
    pub fn train_seconds(&self) -> f64 {
        self.train_seconds
    }

    /// Training steps per second over the training epochs this process ran (time spent in
    /// evaluation excluded; after a resume, the steps the checkpoint had done are not counted).
    pub fn train_steps_per_second(&self) -> Option<f64> {
        let (steps, _) = self.progress.train_steps_run();
        (self.train_seconds > 0.0 && steps > 0).then(|| steps as f64 / self.train_seconds)
    }

    /// The epoch whose evaluation ended at global step `step`, if one did.
    pub fn epoch_evaluated_at(&self, step: u64) -> Option<u32> {
        self.progress.epoch_at(step)
    }
}

/// `run.monitor_names` as keys: each must be written by some network op, in some mode, or the
/// run is refused before it starts (a misspelt name would otherwise log nothing, silently).
fn monitored_keys(manifest: &Manifest, network: &Network, keys: &Keys) -> Result<Vec<KeyId>> {
    manifest
        .run
        .monitor_names
        .iter()
        .map(|name| {
            keys.get(name)
                .filter(|&k| {
                    [Mode::Train, Mode::Eval, Mode::Test]
                        .iter()
                        .any(|&m| network.writes_in(k, m))
                })
                .ok_or_else(|| {
                    Error::Manifest(format!(
                        "{}: run.monitor_names: `{name}` is not a key any network op writes",
                        manifest.file.display()
                    ))
                })
        })
        .collect()
}
