//! Models: the plugin object plus what the host owns for it (parameters, optimizer).

use tch::{Device, Tensor};

use crate::optim::Optimizer;
use crate::plugins::handles::ModelHandle;

/// A model of the run.
pub struct ModelSlot {
    /// Its unique name.
    pub name: String,
    /// The architecture's name, for messages.
    pub architecture: String,
    /// The plugin object.
    pub handle: ModelHandle,
    /// Trainable parameters (sorted by name), sharing storage with the plugin's.
    pub params: Vec<Tensor>,
    /// Names of `params`.
    pub param_names: Vec<String>,
    /// Everything else the model holds (buffers, frozen parameters), by name.
    pub buffers: Vec<(String, Tensor)>,
    /// Its optimizer, if trained.
    pub optimizer: Option<Box<dyn Optimizer>>,
    /// `false` when the manifest froze it.
    pub trainable: bool,
}

impl ModelSlot {
    /// Wraps a freshly created model: splits its variables into trainable parameters and the
    /// rest, freezes them when `trainable` is false, and moves everything to `device`.
    pub fn new(
        name: String,
        architecture: String,
        handle: ModelHandle,
        variables: Vec<(String, Tensor)>,
        optimizer: Option<Box<dyn Optimizer>>,
        trainable: bool,
        device: Device,
    ) -> Result<Self, tch::TchError> {
        let mut params = Vec::new();
        let mut param_names = Vec::new();
        let mut buffers = Vec::new();
        for (var_name, mut tensor) in variables {
            if tensor.device() != device {
                // set_data keeps the tensor object, so the plugin's copy moves too.
                let _guard = tch::no_grad_guard();
                let moved = tensor.f_to_device(device)?;
                tensor.f_set_data(&moved)?;
            }
            if tensor.requires_grad() && trainable {
                params.push(tensor);
                param_names.push(var_name);
            } else {
                if tensor.requires_grad() {
                    let _ = tensor.f_requires_grad_(false)?;
                }
                buffers.push((var_name, tensor));
            }
        }
        Ok(Self {
            name,
            architecture,
            handle,
            params,
            param_names,
            buffers,
            optimizer,
            trainable,
        })
    }

    /// Every variable by name: parameters then buffers.
    pub fn named_variables(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.param_names
            .iter()
            .map(String::as_str)
            .zip(&self.params)
            .chain(self.buffers.iter().map(|(n, t)| (n.as_str(), t)))
    }

    /// Applies gradients with the model's optimizer.
    pub fn apply(&mut self, grads: &[Tensor]) -> Result<(), String> {
        let Some(optimizer) = self.optimizer.as_mut() else {
            return Err(format!(
                "model `{}` has no optimizer to apply an update with",
                self.name
            ));
        };
        optimizer
            .step(&self.params, grads)
            .map_err(crate::tch_message)
    }
}
