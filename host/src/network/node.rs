//! What an op of the network is: a plugin op, a built-in, or a meta op wrapping others.

use super::builtin::{GradientOp, ModelOp, UpdateOp};
use super::meta::MetaOp;
use super::regularize::L2Op;
use crate::batch::KeyId;
use crate::key_path::KeyPath;
use crate::plugins::handles::TensorOpHandle;
use crate::schedule::{DsFilter, InForce, ModeFilter};

/// What an op is.
pub enum OpKind {
    /// A plugin tensor op.
    Plugin(TensorOpHandle),
    /// The built-in `ModelOp`.
    Model(ModelOp),
    /// The built-in `UpdateOp`.
    Update(UpdateOp),
    /// The built-in `GradientOp`.
    Gradient(GradientOp),
    /// The built-in `L2Regularization` (FastEstimator's `L2Regularizaton`).
    L2(L2Op),
    /// The built-in `Delete`: its inputs stop existing for the rest of the step.
    Delete,
    /// `Sometimes`, `OneOf`, `Repeat` or `Fuse` around other ops.
    Meta(MetaOp),
}

/// One op of the network with its keys and filters.
pub struct OpNode {
    /// `Name (network.ops[i])`, for messages.
    pub label: String,
    /// Where it is declared, e.g. `network.ops[2]`: a check-time error points there.
    pub path: KeyPath,
    /// The component name.
    pub name: String,
    /// The crate providing it (a plugin's, or `fe-host`), named by failures the host detects.
    pub provider: String,
    /// Keys read.
    pub inputs: Vec<KeyId>,
    /// Keys written.
    pub outputs: Vec<KeyId>,
    /// Modes it runs in.
    pub modes: ModeFilter,
    /// Dataset ids it runs for.
    pub ds_ids: DsFilter,
    /// Epochs it is in force (scheduled entries).
    pub epochs: InForce,
    /// The op itself.
    pub kind: OpKind,
}

impl OpNode {
    /// A failure of this op that the host detected (a missing input, a wrong output count),
    /// attributed to the crate that provides it.
    pub fn failure(&self, method: &str, message: impl Into<String>) -> fe_plugin_api::PluginError {
        let mut error = crate::error::Error::builtin(&self.name, method, message);
        error.plugin = self.provider.as_str().into();
        error
    }

    /// `true` for ops that compute gradients (`UpdateOp`, `GradientOp`, or a meta op around one):
    /// they need autograd and share the graph (`retain_graph`) with later gradient ops.
    pub fn computes_gradients(&self) -> bool {
        match &self.kind {
            OpKind::Update(_) | OpKind::Gradient(_) => true,
            OpKind::Meta(meta) => meta.children().iter().any(|c| c.computes_gradients()),
            _ => false,
        }
    }

    /// The first `Repeat` with a `while` condition around an op that computes gradients, in
    /// this op or the ops it wraps: how many updates it runs depends on the batch, so the
    /// ranks of a data-parallel run would issue different numbers of gradient all-reduces.
    pub fn updates_decided_by_data(&self) -> Option<&OpNode> {
        let OpKind::Meta(meta) = &self.kind else {
            return None;
        };
        if let super::meta::MetaOp::Repeat {
            op,
            condition: Some(_),
            ..
        } = meta
        {
            if op.computes_gradients() {
                return Some(self);
            }
        }
        meta.children()
            .into_iter()
            .find_map(|child| child.updates_decided_by_data())
    }

    /// `true` for a plain `UpdateOp` (the ones trailing updates are deferred for).
    pub fn is_update(&self) -> bool {
        matches!(self.kind, OpKind::Update(_))
    }

    /// The loss keys of every `UpdateOp` in this op (meta ops included).
    pub fn loss_keys(&self) -> Vec<KeyId> {
        match &self.kind {
            OpKind::Update(update) => vec![update.loss],
            OpKind::Meta(meta) => meta.children().iter().flat_map(|c| c.loss_keys()).collect(),
            _ => Vec::new(),
        }
    }

    /// `(model, loss key)` of every `UpdateOp` in this op (meta ops included).
    pub fn update_losses(&self) -> Vec<(usize, KeyId)> {
        match &self.kind {
            OpKind::Update(update) => vec![(update.model, update.loss)],
            OpKind::Meta(meta) => meta
                .children()
                .iter()
                .flat_map(|c| c.update_losses())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Indices of the models this op updates (meta ops included).
    pub fn updated_models(&self) -> Vec<usize> {
        match &self.kind {
            OpKind::Update(op) => vec![op.model],
            OpKind::Meta(meta) => meta
                .children()
                .iter()
                .flat_map(|c| c.updated_models())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Indices of the models this op runs or updates.
    pub fn models(&self) -> Vec<usize> {
        match &self.kind {
            OpKind::Model(op) => vec![op.model],
            OpKind::Update(op) => vec![op.model],
            OpKind::Gradient(op) => op.model.into_iter().collect(),
            OpKind::L2(op) => vec![op.model],
            OpKind::Meta(meta) => meta.children().iter().flat_map(|c| c.models()).collect(),
            _ => Vec::new(),
        }
    }
}
