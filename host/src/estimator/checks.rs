//! What the estimator does before the first step: every signature epoch of every mode and
//! dataset is resolved and checked for missing keys, and (warm-up) one batch of each runs with
//! updates off, so a mistake fails in the first second with the epoch, mode and ds_id named.

use std::collections::BTreeSet;

use fe_plugin_api::{Mode, StepContext};

use super::report::describe_context;
use super::traces::{self, TraceSlot};
use super::Estimator;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::network::KeyId;

fn per_sample_keys(trace: &TraceSlot) -> Option<(KeyId, Vec<KeyId>)> {
    match &trace.kind {
        traces::TraceKind::Host(host) => host.per_sample_keys(),
        traces::TraceKind::Plugin(_) => None,
    }
}

impl Estimator {
    /// Every op, post-processing op and trace input must be provided, and every model an
    /// `UpdateOp` trains must have an optimizer, in every signature epoch, mode and dataset.
    pub(super) fn check_keys(&self, manifest: &Manifest) -> Result<()> {
        let fail =
            |message: String| Error::Manifest(format!("{}: {message}", manifest.file.display()));
        // Per trace with per-sample keys: whether some mode it runs in has the sample id.
        let mut id_seen = vec![false; self.traces.len()];
        // What evaluation can log, in any epoch: batch keys and what the traces write.
        let mut in_eval: BTreeSet<String> = BTreeSet::new();
        for &epoch in &self.signature_epochs {
            for mode in Mode::ALL {
                for ds_id in self.pipeline.ds_ids(mode, epoch) {
                    let where_ = describe_context(mode, epoch, &ds_id);
                    if let Some((op, key, at)) =
                        self.pipeline.first_missing_input(mode, epoch, &ds_id)
                    {
                        return Err(manifest.error_at(&at, format!(
                            "{op} needs key `{}` in {where_}, but neither the dataset nor an earlier pipeline op provides it",
                            self.keys.name(key)
                        )));
                    }
                    let available = self.pipeline.available_keys(mode, epoch, &ds_id);
                    let desired = traces::wanted_keys(&self.traces, mode, epoch, &ds_id);
                    let plan = self
                        .network
                        .plan(mode, epoch, &ds_id, &desired)
                        .map_err(fail)?;
                    if let Some(missing) = self
                        .network
                        .first_missing_input(&plan, &available, &self.keys)
                    {
                        return Err(manifest.error_at(&missing.at, format!(
                            "{} needs key `{}` in {where_}, but no dataset key or earlier op provides it (available: {})",
                            missing.label,
                            missing.key,
                            missing.available.join(", ")
                        )));
                    }
                    for &index in &plan.ops {
                        let op = &self.network.ops[index];
                        for model in op.updated_models() {
                            let slot = &self.network.models[model];
                            if slot.optimizer_at(epoch).is_none() {
                                return Err(fail(format!(
                                    "{} updates model `{}` in {where_}, but its optimizer schedule gives none then",
                                    op.label, slot.name
                                )));
                            }
                        }
                    }
                    let mut provided: BTreeSet<KeyId> = available;
                    provided.extend(plan.produced.iter().copied());
                    self.check_trace_inputs(manifest, mode, epoch, &ds_id, &provided)?;
                    if mode == Mode::Eval {
                        in_eval.extend(provided.iter().map(|k| self.keys.name(*k).to_owned()));
                        for trace in &self.traces {
                            if trace.active(mode, epoch, Some(&ds_id)) {
                                in_eval.extend(trace.deps().outputs);
                            }
                        }
                    }
                    self.check_per_sample_keys(mode, epoch, &ds_id, &provided, &mut id_seen)
                        .map_err(fail)?;
                }
            }
        }
        self.check_monitor(manifest, &in_eval)?;
        for (trace, seen) in self.traces.iter().zip(id_seen) {
            if let (false, Some((id, _))) = (seen, per_sample_keys(trace)) {
                return Err(fail(format!(
                    "{} names `{}` as the key of each sample (instance_id_key), but no batch of the modes it runs in has it",
                    trace.label,
                    self.keys.name(id)
                )));
            }
        }
        Ok(())
    }

    /// `[checkpoint] monitor` must be something evaluation logs: a misspelt key would rank no
    /// checkpoint, so `keep_best` would keep none for its value and the run would end without
    /// its best line — with exit 0.
    fn check_monitor(&self, manifest: &Manifest, in_eval: &BTreeSet<String>) -> Result<()> {
        let Some(monitor) = manifest
            .checkpoint
            .as_ref()
            .and_then(|c| c.monitor.as_ref())
        else {
            return Ok(());
        };
        if in_eval.contains(monitor) {
            return Ok(());
        }
        let path = crate::manifest::KeyPath::root("checkpoint").key("monitor");
        let message = if in_eval.is_empty() {
            format!("`{monitor}` would be read from evaluation, but this run evaluates nothing (no `pipeline.data.eval`)")
        } else {
            let known = in_eval.iter().cloned().collect::<Vec<_>>().join(", ");
            format!("`{monitor}` is not a value evaluation logs (it logs: {known})")
        };
        Err(manifest.error_at(&path, message))
    }

    /// Where a trace's sample id is in the batch, the keys it logs per sample must be too
    /// (else its per-instance rows would silently lack them).
    fn check_per_sample_keys(
        &self,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        provided: &BTreeSet<KeyId>,
        id_seen: &mut [bool],
    ) -> std::result::Result<(), String> {
        for (trace, seen) in self.traces.iter().zip(id_seen.iter_mut()) {
            let Some((id, keys)) = per_sample_keys(trace) else {
                continue;
            };
            if !trace.active(mode, epoch, Some(ds_id)) || !provided.contains(&id) {
                continue;
            }
            *seen = true;
            if let Some(&missing) = keys.iter().find(|k| !provided.contains(k)) {
                return Err(format!(
                    "{} logs `{}` per sample (instance_keys), but {} has no such key (available: {})",
                    trace.label,
                    self.keys.name(missing),
                    describe_context(mode, epoch, ds_id),
                    self.keys.names(provided.iter().copied()).join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Every active trace must find its inputs: batch keys, or what a trace that runs before
    /// it writes (FastEstimator's strict `sort_traces`).
    fn check_trace_inputs(
        &self,
        manifest: &Manifest,
        mode: Mode,
        epoch: u32,
        ds_id: &str,
        provided: &BTreeSet<KeyId>,
    ) -> Result<()> {
        let active: Vec<super::order::Deps> = self
            .traces
            .iter()
            .filter(|t| t.active(mode, epoch, Some(ds_id)))
            .map(TraceSlot::deps)
            .collect();
        let available: BTreeSet<String> = provided
            .iter()
            .map(|k| self.keys.name(*k).to_owned())
            .collect();
        let where_ = describe_context(mode, epoch, ds_id);
        match super::order::sort_traces(&active, Some(&available)) {
            Ok(_) => Ok(()),
            Err(super::order::OrderError::Unsatisfiable { label, missing }) => {
                // What the other traces write is there to read too.
                let mut listed = available.clone();
                let others = active.iter().filter(|t| t.label != label);
                listed.extend(others.flat_map(|t| t.outputs.iter().cloned()));
                let provided = listed.into_iter().collect::<Vec<_>>().join(", ");
                let message = format!(
                    "{label} needs {} in {where_}, but neither the pipeline, the network nor another trace provides it (available: {provided})",
                    missing.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                );
                let declared = self.traces.iter().find(|t| t.label == label);
                Err(
                    match declared.and_then(|t| Some((t.path.as_ref()?, t.inputs_key()))) {
                        Some((path, key)) => manifest.error_at(&path.key(key), message),
                        None => Error::Manifest(format!("{}: {message}", manifest.file.display())),
                    },
                )
            }
            Err(cycle) => Err(Error::Manifest(format!(
                "{}: {cycle} in {where_}",
                manifest.file.display()
            ))),
        }
    }

    /// FastEstimator's warm-up: one batch of every signature epoch, mode and dataset through
    /// the network with updates off, before anything trains. Models run as they will in that
    /// mode (a training forward in training behaviour, so a module that fails only there fails
    /// here); what that changes — batch norm's running statistics, libtorch's random state —
    /// is put back afterwards, so the run continues exactly as without it.
    pub(super) fn run_warmup(&mut self) -> Result<()> {
        use crate::shim::{generator_state, set_generator_state, Generator};
        let mut generators = vec![Generator::Cpu];
        if let tch::Device::Cuda(index) = self.network.device {
            // Dropout on a GPU draws from the GPU's generator.
            generators.push(Generator::Cuda(index));
        }
        let saved = generators
            .iter()
            .map(|&g| generator_state(g))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Internal(format!("cannot save the RNG state: {e}")))?;
        let buffers = self.network.snapshot_buffers().map_err(Error::Run)?;
        let outcome = self.warmup_batches();
        self.network
            .restore_buffers(&buffers)
            .map_err(|e| Error::Internal(format!("cannot restore the models' buffers: {e}")))?;
        for (generator, state) in generators.into_iter().zip(&saved) {
            set_generator_state(generator, state)
                .map_err(|e| Error::Internal(format!("cannot restore the RNG state: {e}")))?;
        }
        outcome
    }

    fn warmup_batches(&mut self) -> Result<()> {
        for epoch in self.signature_epochs.clone() {
            for mode in Mode::ALL {
                for ds_id in self.pipeline.ds_ids(mode, epoch) {
                    let desired = traces::wanted_keys(&self.traces, mode, epoch, &ds_id);
                    let plan = self
                        .network
                        .plan(mode, epoch, &ds_id, &desired)
                        .map_err(Error::Run)?;
                    let mut wanted: BTreeSet<KeyId> = plan.inputs.iter().copied().collect();
                    wanted.extend(desired.iter().copied());
                    let mut loader =
                        self.pipeline
                            .epoch(mode, epoch, &ds_id, &wanted, Some(1), &self.keys)?;
                    let Some(batch) = loader.next() else { continue };
                    drop(loader);
                    let mut batch = batch?;
                    let step = StepContext {
                        mode,
                        epoch,
                        global_step: 0,
                        batch_idx: 1,
                        ds_id: ds_id.as_str().into(),
                        warmup: true,
                        seed: 0,
                    };
                    self.network
                        .run_step_in(&plan, &mut batch, &step, &self.strategy)?;
                }
            }
        }
        Ok(())
    }
}
