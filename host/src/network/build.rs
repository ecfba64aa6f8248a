//! Builds the network from the manifest: models (with their optimizers), ops (plugin ops,
//! built-ins and meta ops around them), slicers and post-processing, each created from the
//! registry, every error pointing at the manifest.

use fe_plugin_api::{ComponentKind, DeviceSpec};
use serde::Deserialize;
use tch::Device;

use super::builtin::{
    GradientOp, GradientOpConfig, ModelOp, ModelOpConfig, UpdateOp, UpdateOpConfig,
};
use super::keys::Keys;
use super::meta::{Condition, MetaOp};
use super::model::{ModelParts, ModelSlot, OptimizerSlot};
use super::node::{OpKind, OpNode};
use super::post::PostOp;
use super::slicing::SlicerNode;
use super::Network;
use crate::error::{Error, Result};
use crate::manifest::{ComponentSpec, KeyPath, Manifest, ModelConfig};
use crate::plugins::create::{creation_error, unknown_component, Creation};
use crate::plugins::handles::{ModelHandle, NumpyOpHandle, SlicerHandle, TensorOpHandle};
use crate::plugins::Registry;
use crate::schedule::{InForce, ModeFilter, Scheduled};

/// The ops fe-host provides itself: they use the host's models, or other ops.
pub const BUILTIN_OPS: [&str; 8] = [
    "ModelOp",
    "UpdateOp",
    "GradientOp",
    "Delete",
    "Sometimes",
    "OneOf",
    "Repeat",
    "Fuse",
];

/// Creates every model, op, slicer and post-processing op of `manifest` on `device`,
/// interning their keys into `keys`.
pub fn build(
    manifest: &Manifest,
    registry: &Registry,
    keys: &mut Keys,
    device: Device,
) -> Result<Network> {
    let models = manifest
        .models
        .iter()
        .map(|config| build_model(manifest, registry, config, device))
        .collect::<Result<Vec<_>>>()?;
    check_precision(manifest, &models)?;
    let builder = Builder {
        manifest,
        registry,
        models: &models,
        device,
    };
    // A scheduled entry becomes one node per value, each created once and in force in its own
    // epochs, so a component that comes back keeps its state.
    let mut ops = Vec::new();
    for (spec, epochs) in manifest.ops.iter().flat_map(Scheduled::variants) {
        let mut node = builder.op(spec, keys)?;
        node.epochs = epochs;
        ops.push(node);
    }
    let mut slicers = Vec::new();
    for (spec, epochs) in manifest.slicers.iter().flat_map(Scheduled::variants) {
        let mut node = builder.slicer(spec, keys)?;
        node.epochs = epochs;
        slicers.push(node);
    }
    let mut post = Vec::new();
    for (spec, epochs) in manifest.postprocessing.iter().flat_map(Scheduled::variants) {
        let mut node = builder.post(spec, keys)?;
        node.epochs = epochs;
        post.push(node);
    }
    let mut network = Network::new(ops, models, device, keys.clone());
    network.slicers = slicers;
    network.post = post;
    Ok(network)
}

fn build_model(
    manifest: &Manifest,
    registry: &Registry,
    config: &ModelConfig,
    device: Device,
) -> Result<ModelSlot> {
    let path = config.path.key("architecture");
    let creation = Creation::new(
        &config.path,
        &[],
        &[],
        DeviceSpec::from(device),
        manifest.run.seed,
    );
    let text = toml::to_string(&config.config).unwrap_or_default();
    let handle = match registry.create_model(&config.architecture, &text, &creation.context()) {
        None => {
            return Err(unknown_component(
                manifest,
                registry,
                &path,
                ComponentKind::Model,
                &config.architecture,
            ))
        }
        Some(Err(error)) => return Err(creation_error(manifest, &config.path, error)),
        Some(Ok(object)) => ModelHandle(object),
    };
    let variables = handle
        .variables()
        .map_err(|error| creation_error(manifest, &config.path, error))?;
    let mut optimizers = Vec::new();
    if let Some(scheduled) = &config.optimizer {
        for (table, epochs) in scheduled.variants() {
            let path = scheduled
                .schedule
                .variant_path(&config.path.key("optimizer"), epochs.variant());
            let configured = crate::optim::build(table)
                .map_err(|e| manifest.error_at(&path.join_dotted(e.field()), e.message()))?;
            optimizers.push(OptimizerSlot {
                optimizer: configured.optimizer,
                lr_schedule: configured.lr_schedule,
                epochs,
                summary: describe_table(table),
            });
        }
    }
    let parts = ModelParts {
        name: config.name.clone(),
        architecture: config.architecture.clone(),
        handle,
        variables,
        optimizers,
        trainable: config.trainable,
        mixed_precision: config.mixed_precision,
    };
    ModelSlot::new(parts, device).map_err(|e| {
        Error::Run(format!(
            "model `{}`: cannot move it to {device:?}: {}",
            config.name,
            crate::tch_message(e)
        ))
    })
}

/// `sgd { lr = 0.1, momentum = 0.9 }`: an optimizer table as one line.
pub fn describe_table(table: &toml::Table) -> String {
    let mut rest = table.clone();
    let kind = match rest.remove("type") {
        Some(toml::Value::String(kind)) => kind,
        _ => "?".to_owned(),
    };
    if rest.is_empty() {
        return kind;
    }
    let fields: Vec<String> = rest
        .iter()
        .map(|(key, value)| match value {
            // `lr = cosine_decay(cycle_length = 1000, init_lr = 0.001)`
            toml::Value::Table(schedule) if schedule.contains_key("schedule") => {
                let mut params = schedule.clone();
                let name = params
                    .remove("schedule")
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let params: Vec<String> =
                    params.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{key} = {name}({})", params.join(", "))
            }
            _ => format!("{key} = {value}"),
        })
        .collect();
    format!("{kind} {{ {} }}", fields.join(", "))
}

/// All models mixed precision, or none (seed 000's rule).
fn check_precision(manifest: &Manifest, models: &[ModelSlot]) -> Result<()> {
    let mixed: Vec<&ModelConfig> = manifest
        .models
        .iter()
        .filter(|m| m.mixed_precision)
        .collect();
    if mixed.is_empty() || mixed.len() == models.len() {
        return Ok(());
    }
    let full = manifest.models.iter().find(|m| !m.mixed_precision);
    let (mixed, full) = (mixed[0], full.map(|m| m.name.as_str()).unwrap_or("?"));
    Err(manifest.error_at(
        &mixed.path.key("mixed_precision"),
        format!(
            "cannot mix full-precision and mixed-precision models: `{}` is mixed but `{full}` is not",
            mixed.name
        ),
    ))
}

struct Builder<'a> {
    manifest: &'a Manifest,
    registry: &'a Registry,
    models: &'a [ModelSlot],
    device: Device,
}

fn host_config<T: serde::de::DeserializeOwned>(
    manifest: &Manifest,
    spec: &ComponentSpec,
) -> Result<T> {
    fe_plugin_api::parse_config(&spec.config_text()).map_err(|e| {
        manifest.error_at(
            &spec.path.join_dotted(e.field()),
            format!("{} ({})", e.message(), spec.name),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SometimesConfig {
    /// Probability of running the wrapped op.
    #[serde(default = "half")]
    prob: f64,
    /// The wrapped op's table.
    wrap: toml::Table,
}

fn half() -> f64 {
    0.5
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RepeatConfig {
    /// Fixed number of runs.
    #[serde(default)]
    repeat: Option<u32>,
    /// Or: keep running while this holds (after a first run).
    #[serde(default, rename = "while")]
    while_: Option<Condition>,
    /// Upper bound on runs with `while`.
    #[serde(default)]
    max_iter: Option<u32>,
    /// The wrapped op's table.
    wrap: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListConfig {
    /// The wrapped ops' tables.
    ops: Vec<toml::Table>,
}

impl Builder<'_> {
    fn modes(&self, spec: &ComponentSpec, default: &str) -> Result<ModeFilter> {
        match spec.mode {
            Some(modes) => Ok(modes),
            None => ModeFilter::parse_default(default).map_err(|e| {
                self.manifest.error_at(
                    &spec.path,
                    format!("the component's default mode is invalid: {e}"),
                )
            }),
        }
    }

    fn model_index(&self, spec: &ComponentSpec, name: &str) -> Result<usize> {
        self.models
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
                self.manifest.error_at(
                    &spec.path.key("model"),
                    format!(
                        "unknown model `{name}` (models: {})",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                )
            })
    }

    fn node(
        &self,
        spec: &ComponentSpec,
        kind: OpKind,
        inputs: &[String],
        outputs: &[String],
        modes: ModeFilter,
        keys: &mut Keys,
    ) -> OpNode {
        OpNode {
            label: spec.label(),
            name: spec.name.clone(),
            inputs: keys.intern_all(inputs),
            outputs: keys.intern_all(outputs),
            modes,
            ds_ids: spec.ds_id.clone(),
            epochs: InForce::always(),
            kind,
        }
    }

    fn op(&self, spec: &ComponentSpec, keys: &mut Keys) -> Result<OpNode> {
        let manifest = self.manifest;
        match spec.name.as_str() {
            "ModelOp" => {
                let config: ModelOpConfig = host_config(manifest, spec)?;
                let model = self.model_index(spec, &config.model)?;
                if spec.inputs.is_empty() {
                    return Err(manifest.error_at(
                        &spec.path,
                        "ModelOp needs `inputs`: the keys fed to the model",
                    ));
                }
                let known = self.models[model].handle.layers().unwrap_or_default();
                if let Some(unknown) = config
                    .intermediate_layers
                    .iter()
                    .find(|l| !known.contains(l))
                {
                    return Err(manifest.error_at(
                        &spec.path.key("intermediate_layers"),
                        format!(
                            "model `{}` has no layer `{unknown}` (layers: {})",
                            config.model,
                            known.join(", ")
                        ),
                    ));
                }
                let op = ModelOp {
                    model,
                    layers: config.intermediate_layers,
                    trainable: config.trainable,
                };
                let modes = self.modes(spec, "")?;
                Ok(self.node(
                    spec,
                    OpKind::Model(op),
                    &spec.inputs,
                    &spec.outputs,
                    modes,
                    keys,
                ))
            }
            "UpdateOp" => self.update_op(spec, keys),
            "GradientOp" => {
                let config: GradientOpConfig = host_config(manifest, spec)?;
                crate::schedule::validate_key(&config.finals)
                    .map_err(|e| manifest.error_at(&spec.path.key("finals"), e))?;
                let model = match &config.model {
                    Some(name) => Some(self.model_index(spec, name)?),
                    None => None,
                };
                let expected = if model.is_some() {
                    1
                } else {
                    spec.inputs.len()
                };
                if model.is_some() && !spec.inputs.is_empty() {
                    return Err(manifest.error_at(
                        &spec.path.key("inputs"),
                        "GradientOp takes either `model` or `inputs`, not both",
                    ));
                }
                if model.is_none() && spec.inputs.is_empty() {
                    return Err(manifest.error_at(&spec.path, "GradientOp needs `model` or `inputs`: what to differentiate with respect to"));
                }
                if spec.outputs.len() != expected {
                    return Err(manifest.error_at(
                        &spec.path.key("outputs"),
                        format!(
                            "GradientOp writes {expected} key(s) here, got {}",
                            spec.outputs.len()
                        ),
                    ));
                }
                let mut inputs = vec![config.finals.clone()];
                inputs.extend(spec.inputs.iter().cloned());
                let modes = self.modes(spec, "")?;
                Ok(self.node(
                    spec,
                    OpKind::Gradient(GradientOp { model }),
                    &inputs,
                    &spec.outputs,
                    modes,
                    keys,
                ))
            }
            "Delete" => {
                if spec.inputs.is_empty() || !spec.outputs.is_empty() || !spec.config.is_empty() {
                    return Err(manifest
                        .error_at(&spec.path, "Delete takes only `inputs`: the keys to delete"));
                }
                let modes = self.modes(spec, "")?;
                Ok(self.node(spec, OpKind::Delete, &spec.inputs, &[], modes, keys))
            }
            "Sometimes" => {
                let config: SometimesConfig = host_config(manifest, spec)?;
                if !(0.0..=1.0).contains(&config.prob) {
                    return Err(manifest.error_at(&spec.path.key("prob"), "must be in [0, 1]"));
                }
                let child = self.child(spec, config.wrap, spec.path.key("wrap"), keys)?;
                self.meta(spec, vec![child], keys, |mut children| MetaOp::Sometimes {
                    prob: config.prob,
                    op: Box::new(children.remove(0)),
                })
            }
            "Repeat" => {
                let config: RepeatConfig = host_config(manifest, spec)?;
                let child = self.child(spec, config.wrap, spec.path.key("wrap"), keys)?;
                let condition = match (config.repeat, config.while_) {
                    (Some(_), Some(_)) | (None, None) => return Err(manifest.error_at(
                        &spec.path,
                        "Repeat needs exactly one of `repeat` (a count) and `while` (a condition)",
                    )),
                    (Some(0), None) => {
                        return Err(
                            manifest.error_at(&spec.path.key("repeat"), "must be at least 1")
                        )
                    }
                    (Some(_), None) => None,
                    (None, Some(condition)) => {
                        condition
                            .validate()
                            .map_err(|e| manifest.error_at(&spec.path.key("while"), e))?;
                        Some((keys.intern(&condition.key), condition))
                    }
                };
                if config.max_iter == Some(0) {
                    return Err(manifest.error_at(&spec.path.key("max_iter"), "must be at least 1"));
                }
                let times = config.repeat.unwrap_or(1);
                let max_iter = config.max_iter;
                let mut node =
                    self.meta(spec, vec![child], keys, |mut children| MetaOp::Repeat {
                        op: Box::new(children.remove(0)),
                        times,
                        condition,
                        max_iter,
                    })?;
                if let OpKind::Meta(MetaOp::Repeat {
                    condition: Some((key, _)),
                    ..
                }) = &node.kind
                {
                    if !node.inputs.contains(key) && !node.outputs.contains(key) {
                        node.inputs.push(*key);
                    }
                }
                Ok(node)
            }
            "OneOf" | "Fuse" => {
                let config: ListConfig = host_config(manifest, spec)?;
                if config.ops.is_empty() {
                    return Err(manifest.error_at(
                        &spec.path.key("ops"),
                        format!("{} needs at least one op", spec.name),
                    ));
                }
                let children = config
                    .ops
                    .into_iter()
                    .enumerate()
                    .map(|(i, table)| self.child(spec, table, spec.path.key("ops").index(i), keys))
                    .collect::<Result<Vec<_>>>()?;
                if spec.name == "OneOf" {
                    if let Some(odd) = children.iter().find(|c| {
                        c.inputs != children[0].inputs || c.outputs != children[0].outputs
                    }) {
                        return Err(manifest.error_at(
                            &spec.path.key("ops"),
                            format!("all ops of a OneOf must share the same inputs and outputs ({} differs)", odd.label),
                        ));
                    }
                    self.meta(spec, children, keys, |ops| MetaOp::OneOf { ops })
                } else {
                    self.meta(spec, children, keys, |ops| MetaOp::Fuse { ops })
                }
            }
            name => {
                let Some(entry) = self.registry.get(ComponentKind::TensorOp, name) else {
                    return Err(unknown_component(
                        manifest,
                        self.registry,
                        &spec.path.key("op"),
                        ComponentKind::TensorOp,
                        name,
                    ));
                };
                let default_mode = entry.info.default_mode.to_string();
                let creation = Creation::new(
                    &spec.path,
                    &spec.inputs,
                    &spec.outputs,
                    DeviceSpec::from(self.device),
                    manifest.run.seed,
                );
                let handle = match self.registry.create_tensor_op(
                    name,
                    &spec.config_text(),
                    &creation.context(),
                ) {
                    Some(Ok(object)) => TensorOpHandle(object),
                    Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
                    None => {
                        return Err(manifest.error_at(
                            &spec.path.key("op"),
                            format!("`{name}` cannot be used here"),
                        ))
                    }
                };
                let modes = self.modes(spec, &default_mode)?;
                Ok(self.node(
                    spec,
                    OpKind::Plugin(handle),
                    &spec.inputs,
                    &spec.outputs,
                    modes,
                    keys,
                ))
            }
        }
    }

    fn update_op(&self, spec: &ComponentSpec, keys: &mut Keys) -> Result<OpNode> {
        let manifest = self.manifest;
        let config: UpdateOpConfig = host_config(manifest, spec)?;
        let model = self.model_index(spec, &config.model)?;
        if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
            return Err(manifest.error_at(
                &spec.path,
                "UpdateOp takes its input as `loss = \"<key>\"` (or `gradients = \"<key>\"`) and has no outputs",
            ));
        }
        let (input, gradients_input) = match (config.loss, config.gradients) {
            (Some(loss), None) => (loss, false),
            (None, Some(gradients)) => (gradients, true),
            _ => {
                return Err(manifest.error_at(
                    &spec.path,
                    "UpdateOp needs exactly one of `loss` and `gradients`",
                ))
            }
        };
        let field = if gradients_input { "gradients" } else { "loss" };
        crate::schedule::validate_key(&input)
            .map_err(|e| manifest.error_at(&spec.path.key(field), e))?;
        if config.merge_grad == 0 {
            return Err(manifest.error_at(&spec.path.key("merge_grad"), "must be at least 1"));
        }
        let slot = &self.models[model];
        if !slot.trainable || slot.optimizers.is_empty() {
            let why = if slot.trainable {
                "has no optimizer"
            } else {
                "is not trainable"
            };
            return Err(manifest.error_at(
                &spec.path.key("model"),
                format!("model `{}` {why}", slot.name),
            ));
        }
        if gradients_input && slot.mixed_precision {
            return Err(manifest.error_at(
                &spec.path.key("gradients"),
                "mixed-precision training cannot take input gradients, because the gradients need to be computed in this op",
            ));
        }
        let op = UpdateOp {
            model,
            gradients_input,
            merge_grad: config.merge_grad,
            defer: config.defer,
            calls: 0,
            grad_sum: Vec::new(),
        };
        let modes = self.modes(spec, "train")?;
        Ok(self.node(spec, OpKind::Update(op), &[input], &[], modes, keys))
    }

    /// An op nested in a meta op. Modes and dataset ids belong to the meta op.
    fn child(
        &self,
        parent: &ComponentSpec,
        table: toml::Table,
        path: KeyPath,
        keys: &mut Keys,
    ) -> Result<OpNode> {
        let spec = ComponentSpec::parse(path, table, "op", ["inputs", "outputs"])
            .map_err(|p| self.manifest.error_at(&p.path, p.message))?;
        if spec.mode.is_some() || spec.ds_id != crate::schedule::DsFilter::Any {
            return Err(self.manifest.error_at(
                &spec.path,
                format!(
                    "set `mode` and `ds_id` on the {} around this op, not inside it",
                    parent.name
                ),
            ));
        }
        self.op(&spec, keys)
    }

    /// A meta op over `children`: its keys are their keys (reads of keys a child writes first
    /// excluded); its modes are its own, or else the first child's.
    fn meta(
        &self,
        spec: &ComponentSpec,
        children: Vec<OpNode>,
        keys: &mut Keys,
        make: impl FnOnce(Vec<OpNode>) -> MetaOp,
    ) -> Result<OpNode> {
        if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
            return Err(self.manifest.error_at(
                &spec.path,
                format!("{} takes its keys from the ops it wraps", spec.name),
            ));
        }
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for child in &children {
            for key in &child.inputs {
                if !inputs.contains(key) && !outputs.contains(key) {
                    inputs.push(*key);
                }
            }
            for key in &child.outputs {
                if !outputs.contains(key) {
                    outputs.push(*key);
                }
            }
        }
        // Sometimes may skip its op: keys it would write keep their current values, so they are
        // inputs too (FastEstimator's `extra_inputs`).
        if spec.name == "Sometimes" {
            for key in &outputs {
                if !inputs.contains(key) {
                    inputs.push(*key);
                }
            }
        }
        let modes = match spec.mode {
            Some(modes) => modes,
            None => children.first().map(|c| c.modes).unwrap_or(ModeFilter::ALL),
        };
        let _ = keys;
        Ok(OpNode {
            label: spec.label(),
            name: spec.name.clone(),
            inputs,
            outputs,
            modes,
            ds_ids: spec.ds_id.clone(),
            epochs: InForce::always(),
            kind: OpKind::Meta(make(children)),
        })
    }

    fn slicer(&self, spec: &ComponentSpec, keys: &mut Keys) -> Result<SlicerNode> {
        let manifest = self.manifest;
        // FastEstimator: without `unslice`, a slicer puts back what it cut.
        let unslice = if spec.outputs_given {
            spec.outputs.clone()
        } else {
            spec.inputs.clone()
        };
        if spec.inputs.is_empty() && unslice.is_empty() {
            return Err(manifest.error_at(&spec.path, "a slicer needs `slice` or `unslice` keys"));
        }
        let Some(entry) = self.registry.get(ComponentKind::Slicer, &spec.name) else {
            return Err(unknown_component(
                manifest,
                self.registry,
                &spec.path.key("slicer"),
                ComponentKind::Slicer,
                &spec.name,
            ));
        };
        let default_mode = entry.info.default_mode.to_string();
        let creation = Creation::new(
            &spec.path,
            &spec.inputs,
            &unslice,
            DeviceSpec::CPU,
            manifest.run.seed,
        );
        let handle =
            match self
                .registry
                .create_slicer(&spec.name, &spec.config_text(), &creation.context())
            {
                Some(Ok(object)) => SlicerHandle(object),
                Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
                None => {
                    return Err(manifest.error_at(
                        &spec.path.key("slicer"),
                        format!("`{}` cannot be used as a slicer", spec.name),
                    ))
                }
            };
        Ok(SlicerNode {
            label: spec.label(),
            name: spec.name.clone(),
            slice: keys.intern_all(&spec.inputs),
            unslice: keys.intern_all(&unslice),
            modes: self.modes(spec, &default_mode)?,
            ds_ids: spec.ds_id.clone(),
            epochs: InForce::always(),
            handle,
        })
    }

    fn post(&self, spec: &ComponentSpec, keys: &mut Keys) -> Result<PostOp> {
        let manifest = self.manifest;
        if spec.name == "Batch" {
            return Err(manifest.error_at(
                &spec.path.key("op"),
                "post-processing data is already batched, so a Batch op is not supported here",
            ));
        }
        let Some(entry) = self.registry.get(ComponentKind::NumpyOp, &spec.name) else {
            return Err(unknown_component(
                manifest,
                self.registry,
                &spec.path.key("op"),
                ComponentKind::NumpyOp,
                &spec.name,
            ));
        };
        let default_mode = entry.info.default_mode.to_string();
        let creation = Creation::new(
            &spec.path,
            &spec.inputs,
            &spec.outputs,
            DeviceSpec::CPU,
            manifest.run.seed,
        );
        let handle = match self.registry.create_numpy_op(
            &spec.name,
            &spec.config_text(),
            &creation.context(),
        ) {
            Some(Ok(object)) => NumpyOpHandle(object),
            Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
            None => {
                return Err(manifest.error_at(
                    &spec.path.key("op"),
                    format!("`{}` cannot be used here", spec.name),
                ))
            }
        };
        if handle.is_filter() {
            return Err(manifest.error_at(
                &spec.path.key("op"),
                "filtering is not supported in network post-processing",
            ));
        }
        Ok(PostOp {
            label: spec.label(),
            name: spec.name.clone(),
            inputs: keys.intern_all(&spec.inputs),
            outputs: keys.intern_all(&spec.outputs),
            modes: self.modes(spec, &default_mode)?,
            ds_ids: spec.ds_id.clone(),
            epochs: InForce::always(),
            handle,
        })
    }
}
