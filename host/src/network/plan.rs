//! Key resolution, computed once per (mode, epoch, ds_id) rather than per step (seed 000's
//! `_get_ctx_inputs_and_outputs`): which ops run, which keys the network needs from the batch,
//! which of them go to the device, which results come back, and how gradient ops behave.

use std::collections::BTreeSet;

use fe_plugin_api::Mode;

use super::keys::{KeyId, Keys};
use super::{Network, OpKind};

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
    /// For each op in `ops`: apply its update at the end of the step.
    pub defer: Vec<bool>,
    /// Keys the network reads from the batch (tensor ops' unmet inputs).
    pub inputs: Vec<KeyId>,
    /// Keys produced by the ops.
    pub produced: Vec<KeyId>,
    /// Keys brought back to the batch after the ops (those desired by traces).
    pub outputs: Vec<KeyId>,
    /// Whether any op needs gradients.
    pub requires_grad: bool,
    /// One more than the largest key id the step touches (the size of its scratch).
    pub width: usize,
}

impl Network {
    /// Resolves the step of `mode`/`epoch`/`ds_id`; `desired` are the keys traces will read.
    pub fn plan(&self, mode: Mode, epoch: u32, ds_id: &str, desired: &BTreeSet<KeyId>) -> StepPlan {
        let ops: Vec<usize> = (0..self.ops.len())
            .filter(|&i| {
                let op = &self.ops[i];
                op.modes.contains(mode) && op.ds_ids.matches(ds_id)
            })
            .collect();
        let mut inputs = BTreeSet::new();
        let mut produced = BTreeSet::new();
        for &i in &ops {
            let op = &self.ops[i];
            inputs.extend(op.inputs.iter().filter(|k| !produced.contains(*k)).copied());
            produced.extend(op.outputs.iter().copied());
        }
        let outputs: Vec<KeyId> = produced.intersection(desired).copied().collect();

        let is_update = |i: usize| matches!(self.ops[i].kind, OpKind::Update(_));
        let gradient_ops: Vec<usize> = ops.iter().copied().filter(|&i| is_update(i)).collect();
        let retain_graph = ops
            .iter()
            .map(|i| {
                gradient_ops
                    .last()
                    .is_some_and(|last| gradient_ops.contains(i) && i != last)
            })
            .collect();
        // Trailing contiguous updates are deferred so that models which depend on one another
        // (GANs) all differentiate against the weights the forward pass used.
        let trailing = ops.iter().rev().take_while(|&&i| is_update(i)).count();
        let defer = ops
            .iter()
            .enumerate()
            .map(|(position, &i)| match &self.ops[i].kind {
                OpKind::Update(update) => update.defer || position >= ops.len() - trailing,
                _ => false,
            })
            .collect();
        let width = inputs
            .iter()
            .chain(&produced)
            .map(|k| k.0 as usize + 1)
            .max()
            .unwrap_or(0);
        StepPlan {
            width,
            mode,
            epoch,
            ds_id: ds_id.to_owned(),
            requires_grad: !gradient_ops.is_empty(),
            ops,
            retain_graph,
            defer,
            inputs: inputs.into_iter().collect(),
            produced: produced.into_iter().collect(),
            outputs,
        }
    }

    /// The first op of `plan` whose input neither `available` nor an earlier op provides, as
    /// `(op label, key)`.
    pub fn first_missing_input(
        &self,
        plan: &StepPlan,
        available: &BTreeSet<KeyId>,
        keys: &Keys,
    ) -> Option<(String, String)> {
        let mut have = available.clone();
        for &i in &plan.ops {
            let op = &self.ops[i];
            if let Some(missing) = op.inputs.iter().find(|k| !have.contains(k)) {
                return Some((op.label.clone(), keys.name(*missing).to_owned()));
            }
            have.extend(op.outputs.iter().copied());
        }
        None
    }
}
