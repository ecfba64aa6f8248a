//! What a person watching the run sees while an epoch runs, and what the run's closing summary
//! needs from it.
//!
//! On a terminal (stdout `is_terminal()`, as burn-train chooses its renderer) a bar per epoch:
//! `epoch 2/5 train [=====>   ] 312/625  ce 0.1234  105 steps/s  eta 0:03  run 1:02`. Under
//! CI or a pipe nothing is drawn and the run prints its plain periodic lines only, so logs
//! stay greppable. Either way the steps run by this process are counted, so that speeds after
//! a resume count only the steps run, not the ones the checkpoint had done.

use std::time::{Duration, Instant};

use fe_plugin_api::Mode;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::data::format_number;

/// How often the bar's numbers are recomputed: often enough to look live, rarely enough to keep
/// string formatting off almost every step.
const REFRESH: Duration = Duration::from_millis(250);

/// The bar, the numbers it shows, and the counts the summary reads.
pub struct Progress {
    enabled: bool,
    bar: Option<ProgressBar>,
    total_epochs: u32,
    /// Logged keys shown as the loss (the training losses).
    losses: Vec<String>,
    /// The latest logged training loss: key, value and the global step it was logged at.
    latest_loss: Option<(String, f64, u64)>,
    /// Steps of a training epoch and of an evaluation epoch (all datasets), for the run's ETA.
    steps_per_epoch: [u64; 2],
    /// Steps run and seconds spent by this process, training and evaluating.
    done: [(u64, f64); 2],
    current: Option<Current>,
    /// (global step, epoch) at the end of each evaluation epoch: where a best value was.
    eval_epochs: Vec<(u64, u32)>,
}

/// The bar being run.
struct Current {
    mode: Mode,
    epoch: u32,
    steps: u64,
    done: u64,
    started: Instant,
    refreshed: Instant,
}

impl Progress {
    /// Bars when `enabled` (the caller checked `is_terminal()`), over `total_epochs`, showing
    /// the first of `losses` logged.
    pub fn new(enabled: bool, total_epochs: u32, losses: Vec<String>) -> Self {
        Self {
            enabled,
            bar: None,
            total_epochs,
            losses,
            latest_loss: None,
            steps_per_epoch: [0; 2],
            done: [(0, 0.0); 2],
            current: None,
            eval_epochs: Vec::new(),
        }
    }

    /// The steps of one training and one evaluation epoch, for the run's ETA.
    pub fn plan(&mut self, train_steps: u64, eval_steps: u64) {
        self.steps_per_epoch = [train_steps, eval_steps];
    }

    /// Starts the bar of `steps` steps of `mode`'s `epoch` (dataset `ds_id`), ending any other.
    pub fn start(&mut self, mode: Mode, epoch: u32, ds_id: &str, steps: u64) {
        self.finish();
        let now = Instant::now();
        self.current = Some(Current {
            mode,
            epoch,
            steps,
            done: 0,
            started: now,
            refreshed: now,
        });
        if !self.enabled {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stdout());
        // The template is a constant; a bad one would fall back to indicatif's default. The
        // bar takes what the text leaves of the line: a fixed one pushed the ETAs past the edge
        // of an 80-column terminal, where they were cut off.
        if let Ok(style) = ProgressStyle::with_template("{prefix} [{wide_bar}] {pos}/{len}  {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        let data = match ds_id {
            "" => mode.to_string(),
            ds => format!("{mode}/{ds}"),
        };
        bar.set_prefix(format!("epoch {epoch}/{} {data}", self.total_epochs));
        self.bar = Some(bar);
    }

    /// One step done.
    pub fn step(&mut self) {
        let Some(current) = &mut self.current else {
            return;
        };
        current.done += 1;
        let Some(bar) = &self.bar else {
            return;
        };
        bar.inc(1);
        let now = Instant::now();
        if now.duration_since(current.refreshed) >= REFRESH || current.done == current.steps {
            current.refreshed = now;
            bar.set_message(self.message(now));
        }
    }

    /// A value logged at global step `step`; the training loss is shown on training bars.
    pub fn observe(&mut self, mode: Mode, key: &str, value: f64, step: u64) {
        if mode == Mode::Train && self.losses.first().is_some_and(|loss| loss == key) {
            self.latest_loss = Some((key.to_owned(), value, step));
        }
    }

    /// An evaluation epoch ended at `step`.
    pub fn eval_epoch_end(&mut self, epoch: u32, step: u64) {
        self.eval_epochs.retain(|&(_, e)| e != epoch);
        self.eval_epochs.push((step, epoch));
    }

    /// The epoch whose evaluation ended at global step `step`.
    pub fn epoch_at(&self, step: u64) -> Option<u32> {
        self.eval_epochs
            .iter()
            .find(|&&(at, _)| at == step)
            .map(|&(_, epoch)| epoch)
    }

    /// Training steps this process ran, and the seconds they took (evaluation excluded).
    pub fn train_steps_run(&self) -> (u64, f64) {
        let (mut steps, mut seconds) = self.done[0];
        if let Some(current) = self.current.as_ref().filter(|c| c.mode == Mode::Train) {
            steps += current.done;
            seconds += current.started.elapsed().as_secs_f64();
        }
        (steps, seconds)
    }

    /// Removes the bar.
    pub fn finish(&mut self) {
        if let Some(current) = self.current.take() {
            if let Some(slot) = slot(current.mode) {
                self.done[slot].0 += current.done;
                self.done[slot].1 += current.started.elapsed().as_secs_f64();
            }
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    /// Prints `line` above the bar; `false` when there is no bar (the caller prints it).
    pub fn println(&self, line: &str) -> bool {
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                true
            }
            None => false,
        }
    }

    /// `ce 0.1234 (step 300)  105 steps/s  eta 0:03  run 1:02`: the loss is the latest one
    /// logged (every `log_steps`), so it says when; evaluation bars show none.
    fn message(&self, now: Instant) -> String {
        let Some(current) = &self.current else {
            return String::new();
        };
        let mut parts = Vec::new();
        match &self.latest_loss {
            Some((key, value, step)) if current.mode == Mode::Train => {
                parts.push(format!("{key} {} (step {step})", format_number(*value)));
            }
            _ => {}
        }
        let elapsed = now.duration_since(current.started).as_secs_f64();
        if current.done == 0 || elapsed <= 0.0 {
            return parts.join("  ");
        }
        let rate = current.done as f64 / elapsed;
        parts.push(format!("{} steps/s", format_number(significant(rate, 3))));
        let left = current.steps.saturating_sub(current.done) as f64 / rate;
        parts.push(format!("eta {}", clock(left)));
        if let Some(run) = self.run_left(current, rate) {
            parts.push(format!("run {}", clock(run)));
        }
        parts.join("  ")
    }

    /// Seconds until the last epoch's evaluation ends, from the speeds measured so far (an
    /// evaluation not yet measured is assumed as fast as training).
    fn run_left(&self, current: &Current, rate: f64) -> Option<f64> {
        let slot = slot(current.mode)?;
        let mut seconds_per_step = [None, None];
        for (i, (steps, seconds)) in self.done.iter().enumerate() {
            if *steps > 0 {
                seconds_per_step[i] = Some(seconds / *steps as f64);
            }
        }
        seconds_per_step[slot] = Some(1.0 / rate);
        let train = seconds_per_step[0].or(seconds_per_step[1])?;
        let eval = seconds_per_step[1].unwrap_or(train);
        let epochs_after = self.total_epochs.saturating_sub(current.epoch) as f64;
        let [train_steps, eval_steps] = self.steps_per_epoch.map(|s| s as f64);
        let here = current.steps.saturating_sub(current.done) as f64;
        let left = match current.mode {
            Mode::Train => {
                (here + epochs_after * train_steps) * train
                    + (epochs_after + 1.0) * eval_steps * eval
            }
            _ => here * eval + epochs_after * (train_steps * train + eval_steps * eval),
        };
        Some(left)
    }
}

/// Training and evaluation are timed; testing and inference are not part of the run's ETA.
fn slot(mode: Mode) -> Option<usize> {
    match mode {
        Mode::Train => Some(0),
        Mode::Eval => Some(1),
        _ => None,
    }
}

/// `value` rounded to `digits` significant digits.
pub fn significant(value: f64, digits: i32) -> f64 {
    if value == 0.0 || !value.is_finite() {
        return value;
    }
    let scale = 10f64.powi(digits - 1 - value.abs().log10().floor() as i32);
    (value * scale).round() / scale
}

/// `0:07`, `12:30`, `1:02:03`.
pub fn clock(seconds: f64) -> String {
    let total = if seconds.is_finite() {
        seconds.max(0.0).round() as u64
    } else {
        0
    };
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_and_rates_read_at_a_glance() {
        assert_eq!(clock(7.4), "0:07");
        assert_eq!(clock(750.0), "12:30");
        assert_eq!(clock(3723.0), "1:02:03");
        assert_eq!(clock(f64::INFINITY), "0:00");
        assert_eq!(significant(105.27, 3), 105.0);
        assert_eq!(significant(0.012345, 3), 0.0123);
        assert_eq!(significant(98765.0, 3), 98800.0);
    }

    #[test]
    fn the_run_eta_counts_the_epochs_and_evaluations_left() {
        let mut progress = Progress::new(false, 3, vec!["ce".into()]);
        progress.plan(100, 20);
        // Epoch 1 of 3, half-way through training at 10 steps/s; evaluation not yet measured.
        let current = Current {
            mode: Mode::Train,
            epoch: 1,
            steps: 100,
            done: 50,
            started: Instant::now(),
            refreshed: Instant::now(),
        };
        // 50 + 2 * 100 train steps and 3 * 20 evaluation steps, all at 0.1 s.
        let left = progress.run_left(&current, 10.0).unwrap();
        assert!((left - 31.0).abs() < 1e-9, "{left}");
        // Evaluation measured at 0.05 s a step.
        progress.done[1] = (20, 1.0);
        let left = progress.run_left(&current, 10.0).unwrap();
        assert!((left - 28.0).abs() < 1e-9, "{left}");
    }

    #[test]
    fn the_loss_shown_says_when_it_was_logged_and_only_on_training_bars() {
        let mut progress = Progress::new(false, 2, vec!["ce".to_owned()]);
        progress.observe(Mode::Train, "ce", 2.832, 1);
        progress.observe(Mode::Eval, "ce", 1.37, 25);
        progress.start(Mode::Train, 1, "", 25);
        let train = progress.message(Instant::now());
        assert!(train.starts_with("ce 2.832 (step 1)"), "{train}");
        progress.start(Mode::Eval, 1, "", 3);
        let eval = progress.message(Instant::now());
        assert!(!eval.contains("ce"), "{eval}");
    }

    #[test]
    fn steps_are_counted_without_a_terminal_and_only_the_training_ones_timed() {
        let mut progress = Progress::new(false, 1, Vec::new());
        progress.start(Mode::Train, 1, "", 3);
        for _ in 0..3 {
            progress.step();
        }
        progress.start(Mode::Eval, 1, "", 2);
        progress.step();
        progress.finish();
        assert_eq!(progress.train_steps_run().0, 3);
        progress.eval_epoch_end(1, 3);
        assert_eq!(progress.epoch_at(3), Some(1));
        assert_eq!(progress.epoch_at(2), None);
    }
}
