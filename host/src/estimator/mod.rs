//! The fit loop (FastEstimator's Estimator): epochs of training and evaluation, traces around
//! every batch and epoch, checks before the first step.

pub mod data;
pub mod essential;
pub mod traces;
pub mod transform;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use fe_plugin_api::ffi::{TraceHook, TrialEvent};
use fe_plugin_api::{Mode, StepContext};
use tch::Device;

pub use data::{Data, Logged};
pub use traces::{Cx, HostTrace, TraceSlot};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::network::{Batch, KeyId, Keys, Network};
use crate::pipeline::Pipeline;
use crate::plugins::Registry;
use crate::schedule::ModeFilter;
use crate::system::System;

/// Options the command line adds to the manifest.
pub struct RunOptions {
    /// Print nothing but errors.
    pub quiet: bool,
    /// Where log lines go.
    pub out: Box<dyn Write>,
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
}

impl Estimator {
    /// Builds network, pipeline and traces from `manifest` on `device`.
    pub fn build(
        manifest: &Manifest,
        registry: &Registry,
        device: Device,
        options: RunOptions,
    ) -> Result<Self> {
        let mut keys = Keys::default();
        tch::manual_seed(manifest.run.seed as i64);
        let pipeline = Pipeline::build(manifest, registry, &mut keys)?;
        let network = crate::network::build::build(manifest, registry, &mut keys, device)?;
        let user_traces = traces::build_plugin_traces(manifest, registry, &mut keys)?;

        let loss_names = |mode: Mode| -> Vec<(KeyId, String)> {
            network
                .loss_keys(mode)
                .into_iter()
                .map(|k| (k, keys.name(k).to_owned()))
                .collect()
        };
        let mut all = Vec::new();
        let train_losses = loss_names(Mode::Train);
        if !pipeline.ds_ids(Mode::Train).is_empty() {
            all.push(TraceSlot::host(
                "TrainEssential",
                ModeFilter::only(Mode::Train),
                Box::new(essential::TrainEssential::new(train_losses)),
            ));
        }
        let eval_losses = loss_names(Mode::Eval);
        if !eval_losses.is_empty() {
            let mut modes = ModeFilter::only(Mode::Eval);
            if !pipeline.ds_ids(Mode::Test).is_empty() {
                modes = ModeFilter::parse(&["eval", "test"]).unwrap_or(modes);
            }
            all.push(TraceSlot::host(
                "EvalEssential",
                modes,
                Box::new(essential::EvalEssential::new(eval_losses)),
            ));
        }
        all.extend(user_traces);
        let mut network = network;
        network.keys = keys.clone();
        let system = System::new(
            manifest.run.epochs,
            manifest.run.log_steps,
            manifest.run.train_steps_per_epoch,
            manifest.run.eval_steps_per_epoch,
        );
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
        };
        estimator.check_keys(manifest)?;
        Ok(estimator)
    }

    /// Before any step: every op input and every trace input must be provided, in every mode
    /// and dataset that has data, so a missing key fails now rather than hours in.
    fn check_keys(&self, manifest: &Manifest) -> Result<()> {
        for mode in Mode::ALL {
            for ds_id in self.pipeline.ds_ids(mode) {
                let available = self.pipeline.available_keys(mode, &ds_id);
                let where_ = describe_context(mode, 1, &ds_id);
                let desired = traces::wanted_keys(&self.traces, mode, &ds_id);
                let plan = self
                    .network
                    .plan(mode, 1, &ds_id, &desired)
                    .map_err(|e| Error::Manifest(format!("{}: {e}", manifest.file.display())))?;
                if let Some((op, key)) = self
                    .network
                    .first_missing_input(&plan, &available, &self.keys)
                {
                    return Err(Error::Manifest(format!(
                        "{}: {op} needs key `{key}` in {where_}, but no dataset key or earlier op provides it (available: {})",
                        manifest.file.display(),
                        self.keys.names(available.iter().copied()).join(", ")
                    )));
                }
                let mut provided: BTreeSet<KeyId> = available;
                provided.extend(plan.produced.iter().copied());
                for trace in self.traces.iter().filter(|t| t.active(mode, Some(&ds_id))) {
                    for key in trace.batch_inputs() {
                        let name = self.keys.name(key);
                        let written_by_trace = self
                            .traces
                            .iter()
                            .any(|t| t.output_names().iter().any(|o| o == name));
                        if !provided.contains(&key) && !written_by_trace {
                            return Err(Error::Manifest(format!(
                                "{}: {} needs key `{name}` in {where_}, but neither the pipeline nor the network provides it (available: {})",
                                manifest.file.display(),
                                trace.label,
                                self.keys.names(provided.iter().copied()).join(", ")
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Trains for the configured epochs, evaluating after each; then tests if there is test
    /// data. Traces see `on_trial_close` whether the run succeeds or fails.
    pub fn fit(&mut self) -> Result<()> {
        let outcome = self.fit_inner();
        let closing = self.close_trial();
        outcome.and(closing)
    }

    fn fit_inner(&mut self) -> Result<()> {
        let start = Instant::now();
        if self.warmup {
            self.run_warmup()?;
        }
        self.print_start();
        self.hooks(TraceHook::Begin, None)?;
        let has = |mode| !self.pipeline.ds_ids(mode).is_empty();
        let (train, eval, test) = (has(Mode::Train), has(Mode::Eval), has(Mode::Test));
        for epoch in 1..=self.system.total_epochs {
            self.system.epoch_idx = epoch;
            if train {
                let started = Instant::now();
                self.run_epoch(Mode::Train)?;
                self.train_seconds += started.elapsed().as_secs_f64();
            }
            if eval {
                self.run_epoch(Mode::Eval)?;
            }
            if self.system.stop_training {
                break;
            }
        }
        if test {
            self.run_epoch(Mode::Test)?;
        }
        self.hooks(TraceHook::End, None)?;
        self.print_finish(start.elapsed().as_secs_f64());
        Ok(())
    }

    /// FastEstimator's warm-up: one batch of every mode and dataset through the network with
    /// updates off, before anything trains. Models run in inference behaviour and libtorch's
    /// random state is restored afterwards, so the run continues exactly as without it.
    fn run_warmup(&mut self) -> Result<()> {
        let generator = crate::shim::Generator::Cpu;
        let saved = crate::shim::generator_state(generator)
            .map_err(|e| Error::Internal(format!("cannot save the RNG state: {e}")))?;
        let outcome = self.warmup_batches();
        crate::shim::set_generator_state(generator, &saved)
            .map_err(|e| Error::Internal(format!("cannot restore the RNG state: {e}")))?;
        outcome
    }

    fn warmup_batches(&mut self) -> Result<()> {
        for mode in Mode::ALL {
            for ds_id in self.pipeline.ds_ids(mode) {
                let epoch = 1;
                let desired = traces::wanted_keys(&self.traces, mode, &ds_id);
                let plan = self
                    .network
                    .plan(mode, epoch, &ds_id, &desired)
                    .map_err(Error::Run)?;
                let mut wanted: BTreeSet<KeyId> = plan.inputs.iter().copied().collect();
                wanted.extend(desired.iter().copied());
                let mut loader =
                    self.pipeline
                        .epoch(mode, epoch, &ds_id, &wanted, Some(1), &self.keys)?;
                let Some(batch) = loader.next() else { continue };
                drop(loader);
                let mut batch = batch?;
                let step = StepContext {
                    mode,
                    epoch,
                    global_step: 0,
                    batch_idx: 1,
                    ds_id: ds_id.as_str().into(),
                    warmup: true,
                    seed: 0,
                };
                self.network.run_step(&plan, &mut batch, &step)?;
            }
        }
        Ok(())
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

    fn run_epoch(&mut self, mode: Mode) -> Result<()> {
        let epoch = self.system.epoch_idx;
        self.system.mode = Some(mode);
        self.system.batch_idx = 0;
        self.hooks(TraceHook::EpochBegin, None)?;
        for ds_id in self.pipeline.ds_ids(mode) {
            self.system.ds_id = ds_id.clone();
            let desired = traces::wanted_keys(&self.traces, mode, &ds_id);
            let plan = self
                .network
                .plan(mode, epoch, &ds_id, &desired)
                .map_err(Error::Run)?;
            let mut wanted: BTreeSet<KeyId> = plan.inputs.iter().copied().collect();
            wanted.extend(desired.iter().copied());
            let steps = self.system.steps_per_epoch(mode);
            let loader = self
                .pipeline
                .epoch(mode, epoch, &ds_id, &wanted, steps, &self.keys)?;
            let active: Vec<usize> = (0..self.traces.len())
                .filter(|&i| self.traces[i].active(mode, Some(&ds_id)))
                .collect();
            let mut data = Data::default();
            for batch in loader {
                let mut batch = batch?;
                if mode == Mode::Train {
                    self.system.global_step += 1;
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
                self.network.run_step(&plan, &mut batch, &step)?;
                data.clear();
                self.batch_hooks(&active, &batch, &mut data)?;
            }
        }
        self.system.ds_id.clear();
        self.hooks(TraceHook::EpochEnd, None)?;
        Ok(())
    }

    fn batch_hooks(&mut self, active: &[usize], batch: &Batch, data: &mut Data) -> Result<()> {
        let Estimator {
            traces,
            system,
            network,
            ..
        } = self;
        let mut cx = Cx {
            system,
            network,
            data,
            batch_size: batch.size,
        };
        for &index in active {
            traces[index].run(TraceHook::BatchEnd, &mut cx, Some(batch))?;
        }
        if !cx.data.nothing_logged() {
            self.log(data);
        }
        Ok(())
    }

    /// Runs an epoch-level or run-level hook on every active trace, then logs what they wrote.
    fn hooks(&mut self, hook: TraceHook, batch: Option<&Batch>) -> Result<()> {
        let mode = self.system.mode;
        let mut data = Data::default();
        {
            let Estimator {
                traces,
                system,
                network,
                ..
            } = self;
            let mut cx = Cx {
                system,
                network,
                data: &mut data,
                batch_size: 0,
            };
            for trace in traces.iter_mut() {
                let runs = match hook {
                    TraceHook::Begin | TraceHook::End => true,
                    _ => mode.is_some_and(|m| trace.active(m, None)),
                };
                if runs {
                    trace.run(hook, &mut cx, batch)?;
                }
            }
        }
        if hook == TraceHook::EpochEnd && !data.nothing_logged() {
            self.log_epoch(&data);
        }
        Ok(())
    }

    fn log(&mut self, data: &Data) {
        self.write_line(data, false);
    }

    fn log_epoch(&mut self, data: &Data) {
        self.write_line(data, true);
    }

    fn write_line(&mut self, data: &Data, with_epoch: bool) {
        let mode = self.system.mode.unwrap_or(Mode::Train);
        let step = self.system.global_step;
        let mut line = format!("fe-host {mode}: step: {step}; ");
        if with_epoch {
            line.push_str(&format!("epoch: {}; ", self.system.epoch_idx));
        }
        for entry in data.logged() {
            if let Some(value) = entry.value.as_f64() {
                self.system.summary.record(mode, &entry.key, step, value);
            }
            line.push_str(&format!("{}: {}; ", entry.key, entry.value.render()));
        }
        if !self.quiet {
            let _ = writeln!(self.out, "{}", line.trim_end());
        }
    }

    fn print_start(&mut self) {
        if self.quiet {
            return;
        }
        let mut parts = vec![
            format!("device: {}", describe_device(self.network.device)),
            format!("threads: {}", tch::get_num_threads()),
            format!("pipeline workers: {}", self.pipeline.workers),
            format!("epochs: {}", self.system.total_epochs),
            format!("batch_size: {}", self.pipeline.batch_size),
        ];
        for mode in Mode::ALL {
            for ds_id in self.pipeline.ds_ids(mode) {
                let name = if ds_id.is_empty() {
                    mode.to_string()
                } else {
                    format!("{mode}/{ds_id}")
                };
                let steps = self
                    .pipeline
                    .batches(mode, &ds_id, self.system.steps_per_epoch(mode));
                parts.push(format!(
                    "{name}: {} samples, {steps} steps/epoch",
                    self.pipeline.samples(mode, &ds_id)
                ));
            }
        }
        let _ = writeln!(self.out, "fe-host start: {};", parts.join("; "));
    }

    fn print_finish(&mut self, total_seconds: f64) {
        let mut parts = vec![format!("step: {}", self.system.global_step)];
        for model in &self.network.models {
            if let Some(optimizer) = &model.optimizer {
                parts.push(format!(
                    "{}_lr: {}",
                    model.name,
                    data::format_number(optimizer.lr())
                ));
            }
        }
        parts.push(format!(
            "total_time(sec): {}",
            data::format_number(total_seconds)
        ));
        if let Some(rate) = self.train_steps_per_second() {
            self.system.summary.record(
                Mode::Train,
                "steps/sec (overall)",
                self.system.global_step,
                rate,
            );
            parts.push(format!("train steps/sec: {}", data::format_number(rate)));
        }
        if !self.quiet {
            let _ = writeln!(self.out, "fe-host finish: {};", parts.join("; "));
        }
    }

    /// Training steps per second over all training epochs (time spent in evaluation excluded).
    pub fn train_steps_per_second(&self) -> Option<f64> {
        (self.train_seconds > 0.0 && self.system.global_step > 0)
            .then(|| self.system.global_step as f64 / self.train_seconds)
    }
}

fn describe_context(mode: Mode, epoch: u32, ds_id: &str) -> String {
    if ds_id.is_empty() {
        format!("{mode} (epoch {epoch})")
    } else {
        format!("{mode} (epoch {epoch}, ds_id {ds_id})")
    }
}

/// `cpu` or `cuda:N (name)`.
pub fn describe_device(device: Device) -> String {
    match device {
        Device::Cuda(index) => format!("cuda:{index}"),
        _ => "cpu".to_owned(),
    }
}
