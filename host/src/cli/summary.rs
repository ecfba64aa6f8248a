//! The closing lines of a finished run: the best value of the metric it watched and where, what
//! it left on disk (models, checkpoint, logs, plot), and the commands that use them.
//!
//! ```text
//! fe-host best: ce 0.03821 (lowest) at epoch 2, step 1250;
//! fe-host saved: model runs/lenet/best/lenet_best_ce.safetensors;
//! fe-host saved: checkpoint runs/lenet/checkpoints/ckpt-1875;
//! fe-host saved: logs runs/lenet/log.jsonl; plot runs/lenet/metrics.svg;
//! fe-host saved: log runs/lenet/tensorboard;
//! fe-host parallel: 2 ranks; gradients waited for after backward: median 0.57 ms, p95 3.34 ms, 0.61 s in all (11% of training);
//! fe-host next: train longer: fe-host run examples/lenet.toml --resume --epochs N;
//! fe-host next: predict: fe-host predict examples/lenet.toml --checkpoint runs/lenet/checkpoints/ckpt-1875 --input FILE;
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fe_plugin_api::Mode;

use crate::estimator::data::format_number;
use crate::estimator::{Estimator, LOG_FILE, PLOT_FILE};
use crate::manifest::Manifest;

/// What a run wrote besides what its traces and checkpoints say: the flags' outputs.
#[derive(Default)]
pub struct Written<'a> {
    /// `--save-weights DIR`.
    pub weights: Option<&'a Path>,
    /// `--export DIR`.
    pub export: Option<&'a Path>,
}

/// The run's manifest with its flags, as shell words, for the commands the closing lines
/// suggest: a resume compares overrides with the checkpoint's, and a prediction from saved
/// weights needs them to build the model and prepare inputs as the run did.
pub struct Commands {
    /// For `run ... --resume`: the manifest, `--set`, `--log-dir`, `--plugin-dir`.
    pub run: String,
    /// For `predict`: the manifest, `--set`, `--plugin-dir`.
    pub model: String,
}

/// The lines, in order.
pub fn lines(
    estimator: &Estimator,
    manifest: &Manifest,
    commands: &Commands,
    written: &Written<'_>,
) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(best) = best_line(estimator, manifest) {
        lines.push(best);
    }
    let models: Vec<PathBuf> = estimator
        .traces
        .iter()
        .flat_map(|t| t.saved_models())
        .collect();
    for model in &models {
        lines.push(format!("fe-host saved: model {};", shown(model).display()));
    }
    if let Some(dir) = written.weights {
        lines.push(format!("fe-host saved: weights {};", shown(dir).display()));
    }
    if let Some(dir) = written.export {
        lines.push(format!("fe-host saved: export {};", shown(dir).display()));
    }
    let checkpoint = estimator.checkpointing.last_written.as_ref();
    if let Some(checkpoint) = checkpoint {
        lines.push(format!(
            "fe-host saved: checkpoint {};",
            shown(checkpoint).display()
        ));
    }
    if let Some(dir) = &manifest.run.log_dir {
        lines.push(format!(
            "fe-host saved: logs {}; plot {};",
            shown(&dir.join(LOG_FILE)).display(),
            shown(&dir.join(PLOT_FILE)).display()
        ));
    }
    for log in estimator.traces.iter().flat_map(|t| t.written_logs()) {
        lines.push(format!("fe-host saved: log {};", shown(&log).display()));
    }
    if let Some(line) = parallel_line(estimator) {
        lines.push(line);
    }
    let Commands { run, model: with } = commands;
    if let Some(checkpoint) = checkpoint {
        lines.push(format!(
            "fe-host next: train longer: fe-host run {run} --resume --epochs N;"
        ));
        lines.push(format!(
            "fe-host next: predict: fe-host predict {with} --checkpoint {} --input FILE;",
            word(checkpoint)
        ));
    } else if let Some(model) = models.first() {
        lines.push(format!(
            "fe-host next: predict: fe-host predict {with} --weights {} --input FILE;",
            word(model)
        ));
    }
    lines
}

/// Data parallel: how long rank 0 waited for its averaged gradients once backward was done —
/// the communication backward did not hide, and what a run on N ranks loses to one process with
/// N times the threads.
fn parallel_line(estimator: &Estimator) -> Option<String> {
    let waits = estimator.strategy.gradient_waits()?;
    let world = estimator.strategy.world();
    if waits.updates == 0 {
        return Some(format!("fe-host parallel: {world} ranks;"));
    }
    let share = match estimator.train_seconds() {
        seconds if seconds > 0.0 => {
            format!(
                " ({:.0}% of training)",
                100.0 * waits.total_seconds / seconds
            )
        }
        _ => String::new(),
    };
    Some(format!(
        "fe-host parallel: {} ranks; gradients waited for after backward: median {} ms, p95 {} ms, {} s in all{share};",
        world,
        format_number(waits.median_ms),
        format_number(waits.p95_ms),
        format_number(waits.total_seconds),
    ))
}

/// `fe-host best: accuracy 0.9862 (highest) at epoch 3, step 1875;` for the value the run
/// watched: `[checkpoint] monitor`, else the metric a `BestModelSaver` kept a model by, else
/// a metric some trace tracked the best of, else the evaluation loss.
fn best_line(estimator: &Estimator, manifest: &Manifest) -> Option<String> {
    let eval = estimator.system.summary.history.get(Mode::Eval.as_str())?;
    let (key, highest) = monitored(estimator, manifest, eval)?;
    let series = eval.get(&key)?;
    let better = |a: f64, b: f64| if highest { a > b } else { a < b };
    let (step, value) = series.iter().filter(|(_, v)| v.is_finite()).fold(
        None,
        |best: Option<(u64, f64)>, (&step, &value)| match best {
            Some((_, b)) if !better(value, b) => best,
            _ => Some((step, value)),
        },
    )?;
    let which = if highest { "highest" } else { "lowest" };
    let at = match estimator.epoch_evaluated_at(step) {
        Some(epoch) => format!("epoch {epoch}, step {step}"),
        None => format!("step {step}"),
    };
    Some(format!(
        "fe-host best: {key} {} ({which}) at {at};",
        format_number(value)
    ))
}

/// The key the run watched and whether higher is better.
fn monitored(
    estimator: &Estimator,
    manifest: &Manifest,
    eval: &BTreeMap<String, BTreeMap<u64, f64>>,
) -> Option<(String, bool)> {
    if let Some(config) = &manifest.checkpoint {
        if let Some(monitor) = &config.monitor {
            return Some((monitor.clone(), config.maximize));
        }
    }
    // Traces that track a best value log `min_<key>` or `max_<key>` next to `<key>`.
    let trackers: Vec<(String, bool)> = eval
        .keys()
        .filter_map(|k| {
            let (key, highest) = match (k.strip_prefix("min_"), k.strip_prefix("max_")) {
                (Some(key), _) => (key, false),
                (_, Some(key)) => (key, true),
                _ => return None,
            };
            eval.contains_key(key).then(|| (key.to_owned(), highest))
        })
        .collect();
    // A BestModelSaver names its file `<model>_best_<metric>.safetensors`.
    let saved_by: Vec<String> = estimator
        .traces
        .iter()
        .flat_map(|t| t.saved_models())
        .filter_map(|p| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            Some(stem.split_once("_best_")?.1.to_owned())
        })
        .collect();
    let losses: Vec<String> = estimator
        .network
        .loss_keys_written_in(Mode::Eval)
        .into_iter()
        .map(|k| estimator.keys.name(k).to_owned())
        .collect();
    trackers
        .iter()
        .find(|(key, _)| saved_by.contains(key))
        .or_else(|| trackers.iter().find(|(key, _)| !losses.contains(key)))
        .or_else(|| trackers.first())
        .cloned()
        .or_else(|| {
            let loss = losses.into_iter().find(|l| eval.contains_key(l))?;
            Some((loss, false))
        })
}

/// [`shown`] as one shell word, for the commands the lines suggest (pasted as they are).
fn word(path: &Path) -> String {
    super::run::shell_word(&shown(path).to_string_lossy())
}

/// `path` relative to the working directory when it is inside it, as people type paths.
fn shown(path: &Path) -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_paths_are_one_shell_word_each() {
        let plain = Path::new("/nowhere/runs/lenet/version_0/checkpoints/ckpt-6");
        assert_eq!(
            word(plain),
            "/nowhere/runs/lenet/version_0/checkpoints/ckpt-6"
        );
        let spaced = Path::new("/nowhere/sp ace/it's/ckpt-5");
        assert_eq!(word(spaced), r"'/nowhere/sp ace/it'\''s/ckpt-5'");
    }
}
