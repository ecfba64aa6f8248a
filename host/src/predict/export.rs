//! `fe-host export`: a trained model as files other tools load. For every model:
//! `<name>.safetensors` (every parameter and buffer, named as the architecture's PyTorch
//! definition names them) and `<name>.json` (the model card); with the `torchscript` format
//! (the default) also `<name>.pt` for `torch.jit.load` and LibTorch — a TorchScript
//! architecture's own module with the trained weights, a plugin architecture's forward traced
//! (see [`super::trace`]); with `onnx` also `<name>.onnx`, converted from that `.pt` (see
//! [`super::onnx`]). The directory is written beside its final place and renamed into it, so a
//! failed export leaves nothing behind.

use std::path::{Path, PathBuf};

use fe_plugin_api::{ComponentKind, Mode};
use tch::{Device, Tensor};

use super::card::{self, KeyInfo, ManifestInfo, ModelCard, PluginInfo};
use super::onnx;
use super::transform::{self, Request};
use super::Weights;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::network::torchscript::TorchScriptModel;
use crate::network::{Keys, ModelSlot};
use crate::plugins::registry::Provider;
use crate::plugins::Registry;

/// A format `--format` asks for (the safetensors weights and the card are always written).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Weights and card only.
    Safetensors,
    /// Also `<name>.pt` (needs no Python).
    Torchscript,
    /// Also `<name>.pt` and `<name>.onnx` (needs a Python with torch and onnx).
    Onnx,
}

/// What an export writes besides weights and cards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Formats {
    /// `<name>.pt`.
    pub torchscript: bool,
    /// `<name>.onnx` (made from the `.pt`, so it implies it).
    pub onnx: bool,
}

impl Default for Formats {
    fn default() -> Self {
        Self::from(&[Format::Torchscript][..])
    }
}

impl From<&[Format]> for Formats {
    fn from(formats: &[Format]) -> Self {
        let onnx = formats.contains(&Format::Onnx);
        Self {
            torchscript: onnx || formats.contains(&Format::Torchscript),
            onnx,
        }
    }
}

/// Exports every model of `manifest` with `weights` into the new directory `out`; returns the
/// files written.
pub fn run(
    manifest: &Manifest,
    registry: &Registry,
    weights: &Weights,
    out: &Path,
    formats: Formats,
) -> Result<Vec<PathBuf>> {
    let Some(source) = weights.path()? else {
        return Err(Error::Usage(
            "export writes trained weights: pass --weights DIR|FILE or --checkpoint PATH".into(),
        ));
    };
    let mut keys = Keys::default();
    tch::manual_seed(manifest.run.seed as i64);
    let mut network = crate::network::build::build(manifest, registry, &mut keys, Device::Cpu)?;
    crate::system::weights::load(&mut network, &source)?;
    let system = std::fs::read(source.join("system.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    write(
        manifest,
        registry,
        &mut network.models,
        &source.display().to_string(),
        system.as_ref(),
        out,
        formats,
    )
}

/// Exports `models` (trained with `manifest`) into the new directory `out`: what `run
/// --export` does when training ends. `source` says where the weights came from; `system` is
/// the System as JSON (for the step and the last metrics), when known.
pub fn write(
    manifest: &Manifest,
    registry: &Registry,
    models: &mut [ModelSlot],
    source: &str,
    system: Option<&serde_json::Value>,
    out: &Path,
    formats: Formats,
) -> Result<Vec<PathBuf>> {
    refuse_existing("--out", out)?;
    // Before anything is traced or written: a missing Python is a one-line refusal, not a
    // half-done export.
    let python = if formats.onnx {
        Some(onnx::find_python()?)
    } else {
        None
    };
    let shapes = sample_shapes(manifest, registry);
    let partial = out.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    // Errors name the directory asked for: the temporary beside it is ours, not the user's.
    std::fs::create_dir_all(&partial).map_err(|e| Error::io(out, e))?;
    let context = Context {
        manifest,
        registry,
        shapes: &shapes,
        system,
        source,
        python: python.as_deref(),
        torchscript: formats.torchscript,
    };
    let written = models
        .iter_mut()
        .map(|model| export_model(model, &context, &partial))
        .collect::<Result<Vec<_>>>();
    let written = match written {
        Ok(files) => files.into_iter().flatten().collect::<Vec<_>>(),
        Err(error) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(error);
        }
    };
    std::fs::rename(&partial, out).map_err(|e| {
        let _ = std::fs::remove_dir_all(&partial);
        Error::io(out, e)
    })?;
    Ok(written.iter().map(|name| out.join(name)).collect())
}

/// Refuses an export into `out` (given by `flag`) when it exists: an export never replaces
/// another. `run --export` checks before training, so that a run does not train only to be
/// refused.
pub fn refuse_existing(flag: &str, out: &Path) -> Result<()> {
    if out.exists() {
        return Err(Error::Usage(format!(
            "{flag} {}: already exists; export into a new directory",
            out.display()
        )));
    }
    Ok(())
}

struct Context<'a> {
    manifest: &'a Manifest,
    registry: &'a Registry,
    shapes: &'a [(String, Tensor)],
    system: Option<&'a serde_json::Value>,
    source: &'a str,
    /// The Python converting to ONNX; `None` when no ONNX is asked for.
    python: Option<&'a Path>,
    /// Whether `.pt` files are asked for.
    torchscript: bool,
}

/// Writes one model's files into `dir`; returns their names.
fn export_model(model: &mut ModelSlot, context: &Context<'_>, dir: &Path) -> Result<Vec<String>> {
    let manifest = context.manifest;
    let variables: Vec<(String, Tensor)> = model
        .named_variables()
        .map(|(name, tensor)| (name.to_owned(), tensor.detach()))
        .collect();
    let weights_name = format!("{}.safetensors", model.name);
    let weights_path = dir.join(&weights_name);
    crate::system::tensors::write(&weights_path, &variables)?;
    let mut files = vec![weights_name.clone()];
    let (inputs, outputs) = model_keys(manifest, &model.name);
    let pt_name = format!("{}.pt", model.name);
    let pt_path = dir.join(&pt_name);
    let has_torchscript = match &model.torchscript {
        // A TorchScript architecture's own module is written whatever the formats: predicting
        // from the card runs it.
        Some(source) => {
            save_torchscript(&source.file, source.outputs.clone(), &variables, &pt_path)?;
            true
        }
        None if context.torchscript => match samples_of(&inputs, context.shapes) {
            Ok(samples) => {
                super::trace::save_model(model, &samples, &pt_path)?;
                true
            }
            Err(key) => {
                let why = format!(
                    "`{}`: no sample of its input `{key}` to trace it with (the manifest has no infer, test or eval data)",
                    model.name
                );
                if context.python.is_some() {
                    return Err(Error::Usage(format!("--format onnx: {why}")));
                }
                eprintln!("note: {why}; exported without TorchScript");
                false
            }
        },
        None => false,
    };
    let (torchscript, torchscript_sha256) = if has_torchscript {
        // The module is code as well as weights: predicting from the card must refuse
        // another module put in its place, as it refuses other weights.
        let sha256 = crate::plugins::sha256_file(&pt_path).map_err(|e| Error::io(&pt_path, e))?;
        files.push(pt_name.clone());
        (Some(pt_name), Some(sha256))
    } else {
        (None, None)
    };
    let config = manifest.models.iter().find(|m| m.name == model.name);
    let describe = |keys: Vec<String>| -> Vec<KeyInfo> {
        keys.into_iter()
            .map(|key| {
                let found = context.shapes.iter().find(|(k, _)| *k == key);
                KeyInfo {
                    shape: found.map(|(_, t)| t.size().into_iter().skip(1).collect()),
                    dtype: found.map(|(_, t)| format!("{:?}", t.kind())),
                    key,
                }
            })
            .collect()
    };
    let plugin = context
        .registry
        .get(ComponentKind::Model, &model.architecture)
        .and_then(|entry| match entry.provider {
            Provider::Plugin(index) => context.registry.plugins.plugins.get(index),
            Provider::Builtin => None,
        })
        .map(|plugin| PluginInfo {
            name: plugin.name().to_owned(),
            version: plugin.info.plugin_version.as_str().to_owned(),
            file: plugin.path.display().to_string(),
        });
    let input_infos = describe(inputs);
    let onnx_name = match context.python {
        Some(python) if has_torchscript => {
            let name = format!("{}.onnx", model.name);
            let onnx_inputs = input_infos
                .iter()
                .map(|info| match (&info.shape, &info.dtype) {
                    (Some(shape), Some(dtype)) => Ok(onnx::Input {
                        key: info.key.clone(),
                        shape: shape.clone(),
                        dtype: dtype.clone(),
                    }),
                    _ => Err(Error::Usage(format!(
                        "--format onnx: `{}`: no sample of its input `{}` to give the ONNX model its shape",
                        model.name, info.key
                    ))),
                })
                .collect::<Result<Vec<_>>>()?;
            let onnx_outputs = match &model.torchscript {
                Some(source) => source.outputs.clone().unwrap_or(outputs.clone()),
                None => outputs.clone(),
            };
            let checked = onnx::convert(
                python,
                &pt_path,
                &dir.join(&name),
                &onnx_inputs,
                &onnx_outputs,
            )?;
            if !checked.checked {
                eprintln!(
                    "note: {}: unchecked ({} has no onnxruntime to run it with)",
                    name,
                    python.display()
                );
            }
            files.push(name.clone());
            Some(name)
        }
        _ => None,
    };
    let weights_bytes = std::fs::read(&weights_path).map_err(|e| Error::io(&weights_path, e))?;
    let trained_text = manifest.effective_text();
    let card = ModelCard {
        format: card::FORMAT.to_owned(),
        name: model.name.clone(),
        architecture: model.architecture.clone(),
        config: config
            .and_then(|c| serde_json::to_value(&c.config).ok())
            .unwrap_or(serde_json::Value::Null),
        weights: weights_name,
        weights_sha256: crate::checkpoint::store::sha256_hex(&weights_bytes),
        torchscript,
        torchscript_sha256,
        torchscript_source_sha256: model.torchscript.as_ref().map(|s| s.sha256.clone()),
        onnx: onnx_name,
        inputs: input_infos,
        outputs: describe(outputs),
        plugin,
        fe_host_version: env!("CARGO_PKG_VERSION").to_owned(),
        manifest: ManifestInfo {
            // Absolute, so a card read elsewhere still finds the plugin paths it names.
            path: std::path::absolute(&manifest.file)
                .unwrap_or_else(|_| manifest.file.clone())
                .display()
                .to_string(),
            // The text with the run's `--set` overrides (what a checkpoint keeps): predicting
            // from the card must prepare inputs and build the model as training did, not as
            // the file alone says.
            sha256: crate::checkpoint::store::sha256_hex(trained_text.as_bytes()),
            text: trained_text,
        },
        source: context.source.to_owned(),
        step: context.system.and_then(|s| s["global_step"].as_u64()),
        metrics: context.system.map(card::last_metrics).unwrap_or_default(),
    };
    let card_name = format!("{}.json", model.name);
    let text = serde_json::to_string_pretty(&card)
        .map_err(|e| Error::Internal(format!("cannot serialize the model card: {e}")))?;
    let card_path = dir.join(&card_name);
    std::fs::write(&card_path, text).map_err(|e| Error::io(&card_path, e))?;
    files.push(card_name);
    Ok(files)
}

/// Loads the architecture's TorchScript file afresh on the CPU, puts the trained `variables`
/// into it and saves it (in evaluation mode) to `path`.
pub fn save_torchscript(
    file: &Path,
    outputs: Option<Vec<String>>,
    variables: &[(String, Tensor)],
    path: &Path,
) -> Result<()> {
    let problem = |message: String| Error::Data {
        path: file.to_path_buf(),
        message,
    };
    let mut module =
        TorchScriptModel::load(file, Device::Cpu, outputs).map_err(|e| problem(e.to_string()))?;
    let fresh = module.named_variables().map_err(problem)?;
    let _guard = tch::no_grad_guard();
    for (name, mut target) in fresh {
        let Some((_, value)) = variables.iter().find(|(n, _)| *n == name) else {
            return Err(problem(format!(
                "has `{name}`, which the trained model does not: was the file changed after training?"
            )));
        };
        target
            .f_copy_(value)
            .map_err(|e| problem(format!("`{name}`: {}", crate::tch_message(e))))?;
    }
    module
        .save(path)
        .map_err(|e| Error::io(path, std::io::Error::other(e)))
}

/// The sample (a batch of one) of each of `inputs`, in order; else the first key without one.
fn samples_of(
    inputs: &[String],
    shapes: &[(String, Tensor)],
) -> std::result::Result<Vec<Tensor>, String> {
    inputs
        .iter()
        .map(|key| {
            shapes
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, t)| t.shallow_clone())
                .ok_or_else(|| key.clone())
        })
        .collect()
}

/// The inputs and outputs of the first ModelOp that runs `model`.
pub fn model_keys(manifest: &Manifest, model: &str) -> (Vec<String>, Vec<String>) {
    manifest
        .ops
        .iter()
        .flat_map(crate::schedule::Scheduled::variants)
        .find(|(spec, _)| {
            spec.name == "ModelOp"
                && spec.config.get("model").and_then(|v| v.as_str()) == Some(model)
        })
        .map(|(spec, _)| (spec.inputs.clone(), spec.outputs.clone()))
        .unwrap_or_default()
}

/// One sample of every ModelOp's keys, from the first mode with data that runs no update
/// (infer, test, eval); empty when there is none. Only shapes and dtypes are read from it, so
/// the models run with the weights they are created with.
pub fn sample_shapes(manifest: &Manifest, registry: &Registry) -> Vec<(String, Tensor)> {
    let mut keys = Vec::new();
    for model in &manifest.models {
        let (inputs, outputs) = model_keys(manifest, &model.name);
        keys.extend(inputs);
        keys.extend(outputs);
    }
    keys.dedup();
    for mode in [Mode::Infer, Mode::Test, Mode::Eval] {
        let request = Request {
            mode,
            epoch: 1,
            inputs: Vec::new(),
            weights: None,
            random_weights: true,
            keys: keys.clone(),
            limit: Some(1),
            out: PathBuf::new(),
        };
        if let Ok((_, tensors)) = transform::collect(manifest, registry, Device::Cpu, &request) {
            return tensors;
        }
    }
    Vec::new()
}
