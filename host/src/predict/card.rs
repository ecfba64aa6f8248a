//! The model card `fe-host export` writes next to the weights: what the weights are (the
//! architecture and its configuration), what goes in and comes out (keys with per-sample shapes
//! and dtypes), what built them (plugin and fe-host versions) and where they came from (the
//! manifest, the checkpoint or weights, the last metrics).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `format` every card carries, so a reader knows the layout.
pub const FORMAT: &str = "fe-host model card 1";

/// One key a model reads or writes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyInfo {
    /// The key in the manifest.
    pub key: String,
    /// The shape of one sample (without the batch dimension); absent when no data was at hand.
    pub shape: Option<Vec<i64>>,
    /// The dtype (`Float`, `Int64`, ...); absent when no data was at hand.
    pub dtype: Option<String>,
}

/// The plugin that provides a plugin architecture.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PluginInfo {
    /// Its crate name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The file it was loaded from.
    pub file: String,
}

/// The manifest the model was trained with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManifestInfo {
    /// Its path when exported.
    pub path: String,
    /// sha256 of its text.
    pub sha256: String,
    /// Its text, with the `--set` overrides the run had applied (as a checkpoint keeps it).
    pub text: String,
}

/// A model card.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelCard {
    /// [`FORMAT`].
    pub format: String,
    /// The model's name in the manifest.
    pub name: String,
    /// Its architecture (`LeNet`, `TorchScript`, ...).
    pub architecture: String,
    /// The architecture's configuration: the model's table less name, optimizer and flags.
    pub config: serde_json::Value,
    /// The safetensors file with every parameter and buffer, named as in the PyTorch
    /// definition (relative to the card).
    pub weights: String,
    /// sha256 of the weights file.
    pub weights_sha256: String,
    /// The TorchScript file with the trained weights: a TorchScript architecture's own module,
    /// or a plugin architecture's traced forward (absent with `--format safetensors`).
    pub torchscript: Option<String>,
    /// sha256 of the TorchScript file. Cards written before it was recorded lack it (and still
    /// load, their TorchScript file unchecked), so it defaults to absent.
    #[serde(default)]
    pub torchscript_sha256: Option<String>,
    /// sha256 of the TorchScript file the model was trained from (the manifest's `file`):
    /// weights taken from this export into a model built from that file again must find it
    /// unchanged. Absent in older cards (then unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torchscript_source_sha256: Option<String>,
    /// The ONNX file converted from the TorchScript one (`export --format onnx`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onnx: Option<String>,
    /// Keys the model reads, in argument order.
    pub inputs: Vec<KeyInfo>,
    /// Keys the model writes, in output order.
    pub outputs: Vec<KeyInfo>,
    /// The plugin providing the architecture (absent for TorchScript).
    pub plugin: Option<PluginInfo>,
    /// The fe-host version that exported it.
    pub fe_host_version: String,
    /// The manifest it was trained with.
    pub manifest: ManifestInfo,
    /// The checkpoint or weights it was exported from.
    pub source: String,
    /// The global step of the checkpoint, when exported from one.
    pub step: Option<u64>,
    /// The last value of each metric logged in each mode but `train` (from a checkpoint).
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
}

/// The last logged value of every key in every mode but `train`, from a checkpoint's
/// `system.json` (`summary.history.<mode>.<key>.<step>`).
pub fn last_metrics(system: &serde_json::Value) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    let Some(modes) = system["summary"]["history"].as_object() else {
        return out;
    };
    for (mode, keys) in modes.iter().filter(|(m, _)| m.as_str() != "train") {
        let Some(keys) = keys.as_object() else {
            continue;
        };
        let mut last = BTreeMap::new();
        for (key, steps) in keys {
            let newest = steps.as_object().and_then(|steps| {
                steps
                    .iter()
                    .filter_map(|(step, v)| Some((step.parse::<u64>().ok()?, v.as_f64()?)))
                    .max_by_key(|(step, _)| *step)
            });
            if let Some((_, value)) = newest {
                last.insert(key.clone(), value);
            }
        }
        if !last.is_empty() {
            out.insert(mode.clone(), last);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_metrics_takes_the_newest_step_of_each_key_outside_training() {
        let system = serde_json::json!({"summary": {"history": {
            "train": {"ce": {"10": 0.5}},
            "eval": {"accuracy": {"9": 0.8, "18": 0.9, "2": 0.1}, "ce": {"18": 0.3}},
        }}});
        let metrics = last_metrics(&system);
        assert_eq!(metrics.len(), 1);
        assert_eq!(metrics["eval"]["accuracy"], 0.9);
        assert_eq!(metrics["eval"]["ce"], 0.3);
        assert!(last_metrics(&serde_json::json!({})).is_empty());
    }
}
