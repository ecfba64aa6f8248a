//! Builds the network from the manifest: models (with their optimizers) and ops, each created
//! from the registry, every error pointing at the manifest.

use fe_plugin_api::{ComponentKind, DeviceSpec};
use tch::Device;

use super::builtin::{ModelOp, ModelOpConfig, UpdateOp, UpdateOpConfig};
use super::keys::Keys;
use super::model::ModelSlot;
use super::{Network, OpKind, OpNode};
use crate::error::{Error, Result};
use crate::manifest::{ComponentSpec, Manifest, ModelConfig};
use crate::plugins::create::{creation_error, unknown_component, Creation};
use crate::plugins::handles::{ModelHandle, TensorOpHandle};
use crate::plugins::Registry;
use crate::schedule::ModeFilter;

/// Creates every model and op of `manifest` on `device`, interning their keys into `keys`.
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
    let ops = manifest
        .ops
        .iter()
        .map(|spec| build_op(manifest, registry, spec, &models, keys, device))
        .collect::<Result<Vec<_>>>()?;
    Ok(Network::new(ops, models, device, keys.clone()))
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
    let optimizer = match &config.optimizer {
        None => None,
        Some(table) => Some(crate::optim::build(table).map_err(|e| {
            manifest.error_at(
                &config.path.key("optimizer").join_dotted(e.field()),
                e.message(),
            )
        })?),
    };
    ModelSlot::new(
        config.name.clone(),
        config.architecture.clone(),
        handle,
        variables,
        optimizer,
        config.trainable,
        device,
    )
    .map_err(|e| {
        Error::Run(format!(
            "model `{}`: cannot move it to {device:?}: {}",
            config.name,
            crate::tch_message(e)
        ))
    })
}

fn modes(manifest: &Manifest, spec: &ComponentSpec, default: &str) -> Result<ModeFilter> {
    match spec.mode {
        Some(modes) => Ok(modes),
        None => ModeFilter::parse_default(default).map_err(|e| {
            manifest.error_at(
                &spec.path,
                format!("the component's default mode is invalid: {e}"),
            )
        }),
    }
}

fn model_index(
    manifest: &Manifest,
    spec: &ComponentSpec,
    models: &[ModelSlot],
    name: &str,
) -> Result<usize> {
    models.iter().position(|m| m.name == name).ok_or_else(|| {
        let known: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        manifest.error_at(
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

fn build_op(
    manifest: &Manifest,
    registry: &Registry,
    spec: &ComponentSpec,
    models: &[ModelSlot],
    keys: &mut Keys,
    device: Device,
) -> Result<OpNode> {
    let node = |kind, inputs: &[String], outputs: &[String], modes, keys: &mut Keys| OpNode {
        label: spec.label(),
        name: spec.name.clone(),
        inputs: keys.intern_all(inputs),
        outputs: keys.intern_all(outputs),
        modes,
        ds_ids: spec.ds_id.clone(),
        kind,
    };
    match spec.name.as_str() {
        "ModelOp" => {
            let config: ModelOpConfig = host_config(manifest, spec)?;
            let model = model_index(manifest, spec, models, &config.model)?;
            if spec.inputs.is_empty() {
                return Err(manifest.error_at(
                    &spec.path,
                    "ModelOp needs `inputs`: the keys fed to the model",
                ));
            }
            let known = models[model].handle.layers().unwrap_or_default();
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
            let modes = modes(manifest, spec, "")?;
            Ok(node(
                OpKind::Model(op),
                &spec.inputs,
                &spec.outputs,
                modes,
                keys,
            ))
        }
        "UpdateOp" => {
            let config: UpdateOpConfig = host_config(manifest, spec)?;
            let model = model_index(manifest, spec, models, &config.model)?;
            if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
                return Err(manifest.error_at(
                    &spec.path,
                    "UpdateOp takes its input as `loss = \"<key>\"` and has no outputs",
                ));
            }
            let Some(loss) = config.loss else {
                return Err(manifest.error_at(
                    &spec.path,
                    "UpdateOp needs `loss`: the key holding the loss",
                ));
            };
            crate::schedule::validate_key(&loss)
                .map_err(|e| manifest.error_at(&spec.path.key("loss"), e))?;
            if config.merge_grad == 0 {
                return Err(manifest.error_at(&spec.path.key("merge_grad"), "must be at least 1"));
            }
            let slot = &models[model];
            if !slot.trainable || slot.optimizer.is_none() {
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
            let op = UpdateOp {
                model,
                merge_grad: config.merge_grad,
                defer: config.defer,
                calls: 0,
                grad_sum: Vec::new(),
            };
            let modes = modes(manifest, spec, "train")?;
            Ok(node(OpKind::Update(op), &[loss], &[], modes, keys))
        }
        name => {
            let Some(entry) = registry.get(ComponentKind::TensorOp, name) else {
                return Err(unknown_component(
                    manifest,
                    registry,
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
                DeviceSpec::from(device),
                manifest.run.seed,
            );
            let handle =
                match registry.create_tensor_op(name, &spec.config_text(), &creation.context()) {
                    Some(Ok(object)) => TensorOpHandle(object),
                    Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
                    None => {
                        return Err(manifest.error_at(
                            &spec.path.key("op"),
                            format!("`{name}` is built in but cannot be used here"),
                        ))
                    }
                };
            let modes = modes(manifest, spec, &default_mode)?;
            Ok(node(
                OpKind::Plugin(handle),
                &spec.inputs,
                &spec.outputs,
                modes,
                keys,
            ))
        }
    }
}
