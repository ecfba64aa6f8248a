//! Models and their optimizers, from `[[models]]`.

use fe_plugin_api::{ComponentKind, DeviceSpec};
use tch::Device;

use super::super::model::{ModelParts, ModelSlot, OptimizerSlot, TorchScriptSource};
use super::super::torchscript::{self, LoadError, TorchScriptConfig, TorchScriptModel};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, ModelConfig};
use crate::plugins::create::{creation_error, unknown_component, Creation};
use crate::plugins::handles::ModelHandle;
use crate::plugins::Registry;
use fe_plugin_api::abi_stable::sabi_trait::TD_Opaque;
use fe_plugin_api::ffi::FfiModel_TO;

pub(super) fn build_model(
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
    let (handle, variables, torchscript) = if config.architecture == torchscript::ARCHITECTURE {
        torchscript_model(manifest, config, device)?
    } else {
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
        (handle, variables, None)
    };
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
                path,
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
        torchscript,
    };
    ModelSlot::new(parts, device).map_err(|e| {
        Error::Run(format!(
            "model `{}`: cannot move it to {device:?}: {}",
            config.name,
            crate::tch_message(e)
        ))
    })
}

/// A model object, its variables, and where it came from when it is TorchScript.
type BuiltModel = (
    ModelHandle,
    Vec<(String, tch::Tensor)>,
    Option<TorchScriptSource>,
);

/// Loads `[[models]] architecture = "TorchScript"`: the file named by `file`, relative to the
/// manifest, straight onto `device`. Errors name the file and the manifest key.
fn torchscript_model(
    manifest: &Manifest,
    config: &ModelConfig,
    device: Device,
) -> Result<BuiltModel> {
    let text = toml::to_string(&config.config).unwrap_or_default();
    let settings: TorchScriptConfig = fe_plugin_api::parse_config(&text)
        .map_err(|e| manifest.error_at(&config.path.join_dotted(e.field()), e.message()))?;
    let file = manifest.dir().join(&settings.file);
    let model = TorchScriptModel::load(&file, device, settings.outputs.clone()).map_err(
        |error| match error {
            LoadError::Corrupt(why) => Error::data(&file, why),
            LoadError::Unusable(why) => manifest.error_at(
                &config.path.key("file"),
                format!("{}: {why}", file.display()),
            ),
        },
    )?;
    use crate::network::torchscript::Returns;
    match (&model.signature().returns, &settings.outputs) {
        (Returns::Tensor | Returns::Tuple(_) | Returns::List, Some(_)) => {
            return Err(manifest.error_at(
                &config.path.key("outputs"),
                format!(
                    "names entries of a dict or fields of a NamedTuple, but {}'s forward returns {}: drop `outputs` (the ModelOp's outputs name what forward returns)",
                    file.display(),
                    match model.signature().returns {
                        Returns::Tensor => "a Tensor".to_owned(),
                        Returns::Tuple(n) => format!("a tuple of {n} tensors"),
                        _ => "a list of tensors".to_owned(),
                    }
                ),
            ))
        }
        (Returns::Dict, None) => {
            return Err(manifest.error_at(
                &config.path.key("file"),
                format!(
                    "{}'s forward returns a Dict[str, Tensor]: name the entries to take with `outputs = [...]` in the model's table",
                    file.display()
                ),
            ))
        }
        _ => {}
    }
    let variables = model.named_variables().map_err(|why| {
        manifest.error_at(
            &config.path.key("file"),
            format!("{}: cannot read its parameters: {why}", file.display()),
        )
    })?;
    let sha256 = crate::plugins::sha256_file(&file).map_err(|e| {
        manifest.error_at(&config.path.key("file"), format!("{}: {e}", file.display()))
    })?;
    let source = TorchScriptSource {
        sha256,
        file,
        signature: model.signature().clone(),
        outputs: settings.outputs,
    };
    let handle = ModelHandle(FfiModel_TO::from_value(model, TD_Opaque));
    Ok((handle, variables, Some(source)))
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

/// All models mixed precision, or none (FastEstimator's rule, `fe.network.TorchNetwork`).
pub(super) fn check_precision(manifest: &Manifest, models: &[ModelSlot]) -> Result<()> {
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
