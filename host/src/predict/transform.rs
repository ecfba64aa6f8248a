//! `fe-host transform`: FastEstimator's `Network.transform` — run the network (by default in
//! `infer` mode) over a dataset, in order, and write what it produces.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fe_plugin_api::{Mode, StepContext};
use tch::{Device, Tensor};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::network::{KeyId, Keys};
use crate::pipeline::{Dataset, Pipeline};
use crate::plugins::Registry;

/// What to transform and where to put it.
pub struct Request {
    /// The mode the pipeline ops and network ops run in (default `infer`).
    pub mode: Mode,
    /// The epoch whose schedules are in force (default 1).
    pub epoch: u32,
    /// Data to read instead of the manifest's dataset of `mode`: `FILE`, `DIR` or `KEY=FILE`
    /// in any format the pipeline reads (see `predict::input`).
    pub inputs: Vec<String>,
    /// Weights to load first (a directory of `<model>.safetensors`, a checkpoint, or a file).
    pub weights: Option<PathBuf>,
    /// Run the models with the weights they start with when no `weights` are given; without
    /// it, a network with models and no weights is refused.
    pub random_weights: bool,
    /// Keys to write; default: everything the network produces.
    pub keys: Vec<String>,
    /// At most this many samples.
    pub limit: Option<usize>,
    /// The `.safetensors` file to write.
    pub out: PathBuf,
}

/// What was written.
pub struct Written {
    /// Samples transformed.
    pub samples: usize,
    /// Keys written, with their shapes.
    pub keys: Vec<(String, Vec<i64>)>,
}

/// Runs the transform and writes what it produced as safetensors.
pub fn run(
    manifest: &Manifest,
    registry: &Registry,
    device: Device,
    request: &Request,
) -> Result<Written> {
    let (samples, tensors) = collect(manifest, registry, device, request)?;
    crate::system::tensors::write(&request.out, &tensors)?;
    Ok(Written {
        samples,
        keys: tensors.iter().map(|(k, t)| (k.clone(), t.size())).collect(),
    })
}

/// Why running `manifest`'s models without trained weights is refused, unless asked for.
pub fn refuse_untrained(manifest: &Manifest, request: &Request) -> Result<()> {
    if request.weights.is_none() && !request.random_weights && !manifest.models.is_empty() {
        let names: Vec<&str> = manifest.models.iter().map(|m| m.name.as_str()).collect();
        return Err(Error::Usage(format!(
            "no trained weights for model(s) {}: pass --weights with saved weights, an export or a checkpoint directory, or --random-weights to run the models as built (untrained; a TorchScript model with the weights its file holds)",
            names.join(", ")
        )));
    }
    Ok(())
}

/// The key a single-array `--input` file feeds when it names none: the first input of the
/// first ModelOp (the model's data key), or `x`.
pub fn default_input_key(manifest: &Manifest) -> String {
    manifest
        .ops
        .iter()
        .flat_map(crate::schedule::Scheduled::variants)
        .find(|(spec, _)| spec.name == "ModelOp")
        .and_then(|(spec, _)| spec.inputs.first().cloned())
        .unwrap_or_else(|| "x".to_owned())
}

/// Runs the network over the data in order and returns each written key joined over the
/// samples, with the number of samples.
pub fn collect(
    manifest: &Manifest,
    registry: &Registry,
    device: Device,
    request: &Request,
) -> Result<(usize, Vec<(String, Tensor)>)> {
    refuse_untrained(manifest, request)?;
    let mut keys = Keys::default();
    tch::manual_seed(manifest.run.seed as i64);
    let mut pipeline = if request.inputs.is_empty() {
        Pipeline::build(manifest, registry, &mut keys)?
    } else {
        // The data comes from the command line: the manifest's datasets are not opened, so a
        // model predicts where its training data is gone (or, from a model card, never was).
        let mut without_data = manifest.clone();
        without_data.pipeline.data.clear();
        Pipeline::build(&without_data, registry, &mut keys)?
    };
    if !request.inputs.is_empty() {
        let (source, format) =
            crate::predict::input::open(manifest, &request.inputs, &default_input_key(manifest))?;
        if let Some(note) = crate::predict::input::unlike_training(manifest, format) {
            eprintln!("note: {note}");
        }
        let ids = keys.intern_all(source.keys());
        pipeline.datasets.retain(|d| d.mode != request.mode);
        pipeline.datasets.push(Dataset {
            mode: request.mode,
            ds_id: String::new(),
            epochs: crate::schedule::InForce::always(),
            source,
            keys: ids,
        });
    }
    let epoch = request.epoch.max(1);
    let ds_ids = pipeline.ds_ids(request.mode, epoch);
    let Some(ds_id) = ds_ids.first().cloned() else {
        return Err(Error::Usage(format!(
            "the manifest has no {} dataset in epoch {epoch}; pass --mode with a mode that has one, or --input KEY=FILE",
            request.mode
        )));
    };
    let mut network = crate::network::build::build(manifest, registry, &mut keys, device)?;
    if let Some(weights) = &request.weights {
        crate::system::weights::load(&mut network, weights)?;
    }
    let requested: Vec<KeyId> = request
        .keys
        .iter()
        .map(|k| {
            keys.get(k)
                .ok_or_else(|| Error::Usage(format!("no key `{k}` in this manifest")))
        })
        .collect::<Result<_>>()?;
    let everything: BTreeSet<KeyId> = (0..keys.len() as u32).map(KeyId).collect();
    let plan = network
        .plan(request.mode, epoch, &ds_id, &everything)
        .map_err(Error::Run)?;
    refuse_training(&network, &plan)?;
    let write: Vec<KeyId> = if requested.is_empty() {
        plan.produced.clone()
    } else {
        requested
    };
    if write.is_empty() {
        // An empty file written "successfully" would hide that nothing was asked for.
        return Err(Error::Usage(format!(
            "the network produces no keys in {} mode; choose what to write with --key (the batch has: {})",
            request.mode,
            keys.names(pipeline.available_keys(request.mode, epoch, &ds_id)).join(", ")
        )));
    }
    let mut wanted: BTreeSet<KeyId> = plan.inputs.iter().copied().collect();
    wanted.extend(write.iter().copied());
    network.keys = keys.clone();
    let keys = Arc::new(keys);
    let samples = pipeline.samples(request.mode, epoch, &ds_id) as usize;
    if samples == 0 {
        // Nothing to join into an output, which would otherwise fail as an internal error.
        return Err(match request.inputs.as_slice() {
            [] => Error::Usage(format!("the {} dataset holds no samples", request.mode)),
            inputs => Error::data(Path::new(&inputs.join(" ")), "holds no samples"),
        });
    }
    let count = request.limit.map_or(samples, |limit| limit.min(samples));
    let order: Vec<u64> = (0..count as u64).collect();
    let batches = count.div_ceil(pipeline.batch_size_at(epoch));
    let loader =
        pipeline.epoch_in_order(request.mode, epoch, &ds_id, &wanted, order, batches, &keys)?;
    let mut columns: Vec<Vec<Tensor>> = write.iter().map(|_| Vec::new()).collect();
    let _no_grad = tch::no_grad_guard();
    for (index, batch) in loader.enumerate() {
        let mut batch = batch?;
        let step = StepContext {
            mode: request.mode,
            epoch,
            global_step: 0,
            batch_idx: index as u64 + 1,
            ds_id: ds_id.as_str().into(),
            warmup: false,
            seed: index as u64,
        };
        network.run_step(&plan, &mut batch, &step)?;
        for (column, key) in columns.iter_mut().zip(&write) {
            match batch.get(*key) {
                Some(value) => column.push(value.shallow_clone()),
                None => {
                    return Err(Error::Run(format!(
                        "key `{}` was not produced in {} mode",
                        keys.name(*key),
                        request.mode
                    )))
                }
            }
        }
    }
    let mut tensors = Vec::new();
    for (column, key) in columns.iter().zip(&write) {
        // Per-sample values join along the batch; per-batch scalars (losses) stack, one per batch.
        let scalars = column.first().is_some_and(|t| t.dim() == 0);
        let joined = if scalars {
            Tensor::f_stack(column, 0)
        } else {
            Tensor::f_cat(column, 0)
        }
        .map_err(|e| {
            Error::Run(format!(
                "cannot join the batches of `{}`: {}",
                keys.name(*key),
                crate::tch_message(e)
            ))
        })?;
        tensors.push((keys.name(*key).to_owned(), joined));
    }
    Ok((count, tensors))
}

/// `transform` runs without gradients and keeps no weights: an op that trains (or computes
/// gradients) in the requested mode would fail deep inside, or change what nobody keeps.
fn refuse_training(
    network: &crate::network::Network,
    plan: &crate::network::plan::StepPlan,
) -> Result<()> {
    match plan
        .ops
        .iter()
        .map(|&i| &network.ops[i])
        .find(|op| op.computes_gradients())
    {
        Some(op) => Err(Error::Usage(format!(
            "transform does not train, but {} computes gradients in {} mode; transform in a mode it does not run in (e.g. --mode eval or --mode infer), or train with `fe-host run`",
            op.label, plan.mode
        ))),
        None => Ok(()),
    }
}
