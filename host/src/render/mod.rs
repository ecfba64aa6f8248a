//! `fe-host render`: the resolved plan of a manifest, per signature epoch and mode — what is in
//! force (data, batch size, pipeline ops, network ops with their keys, traces, optimizers and
//! learning-rate schedules) — so a user checks a curriculum before a long run.

pub mod changes;

use std::fmt::Write;

use fe_plugin_api::Mode;

use crate::estimator::{describe_device, Estimator, TraceSlot};
use crate::manifest::Manifest;
use crate::network::{KeyId, Keys};

/// The plan of `estimator` (built from `manifest`) as text.
pub fn render(manifest: &Manifest, estimator: &Estimator) -> String {
    let total = manifest.run.epochs;
    let signature = manifest.signature_epochs();
    let schedules = manifest.schedules();
    let combination = |epoch: u32| -> Vec<Option<usize>> {
        schedules.iter().map(|s| s.index_at(epoch)).collect()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "plan of {}: {total} epoch{}, device {}, signature epochs {}",
        manifest.file.display(),
        if total == 1 { "" } else { "s" },
        describe_device(estimator.network.device),
        join(signature.iter().map(u32::to_string)),
    );
    if let Some(shard) = estimator.pipeline.shard.filter(|s| s.world > 1) {
        let _ = writeln!(
            out,
            "data parallel: {} ranks; batch_size is the global batch, each rank reads batch_size / {} samples a step (steps below are per rank; evaluation steps are rank 0's)",
            shard.world, shard.world
        );
    }
    for &epoch in &signature {
        let same: Vec<u32> = (1..=total)
            .filter(|&e| combination(e) == combination(epoch))
            .collect();
        let _ = writeln!(
            out,
            "\nepoch {epoch} (in force in {})",
            describe_epochs(&same)
        );
        render_epoch(&mut out, estimator, epoch);
    }
    out
}

fn render_epoch(out: &mut String, estimator: &Estimator, epoch: u32) {
    let keys = &estimator.keys;
    let pipeline = &estimator.pipeline;
    let network = &estimator.network;
    for mode in Mode::ALL {
        for ds_id in pipeline.ds_ids(mode, epoch) {
            let name = if ds_id.is_empty() {
                mode.to_string()
            } else {
                format!("{mode}/{ds_id}")
            };
            let steps =
                pipeline.batches(mode, epoch, &ds_id, estimator.system.steps_per_epoch(mode));
            let per_rank = match pipeline.shard.filter(|s| s.world > 1) {
                Some(_) => format!(" ({} per rank)", pipeline.batching(mode, epoch, &ds_id).0),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "  {name}: {} samples, batch_size {}{per_rank}, {steps} step{}",
                pipeline.samples(mode, epoch, &ds_id),
                pipeline.batch_size_at(epoch),
                if steps == 1 { "" } else { "s" },
            );
            let ops: Vec<String> = pipeline
                .ops_at(mode, epoch, &ds_id)
                .iter()
                .map(|op| with_keys(&op.label, &op.inputs, &op.outputs, keys))
                .collect();
            section(out, "pipeline", ops);
            let desired =
                crate::estimator::traces::wanted_keys(&estimator.traces, mode, epoch, &ds_id);
            let plan = match network.plan(mode, epoch, &ds_id, &desired) {
                Ok(plan) => plan,
                Err(error) => {
                    let _ = writeln!(out, "    error: {error}");
                    continue;
                }
            };
            let slicers = plan
                .slicers
                .iter()
                .map(|&i| {
                    let s = &network.slicers[i];
                    with_keys(&s.label, &s.slice, &s.unslice, keys)
                })
                .collect();
            section(out, "slicers", slicers);
            let ops = plan
                .ops
                .iter()
                .map(|&i| {
                    let op = &network.ops[i];
                    with_keys(&op.label, &op.inputs, &op.outputs, keys)
                })
                .collect();
            section(out, "network", ops);
            let post = plan
                .post
                .iter()
                .map(|&i| {
                    let op = &network.post[i];
                    with_keys(&op.label, &op.inputs, &op.outputs, keys)
                })
                .collect();
            section(out, "postprocessing", post);
            let traces = estimator
                .traces
                .iter()
                .filter(|t| t.active(mode, epoch, Some(&ds_id)))
                .map(describe_trace)
                .collect();
            section(out, "traces", traces);
            if mode == Mode::Train {
                let models = network
                    .models
                    .iter()
                    .map(|m| {
                        let optimizer = m
                            .optimizer_at(epoch)
                            .map(|i| m.optimizers[i].summary.clone())
                            .unwrap_or_else(|| "no optimizer".to_owned());
                        format!("{}: {optimizer}", m.name)
                    })
                    .collect();
                section(out, "models", models);
            }
        }
    }
}

fn section(out: &mut String, title: &str, lines: Vec<String>) {
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(out, "    {title}:");
    for line in lines {
        let _ = writeln!(out, "      {line}");
    }
}

fn with_keys(label: &str, inputs: &[KeyId], outputs: &[KeyId], keys: &Keys) -> String {
    let side = |ids: &[KeyId]| {
        if ids.is_empty() {
            "-".to_owned()
        } else {
            keys.names(ids.iter().copied()).join(", ")
        }
    };
    format!("{label}: {} -> {}", side(inputs), side(outputs))
}

fn describe_trace(trace: &TraceSlot) -> String {
    let inputs = trace.input_names();
    let outputs = trace.output_names();
    if inputs.is_empty() && outputs.is_empty() {
        return trace.label.clone();
    }
    let side = |names: &[String]| {
        if names.is_empty() {
            "-".to_owned()
        } else {
            names.join(", ")
        }
    };
    format!("{}: {} -> {}", trace.label, side(&inputs), side(&outputs))
}

/// `1-2, 5, 7-9`.
pub fn describe_epochs(epochs: &[u32]) -> String {
    let mut spans: Vec<(u32, u32)> = Vec::new();
    for &epoch in epochs {
        match spans.last_mut() {
            Some((_, end)) if *end + 1 == epoch => *end = epoch,
            _ => spans.push((epoch, epoch)),
        }
    }
    let text = join(spans.iter().map(|&(a, b)| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    }));
    if epochs.len() == 1 {
        format!("epoch {text}")
    } else {
        format!("epochs {text}")
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::describe_epochs;

    #[test]
    fn epochs_are_shown_as_ranges() {
        assert_eq!(describe_epochs(&[1]), "epoch 1");
        assert_eq!(describe_epochs(&[1, 2, 3, 5, 7, 8]), "epochs 1-3, 5, 7-8");
    }
}
