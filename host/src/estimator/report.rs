//! The lines a run prints: the start line, per-step and per-epoch values, schedule switches,
//! and the finish line. Every logged number is also recorded in the System's summary.

use std::io::Write;

use fe_plugin_api::Mode;
use tch::Device;

use super::data::{self, Data};
use super::Estimator;

impl Estimator {
    /// Logs what traces wrote after a batch.
    pub(super) fn log(&mut self, data: &Data) {
        self.write_line(data, false);
    }

    /// Logs what traces wrote at the end of an epoch.
    pub(super) fn log_epoch(&mut self, data: &Data) {
        self.write_line(data, true);
    }

    fn write_line(&mut self, data: &Data, with_epoch: bool) {
        let mode = self.system.mode.unwrap_or(Mode::Train);
        let step = self.system.global_step;
        let mut line = format!("fe-host {mode}: step: {step}; ");
        if with_epoch {
            line.push_str(&format!("epoch: {}; ", self.system.epoch_idx));
            if mode == Mode::Eval {
                self.progress.eval_epoch_end(self.system.epoch_idx, step);
            }
        }
        for entry in data.logged() {
            if let Some(value) = entry.value.as_f64() {
                self.system.summary.record(mode, &entry.key, step, value);
                self.progress.observe(mode, &entry.key, value, step);
            }
            line.push_str(&format!("{}: {}; ", entry.key, entry.value.render()));
        }
        self.print(line.trim_end());
    }

    /// `fe-host schedule: epoch N: entry: old => new; ...` when schedules switch at `epoch`.
    pub(super) fn log_schedule_changes(&mut self, epoch: u32) {
        if let Some(changes) = self.schedule_changes.get(&epoch) {
            let line = format!("fe-host schedule: epoch {epoch}: {};", changes.join("; "));
            self.print(&line);
        }
    }

    /// Prints what traces asked to tell (`fe-host EarlyStopping: ...`).
    pub(super) fn print_notes(&mut self, notes: &[String]) {
        for note in notes {
            self.print(&format!("fe-host {note}"));
        }
    }

    pub(super) fn print(&mut self, line: &str) {
        if !self.quiet && !self.progress.println(line) {
            let _ = writeln!(self.out, "{line}");
        }
    }

    pub(super) fn print_start(&mut self) {
        let mut parts = vec![
            format!("device: {}", describe_device(self.network.device)),
            format!("threads: {}", tch::get_num_threads()),
            format!("pipeline workers: {}", self.pipeline.workers),
            format!("epochs: {}", self.system.total_epochs),
            format!("batch_size: {}", self.pipeline.batch_size_at(1)),
        ];
        if let Some(cluster) = self.strategy.cluster() {
            // Which launcher's variables placed the ranks: the first thing to check when a
            // cluster job trains as a different world than it asked for.
            parts.insert(
                0,
                format!("ranks: {} (cluster: {cluster})", self.strategy.world()),
            );
        }
        let mut epoch_steps = [0, 0];
        for mode in Mode::ALL {
            for ds_id in self.pipeline.ds_ids(mode, 1) {
                let name = if ds_id.is_empty() {
                    mode.to_string()
                } else {
                    format!("{mode}/{ds_id}")
                };
                let steps =
                    self.pipeline
                        .batches(mode, 1, &ds_id, self.system.steps_per_epoch(mode));
                match mode {
                    Mode::Train => epoch_steps[0] += steps as u64,
                    Mode::Eval => epoch_steps[1] += steps as u64,
                    _ => {}
                }
                parts.push(format!(
                    "{name}: {} samples, {steps} steps/epoch",
                    self.pipeline.samples(mode, 1, &ds_id)
                ));
            }
        }
        self.progress.plan(epoch_steps[0], epoch_steps[1]);
        let line = format!("fe-host start: {};", parts.join("; "));
        self.print(&line);
    }

    pub(super) fn print_finish(&mut self, total_seconds: f64) {
        let mut parts = vec![format!("step: {}", self.system.global_step)];
        for model in &self.network.models {
            if let Some(optimizer) = model.optimizer() {
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
            let (steps, _) = self.progress.train_steps_run();
            parts.push(format!(
                "train steps/sec: {} ({steps} steps run)",
                data::format_number(rate)
            ));
        }
        let line = format!("fe-host finish: {};", parts.join("; "));
        self.print(&line);
    }
}

/// `train (epoch 3)` or `eval (epoch 3, ds_id b)`.
pub fn describe_context(mode: Mode, epoch: u32, ds_id: &str) -> String {
    if ds_id.is_empty() {
        format!("{mode} (epoch {epoch})")
    } else {
        format!("{mode} (epoch {epoch}, ds_id {ds_id})")
    }
}

/// `cpu` or `cuda:N`.
pub fn describe_device(device: Device) -> String {
    match device {
        Device::Cuda(index) => format!("cuda:{index}"),
        _ => "cpu".to_owned(),
    }
}
