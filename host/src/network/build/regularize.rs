//! The `L2Regularization` built-in: one loss key in, one out, a known model, a finite beta.

use super::{host_config, Builder};
use crate::batch::Keys;
use crate::error::Result;
use crate::manifest::ComponentSpec;
use crate::network::node::{OpKind, OpNode};
use crate::network::regularize::{L2Config, L2Op};

impl Builder<'_> {
    pub(super) fn l2_op(&self, spec: &ComponentSpec, keys: &mut Keys) -> Result<OpNode> {
        let manifest = self.manifest;
        let config: L2Config = host_config(manifest, spec)?;
        let model = self.model_index(spec, &config.model)?;
        if spec.inputs.len() != 1 || spec.outputs.len() != 1 {
            return Err(manifest.error_at(
                &spec.path,
                format!(
                    "{} reads one key (the loss) and writes one (the regularized loss), got {} input(s) and {} output(s)",
                    spec.name,
                    spec.inputs.len(),
                    spec.outputs.len()
                ),
            ));
        }
        if !config.beta.is_finite() || config.beta < 0.0 {
            return Err(manifest.error_at(
                &spec.path.key("beta"),
                format!("must be a finite number >= 0, got {}", config.beta),
            ));
        }
        if self.models[model].params.is_empty() {
            return Err(manifest.error_at(
                &spec.path.key("model"),
                format!(
                    "model `{}` has no trainable parameter to regularize",
                    config.model
                ),
            ));
        }
        let op = L2Op {
            model,
            beta: config.beta,
        };
        let modes = self.modes(spec, "")?;
        Ok(self.node(
            spec,
            OpKind::L2(op),
            &spec.inputs,
            &spec.outputs,
            modes,
            keys,
        ))
    }
}
