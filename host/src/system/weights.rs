//! Model weights: one `<model name>.safetensors` per model, every variable (parameters and
//! buffers) by name.

use std::path::{Path, PathBuf};

use tch::Tensor;

use super::tensors;
use crate::error::{Error, Result};
use crate::network::{ModelSlot, Network};

/// The weights file of model `name` in `dir`.
pub fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.safetensors"))
}

/// Writes every model's variables into `dir`.
pub fn save(network: &Network, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut written = Vec::new();
    for model in &network.models {
        let path = file(dir, &model.name);
        let variables: Vec<(String, Tensor)> = model
            .named_variables()
            .map(|(n, t)| (n.to_owned(), t.detach()))
            .collect();
        tensors::write(&path, &variables)?;
        written.push(path);
    }
    Ok(written)
}

/// Loads weights into the models: from `path/<model>.safetensors`, or `path/models/...` for a
/// checkpoint directory, or the file itself when the network has one model. Names, shapes and
/// dtypes must match the model exactly.
pub fn load(network: &mut Network, path: &Path) -> Result<Vec<PathBuf>> {
    let mut loaded = Vec::new();
    let single = network.models.len() == 1 && path.is_file();
    for model in &mut network.models {
        let source = if single {
            path.to_path_buf()
        } else if path.join("models").is_dir() {
            torchscript_unchanged(&path.join("models"), model)?;
            file(&path.join("models"), &model.name)
        } else {
            let source = file(path, &model.name);
            torchscript_unchanged_since_export(&source, model)?;
            source
        };
        crate::predict::from_card::check_weights_beside_card(&source)?;
        let values = tensors::read(&source).map_err(|message| Error::Checkpoint {
            path: source.clone(),
            message,
        })?;
        copy_into(model, &values, &source)?;
        loaded.push(source);
    }
    Ok(loaded)
}

/// A checkpoint records the sha256 of a TorchScript model's file. Its weights in a file edited
/// or regenerated since (same parameter names, another forward) would load and predict
/// something never trained, so that is refused as `--resume` refuses it. Checkpoints written
/// before the sha256 was recorded pass.
fn torchscript_unchanged(models: &Path, model: &ModelSlot) -> Result<()> {
    let Some(source) = &model.torchscript else {
        return Ok(());
    };
    let record_path = models.join(format!("{}.json", model.name));
    let Ok(text) = std::fs::read_to_string(&record_path) else {
        return Ok(());
    };
    let record: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Checkpoint {
        path: record_path.clone(),
        message: format!("is not valid JSON: {e}"),
    })?;
    let saved = &record["torchscript"];
    match saved["sha256"].as_str() {
        Some(sha256) if sha256 != source.sha256 => Err(Error::Checkpoint {
            path: record_path,
            message: format!(
                "model `{}` was trained with TorchScript file {} of sha256 {sha256}, but {} has {} now: the architecture changed since; retrain, or restore the file",
                model.name,
                saved["file"].as_str().unwrap_or("?"),
                source.file.display(),
                source.sha256
            ),
        }),
        _ => Ok(()),
    }
}

/// An export's card records the sha256 of the TorchScript file its model was trained from:
/// its weights loaded into a model built from that file edited since would predict something
/// never trained, as [`torchscript_unchanged`] refuses for a checkpoint.
fn torchscript_unchanged_since_export(weights: &Path, model: &ModelSlot) -> Result<()> {
    let Some(source) = &model.torchscript else {
        return Ok(());
    };
    let card_path = weights.with_extension("json");
    let Ok(text) = std::fs::read_to_string(&card_path) else {
        return Ok(());
    };
    let Ok(card) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Ok(());
    };
    match card["torchscript_source_sha256"].as_str() {
        Some(sha256) if sha256 != source.sha256 => Err(Error::Checkpoint {
            path: card_path,
            message: format!(
                "model `{}` was trained with a TorchScript file of sha256 {sha256}, but {} has {} now: the architecture changed since; retrain, restore the file, or predict from the export alone (`fe-host predict {}`)",
                model.name,
                source.file.display(),
                source.sha256,
                weights.with_extension("json").display()
            ),
        }),
        _ => Ok(()),
    }
}

/// Copies `values` (read from `source`) into the variables of `model`: every variable must be
/// there with the same shape and dtype, and nothing else.
pub fn copy_into(model: &mut ModelSlot, values: &[(String, Tensor)], source: &Path) -> Result<()> {
    let problem = |message: String| Error::Checkpoint {
        path: source.to_path_buf(),
        message,
    };
    let mut expected: Vec<(String, Tensor)> = model
        .named_variables()
        .map(|(n, t)| (n.to_owned(), t.shallow_clone()))
        .collect();
    for (name, _) in values {
        if !expected.iter().any(|(n, _)| n == name) {
            return Err(problem(format!(
                "has `{name}`, which model `{}` does not",
                model.name
            )));
        }
    }
    for (name, target) in &mut expected {
        let Some((_, value)) = values.iter().find(|(n, _)| n == name) else {
            return Err(problem(format!(
                "is missing `{name}` of model `{}`",
                model.name
            )));
        };
        if value.size() != target.size() || value.kind() != target.kind() {
            return Err(problem(format!(
                "`{name}` is {:?} {:?} but model `{}` has {:?} {:?}",
                value.kind(),
                value.size(),
                model.name,
                target.kind(),
                target.size()
            )));
        }
        let _guard = tch::no_grad_guard();
        target
            .f_copy_(value)
            .map_err(|e| problem(format!("`{name}`: {}", crate::tch_message(e))))?;
    }
    Ok(())
}
