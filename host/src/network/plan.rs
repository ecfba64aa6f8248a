//! Key resolution, computed once per (mode, epoch, ds_id) rather than per step: FastEstimator's
//! `_get_ctx_inputs_and_outputs`. Which ops, slicers and post-processing ops run; which keys the
//! network needs from the batch and which of them go to the device; which results come back;
//! how gradient ops behave; and the error when a wanted key was sliced but not unsliced.

use std::collections::BTreeSet;

use fe_plugin_api::Mode;

use super::node::{OpKind, OpNode};
use super::{slicing, Network};
use crate::batch::{KeyId, Keys};
use crate::key_path::KeyPath;
use crate::schedule::{DsFilter, InForce, ModeFilter};

/// What one step of a given (mode, epoch, ds_id) does.
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// Mode.
    pub mode: Mode,
    /// Epoch.
    pub epoch: u32,
    /// Dataset id.
    pub ds_id: String,
    /// Indices of the ops that run, in order.
    pub ops: Vec<usize>,
    /// For each op in `ops`: keep the autograd graph after its backward pass (every gradient
    /// op but the last).
    pub retain_graph: Vec<bool>,
    /// For each op in `ops`: apply its update at the end of the step (trailing contiguous
    /// `UpdateOp`s are deferred, as FastEstimator's TorchNetwork does).
    pub defer: Vec<bool>,
    /// For each op in `ops`: a plain `UpdateOp` that is the only update of its model in the
    /// step. No other update's gradients join its own, so in a data-parallel run they can be
    /// averaged over the ranks during its backward pass even when the update is deferred.
    pub sole_update: Vec<bool>,
    /// Indices of the active slicers.
    pub slicers: Vec<usize>,
    /// Indices of the active post-processing ops.
    pub post: Vec<usize>,
    /// Keys the network reads from the batch.
    pub inputs: Vec<KeyId>,
    /// Keys the tensor ops read from the batch: the only ones moved to the device.
    pub device_inputs: Vec<KeyId>,
    /// Keys produced by the ops (deleted ones excluded).
    pub produced: Vec<KeyId>,
    /// Keys brought back to the batch after the ops: the desired ones and what
    /// post-processing reads.
    pub outputs: Vec<KeyId>,
    /// Whether any op computes gradients.
    pub requires_grad: bool,
    /// Whether the ops run under autocast (mixed precision).
    pub autocast: bool,
    /// One more than the largest key id the step touches (the size of its scratch).
    pub width: usize,
}

impl Network {
    /// Resolves the step of `mode`/`epoch`/`ds_id`; `desired` are the keys traces will read.
    /// Fails when slicers conflict, or when a desired key was sliced (or produced while
    /// slicing) but no slicer unslices it.
    pub fn plan(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        desired: &BTreeSet<KeyId>,
    ) -> Result<StepPlan, String> {
        let active = |modes: &ModeFilter, ds: &DsFilter, epochs: &InForce| {
            modes.contains(mode) && ds.matches(ds_id) && epochs.at(epoch)
        };
        let ops: Vec<usize> = (0..self.ops.len())
            .filter(|&i| {
                let op = &self.ops[i];
                active(&op.modes, &op.ds_ids, &op.epochs)
            })
            .collect();
        let slicers: Vec<usize> = (0..self.slicers.len())
            .filter(|&i| {
                let slicer = &self.slicers[i];
                active(&slicer.modes, &slicer.ds_ids, &slicer.epochs)
            })
            .collect();
        let post: Vec<usize> = (0..self.post.len())
            .filter(|&i| {
                let op = &self.post[i];
                active(&op.modes, &op.ds_ids, &op.epochs)
            })
            .collect();
        let slicer_refs: Vec<&slicing::SlicerNode> =
            slicers.iter().map(|&i| &self.slicers[i]).collect();
        slicing::check(&slicer_refs, &self.keys)?;

        let mut inputs: BTreeSet<KeyId> = BTreeSet::new();
        let mut device_inputs: BTreeSet<KeyId> = BTreeSet::new();
        let mut produced: BTreeSet<KeyId> = BTreeSet::new();
        let mut unslice: BTreeSet<KeyId> = BTreeSet::new();
        for slicer in &slicer_refs {
            inputs.extend(slicer.slice.iter().copied());
            unslice.extend(slicer.unslice.iter().copied());
        }
        let sliced = inputs.clone();
        for &i in &ops {
            let op = &self.ops[i];
            if let OpKind::Delete = op.kind {
                // A deleted key is gone: nothing to bring back, nothing to unslice.
                for key in &op.inputs {
                    produced.remove(key);
                }
                continue;
            }
            let unmet: Vec<KeyId> = op
                .inputs
                .iter()
                .filter(|k| !produced.contains(*k))
                .copied()
                .collect();
            inputs.extend(&unmet);
            device_inputs.extend(&unmet);
            produced.extend(op.outputs.iter().copied());
        }
        inputs.extend(unslice.difference(&produced).copied());
        let mut post_inputs: BTreeSet<KeyId> = BTreeSet::new();
        let mut post_produced: BTreeSet<KeyId> = BTreeSet::new();
        let mut network_produced = produced.clone();
        for &i in &post {
            let op = &self.post[i];
            inputs.extend(op.inputs.iter().filter(|k| !network_produced.contains(*k)));
            network_produced.extend(op.outputs.iter().copied());
            post_inputs.extend(op.inputs.iter().filter(|k| !post_produced.contains(*k)));
            post_produced.extend(op.outputs.iter().copied());
        }
        // What comes back, as `_get_ctx_inputs_and_outputs` decides it: with no desired keys,
        // everything the ops produce; else the desired ones, plus whatever post-processing
        // reads (it runs on the CPU even when no trace wants the key).
        let mut outputs: BTreeSet<KeyId> = if desired.is_empty() {
            produced.clone()
        } else {
            produced.intersection(desired).copied().collect()
        };
        outputs.extend(post_inputs.intersection(&produced));
        if !sliced.is_empty() {
            let touched: BTreeSet<KeyId> = sliced.union(&produced).copied().collect();
            // Post-processing reads count as wanted, batch keys included: a sliced key it reads
            // must be unsliced (FastEstimator adds every post-processing input to the outputs).
            // Its own outputs are made after unslicing, from whole keys, so they need none.
            let wanted: BTreeSet<KeyId> = outputs.union(&post_inputs).copied().collect();
            let missing: Vec<&str> = wanted
                .intersection(&touched)
                .filter(|k| !unslice.contains(*k))
                .map(|k| self.keys.name(*k))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "since you are using slicers, you must say how to unslice these keys in {mode} (epoch {epoch}{}): {}",
                    if ds_id.is_empty() { String::new() } else { format!(", ds_id {ds_id}") },
                    missing.join(", ")
                ));
            }
        }

        let gradient_ops: Vec<usize> = ops
            .iter()
            .copied()
            .filter(|&i| self.ops[i].computes_gradients())
            .collect();
        let retain_graph = ops
            .iter()
            .map(|i| {
                gradient_ops
                    .last()
                    .is_some_and(|last| gradient_ops.contains(i) && i != last)
            })
            .collect();
        let trailing = ops
            .iter()
            .rev()
            .take_while(|&&i| self.ops[i].is_update())
            .count();
        let defer = (0..ops.len())
            .map(|position| position >= ops.len() - trailing)
            .collect();
        let updates_of = |model: usize| {
            ops.iter()
                .flat_map(|&i| self.ops[i].updated_models())
                .filter(|&m| m == model)
                .count()
        };
        let sole_update = ops
            .iter()
            .map(|&i| {
                let op = &self.ops[i];
                op.is_update() && op.updated_models().iter().all(|&m| updates_of(m) == 1)
            })
            .collect();
        let autocast = ops
            .iter()
            .flat_map(|&i| self.ops[i].models())
            .any(|m| self.models[m].mixed_precision);
        // Every key an active op reads or writes gets a slot, deleted ones included.
        let width = ops
            .iter()
            .flat_map(|&i| self.ops[i].inputs.iter().chain(&self.ops[i].outputs))
            .chain(&inputs)
            .chain(&outputs)
            .map(|k| k.0 as usize + 1)
            .max()
            .unwrap_or(0);
        Ok(StepPlan {
            mode,
            epoch,
            ds_id: ds_id.to_owned(),
            requires_grad: !gradient_ops.is_empty(),
            ops,
            retain_graph,
            defer,
            sole_update,
            slicers,
            post,
            inputs: inputs.into_iter().collect(),
            device_inputs: device_inputs.into_iter().collect(),
            produced: network_produced.into_iter().collect(),
            outputs: outputs.into_iter().collect(),
            autocast,
            width,
        })
    }

    /// The first slicer of `plan` that slices a key `available` lacks, else the first op
    /// whose input neither `available` nor an earlier op provides.
    pub fn first_missing_input(
        &self,
        plan: &StepPlan,
        available: &BTreeSet<KeyId>,
        keys: &Keys,
    ) -> Option<MissingInput> {
        let missing = |label: &str, at: KeyPath, key: &KeyId, have: &BTreeSet<KeyId>| {
            let mut available: Vec<String> =
                have.iter().map(|k| keys.name(*k).to_owned()).collect();
            available.sort();
            MissingInput {
                label: label.to_owned(),
                key: keys.name(*key).to_owned(),
                at,
                available,
            }
        };
        // Slicers cut the batch before any op runs: what they slice must be in it. A slicer
        // whose keys are missing cuts nothing, and then no op runs at all.
        for &i in &plan.slicers {
            let slicer = &self.slicers[i];
            if let Some(key) = slicer.slice.iter().find(|k| !available.contains(k)) {
                return Some(missing(
                    &slicer.label,
                    slicer.path.key("slice"),
                    key,
                    available,
                ));
            }
        }
        let mut have = available.clone();
        for &i in &plan.ops {
            let op: &OpNode = &self.ops[i];
            if let OpKind::Delete = op.kind {
                continue;
            }
            if let Some(key) = op.inputs.iter().find(|k| !have.contains(k)) {
                return Some(missing(&op.label, op.path.key("inputs"), key, &have));
            }
            have.extend(op.outputs.iter().copied());
        }
        for &i in &plan.post {
            let op = &self.post[i];
            if let Some(key) = op.inputs.iter().find(|k| !have.contains(k)) {
                return Some(missing(&op.label, op.path.key("inputs"), key, &have));
            }
            have.extend(op.outputs.iter().copied());
        }
        None
    }
}

/// An input of a network component that nothing provides: its label, the key, and the manifest
/// field that names the key.
pub struct MissingInput {
    /// The component, `Name (network.ops[i])`.
    pub label: String,
    /// The key's name.
    pub key: String,
    /// The field naming it, e.g. `network.ops[2].inputs`.
    pub at: KeyPath,
    /// The keys there are at that point (the batch's and earlier ops' outputs), sorted.
    pub available: Vec<String>,
}
