//! Who sets a model's learning rate. Each of these writes the optimizer's rate directly: a
//! schedule in the optimizer (`lr = { schedule = ... }`), an `LRScheduler` trace and a
//! `ReduceLROnPlateau` trace. Two of them on one model in one epoch do not compose — the one
//! that runs later overwrites the other, so the rate logged by one is not the rate applied
//! (FastEstimator defines no composition either: its traces each call `set_lr`). The run is
//! refused at start instead, naming both sources as `fe-host render` lists them.

use crate::error::Result;
use crate::manifest::{KeyPath, Manifest};
use crate::network::Network;
use crate::schedule::{By, InForce};

use super::traces::{TraceKind, TraceSlot};

/// How a trace sets a model's learning rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LrControl {
    /// The model's index in the network.
    pub model: usize,
    /// How.
    pub how: How,
}

/// The ways a learning rate is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// A schedule sets it before every step or epoch.
    Schedule(By),
    /// `ReduceLROnPlateau` multiplies it when a value stalls.
    Plateau,
}

/// One source of a model's learning rate.
struct Source {
    /// In messages: `the schedule in models[0].optimizer.lr`, `LRScheduler (traces[1])`.
    name: String,
    /// Where an error points.
    path: KeyPath,
    epochs: InForce,
    how: How,
}

/// Refuses a model whose learning rate two sources would set in the same epoch. `traces` are
/// the manifest's traces as built, `paths` where each is written.
pub fn check(
    manifest: &Manifest,
    network: &Network,
    paths: &[KeyPath],
    traces: &[TraceSlot],
) -> Result<()> {
    for (index, model) in network.models.iter().enumerate() {
        let mut sources: Vec<Source> = model
            .optimizers
            .iter()
            .filter_map(|slot| {
                let by = slot.lr_schedule.as_ref()?.by();
                let path = slot.path.key("lr");
                Some(Source {
                    name: format!("the schedule in {path}"),
                    path,
                    epochs: slot.epochs.clone(),
                    how: How::Schedule(by),
                })
            })
            .collect();
        for (trace, path) in traces.iter().zip(paths) {
            let TraceKind::Host(host) = &trace.kind else {
                continue;
            };
            match host.lr_control() {
                Some(control) if control.model == index => sources.push(Source {
                    name: trace.label.clone(),
                    path: path.clone(),
                    epochs: trace.epochs.clone(),
                    how: control.how,
                }),
                _ => {}
            }
        }
        for (later, b) in sources.iter().enumerate() {
            for a in &sources[..later] {
                let Some(epoch) =
                    (1..=manifest.run.epochs).find(|&e| a.epochs.at(e) && b.epochs.at(e))
                else {
                    continue;
                };
                return Err(manifest.error_at(&b.path, conflict(&model.name, a, b, epoch)));
            }
        }
    }
    Ok(())
}

fn conflict(model: &str, a: &Source, b: &Source, epoch: u32) -> String {
    let (plateau, schedule) = match (a.how, b.how) {
        (How::Plateau, How::Schedule(by)) => (a, Some((b, by))),
        (How::Schedule(by), How::Plateau) => (b, Some((a, by))),
        _ => (b, None),
    };
    match (plateau.how, schedule) {
        (How::Plateau, Some((schedule, by))) => {
            let when = match by {
                By::Step => "step",
                By::Epoch => "epoch",
            };
            format!(
                "{} cannot reduce the learning rate of model `{model}`: in epoch {epoch} it follows {}, which sets it \
                 again before every {when}, so a reduced rate would be logged but never applied; keep one of them \
                 (a fixed `lr` with ReduceLROnPlateau, or the schedule alone)",
                plateau.name, schedule.name
            )
        }
        _ => format!(
            "model `{model}` would take its learning rate from both {} and {} in epoch {epoch}; they do not compose \
             (each overwrites what the other set): keep one",
            a.name, b.name
        ),
    }
}
