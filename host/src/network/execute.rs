//! Running the ops of one (mini)batch over the device-side values of its keys.

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::std_types::RStr;
use fe_plugin_api::{Mode, PluginError, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use smallvec::SmallVec;
use tch::Tensor;

use super::builtin::Deferred;
use super::meta::MetaOp;
use super::model::ModelSlot;
use super::node::{OpKind, OpNode};
use crate::batch::Keys;
use crate::error::Error;

/// Everything ops of one step share besides the key values.
pub struct StepEnv<'a, 'c> {
    /// The network's models.
    pub models: &'a mut [ModelSlot],
    /// Key names, for messages.
    pub keys: &'a Keys,
    /// How the ranks average gradients.
    pub strategy: &'a crate::dist::Strategy,
    /// The step.
    pub step: &'a StepContext<'c>,
    /// Updates waiting for the end of the step.
    pub deferred: &'a mut Vec<Deferred>,
    /// Randomness of meta ops, seeded by the step.
    pub rng: &'a mut ChaCha8Rng,
}

/// How a gradient op behaves in this position of the step.
#[derive(Debug, Clone, Copy)]
pub struct Flags {
    /// Keep the autograd graph after differentiating.
    pub retain_graph: bool,
    /// Apply updates at the end of the step.
    pub defer: bool,
    /// The op is its model's only update in the step ([`StepPlan::sole_update`]).
    ///
    /// [`StepPlan::sole_update`]: super::plan::StepPlan::sole_update
    pub sole_update: bool,
}

/// Runs one op (recursively for meta ops) on `work`, the values of every key by id.
pub fn run_node(
    node: &mut OpNode,
    work: &mut [Option<Tensor>],
    env: &mut StepEnv<'_, '_>,
    flags: Flags,
) -> Result<(), PluginError> {
    if let OpKind::Meta(meta) = &mut node.kind {
        return run_meta(meta, work, env, flags);
    }
    if let OpKind::Delete = node.kind {
        for key in &node.inputs {
            if let Some(slot) = work.get_mut(key.0 as usize) {
                *slot = None;
            }
        }
        return Ok(());
    }
    let outputs = {
        let mut inputs: SmallVec<[&Tensor; 4]> = SmallVec::new();
        for key in &node.inputs {
            match work.get(key.0 as usize).and_then(Option::as_ref) {
                Some(tensor) => inputs.push(tensor),
                None => {
                    return Err(node.failure(
                        "forward",
                        format!(
                            "input key `{}` has no value ({})",
                            env.keys.name(*key),
                            node.label
                        ),
                    ))
                }
            }
        }
        call(&mut node.kind, &inputs, env, flags).map_err(|error| at_node(error, node, env))?
    };
    let outputs = torchscript_outputs(node, env, outputs)?;
    if outputs.len() != node.outputs.len() {
        return Err(node.failure(
            "forward",
            format!(
                "returned {} tensor(s) for {} output key(s) ({})",
                outputs.len(),
                node.outputs.len(),
                node.label
            ),
        ));
    }
    for (key, tensor) in node.outputs.iter().zip(outputs) {
        work[key.0 as usize] = Some(tensor);
    }
    Ok(())
}

/// Names the manifest entry a failure came from: the op's key, and for `ModelOp` the model
/// it ran (the failing component is then the architecture, which alone says neither).
fn at_node(mut error: PluginError, node: &OpNode, env: &StepEnv<'_, '_>) -> PluginError {
    let place = match &node.kind {
        OpKind::Model(op) => match env.models.get(op.model) {
            Some(model) => format!(
                "model `{}` (models[{}]) run by {}",
                model.name, op.model, node.label
            ),
            None => node.label.clone(),
        },
        _ => node.label.clone(),
    };
    error.message = format!("{} [{place}]", error.message).into();
    error
}

fn run_meta(
    meta: &mut MetaOp,
    work: &mut [Option<Tensor>],
    env: &mut StepEnv<'_, '_>,
    flags: Flags,
) -> Result<(), PluginError> {
    // An update inside a meta op may run several times a step, or on a random draw.
    let flags = Flags {
        sole_update: false,
        ..flags
    };
    match meta {
        MetaOp::Sometimes { prob, op } => {
            if env.rng.random::<f64>() < *prob {
                run_node(op, work, env, flags)?;
            }
        }
        MetaOp::OneOf { ops } => {
            let choice = env.rng.random_range(0..ops.len());
            run_node(&mut ops[choice], work, env, flags)?;
        }
        MetaOp::Repeat {
            op,
            times,
            condition,
            max_iter,
        } => {
            // Every pass but the last keeps the graph: later passes may differentiate again.
            let keep = Flags {
                retain_graph: true,
                ..flags
            };
            match condition {
                None => {
                    for pass in 0..*times {
                        run_node(op, work, env, if pass + 1 == *times { flags } else { keep })?;
                    }
                }
                Some((key, condition)) => {
                    run_node(op, work, env, keep)?;
                    let mut passes = 1;
                    loop {
                        if max_iter.is_some_and(|limit| passes >= limit) {
                            break;
                        }
                        let value = work
                            .get(key.0 as usize)
                            .and_then(Option::as_ref)
                            .ok_or_else(|| {
                                Error::builtin(
                                    "Repeat",
                                    "forward",
                                    format!("`while` key `{}` has no value", env.keys.name(*key)),
                                )
                            })?;
                        let holds = condition.holds(value).map_err(|e| {
                            Error::builtin("Repeat", "forward", crate::tch_message(e))
                        })?;
                        if !holds {
                            break;
                        }
                        run_node(op, work, env, keep)?;
                        passes += 1;
                    }
                }
            }
        }
        MetaOp::Fuse { ops } => {
            let last_gradient = ops.iter().rposition(OpNode::computes_gradients);
            for (index, op) in ops.iter_mut().enumerate() {
                let own = if Some(index) == last_gradient {
                    flags
                } else {
                    Flags {
                        retain_graph: true,
                        ..flags
                    }
                };
                run_node(op, work, env, own)?;
            }
        }
    }
    Ok(())
}

/// A TorchScript `forward` may return more than its ModelOp has keys for (the signature check
/// allows fewer keys: they take the first values), and an `Optional[Tensor]` it left None
/// comes back undefined: it may only fall beyond the keys.
fn torchscript_outputs(
    node: &OpNode,
    env: &StepEnv<'_, '_>,
    mut outputs: Vec<Tensor>,
) -> Result<Vec<Tensor>, PluginError> {
    let OpKind::Model(op) = &node.kind else {
        return Ok(outputs);
    };
    if env.models[op.model].torchscript.is_none() {
        return Ok(outputs);
    }
    outputs.truncate(node.outputs.len());
    match outputs.iter().position(|t| !t.defined()) {
        None => Ok(outputs),
        Some(at) => Err(node.failure(
            "forward",
            format!(
                "forward's output {at} is None, so output key `{}` gets no value (an Optional output the module sets only in some modes, such as training?) ({})",
                env.keys.name(node.outputs[at]),
                node.label
            ),
        )),
    }
}

fn call(
    kind: &mut OpKind,
    inputs: &[&Tensor],
    env: &mut StepEnv<'_, '_>,
    flags: Flags,
) -> Result<Vec<Tensor>, PluginError> {
    match kind {
        OpKind::Plugin(handle) => handle.forward(inputs, env.step),
        OpKind::Model(model_op) => {
            let model = &mut env.models[model_op.model];
            let train = env.step.mode == Mode::Train && model_op.trainable;
            let layers: SmallVec<[RStr<'_>; 4]> =
                model_op.layers.iter().map(|l| RStr::from_str(l)).collect();
            model.handle.forward(inputs, train, &layers)
        }
        OpKind::Update(update) => {
            if env.step.warmup {
                return Ok(Vec::new());
            }
            let model = &mut env.models[update.model];
            let deferred = &mut *env.deferred;
            let strategy = env.strategy;
            // Host code calling libtorch can panic (tch's non-`f_` methods); keep it an error.
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let flags = Flags {
                    defer: flags.defer || update.defer,
                    ..flags
                };
                update.forward(model, inputs, flags, deferred, strategy)
            }));
            finish(
                "UpdateOp",
                "backward and update",
                outcome.map(|r| r.map(|()| Vec::new())),
            )
        }
        OpKind::Gradient(gradient) => {
            let models = &*env.models;
            let finals = env.keys.name(gradient.finals);
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                gradient.forward(models, finals, inputs, flags.retain_graph)
            }));
            finish("GradientOp", "backward", outcome)
        }
        OpKind::L2(l2) => {
            let model = &env.models[l2.model];
            let outcome = catch_unwind(AssertUnwindSafe(|| l2.forward(model, inputs)));
            finish("L2Regularization", "forward", outcome)
        }
        OpKind::Delete | OpKind::Meta(_) => Ok(Vec::new()),
    }
}

/// A built-in op's outcome as the step reports it: `method` is what the op was doing (an
/// UpdateOp's backward pass and update, where a lost rank shows as a failed all-reduce).
fn finish(
    component: &str,
    method: &str,
    outcome: std::thread::Result<Result<Vec<Tensor>, String>>,
) -> Result<Vec<Tensor>, PluginError> {
    match outcome {
        Ok(Ok(outputs)) => Ok(outputs),
        Ok(Err(message)) => Err(Error::builtin(component, method, message)),
        Err(payload) => Err(Error::builtin(
            component,
            method,
            fe_plugin_api::panic_message(payload.as_ref()),
        )),
    }
}

/// Applies the updates deferred to the end of the step.
pub fn apply_deferred(
    models: &mut [ModelSlot],
    deferred: Vec<Deferred>,
    strategy: &crate::dist::Strategy,
) -> Result<(), PluginError> {
    for update in deferred {
        let model = &mut models[update.model];
        let name = model.name.clone();
        model
            .apply(
                &update.grads,
                update.found_inf.as_ref(),
                update.averaged,
                update.clip,
                strategy,
            )
            .map_err(|message| {
                Error::builtin("UpdateOp", "update", format!("{name}: {message}"))
            })?;
    }
    Ok(())
}
