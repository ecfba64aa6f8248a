//! Post-processing: NumpyOps run on the CPU over the whole batch after the network's ops.

use fe_plugin_api::StepContext;

use crate::batch::{Batch, KeyId, Keys};
use crate::error::Error;
use crate::key_path::KeyPath;
use crate::plugins::handles::NumpyOpHandle;
use crate::schedule::{DsFilter, InForce, ModeFilter};

/// One post-processing op.
pub struct PostOp {
    /// `Name (network.postprocessing[i])`.
    pub label: String,
    /// Where it is declared: a check-time error points there.
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
    /// The plugin op.
    pub handle: NumpyOpHandle,
}

impl PostOp {
    fn failure(&self, method: &str, message: String) -> fe_plugin_api::PluginError {
        let mut error = Error::builtin(&self.name, method, message);
        error.plugin = self.provider.as_str().into();
        error
    }

    /// Runs the op on the batch (its `forward_batch`).
    pub fn run(
        &self,
        batch: &mut Batch,
        step: &StepContext<'_>,
        keys: &Keys,
    ) -> Result<(), fe_plugin_api::PluginError> {
        let outputs = {
            let mut inputs = Vec::with_capacity(self.inputs.len());
            for key in &self.inputs {
                match batch.get(*key) {
                    Some(t) => inputs.push(t),
                    None => {
                        return Err(self.failure(
                            "forward_batch",
                            format!(
                                "input key `{}` has no value ({})",
                                keys.name(*key),
                                self.label
                            ),
                        ))
                    }
                }
            }
            self.handle.forward_batch(&inputs, step)?
        };
        if outputs.len() != self.outputs.len() {
            return Err(self.failure(
                "forward_batch",
                format!(
                    "returned {} tensor(s) for {} output key(s)",
                    outputs.len(),
                    self.outputs.len()
                ),
            ));
        }
        for (key, value) in self.outputs.iter().zip(outputs) {
            batch.set(*key, value);
        }
        Ok(())
    }
}
