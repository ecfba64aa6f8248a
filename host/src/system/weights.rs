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

/// The one `<name>_best_<metric>.safetensors` a `BestModelSaver` kept in `dir`, if any. Two
/// (the same model saved by two metrics) are refused: which one is meant cannot be guessed.
pub fn best_file(dir: &Path, name: &str) -> Result<Option<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let prefix = format!("{name}_best_");
    let mut found: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".safetensors"))
        })
        .collect();
    found.sort();
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(Error::Usage(format!(
            "{} holds several best models of `{name}` ({}): pass --weights with the file meant",
            dir.display(),
            found
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
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

/// Loads weights into the models: from `path/<model>.safetensors` (or, without it, the
/// `path/<model>_best_<metric>.safetensors` a `BestModelSaver` wrote), or `path/models/...` for
/// a checkpoint directory, or the file itself when the network has one model. Names, shapes
/// and dtypes must match the model exactly.
pub fn load(network: &mut Network, path: &Path) -> Result<Vec<PathBuf>> {
    let mut loaded = Vec::new();
    let single = network.models.len() == 1 && path.is_file();
    for model in &mut network.models {
        let source = if single {
            path.to_path_buf()
        } else if path.join("models").is_dir() {
            let models = path.join("models");
            let record = models.join(format!("{}.json", model.name));
            torchscript_unchanged(&record, "/torchscript/sha256", model)?;
            file(&models, &model.name)
        } else {
            let mut source = file(path, &model.name);
            if !source.exists() {
                source = best_file(path, &model.name)?.unwrap_or(source);
            }
            let card = source.with_extension("json");
            torchscript_unchanged(&card, "/torchscript_source_sha256", model)?;
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

/// A checkpoint's model record (`models/<name>.json`, at `/torchscript/sha256`) and an
/// export's card (`<name>.json`, at `/torchscript_source_sha256`) keep the sha256 of the
/// TorchScript file the model was trained from. Its weights in a file edited or regenerated
/// since (same parameter names, another forward) would load and predict something never
/// trained, so that is refused as `--resume` refuses it. Records written before the sha256 was
/// kept, and JSON files of that name that hold no such sha256, pass.
fn torchscript_unchanged(record_path: &Path, pointer: &str, model: &ModelSlot) -> Result<()> {
    let Some(source) = &model.torchscript else {
        return Ok(());
    };
    let Ok(text) = std::fs::read_to_string(record_path) else {
        return Ok(());
    };
    let record: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Checkpoint {
        path: record_path.to_path_buf(),
        message: format!("is not valid JSON: {e}"),
    })?;
    match record.pointer(pointer).and_then(serde_json::Value::as_str) {
        Some(sha256) if sha256 != source.sha256 => Err(Error::Checkpoint {
            path: record_path.to_path_buf(),
            message: format!(
                "model `{}` was trained with TorchScript file {} of sha256 {sha256}, but {} has {} now: the architecture changed since; retrain, or restore the file",
                model.name,
                source.file.file_name().unwrap_or_default().to_string_lossy(),
                source.file.display(),
                source.sha256
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
