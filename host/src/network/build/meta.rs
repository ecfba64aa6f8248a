//! Meta ops in the network: `Sometimes`, `OneOf`, `Repeat` and `Fuse` around other ops.

use serde::Deserialize;

use super::Builder;
use crate::batch::{KeyId, Keys};
use crate::error::Result;
use crate::manifest::{ComponentSpec, KeyPath, Manifest};
use crate::network::meta::{Condition, MetaOp};
use crate::network::node::{OpKind, OpNode};
use crate::schedule::{InForce, ModeFilter};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SometimesConfig {
    /// Probability of running the wrapped op.
    #[serde(default = "half")]
    pub(crate) prob: f64,
    /// The wrapped op's table.
    pub(crate) wrap: toml::Table,
}

fn half() -> f64 {
    0.5
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RepeatConfig {
    /// Fixed number of runs.
    #[serde(default)]
    pub(crate) repeat: Option<u32>,
    /// Or: keep running while this holds (after a first run).
    #[serde(default, rename = "while")]
    pub(crate) while_: Option<Condition>,
    /// Upper bound on runs with `while`.
    #[serde(default)]
    pub(crate) max_iter: Option<u32>,
    /// The wrapped op's table.
    pub(crate) wrap: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListConfig {
    /// The wrapped ops' tables.
    pub(crate) ops: Vec<toml::Table>,
}

impl ListConfig {
    /// The wrapped ops' tables with where each is written (`ops[i]`); an empty list is an error.
    pub(crate) fn tables(
        self,
        manifest: &Manifest,
        spec: &ComponentSpec,
    ) -> Result<Vec<(toml::Table, KeyPath)>> {
        if self.ops.is_empty() {
            return Err(manifest.error_at(
                &spec.path.key("ops"),
                format!("{} needs at least one op", spec.name),
            ));
        }
        Ok(self
            .ops
            .into_iter()
            .enumerate()
            .map(|(i, table)| (table, spec.path.key("ops").index(i)))
            .collect())
    }
}

/// The ops of a `OneOf` must read and write the same keys; `keys` gives (inputs, outputs,
/// label) of an op, in the network or the pipeline.
pub(crate) fn check_one_of<T>(
    manifest: &Manifest,
    spec: &ComponentSpec,
    ops: &[T],
    keys: impl Fn(&T) -> (&[KeyId], &[KeyId], &str),
) -> Result<()> {
    let Some(first) = ops.first().map(&keys) else {
        return Ok(());
    };
    match ops
        .iter()
        .map(keys)
        .find(|k| k.0 != first.0 || k.1 != first.1)
    {
        Some((_, _, odd)) => Err(manifest.error_at(
            &spec.path.key("ops"),
            format!("all ops of a OneOf must share the same inputs and outputs ({odd} differs)"),
        )),
        None => Ok(()),
    }
}

/// `Sometimes` may skip its op: keys it would write keep their current values, so they are
/// inputs too (FastEstimator's `extra_inputs`).
pub(crate) fn add_sometimes_inputs(
    spec: &ComponentSpec,
    inputs: &mut Vec<KeyId>,
    outputs: &[KeyId],
) {
    if spec.name == "Sometimes" {
        for key in outputs {
            if !inputs.contains(key) {
                inputs.push(*key);
            }
        }
    }
}

impl RepeatConfig {
    /// Checks the configuration (the same in the network and the pipeline) and interns the
    /// key a `while` condition reads.
    pub(crate) fn condition(
        &self,
        manifest: &Manifest,
        spec: &ComponentSpec,
        keys: &mut Keys,
    ) -> Result<Option<(KeyId, Condition)>> {
        let condition = match (self.repeat, &self.while_) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(manifest.error_at(
                    &spec.path,
                    "Repeat needs exactly one of `repeat` (a count) and `while` (a condition)",
                ))
            }
            (Some(0), None) => {
                return Err(manifest.error_at(&spec.path.key("repeat"), "must be at least 1"))
            }
            (Some(_), None) => None,
            (None, Some(condition)) => {
                condition
                    .validate()
                    .map_err(|e| manifest.error_at(&spec.path.key("while"), e))?;
                Some((keys.intern(&condition.key), condition.clone()))
            }
        };
        if self.max_iter == Some(0) {
            return Err(manifest.error_at(&spec.path.key("max_iter"), "must be at least 1"));
        }
        Ok(condition)
    }
}

impl Builder<'_> {
    /// An op nested in a meta op. Modes and dataset ids belong to the meta op.
    pub(super) fn child(
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
    pub(super) fn meta(
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
        add_sometimes_inputs(spec, &mut inputs, &outputs);
        let modes = match spec.mode {
            Some(modes) => modes,
            None => children.first().map(|c| c.modes).unwrap_or(ModeFilter::ALL),
        };
        let _ = keys;
        Ok(OpNode {
            label: spec.label(),
            path: spec.path.clone(),
            name: spec.name.clone(),
            provider: "fe-host".to_owned(),
            inputs,
            outputs,
            modes,
            ds_ids: spec.ds_id.clone(),
            epochs: InForce::always(),
            kind: OpKind::Meta(make(children)),
        })
    }
}
