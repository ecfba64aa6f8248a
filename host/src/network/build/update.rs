//! The `UpdateOp` built-in: its keys, model, merging and gradient clipping, checked against
//! the manifest.

use super::{host_config, Builder};
use crate::batch::Keys;
use crate::error::Result;
use crate::manifest::ComponentSpec;
use crate::network::builtin::{GradientKeys, UpdateOp, UpdateOpConfig};
use crate::network::node::{OpKind, OpNode};
use crate::optim::{Clip, ClipConfig};

impl Builder<'_> {
    pub(super) fn update_op(&self, spec: &ComponentSpec, keys: &mut Keys) -> Result<OpNode> {
        let manifest = self.manifest;
        let config: UpdateOpConfig = host_config(manifest, spec)?;
        let model = self.model_index(spec, &config.model)?;
        let clip = self.clip(spec, &config, model)?;
        if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
            return Err(manifest.error_at(
                &spec.path,
                "UpdateOp takes its input as `loss = \"<key>\"` (or `gradients = \"<key>\"`) and has no outputs",
            ));
        }
        // FastEstimator's rules: `loss` always names the model's loss; with `gradients` those
        // are applied instead of differentiating it.
        let Some(loss) = config.loss else {
            return Err(manifest.error_at(
                &spec.path,
                "UpdateOp needs `loss`: the key of the loss it trains on (with `gradients`, the loss they come from, logged as the model's loss)",
            ));
        };
        crate::schedule::validate_key(&loss)
            .map_err(|e| manifest.error_at(&spec.path.key("loss"), e))?;
        let (gradient_keys, per_parameter) = match config.gradients {
            None => (Vec::new(), false),
            Some(GradientKeys::Flat(key)) => (vec![key], false),
            Some(GradientKeys::PerParameter(keys)) => (keys, true),
        };
        for key in &gradient_keys {
            crate::schedule::validate_key(key)
                .map_err(|e| manifest.error_at(&spec.path.key("gradients"), e))?;
        }
        let gradients_input = !gradient_keys.is_empty() || per_parameter;
        if config.merge_grad == 0 {
            return Err(manifest.error_at(&spec.path.key("merge_grad"), "must be at least 1"));
        }
        let slot = &self.models[model];
        if slot.trainable && slot.params.is_empty() {
            // Without this, the first step failed inside the optimizer, after the run's
            // version and outputs were made.
            return Err(manifest.error_at(
                &spec.path.key("model"),
                format!(
                    "model `{}` has no trainable parameters, so this UpdateOp has nothing to update: remove the UpdateOp (its ModelOp still runs the model), or give the model parameters (a module saved after torch.jit.freeze, or whose parameters all have requires_grad = False, has none)",
                    slot.name
                ),
            ));
        }
        if per_parameter && gradient_keys.len() != slot.params.len() {
            return Err(manifest.error_at(
                &spec.path.key("gradients"),
                format!(
                    "{} keys for the {} trainable parameters of model `{}` ({})",
                    gradient_keys.len(),
                    slot.params.len(),
                    slot.name,
                    slot.param_names.join(", ")
                ),
            ));
        }
        if !slot.trainable || slot.optimizers.is_empty() {
            let why = if slot.trainable {
                "has no optimizer"
            } else {
                "is not trainable"
            };
            return Err(manifest.error_at(
                &spec.path.key("model"),
                format!("model `{}` {why}", slot.name),
            ));
        }
        if gradients_input && slot.mixed_precision {
            return Err(manifest.error_at(
                &spec.path.key("gradients"),
                "mixed-precision training cannot take input gradients, because the gradients need to be computed in this op",
            ));
        }
        let inputs = if gradients_input {
            gradient_keys.clone()
        } else {
            vec![loss.clone()]
        };
        let op = UpdateOp {
            model,
            gradients_input,
            loss: keys.intern(&loss),
            loss_name: loss.clone(),
            gradient_keys: if per_parameter {
                gradient_keys
            } else {
                Vec::new()
            },
            merge_grad: config.merge_grad,
            defer: config.defer,
            clip,
            calls: 0,
            grad_sum: Vec::new(),
            found_inf_sum: None,
        };
        let modes = self.modes(spec, "train")?;
        Ok(self.node(spec, OpKind::Update(op), &inputs, &[], modes, keys))
    }

    /// The op's clipping, refused at its key when it cannot be meant or differs from another
    /// update of the same model: updates of one model in one step are summed into one
    /// optimizer step, which clips once.
    fn clip(
        &self,
        spec: &ComponentSpec,
        config: &UpdateOpConfig,
        model: usize,
    ) -> Result<Option<Clip>> {
        let fields = ClipConfig {
            clip_norm: config.clip_norm,
            norm_type: config.norm_type,
            clip_value: config.clip_value,
        };
        let clip = fields
            .resolve()
            .map_err(|(field, message)| self.manifest.error_at(&spec.path.key(field), message))?;
        let mut clips = self.clips.borrow_mut();
        match clips.iter().find(|(m, _)| *m == model) {
            Some((_, first)) if *first != clip => {
                let field = match (clip, first) {
                    (Some(Clip::Value(_)), _) | (None, Some(Clip::Value(_))) => "clip_value",
                    _ => "clip_norm",
                };
                Err(self.manifest.error_at(
                    &spec.path.key(field),
                    format!(
                        "model `{}` is clipped differently by another UpdateOp ({}); every update of a model must clip alike",
                        self.models[model].name,
                        describe(*first)
                    ),
                ))
            }
            Some(_) => Ok(clip),
            None => {
                clips.push((model, clip));
                Ok(clip)
            }
        }
    }
}

fn describe(clip: Option<Clip>) -> String {
    match clip {
        None => "no clipping".to_owned(),
        Some(Clip::Norm {
            max_norm,
            norm_type,
        }) => format!("clip_norm = {max_norm}, norm_type = {norm_type}"),
        Some(Clip::Value(value)) => format!("clip_value = {value}"),
    }
}
