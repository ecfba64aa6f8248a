//! Everything a manifest can name: the components fe-host provides itself, gathered here from
//! the modules that implement them, and those of every plugin loaded. The plugin registry sits
//! below the pipeline and the estimator (they create components through it), so it is handed
//! the built-ins rather than reaching up for them.

use std::collections::BTreeMap;

use fe_plugin_api::{ComponentInfo, ComponentKind};

use crate::error::{Error, Result};
use crate::plugins::{PluginSet, Registry, SearchEntry};

/// Loads every plugin on `search` and indexes their components with the host's built-ins.
pub fn load_registry(search: &[SearchEntry], pins: &BTreeMap<String, String>) -> Result<Registry> {
    let set = crate::plugins::load::load_all(search, pins).map_err(Error::Plugins)?;
    registry(set)
}

/// [`load_registry`] for `manifest` (its sha256 pins), then tells the plugins about its run
/// (manifest and output directories, rank) before anything is created.
pub fn load_manifest_registry(
    search: &[SearchEntry],
    manifest: &crate::manifest::Manifest,
) -> Result<Registry> {
    let registry = load_registry(search, &manifest.plugins.sha256)?;
    // A data-parallel run announces again with its rank once it has joined its group.
    let info = crate::plugins::run_info(manifest, crate::plugins::Membership::SINGLE);
    registry.announce(&info);
    Ok(registry)
}

/// Indexes the components of `plugins` with the host's built-ins.
pub fn registry(plugins: PluginSet) -> Result<Registry> {
    let builtins = builtins()
        .into_iter()
        .map(|info| {
            let fields =
                crate::builtin_fields::fields(info.kind, info.name.as_str()).unwrap_or(&[]);
            (info, fields)
        })
        .collect();
    Registry::new(plugins, builtins).map_err(Error::Plugins)
}

fn builtin(kind: ComponentKind, name: &str, doc: &str, default_mode: &str) -> ComponentInfo {
    ComponentInfo {
        kind,
        name: name.into(),
        doc: doc.into(),
        default_mode: default_mode.into(),
        is_metric: false,
    }
}

/// The components fe-host provides itself, from each module that implements them: the
/// network's ops (they need the host's models and optimizers), the pipeline's readers and ops,
/// the estimator's traces.
pub fn builtins() -> Vec<ComponentInfo> {
    vec![
        builtin(
            ComponentKind::TensorOp,
            "ModelOp",
            "Runs a model: inputs -> outputs (optionally intermediate layers)",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "UpdateOp",
            "Backpropagates a loss (mean-reduced) and steps the model's optimizer",
            "train",
        ),
        builtin(
            ComponentKind::TensorOp,
            "GradientOp",
            "Gradients of a key with respect to a model's weights or to other keys",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "L2Regularization",
            "Adds beta * sum(w^2)/2 over a model's trainable weights to a loss (FastEstimator's L2Regularizaton)",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "L2Regularizaton",
            "FastEstimator's spelling of L2Regularization (the same op)",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "Delete",
            "Removes keys for the rest of the step",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "Sometimes",
            "Runs the wrapped op with probability `prob`",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "OneOf",
            "Runs one of the wrapped ops, chosen uniformly",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "Repeat",
            "Runs the wrapped op N times or while a condition holds",
            "",
        ),
        builtin(
            ComponentKind::TensorOp,
            "Fuse",
            "Runs the wrapped ops in order as one op",
            "",
        ),
        builtin(
            ComponentKind::Dataset,
            "idx",
            "IDX files (the MNIST format), one per key",
            "",
        ),
    ]
    .into_iter()
    .chain(
        crate::pipeline::formats::KINDS
            .iter()
            .map(|(name, doc)| builtin(ComponentKind::Dataset, name, doc, "")),
    )
    .chain(
        crate::pipeline::build::BUILTINS
            .iter()
            .map(|(name, doc)| builtin(ComponentKind::NumpyOp, name, doc, "")),
    )
    .chain(crate::estimator::host_traces::registry_entries())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_ins_of_every_layer_are_listed() {
        let names = |kind: ComponentKind| -> Vec<String> {
            builtins()
                .into_iter()
                .filter(|c| c.kind == kind)
                .map(|c| c.name.to_string())
                .collect()
        };
        assert_eq!(
            names(ComponentKind::Dataset),
            [
                "idx",
                "csv",
                "npy",
                "npz",
                "image_folder",
                "webdataset",
                "parquet",
                "arrow"
            ]
        );
        assert!(names(ComponentKind::NumpyOp).contains(&"Batch".to_owned()));
        assert!(names(ComponentKind::TensorOp).contains(&"UpdateOp".to_owned()));
        assert!(!names(ComponentKind::Trace).is_empty());
    }

    #[test]
    fn every_built_in_declares_its_fields() {
        // `plugins show` is the reference of a component; a built-in without declarations
        // showed "no field declarations", and GradientOp's required `finals` was documented
        // nowhere.
        let undeclared: Vec<String> = builtins()
            .into_iter()
            .filter(|c| crate::builtin_fields::fields(c.kind, c.name.as_str()).is_none())
            .map(|c| format!("{} {}", c.kind, c.name))
            .collect();
        assert!(undeclared.is_empty(), "undeclared: {undeclared:?}");
        let gradient = crate::builtin_fields::fields(ComponentKind::TensorOp, "GradientOp");
        assert!(
            gradient.is_some_and(|f| f.iter().any(|f| f.name == "finals" && f.default.is_none()))
        );
    }
}
