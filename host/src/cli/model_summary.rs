//! `fe-host summary m.toml`: per model, its layers (parameters grouped by module path, as
//! Lightning's `ModelSummary` groups a module's children), each one's parameter shapes and
//! count and, where the model exposes it, its output shape; then trainable, non-trainable and
//! total parameter counts (PyTorch's `sum(p.numel() for p in model.parameters())`), buffer
//! elements (batch-norm statistics: in Keras's "non-trainable", not in PyTorch's parameters)
//! and the size in MB (10^6 bytes) of parameters and buffers. The models are built with their
//! initial weights on the CPU; one sample of the manifest's data (infer, test or eval) runs
//! through each for the shapes.

use std::io::Write;
use std::path::PathBuf;

use abi_stable::std_types::RStr;
use clap::Args;
use serde::Serialize;
use tch::{Device, Tensor};

use super::{OverrideArgs, PluginArgs};
use crate::components::load_manifest_registry;
use crate::error::Result;
use crate::network::{Keys, ModelSlot};
use crate::plugins::default_search_path;
use crate::predict::export::{model_keys, sample_shapes};

/// `fe-host summary`
#[derive(Args, Debug)]
pub struct SummaryArgs {
    /// The manifest.
    pub manifest: PathBuf,
    /// Group parameters by this many leading parts of their names (`layer1.0.conv1.weight`:
    /// 1 gives `layer1`, 3 gives `layer1.0.conv1`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub depth: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// One model's summary.
#[derive(Serialize, Debug)]
pub struct ModelSummary {
    name: String,
    architecture: String,
    /// Input keys with the shape of a batch of one, when data was at hand.
    inputs: Vec<KeyShape>,
    /// Output keys likewise.
    outputs: Vec<KeyShape>,
    layers: Vec<Layer>,
    trainable_params: i64,
    non_trainable_params: i64,
    total_params: i64,
    buffer_elements: i64,
    size_mb: f64,
}

#[derive(Serialize, Debug)]
struct KeyShape {
    key: String,
    shape: Option<Vec<i64>>,
}

#[derive(Serialize, Debug)]
struct Layer {
    name: String,
    /// `(name within the layer, shape)` of each parameter and buffer.
    tensors: Vec<(String, Vec<i64>)>,
    params: i64,
    buffer_elements: i64,
    /// For a batch of one; absent when the model does not expose this layer's output.
    output_shape: Option<Vec<i64>>,
}

/// Runs `fe-host summary`.
pub fn run(args: SummaryArgs) -> Result<()> {
    let manifest = args.overrides.load(&args.manifest)?;
    crate::runtime::set_threads(manifest.run.threads);
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    // Built all trainable so that frozen models' parameters still count as parameters (a
    // frozen model's slot holds them as buffers); the manifest's flag decides the column.
    let mut unfrozen = manifest.clone();
    for model in &mut unfrozen.models {
        model.trainable = true;
    }
    tch::manual_seed(manifest.run.seed as i64);
    let mut keys = Keys::default();
    let mut network = crate::network::build::build(&unfrozen, &registry, &mut keys, Device::Cpu)?;
    let samples = sample_shapes(&manifest, &registry);
    let summaries: Vec<ModelSummary> = network
        .models
        .iter_mut()
        .map(|model| {
            let trainable = manifest
                .models
                .iter()
                .find(|m| m.name == model.name)
                .is_none_or(|m| m.trainable);
            let (inputs, outputs) = model_keys(&manifest, &model.name);
            summarize(model, trainable, &inputs, &outputs, &samples, args.depth)
        })
        .collect();
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&serde_json::json!({ "models": summaries }))
            .map_err(|e| crate::Error::Internal(format!("summary as JSON: {e}")))?;
        text.push('\n');
        text
    } else {
        summaries.iter().map(table).collect::<Vec<_>>().join("\n")
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(())
}

fn summarize(
    model: &mut ModelSlot,
    trainable: bool,
    inputs: &[String],
    outputs: &[String],
    samples: &[(String, Tensor)],
    depth: u32,
) -> ModelSummary {
    let sample = |key: &String| samples.iter().find(|(k, _)| k == key).map(|(_, t)| t);
    let shape_of = |key: &String| KeyShape {
        key: key.clone(),
        shape: sample(key).map(Tensor::size),
    };
    let exposed = model.handle.layers().unwrap_or_default();
    let layer_outputs: Vec<(String, Vec<i64>)> = inputs
        .iter()
        .map(sample)
        .collect::<Option<Vec<_>>>()
        .and_then(|batch| {
            let names: Vec<RStr<'_>> = exposed.iter().map(|l| RStr::from_str(l)).collect();
            let _guard = tch::no_grad_guard();
            let produced = model.handle.forward(&batch, false, &names).ok()?;
            let taps = produced.len().checked_sub(names.len())?;
            Some(
                exposed
                    .iter()
                    .cloned()
                    .zip(produced[taps..].iter().map(Tensor::size))
                    .collect(),
            )
        })
        .unwrap_or_default();
    let mut layers: Vec<Layer> = Vec::new();
    let params: Vec<(&str, &Tensor)> = model
        .param_names
        .iter()
        .map(String::as_str)
        .zip(&model.params)
        .collect();
    let buffers: Vec<(&str, &Tensor)> =
        model.buffers.iter().map(|(n, t)| (n.as_str(), t)).collect();
    for (is_param, (name, tensor)) in params
        .iter()
        .map(|p| (true, *p))
        .chain(buffers.iter().map(|b| (false, *b)))
    {
        let (group, rest) = split_name(name, depth);
        let index = match layers.iter().position(|l| l.name == group) {
            Some(index) => index,
            None => {
                layers.push(Layer {
                    name: group.to_owned(),
                    tensors: Vec::new(),
                    params: 0,
                    buffer_elements: 0,
                    output_shape: layer_outputs
                        .iter()
                        .find(|(l, _)| l == group)
                        .map(|(_, s)| s.clone()),
                });
                layers.len() - 1
            }
        };
        let layer = &mut layers[index];
        layer.tensors.push((rest.to_owned(), tensor.size()));
        if is_param {
            layer.params += tensor.numel() as i64;
        } else {
            layer.buffer_elements += tensor.numel() as i64;
        }
    }
    // Exposed layers without variables of their own (pooling, activations) still show their
    // output shape.
    for (name, shape) in &layer_outputs {
        if !layers.iter().any(|l| &l.name == name) {
            layers.push(Layer {
                name: name.clone(),
                tensors: Vec::new(),
                params: 0,
                buffer_elements: 0,
                output_shape: Some(shape.clone()),
            });
        }
    }
    let total: i64 = params.iter().map(|(_, t)| t.numel() as i64).sum();
    let buffer_elements: i64 = buffers.iter().map(|(_, t)| t.numel() as i64).sum();
    let bytes: usize = params
        .iter()
        .chain(&buffers)
        .map(|(_, t)| t.numel() * t.kind().elt_size_in_bytes())
        .sum();
    ModelSummary {
        name: model.name.clone(),
        architecture: model.architecture.clone(),
        inputs: inputs.iter().map(shape_of).collect(),
        outputs: outputs.iter().map(shape_of).collect(),
        layers,
        trainable_params: if trainable { total } else { 0 },
        non_trainable_params: if trainable { 0 } else { total },
        total_params: total,
        buffer_elements,
        size_mb: bytes as f64 / 1e6,
    }
}

/// `layer1.0.conv1.weight` at depth 1: (`layer1`, `0.conv1.weight`). The last part (the
/// tensor's own name) always stays in the second half.
fn split_name(name: &str, depth: u32) -> (&str, &str) {
    let parts = name.matches('.').count();
    let cut = (depth as usize).min(parts);
    if cut == 0 {
        return ("", name);
    }
    match name.match_indices('.').nth(cut - 1) {
        Some((at, _)) => (&name[..at], &name[at + 1..]),
        None => ("", name),
    }
}

fn shape_text(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Keras-style thousands separators.
fn count(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

fn keys_text(keys: &[KeyShape]) -> String {
    keys.iter()
        .map(|k| match &k.shape {
            Some(shape) => format!("{} {}", k.key, shape_text(shape)),
            None => format!("{} (no data at hand)", k.key),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn table(summary: &ModelSummary) -> String {
    let mut rows = vec![[
        "Layer".to_owned(),
        "Parameters".to_owned(),
        "Params".to_owned(),
        "Output shape".to_owned(),
    ]];
    for layer in &summary.layers {
        let tensors = if layer.tensors.len() <= 2 {
            layer
                .tensors
                .iter()
                .map(|(n, s)| format!("{n} {}", shape_text(s)))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            format!("{} tensors", layer.tensors.len())
        };
        rows.push([
            if layer.name.is_empty() {
                "(model)".to_owned()
            } else {
                layer.name.clone()
            },
            tensors,
            count(layer.params),
            layer
                .output_shape
                .as_deref()
                .map_or("-".to_owned(), shape_text),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "model {} ({})\n  inputs: {}\n  outputs: {}\n",
        summary.name,
        summary.architecture,
        keys_text(&summary.inputs),
        keys_text(&summary.outputs)
    );
    for (i, row) in rows.iter().enumerate() {
        let line = format!(
            "  {:<w0$}  {:<w1$}  {:>w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&format!(
                "  {}\n",
                "-".repeat(widths.iter().sum::<usize>() + 6)
            ));
        }
    }
    out.push_str(&format!(
        "  trainable params: {}\n  non-trainable params: {}\n  total params: {}\n  buffers: {} elements\n  size: {:.3} MB (parameters and buffers)\n",
        count(summary.trainable_params),
        count(summary.non_trainable_params),
        count(summary.total_params),
        count(summary.buffer_elements),
        summary.size_mb
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_at_the_depth_asked_keeping_the_tensor_name() {
        assert_eq!(
            split_name("layer1.0.conv1.weight", 1),
            ("layer1", "0.conv1.weight")
        );
        assert_eq!(
            split_name("layer1.0.conv1.weight", 3),
            ("layer1.0.conv1", "weight")
        );
        assert_eq!(
            split_name("layer1.0.conv1.weight", 9),
            ("layer1.0.conv1", "weight")
        );
        assert_eq!(split_name("scale", 1), ("", "scale"));
    }

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
