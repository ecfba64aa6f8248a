//! Progress bars while an epoch runs, when a person is watching (stdout is a terminal, as
//! burn-train chooses its renderer). Under CI or a pipe nothing is drawn and the run prints
//! its plain periodic lines only, so logs stay greppable.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar of the dataset being run, if bars are on.
#[derive(Default)]
pub struct Progress {
    enabled: bool,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Bars when `enabled` (the caller checked `is_terminal()`).
    pub fn new(enabled: bool) -> Self {
        Self { enabled, bar: None }
    }

    /// Starts a bar of `steps` steps labelled `label` (`epoch 3 train`), ending any other.
    pub fn start(&mut self, label: String, steps: u64) {
        self.finish();
        if !self.enabled {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stdout());
        // The template is a constant; a bad one would fall back to indicatif's default.
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:>16} [{bar:32}] {pos}/{len} steps  {per_sec}  eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label);
        self.bar = Some(bar);
    }

    /// One step done.
    pub fn step(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Removes the bar.
    pub fn finish(&mut self) {
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
}
