//! One epoch of one mode, and the trace hooks around its batches. `stop_training` is checked
//! after every hook group, as FastEstimator's estimator does: a trace that sets it ends the run
//! right there (`on_end` still runs).

use std::collections::BTreeSet;

use fe_plugin_api::ffi::TraceHook;
use fe_plugin_api::{Mode, StepContext};

use super::data::Data;
use super::essential::is_log_step;
use super::traces::{self, Cx};
use super::uneven::{Joined, Turn};
use super::Estimator;
use crate::checkpoint::{policy, Cursor};
use crate::error::{Error, Result};
use crate::network::{Batch, KeyId, StepPlan};

/// How an epoch of one mode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Epoch {
    /// The mode has no data this epoch: nothing ran.
    NoData,
    /// Every batch ran.
    Done,
    /// A trace stopped training.
    Stopped,
    /// A signal asked the run to stop; a checkpoint of the step it stopped after was taken.
    Interrupted,
}

/// Whether to go on after a hook group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Go on.
    Go,
    /// A trace set `stop_training`.
    Stop,
}

impl Estimator {
    /// Runs one epoch of `mode` over each of its datasets in force. `resume` continues an epoch
    /// a checkpoint was taken in: `(dataset index, batches done)`; its `on_epoch_begin` ran.
    pub(super) fn run_epoch(&mut self, mode: Mode, resume: Option<(usize, u64)>) -> Result<Epoch> {
        let epoch = self.system.epoch_idx;
        let ds_ids = self.pipeline.ds_ids(mode, epoch);
        if ds_ids.is_empty() {
            return Ok(Epoch::NoData);
        }
        let shared = self.strategy.is_data_parallel();
        self.system.mode = Some(mode);
        if resume.is_none() {
            self.system.batch_idx = 0;
            if self.hooks(TraceHook::EpochBegin)? == Flow::Stop {
                return Ok(Epoch::Stopped);
            }
        }
        let (first_ds, skip) = resume.unwrap_or((0, 0));
        for (ds_index, ds_id) in ds_ids.into_iter().enumerate().skip(first_ds) {
            let skip = if ds_index == first_ds { skip } else { 0 };
            self.system.ds_id = ds_id.clone();
            let desired = traces::wanted_keys(&self.traces, mode, epoch, &ds_id);
            let plan = self
                .network
                .plan(mode, epoch, &ds_id, &desired)
                .map_err(Error::Run)?;
            // Train steps that log nothing need not bring back what only the loss log reads
            // (on CUDA a copy and a sync per step): they run a plan without those outputs.
            let between_logs = if mode == Mode::Train {
                let lean = traces::wanted_keys_between_logs(&self.traces, mode, epoch, &ds_id);
                (lean != desired)
                    .then(|| self.network.plan(mode, epoch, &ds_id, &lean))
                    .transpose()
                    .map_err(Error::Run)?
            } else {
                None
            };
            let mut wanted: BTreeSet<KeyId> = plan.inputs.iter().copied().collect();
            wanted.extend(desired.iter().copied());
            let steps = self.system.steps_per_epoch(mode);
            let loader = self.pipeline.epoch_from(
                mode,
                epoch,
                &ds_id,
                &wanted,
                steps,
                &self.keys,
                skip as usize,
            )?;
            let active: Vec<usize> = (0..self.traces.len())
                .filter(|&i| self.traces[i].active(mode, epoch, Some(&ds_id)))
                .collect();
            let traces_may_stop = active
                .iter()
                .any(|&i| self.traces[i].may_stop_between_steps());
            let mut data = Data::default();
            let total = self.pipeline.batches(mode, epoch, &ds_id, steps) as u64;
            self.progress
                .start(mode, epoch, &ds_id, total.saturating_sub(skip));
            if mode == Mode::Eval {
                self.system.set_eval_log_steps(total);
            }
            let mut loader = loader;
            let mut joined = match mode {
                Mode::Train => Joined::start(&self.strategy, &loader),
                _ => None,
            };
            let mut batches_done = skip;
            loop {
                let (mut batch, shadow) = match &mut joined {
                    None => match loader.next() {
                        Some(batch) => (batch?, false),
                        None => break,
                    },
                    Some(joined) => {
                        let fallback = || {
                            let mut first = self.pipeline.epoch(
                                mode,
                                epoch,
                                &ds_id,
                                &wanted,
                                Some(1),
                                &self.keys,
                            )?;
                            first.next().transpose()
                        };
                        match joined.next(&self.strategy, &mut loader, fallback)? {
                            Turn::Own(batch) => (batch, false),
                            Turn::Shadow(batch) => (batch, true),
                            Turn::End => break,
                        }
                    }
                };
                batches_done += 1;
                if mode == Mode::Train {
                    self.system.global_step += 1;
                    self.strategy.at_step(self.system.global_step);
                }
                self.system.batch_idx += 1;
                let step = StepContext {
                    mode,
                    epoch,
                    global_step: self.system.global_step,
                    batch_idx: self.system.batch_idx,
                    ds_id: ds_id.as_str().into(),
                    warmup: false,
                    seed: crate::rng::mix(self.pipeline.seed, self.system.global_step),
                };
                data.clear();
                if shadow {
                    self.shadow_step(&plan, &mut batch, &step)?;
                    let collective: Vec<usize> = active
                        .iter()
                        .copied()
                        .filter(|&i| self.traces[i].collective_in_batch_hooks())
                        .collect();
                    self.batch_hooks(TraceHook::BatchEnd, &collective, &batch, &mut data)?;
                    if !data.nothing_logged() {
                        self.log(&data);
                    }
                } else {
                    let step_plan = match &between_logs {
                        Some(lean) if !is_log_step(step.global_step, self.system.log_steps) => lean,
                        _ => &plan,
                    };
                    let flow = self.own_step(step_plan, &active, &mut batch, &mut data, &step)?;
                    // Data parallel: a stop one rank's trace asks for is only a proposal until
                    // the ranks agree on it after the step (see `agree_after_step`).
                    if flow == Flow::Stop && !shared {
                        return Ok(Epoch::Stopped);
                    }
                }
                // Evaluation steps are not collectives: the ranks agree at its end.
                if shared
                    && mode == Mode::Train
                    && self.agree_after_step(traces_may_stop)? == Flow::Stop
                {
                    return Ok(Epoch::Stopped);
                }
                if mode == Mode::Eval
                    && self
                        .system
                        .eval_log_steps
                        .0
                        .contains(&self.system.batch_idx)
                {
                    let line = format!(
                        "fe-host eval progress: {}/{};",
                        self.system.batch_idx, self.system.eval_log_steps.1
                    );
                    self.print(&line);
                }
                let due = mode == Mode::Train
                    && self
                        .checkpointing
                        .config
                        .as_ref()
                        .is_some_and(|c| policy::due_after_step(c, self.system.global_step));
                let interrupted = mode == Mode::Train && self.stop.agreed(shared).is_some();
                if due || interrupted {
                    self.save_checkpoint(Cursor::InEpoch {
                        epoch,
                        ds_index,
                        batches_done,
                    })?;
                }
                if interrupted {
                    self.progress.finish();
                    return Ok(Epoch::Interrupted);
                }
                self.progress.step();
            }
            self.progress.finish();
        }
        self.system.ds_id.clear();
        if shared && mode != Mode::Train && self.agree_to_stop()? == Flow::Stop {
            return Ok(Epoch::Stopped);
        }
        self.log_memory(mode);
        Ok(match self.hooks(TraceHook::EpochEnd)? {
            Flow::Go => Epoch::Done,
            Flow::Stop => Epoch::Stopped,
        })
    }

    /// One step on this rank's own batch, with the batch hooks around it: `Flow::Stop` when a
    /// trace asked to stop training.
    fn own_step(
        &mut self,
        plan: &StepPlan,
        active: &[usize],
        batch: &mut Batch,
        data: &mut Data,
        step: &StepContext<'_>,
    ) -> Result<Flow> {
        let begin = self.batch_hooks(TraceHook::BatchBegin, active, batch, data)?;
        if begin == Flow::Stop && !self.strategy.is_data_parallel() {
            return Ok(Flow::Stop);
        }
        if let Err(error) = self.network.run_step_in(plan, batch, step, &self.strategy) {
            return Err(self.explain_failure(error, batch.size));
        }
        let end = self.batch_hooks(TraceHook::BatchEnd, active, batch, data)?;
        if !data.nothing_logged() {
            self.log(data);
        }
        Ok(if begin == Flow::Stop { begin } else { end })
    }

    /// A step this rank takes part in without data of its own (see [`super::uneven`]): the
    /// batch runs again with the loss weighed 0, the models' buffers are put back afterwards
    /// and no trace sees it.
    fn shadow_step(
        &mut self,
        plan: &StepPlan,
        batch: &mut Batch,
        step: &StepContext<'_>,
    ) -> Result<()> {
        let buffers = self.network.snapshot_buffers().map_err(Error::Run)?;
        if let Err(error) = self.network.run_step_in(plan, batch, step, &self.strategy) {
            return Err(self.explain_failure(error, batch.size));
        }
        self.network.restore_buffers(&buffers).map_err(Error::Run)
    }

    /// Adds where and what to try to an out-of-memory failure; others pass unchanged.
    fn explain_failure(&self, error: Error, batch_size: i64) -> Error {
        let models: Vec<&str> = self
            .network
            .models
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        let at = crate::device::OomContext {
            device: self.network.device,
            step: self.system.global_step,
            batch_size,
            models: &models,
        };
        match crate::device::explain_oom(&error.to_string(), &at) {
            Some(message) => Error::Run(message),
            None => error,
        }
    }

    /// Prints and records the device's peak memory over the epoch that just ended (CUDA).
    fn log_memory(&mut self, mode: Mode) {
        let tch::Device::Cuda(index) = self.network.device else {
            return;
        };
        let Ok(stats) = crate::shim::memory_stats(index) else {
            return;
        };
        let mib = |bytes: i64| bytes as f64 / f64::from(1u32 << 20);
        let step = self.system.global_step;
        let (allocated, reserved) = (mib(stats.peak_allocated), mib(stats.peak_reserved));
        self.system
            .summary
            .record(mode, "gpu_peak_allocated_mib", step, allocated);
        self.system
            .summary
            .record(mode, "gpu_peak_reserved_mib", step, reserved);
        let line = format!(
            "fe-host memory: {mode} epoch {}: peak allocated {allocated:.1} MiB; peak reserved {reserved:.1} MiB;",
            self.system.epoch_idx
        );
        self.print(&line);
    }

    fn batch_hooks(
        &mut self,
        hook: TraceHook,
        active: &[usize],
        batch: &Batch,
        data: &mut Data,
    ) -> Result<Flow> {
        let mut notes = Vec::new();
        {
            let Estimator {
                traces,
                system,
                network,
                strategy,
                ..
            } = self;
            let mut cx = Cx {
                system,
                network,
                data,
                batch_size: batch.size,
                notes: &mut notes,
                strategy,
            };
            for &index in active {
                traces[index].run(hook, &mut cx, Some(batch))?;
            }
        }
        self.print_notes(&notes);
        Ok(self.flow())
    }

    /// Runs an epoch-level or run-level hook on every active trace, then logs what they wrote.
    pub(super) fn hooks(&mut self, hook: TraceHook) -> Result<Flow> {
        let mode = self.system.mode;
        let epoch = self.system.epoch_idx;
        let mut data = Data::default();
        let mut notes = Vec::new();
        {
            let Estimator {
                traces,
                system,
                network,
                strategy,
                ..
            } = self;
            let mut cx = Cx {
                system,
                network,
                data: &mut data,
                batch_size: 0,
                notes: &mut notes,
                strategy,
            };
            for trace in traces.iter_mut() {
                let runs = match hook {
                    TraceHook::Begin | TraceHook::End => true,
                    _ => mode.is_some_and(|m| trace.active(m, epoch, None)),
                };
                if runs {
                    trace.run(hook, &mut cx, None)?;
                }
            }
        }
        if matches!(hook, TraceHook::EpochEnd | TraceHook::End) && !data.nothing_logged() {
            self.log_epoch(&data);
        }
        self.print_notes(&notes);
        if self.strategy.is_data_parallel() {
            return self.agree_to_stop();
        }
        Ok(self.flow())
    }

    /// Data parallel, after every training step: the ranks agree on what each proposes — a
    /// trace's `stop_training` and a received signal — so that every rank stops (or checkpoints
    /// and stops) after the same step. When no active trace can stop between steps, the step's
    /// gradient all-reduce already carried the signals (see [`SharedGroup::take_carried_signal`])
    /// and nothing more is sent; otherwise, or after a step that updated nothing, one max
    /// all-reduce does it.
    ///
    /// [`SharedGroup::take_carried_signal`]: crate::dist::SharedGroup::take_carried_signal
    fn agree_after_step(&mut self, traces_may_stop: bool) -> Result<Flow> {
        if !self.strategy.is_data_parallel() {
            return Ok(self.flow());
        }
        let carried = self.strategy.take_carried_signal();
        if let (false, Some(signal)) = (traces_may_stop, carried) {
            self.stop.decide(signal);
            return Ok(self.flow());
        }
        let proposal = [
            f64::from(u8::from(self.system.stop_training)),
            crate::stop::Signal::code(self.stop.local()),
        ];
        let agreed = self.strategy.max(&proposal)?;
        self.system.stop_training = agreed[0] > 0.0;
        self.stop.decide(crate::stop::Signal::from_code(agreed[1]));
        Ok(self.flow())
    }

    /// Data parallel: whether any rank's traces set `stop_training` (then all stop).
    pub(super) fn agree_to_stop(&mut self) -> Result<Flow> {
        self.system.stop_training = self.strategy.any(self.system.stop_training)?;
        Ok(self.flow())
    }

    /// Whether a signal asked the run to stop — on any rank, in a data-parallel run (where
    /// the ranks agree on it here, at an epoch's end).
    pub(super) fn signal_agreed(&mut self) -> Result<Option<crate::stop::Signal>> {
        if self.strategy.is_data_parallel() {
            let proposal = [crate::stop::Signal::code(self.stop.local())];
            let agreed = self.strategy.max(&proposal)?;
            self.stop.decide(crate::stop::Signal::from_code(agreed[0]));
        }
        Ok(self.stop.agreed(self.strategy.is_data_parallel()))
    }

    fn flow(&self) -> Flow {
        if self.system.stop_training {
            Flow::Stop
        } else {
            Flow::Go
        }
    }
}
