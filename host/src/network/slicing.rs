//! Slicers (FastEstimator's `forward_slicers` / `reverse_slicers`): cut a batch into
//! minibatches before the ops run and join the results after.

use fe_plugin_api::PluginError;

use crate::batch::{Batch, KeyId, Keys};
use crate::error::Error;
use crate::key_path::KeyPath;
use crate::plugins::handles::SlicerHandle;
use crate::schedule::{DsFilter, InForce, ModeFilter};

/// One slicer of the network.
pub struct SlicerNode {
    /// `Name (network.slicers[i])`.
    pub label: String,
    /// Where it is declared: a check-time error points there.
    pub path: KeyPath,
    /// The component name.
    pub name: String,
    /// The crate providing it (a plugin's, or `fe-host`), named by failures the host detects.
    pub provider: String,
    /// Keys it cuts.
    pub slice: Vec<KeyId>,
    /// Keys it joins back.
    pub unslice: Vec<KeyId>,
    /// Modes it runs in.
    pub modes: ModeFilter,
    /// Dataset ids it runs for.
    pub ds_ids: DsFilter,
    /// Epochs it is in force (scheduled entries).
    pub epochs: InForce,
    /// The plugin object.
    pub handle: SlicerHandle,
}

impl SlicerNode {
    fn failure(&self, method: &str, message: String) -> PluginError {
        let mut error = Error::builtin(&self.name, method, message);
        error.plugin = self.provider.as_str().into();
        error
    }
}

/// FastEstimator's `sanity_assert_slicers`: slicers active together may not cut or join the
/// same key, and joining needs someone to cut.
pub fn check(slicers: &[&SlicerNode], keys: &Keys) -> Result<(), String> {
    let mut sliced: Vec<KeyId> = Vec::new();
    let mut unsliced: Vec<KeyId> = Vec::new();
    for slicer in slicers {
        if let Some(key) = slicer.slice.iter().find(|k| sliced.contains(k)) {
            return Err(format!(
                "several slicers try to slice `{}` at the same time ({} is one)",
                keys.name(*key),
                slicer.label
            ));
        }
        if let Some(key) = slicer.unslice.iter().find(|k| unsliced.contains(k)) {
            return Err(format!(
                "several slicers try to unslice `{}` at the same time ({} is one)",
                keys.name(*key),
                slicer.label
            ));
        }
        sliced.extend(&slicer.slice);
        unsliced.extend(&slicer.unslice);
    }
    if !unsliced.is_empty() && sliced.is_empty() {
        return Err(
            "slicers unslice keys but none slices anything: there is nothing to put back together"
                .into(),
        );
    }
    Ok(())
}

/// Cuts `batch` into minibatches; keys no slicer cuts are shared by every minibatch.
pub fn forward(
    slicers: &mut [&mut SlicerNode],
    batch: &Batch,
    keys: &Keys,
) -> Result<Vec<Batch>, PluginError> {
    let mut minibatches: Vec<Batch> = Vec::new();
    let mut sliced: Vec<KeyId> = Vec::new();
    for slicer in slicers.iter_mut() {
        let mut count: Option<usize> = None;
        for key in slicer.slice.clone() {
            // The pre-run key check refuses this; cutting nothing would silently skip every op.
            let Some(value) = batch.get(key) else {
                return Err(slicer.failure(
                    "slice",
                    format!(
                        "the batch has no key `{}` to slice ({})",
                        keys.name(key),
                        slicer.label
                    ),
                ));
            };
            let pieces = slicer.handle.slice(keys.name(key), value)?;
            match count {
                Some(n) if n != pieces.len() => {
                    return Err(slicer.failure(
                        "slice",
                        format!(
                            "produced {} slices of `{}` but {n} of its other keys ({})",
                            pieces.len(),
                            keys.name(key),
                            slicer.label
                        ),
                    ))
                }
                _ => count = Some(pieces.len()),
            }
            if minibatches.is_empty() {
                minibatches = pieces.iter().map(|_| Batch::with_keys(0)).collect();
            } else if minibatches.len() != pieces.len() {
                return Err(slicer.failure(
                    "slice",
                    format!(
                        "slicers disagree on the number of slices: {} vs {} ({})",
                        minibatches.len(),
                        pieces.len(),
                        slicer.label
                    ),
                ));
            }
            for (minibatch, piece) in minibatches.iter_mut().zip(pieces) {
                minibatch.set(key, piece);
            }
            sliced.push(key);
        }
    }
    for minibatch in &mut minibatches {
        for key in batch.present().filter(|k| !sliced.contains(k)) {
            if let Some(value) = batch.get(key) {
                minibatch.set(key, value.shallow_clone());
            }
        }
        let size = minibatch
            .present()
            .find(|k| sliced.contains(k))
            .and_then(|k| minibatch.get(k))
            .and_then(|t| t.size().first().copied())
            .unwrap_or(batch.size);
        minibatch.size = size;
    }
    Ok(minibatches)
}

/// Joins `minibatches` back into one batch: each slicer unslices the keys it declared (when the
/// minibatches have them); any other key keeps its value from `original`, or else the first
/// minibatch's.
pub fn reverse(
    slicers: &mut [&mut SlicerNode],
    minibatches: &[Batch],
    original: &Batch,
    keys: &Keys,
) -> Result<Batch, PluginError> {
    let mut out = Batch::with_keys(0);
    out.size = original.size;
    let Some(first) = minibatches.first() else {
        return Ok(out);
    };
    let mut done: Vec<KeyId> = Vec::new();
    for slicer in slicers.iter_mut() {
        for key in slicer.unslice.clone() {
            if first.get(key).is_none() {
                continue;
            }
            let slices: Vec<&tch::Tensor> = minibatches.iter().filter_map(|m| m.get(key)).collect();
            if slices.len() != minibatches.len() {
                return Err(slicer.failure(
                    "unslice",
                    format!("`{}` is missing from some slices", keys.name(key)),
                ));
            }
            let joined = slicer.handle.unslice(keys.name(key), &slices)?;
            out.set(key, joined);
            done.push(key);
        }
    }
    for key in first.present().filter(|k| !done.contains(k)) {
        let value = original.get(key).or_else(|| first.get(key));
        if let Some(value) = value {
            out.set(key, value.shallow_clone());
        }
    }
    let missing: Vec<KeyId> = original
        .present()
        .filter(|k| out.get(*k).is_none())
        .collect();
    for key in missing {
        if let Some(value) = original.get(key) {
            out.set(key, value.shallow_clone());
        }
    }
    Ok(out)
}
