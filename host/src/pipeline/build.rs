//! Building the pipeline's ops from the manifest: plugin NumpyOps (with the host-owned
//! `replacement` of filters) and the built-ins `Delete`, `Batch`, `Sometimes`, `OneOf`,
//! `Repeat` and `Fuse`, which take the same configuration as in the network.

use fe_plugin_api::{ComponentKind, DeviceSpec};
use serde::Deserialize;

use super::ops::{BatchSpec, OpKind, PipelineOp};
use crate::batch::Keys;
use crate::error::Result;
use crate::manifest::{ComponentSpec, KeyPath, Manifest};
use crate::network::build::meta::{self, ListConfig, RepeatConfig, SometimesConfig};
use crate::plugins::create::{creation_error, registered, Creation};
use crate::plugins::handles::NumpyOpHandle;
use crate::plugins::Registry;
use crate::schedule::{DsFilter, InForce, ModeFilter};

/// The ops the host provides in the pipeline, with what they do (a plugin op of the same
/// name is shadowed); `fe-host plugins list` shows them.
pub const BUILTINS: [(&str, &str); 6] = [
    ("Delete", "Removes keys from every sample"),
    ("Batch", "Groups samples into batches: `batch_size`, `drop_last`, `pad_value`; ops after it run on whole batches"),
    ("Sometimes", "Runs the wrapped op with probability `prob`"),
    ("OneOf", "Runs one of the wrapped ops, chosen uniformly"),
    ("Repeat", "Runs the wrapped op N times or while a condition holds"),
    ("Fuse", "Runs the wrapped ops in order as one op"),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchConfig {
    #[serde(default)]
    batch_size: Option<u32>,
    #[serde(default)]
    drop_last: Option<bool>,
    #[serde(default)]
    pad_value: Option<f64>,
}

/// Builds pipeline ops.
pub struct OpBuilder<'a> {
    /// The manifest, for errors.
    pub manifest: &'a Manifest,
    /// Where plugin ops come from.
    pub registry: &'a Registry,
}

impl OpBuilder<'_> {
    /// The op declared by `spec`, in force in `epochs`.
    pub fn op(&self, spec: &ComponentSpec, epochs: InForce, keys: &mut Keys) -> Result<PipelineOp> {
        let manifest = self.manifest;
        let mut node =
            |handle: OpKind, modes: ModeFilter, inputs: &[String], outputs: &[String]| PipelineOp {
                label: spec.label(),
                provider: "fe-host".to_owned(),
                path: spec.path.clone(),
                inputs: keys.intern_all(inputs),
                outputs: keys.intern_all(outputs),
                modes,
                ds_ids: spec.ds_id.clone(),
                epochs: epochs.clone(),
                cache: matches!(handle, OpKind::Delete).then(|| format!("Delete {inputs:?}")),
                handle,
            };
        let own_modes = || spec.mode.unwrap_or(ModeFilter::ALL);
        match spec.name.as_str() {
            "Delete" => {
                if spec.inputs.is_empty() || !spec.outputs.is_empty() || !spec.config.is_empty() {
                    return Err(manifest
                        .error_at(&spec.path, "Delete takes only `inputs`: the keys to delete"));
                }
                Ok(node(OpKind::Delete, own_modes(), &spec.inputs, &[]))
            }
            "Batch" => {
                if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
                    return Err(
                        manifest.error_at(&spec.path, "Batch takes no `inputs` or `outputs`")
                    );
                }
                let config: BatchConfig = self.config(spec)?;
                if config.batch_size == Some(0) {
                    return Err(
                        manifest.error_at(&spec.path.key("batch_size"), "must be at least 1")
                    );
                }
                let batch = BatchSpec {
                    batch_size: config.batch_size.map(|n| n as usize),
                    drop_last: config.drop_last,
                    pad_value: config.pad_value,
                };
                Ok(node(OpKind::Batch(batch), own_modes(), &[], &[]))
            }
            "Sometimes" | "OneOf" | "Repeat" | "Fuse" => self.meta(spec, epochs, keys),
            name => self.plugin(spec, name, epochs, keys),
        }
    }

    fn config<T: serde::de::DeserializeOwned>(&self, spec: &ComponentSpec) -> Result<T> {
        fe_plugin_api::parse_config(&spec.config_text()).map_err(|e| {
            self.manifest.error_at(
                &spec.path.join_dotted(e.field()),
                format!("{} ({})", e.message(), spec.name),
            )
        })
    }

    fn plugin(
        &self,
        spec: &ComponentSpec,
        name: &str,
        epochs: InForce,
        keys: &mut Keys,
    ) -> Result<PipelineOp> {
        let manifest = self.manifest;
        let entry = registered(
            manifest,
            self.registry,
            &spec.path.key("op"),
            ComponentKind::NumpyOp,
            name,
        )?;
        let default_mode = entry.info.default_mode.to_string();
        // `replacement` belongs to the host, which does the replacing: the plugin never sees it.
        let mut spec = spec.clone();
        let replacement = match spec.config.remove("replacement") {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(b),
            Some(_) => {
                return Err(
                    manifest.error_at(&spec.path.key("replacement"), "must be true or false")
                )
            }
        };
        // `cache` too: whether the pipeline cache may keep this op's outputs.
        let cache = match spec.config.remove("cache") {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(b),
            Some(_) => {
                return Err(manifest.error_at(&spec.path.key("cache"), "must be true or false"))
            }
        };
        let creation = Creation::new(
            &spec.path,
            &spec.inputs,
            &spec.outputs,
            DeviceSpec::CPU,
            manifest.run.seed,
        );
        let op = match self
            .registry
            .create_numpy_op(name, &spec.config_text(), &creation.context())
        {
            Some(Ok(object)) => NumpyOpHandle(object),
            Some(Err(error)) => return Err(creation_error(manifest, &spec.path, error)),
            None => {
                return Err(manifest.error_at(
                    &spec.path.key("op"),
                    format!("`{name}` cannot be used in the pipeline"),
                ))
            }
        };
        let filter = op.is_filter();
        if replacement.is_some() && !filter {
            return Err(manifest.error_at(
                &spec.path.key("replacement"),
                format!(
                    "only filtering ops (like RemoveIf) take `replacement`; `{name}` is not one"
                ),
            ));
        }
        let modes = match spec.mode {
            Some(modes) => modes,
            None => ModeFilter::parse_default(&default_mode)
                .map_err(|e| manifest.error_at(&spec.path, e))?,
        };
        if filter && cache == Some(true) {
            return Err(manifest.error_at(
                &spec.path.key("cache"),
                format!("`{name}` filters samples, and the pipeline cache keeps every sample; only ops that transform samples can be cached"),
            ));
        }
        // A batchable op promises no randomness (`NumpyOp::batchable`); any other op is
        // cached only when the manifest vouches for it (`cache = true`: decoding, tokenizing).
        let identity = cache.unwrap_or(op.batchable() && !filter).then(|| {
            format!(
                "{name} {} {} {:?} {:?} {}",
                self.registry.provider_crate(ComponentKind::NumpyOp, name),
                self.registry.provider_version(ComponentKind::NumpyOp, name),
                spec.inputs,
                spec.outputs,
                spec.config_text()
            )
        });
        let handle = OpKind::Plugin {
            batchable: op.batchable(),
            op,
            filter,
            replacement: replacement.unwrap_or(true),
        };
        Ok(PipelineOp {
            label: spec.label(),
            provider: self
                .registry
                .provider_crate(ComponentKind::NumpyOp, &spec.name)
                .to_owned(),
            path: spec.path.clone(),
            inputs: keys.intern_all(&spec.inputs),
            outputs: keys.intern_all(&spec.outputs),
            modes,
            ds_ids: spec.ds_id.clone(),
            epochs,
            handle,
            cache: identity,
        })
    }

    /// An op inside a meta op; modes and dataset ids belong to the meta op.
    fn child(
        &self,
        parent: &ComponentSpec,
        table: toml::Table,
        path: KeyPath,
        keys: &mut Keys,
    ) -> Result<PipelineOp> {
        let spec = ComponentSpec::parse(path, table, "op", ["inputs", "outputs"])
            .map_err(|p| self.manifest.error_at(&p.path, p.message))?;
        if spec.mode.is_some() || spec.ds_id != DsFilter::Any {
            return Err(self.manifest.error_at(
                &spec.path,
                format!(
                    "set `mode` and `ds_id` on the {} around this op, not inside it",
                    parent.name
                ),
            ));
        }
        if spec.name == "Batch" {
            return Err(self.manifest.error_at(
                &spec.path,
                format!("a Batch op cannot go inside {}", parent.name),
            ));
        }
        self.op(&spec, InForce::always(), keys)
    }

    fn meta(&self, spec: &ComponentSpec, epochs: InForce, keys: &mut Keys) -> Result<PipelineOp> {
        let manifest = self.manifest;
        if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
            return Err(manifest.error_at(
                &spec.path,
                format!("{} takes its keys from the ops it wraps", spec.name),
            ));
        }
        let (handle, children_keys) = match spec.name.as_str() {
            "Sometimes" => {
                let config: SometimesConfig = self.config(spec)?;
                if !(0.0..=1.0).contains(&config.prob) {
                    return Err(manifest.error_at(&spec.path.key("prob"), "must be in [0, 1]"));
                }
                let child = self.child(spec, config.wrap, spec.path.key("wrap"), keys)?;
                let io = io_of(&[&child]);
                (
                    OpKind::Sometimes {
                        prob: config.prob,
                        op: Box::new(child),
                    },
                    io,
                )
            }
            "Repeat" => {
                let config: RepeatConfig = self.config(spec)?;
                let condition = config.condition(manifest, spec, keys)?;
                let child = self.child(spec, config.wrap, spec.path.key("wrap"), keys)?;
                let mut io = io_of(&[&child]);
                if let Some((key, _)) = &condition {
                    if !io.0.contains(key) && !io.1.contains(key) {
                        io.0.push(*key);
                    }
                }
                let handle = OpKind::Repeat {
                    op: Box::new(child),
                    times: config.repeat.unwrap_or(1),
                    condition,
                    max_iter: config.max_iter,
                };
                (handle, io)
            }
            _ => {
                let config: ListConfig = self.config(spec)?;
                let children = config
                    .tables(manifest, spec)?
                    .into_iter()
                    .map(|(table, path)| self.child(spec, table, path, keys))
                    .collect::<Result<Vec<_>>>()?;
                let io = io_of(&children.iter().collect::<Vec<_>>());
                if spec.name == "OneOf" {
                    meta::check_one_of(manifest, spec, &children, |c| {
                        (&c.inputs, &c.outputs, &c.label)
                    })?;
                    (OpKind::OneOf(children), io)
                } else {
                    (OpKind::Fuse(children), io)
                }
            }
        };
        let (mut inputs, outputs) = children_keys;
        meta::add_sometimes_inputs(spec, &mut inputs, &outputs);
        let modes = match spec.mode {
            Some(modes) => modes,
            None => {
                let first = match &handle {
                    OpKind::Sometimes { op, .. } | OpKind::Repeat { op, .. } => Some(op.modes),
                    OpKind::OneOf(ops) | OpKind::Fuse(ops) => ops.first().map(|c| c.modes),
                    _ => None,
                };
                first.unwrap_or(ModeFilter::ALL)
            }
        };
        Ok(PipelineOp {
            label: spec.label(),
            provider: "fe-host".to_owned(),
            path: spec.path.clone(),
            inputs,
            outputs,
            modes,
            ds_ids: spec.ds_id.clone(),
            epochs,
            handle,
            cache: None,
        })
    }
}

type KeyLists = (Vec<crate::batch::KeyId>, Vec<crate::batch::KeyId>);

/// A meta op's keys: what its ops read (but an earlier one of them did not write) and write.
fn io_of(children: &[&PipelineOp]) -> KeyLists {
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    for child in children {
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
    (inputs, outputs)
}
