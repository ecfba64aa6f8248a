//! Builds the network from the manifest: models (with their optimizers), ops (plugin ops,
//! built-ins and meta ops around them), slicers and post-processing, each created from the
//! registry, every error pointing at the manifest. Models are built in `models`, meta ops
//! (`Sometimes`, `OneOf`, `Repeat`, `Fuse`) in `meta`.

pub(crate) mod meta;
mod models;
mod regularize;
mod update;

use meta::{ListConfig, RepeatConfig, SometimesConfig};
pub use models::describe_table;
use models::{build_model, check_precision};

use fe_plugin_api::{ComponentKind, DeviceSpec};
use tch::Device;

use super::builtin::{GradientOp, GradientOpConfig, ModelOp, ModelOpConfig};
use super::meta::MetaOp;
use super::model::ModelSlot;
use super::node::{OpKind, OpNode};
use super::post::PostOp;
use super::slicing::SlicerNode;
use super::Network;
use crate::batch::Keys;
use crate::error::Result;
use crate::manifest::{ComponentSpec, Manifest};
use crate::plugins::create::{creation_error, registered, Creation};
use crate::plugins::handles::{NumpyOpHandle, SlicerHandle, TensorOpHandle};
use crate::plugins::Registry;
use crate::schedule::{InForce, ModeFilter, Scheduled};

/// The ops fe-host provides itself: they use the host's models, or other ops.
pub const BUILTIN_OPS: [&str; 10] = [
    "ModelOp",
    "UpdateOp",
    "GradientOp",
    "L2Regularization",
    "L2Regularizaton",
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
        clips: Default::default(),
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

struct Builder<'a> {
    manifest: &'a Manifest,
    registry: &'a Registry,
    models: &'a [ModelSlot],
    device: Device,
    /// The clipping of each model's first UpdateOp, which every other update of it must share.
    clips: std::cell::RefCell<Vec<(usize, Option<crate::optim::Clip>)>>,
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
            path: spec.path.clone(),
            name: spec.name.clone(),
            provider: match kind {
                OpKind::Plugin(_) => self
                    .registry
                    .provider_crate(ComponentKind::TensorOp, &spec.name)
                    .to_owned(),
                _ => "fe-host".to_owned(),
            },
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
                if let Some(source) = &self.models[model].torchscript {
                    let refuse = |key: &str, why: String| {
                        manifest.error_at(
                            &spec.path.key(key),
                            format!("{}: {why}", source.file.display()),
                        )
                    };
                    let signature = &source.signature;
                    signature
                        .check_inputs(spec.inputs.len())
                        .map_err(|why| refuse("inputs", why))?;
                    signature
                        .check_outputs(spec.outputs.len(), source.outputs.as_deref())
                        .map_err(|why| refuse("outputs", why))?;
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
            name if crate::network::regularize::NAMES.contains(&name) => self.l2_op(spec, keys),
            "GradientOp" => {
                let config: GradientOpConfig = host_config(manifest, spec)?;
                crate::schedule::validate_key(&config.finals)
                    .map_err(|e| manifest.error_at(&spec.path.key("finals"), e))?;
                let model = match &config.model {
                    Some(name) => Some(self.model_index(spec, name)?),
                    None => None,
                };
                // With a model: one output per trainable parameter, or one flattened.
                let parameters = model.map(|m| self.models[m].params.len());
                let per_parameter = parameters.is_some_and(|n| n > 1 && spec.outputs.len() == n);
                let expected = match parameters {
                    Some(n) if per_parameter => n,
                    Some(_) => 1,
                    None => spec.inputs.len(),
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
                    let what = match parameters {
                        Some(n) => {
                            format!("1 key (flattened) or {n} (one per trainable parameter)")
                        }
                        None => format!("{expected} key(s)"),
                    };
                    return Err(manifest.error_at(
                        &spec.path.key("outputs"),
                        format!("GradientOp writes {what} here, got {}", spec.outputs.len()),
                    ));
                }
                let mut inputs = vec![config.finals.clone()];
                inputs.extend(spec.inputs.iter().cloned());
                let modes = self.modes(spec, "")?;
                Ok(self.node(
                    spec,
                    OpKind::Gradient(GradientOp {
                        model,
                        per_parameter,
                        finals: keys.intern(&config.finals),
                    }),
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
                let condition = config.condition(manifest, spec, keys)?;
                let child = self.child(spec, config.wrap, spec.path.key("wrap"), keys)?;
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
                let children = config
                    .tables(manifest, spec)?
                    .into_iter()
                    .map(|(table, path)| self.child(spec, table, path, keys))
                    .collect::<Result<Vec<_>>>()?;
                if spec.name == "OneOf" {
                    meta::check_one_of(manifest, spec, &children, |c| {
                        (&c.inputs, &c.outputs, &c.label)
                    })?;
                    self.meta(spec, children, keys, |ops| MetaOp::OneOf { ops })
                } else {
                    self.meta(spec, children, keys, |ops| MetaOp::Fuse { ops })
                }
            }
            name => {
                let entry = registered(
                    manifest,
                    self.registry,
                    &spec.path.key("op"),
                    ComponentKind::TensorOp,
                    name,
                )?;
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
        let entry = registered(
            manifest,
            self.registry,
            &spec.path.key("slicer"),
            ComponentKind::Slicer,
            &spec.name,
        )?;
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
            path: spec.path.clone(),
            name: spec.name.clone(),
            provider: self
                .registry
                .provider_crate(ComponentKind::Slicer, &spec.name)
                .to_owned(),
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
        let entry = registered(
            manifest,
            self.registry,
            &spec.path.key("op"),
            ComponentKind::NumpyOp,
            &spec.name,
        )?;
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
            path: spec.path.clone(),
            name: spec.name.clone(),
            provider: self
                .registry
                .provider_crate(ComponentKind::NumpyOp, &spec.name)
                .to_owned(),
            inputs: keys.intern_all(&spec.inputs),
            outputs: keys.intern_all(&spec.outputs),
            modes: self.modes(spec, &default_mode)?,
            ds_ids: spec.ds_id.clone(),
            epochs: InForce::always(),
            handle,
        })
    }
}
