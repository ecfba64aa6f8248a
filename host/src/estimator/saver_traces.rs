//! Traces that write model files: `BestModelSaver` (the model at its best epoch) and
//! `ModelSaver` (every few epochs, the newest kept), each file written atomically. Paths are
//! relative to the manifest.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tch::Tensor;

use super::data::Logged;
use super::lr_traces::Better;
use super::traces::{Cx, HostTrace};
use crate::error::{Error, Result};
use crate::network::ModelSlot;

/// Writes `model`'s variables to `path` atomically (a temporary sibling renamed into place),
/// so a crash never leaves a half-written model file.
pub fn save_model(model: &ModelSlot, path: &Path) -> Result<()> {
    let variables: Vec<(String, Tensor)> = model
        .named_variables()
        .map(|(n, t)| (n.to_owned(), t.detach()))
        .collect();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let temp = path.with_extension(format!("tmp-{}", std::process::id()));
    crate::replace::through_temp(path, &temp, |temp| {
        crate::system::tensors::write(temp, &variables)
    })
}

/// Removes what a save killed mid-write left in `dir`: files named `<name>.tmp-<pid>` (see
/// [`save_model`]), as the checkpoint store removes its temporaries when a run starts.
/// Returns how many it removed.
pub fn remove_save_leftovers(dir: &Path) -> Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_save_leftover(&name) && entry.path().is_file() {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes `path`, a file this run wrote earlier and no longer keeps. One already gone (the
/// user deleted it) is what removing it wanted: a resumed run used to fail on it after
/// saving the epoch's model, before the epoch's checkpoint.
pub fn remove_old_file(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// `lenet_best_ce.tmp-4242`: a temporary of [`save_model`].
fn is_save_leftover(name: &str) -> bool {
    name.rsplit_once(".tmp-").is_some_and(|(stem, pid)| {
        !stem.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
    })
}

/// `[[traces]] trace = "BestModelSaver"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BestModelSaverConfig {
    /// The model to save.
    pub model: String,
    /// Where to save it (relative to the manifest).
    pub save_dir: PathBuf,
    /// The evaluation value to rank by; default the model's loss.
    #[serde(default)]
    pub metric: Option<String>,
    /// `min` or `max`.
    #[serde(default)]
    pub save_best_mode: Better,
    /// Load the best weights back into the model when training ends.
    #[serde(default)]
    pub load_best_final: bool,
}

/// Keeps one file, `<model>_best_<metric>.safetensors`, holding the model at its best epoch;
/// logs `since_best_<metric>` and `<min|max>_<metric>`.
pub struct BestModelSaver {
    model: usize,
    metric: String,
    better: Better,
    path: PathBuf,
    load_best_final: bool,
    best: Option<f64>,
    since_best: u32,
}

impl BestModelSaver {
    /// Saves model `model` (index) by `metric` into `dir`.
    pub fn new(
        model: (usize, &str),
        metric: String,
        dir: &Path,
        config: &BestModelSaverConfig,
    ) -> Self {
        Self {
            model: model.0,
            path: dir.join(format!("{}_best_{metric}.safetensors", model.1)),
            metric,
            better: config.save_best_mode,
            load_best_final: config.load_best_final,
            best: None,
            since_best: 0,
        }
    }

    fn mode_name(&self) -> &'static str {
        match self.better {
            Better::Min => "min",
            Better::Max => "max",
        }
    }
}

impl BestModelSaver {
    fn write_progress(&self, cx: &mut Cx<'_>) -> Result<()> {
        let outputs = self.output_names();
        cx.data
            .write(&outputs[0], Logged::Scalar(self.since_best as f64), true);
        if let Some(best) = self.best {
            cx.data.write(&outputs[1], Logged::Scalar(best), true);
        }
        Ok(())
    }
}

impl HostTrace for BestModelSaver {
    fn inputs_key(&self) -> &'static str {
        "metric"
    }

    fn input_names(&self) -> Vec<String> {
        vec![self.metric.clone()]
    }

    fn output_names(&self) -> Vec<String> {
        vec![
            format!("since_best_{}", self.metric),
            format!("{}_{}", self.mode_name(), self.metric),
        ]
    }

    fn on_begin(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        if !cx.strategy.writes_outputs() {
            return Ok(());
        }
        match self.path.parent() {
            Some(dir) => remove_save_leftovers(dir).map(|_| ()),
            None => Ok(()),
        }
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let Some(value) = cx.data.get(&self.metric).and_then(Logged::as_f64) else {
            return Ok(());
        };
        if self.better.improves(value, self.best, 0.0) {
            self.best = Some(value);
            self.since_best = 0;
            // Every rank tracks the best value (its outputs are logged and read by other
            // traces); rank 0 alone writes the file.
            if !cx.strategy.writes_outputs() {
                return self.write_progress(cx);
            }
            save_model(&cx.network.models[self.model], &self.path)?;
            cx.notes.push(format!(
                "BestModelSaver: saved model to {}",
                self.path.display()
            ));
        } else {
            self.since_best += 1;
        }
        self.write_progress(cx)
    }

    fn on_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        if !self.load_best_final || self.best.is_none() || !cx.strategy.writes_outputs() {
            return Ok(());
        }
        let values =
            crate::system::tensors::read(&self.path).map_err(|message| Error::Checkpoint {
                path: self.path.clone(),
                message,
            })?;
        crate::system::weights::copy_into(&mut cx.network.models[self.model], &values, &self.path)?;
        cx.notes.push(format!(
            "BestModelSaver: restored the best weights from {}",
            self.path.display()
        ));
        Ok(())
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({ "best": self.best, "since_best": self.since_best })
    }

    fn saved_models(&self) -> Vec<PathBuf> {
        self.best.map(|_| self.path.clone()).into_iter().collect()
    }

    fn load_state(&mut self, state: serde_json::Value) -> std::result::Result<(), String> {
        self.best = state["best"].as_f64();
        self.since_best = state["since_best"].as_u64().unwrap_or(0) as u32;
        Ok(())
    }
}

/// `[[traces]] trace = "ModelSaver"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSaverConfig {
    /// The model to save.
    pub model: String,
    /// Where to save it (relative to the manifest).
    pub save_dir: PathBuf,
    /// Save every N-th epoch.
    #[serde(default = "one")]
    pub frequency: u32,
    /// Keep only the N newest files.
    #[serde(default)]
    pub max_to_keep: Option<usize>,
}

fn one() -> u32 {
    1
}

/// Saves `<model>_epoch_<N>.safetensors` at the end of every `frequency`-th training epoch,
/// keeping the newest `max_to_keep`.
pub struct ModelSaver {
    /// `ModelSaver (traces[2])`, for errors.
    label: String,
    model: (usize, String),
    dir: PathBuf,
    frequency: u32,
    max_to_keep: Option<usize>,
    saved: Vec<PathBuf>,
}

impl ModelSaver {
    /// Saves model `model` (index, name) into `dir`; `label` names the trace in errors.
    pub fn new(
        label: String,
        model: (usize, String),
        dir: PathBuf,
        config: &ModelSaverConfig,
    ) -> Self {
        Self {
            label,
            model,
            dir,
            frequency: config.frequency.max(1),
            max_to_keep: config.max_to_keep,
            saved: Vec::new(),
        }
    }
}

impl HostTrace for ModelSaver {
    fn writes_files_only(&self) -> bool {
        true
    }

    fn on_begin(&mut self, _cx: &mut Cx<'_>) -> Result<()> {
        remove_save_leftovers(&self.dir).map(|_| ())
    }

    fn on_epoch_end(&mut self, cx: &mut Cx<'_>) -> Result<()> {
        let epoch = cx.system.epoch_idx;
        if epoch % self.frequency != 0 {
            return Ok(());
        }
        let path = self
            .dir
            .join(format!("{}_epoch_{epoch}.safetensors", self.model.1));
        save_model(&cx.network.models[self.model.0], &path)?;
        self.saved.push(path);
        if let Some(keep) = self.max_to_keep {
            while self.saved.len() > keep {
                let old = self.saved.remove(0);
                remove_old_file(&old).map_err(|e| {
                    Error::Run(format!(
                        "{}: cannot remove {}, an older model file beyond max_to_keep = {keep}: {e}",
                        self.label,
                        old.display()
                    ))
                })?;
            }
        }
        Ok(())
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({ "saved": self.saved })
    }

    fn saved_models(&self) -> Vec<PathBuf> {
        self.saved.last().cloned().into_iter().collect()
    }

    fn load_state(&mut self, state: serde_json::Value) -> std::result::Result<(), String> {
        self.saved = serde_json::from_value(state["saved"].clone()).map_err(|e| e.to_string())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_temporaries_of_a_save_are_leftovers() {
        assert!(is_save_leftover("lenet_best_ce.tmp-4242"));
        assert!(is_save_leftover("lenet_epoch_3.tmp-1"));
        assert!(!is_save_leftover("lenet_best_ce.safetensors"));
        assert!(!is_save_leftover("notes.tmp-draft"));
        assert!(!is_save_leftover(".tmp-12"));
        assert!(!is_save_leftover("x.tmp-"));
    }

    #[test]
    fn leftovers_are_removed_and_saved_models_kept() {
        let dir = std::env::temp_dir().join(format!("fe-save-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lenet_best_ce.tmp-99999"), b"half").unwrap();
        std::fs::write(dir.join("lenet_best_ce.safetensors"), b"whole").unwrap();
        assert_eq!(remove_save_leftovers(&dir).unwrap(), 1);
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["lenet_best_ce.safetensors"]);
        assert_eq!(remove_save_leftovers(&dir.join("missing")).unwrap(), 0);
        // An old file the user already deleted needs no removing; other failures still show.
        remove_old_file(&dir.join("lenet_epoch_1.safetensors")).unwrap();
        assert!(
            remove_old_file(&dir).is_err(),
            "a directory is not removed as a file"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
