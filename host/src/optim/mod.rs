//! Optimizers, implemented in the host over tensors so that their whole state is a set of named
//! tensors plus JSON hyper-parameters: checkpoints save and restore it exactly, which libtorch's
//! own optimizers (behind tch) do not allow.
//!
//! Each runs the op sequence of torch 2.11's single-tensor path (what `foreach=None` picks on
//! CPU), with the same in-place ops and `f64` scalars, so its updates are bit-identical to
//! `torch.optim`'s there; fused Adam/AdamW run the same fused kernel as `fused=True`.

mod adam;
mod check;
mod clip;
mod ops;
mod rmsprop;
mod saved_state;
mod sgd;

use serde::de::DeserializeOwned;
use tch::Tensor;

use crate::schedule::LrSchedule;

pub use adam::{Adam, AdamConfig};
pub use clip::{Clip, ClipConfig};
pub use rmsprop::{RmsProp, RmsPropConfig};
pub use saved_state::Parameters;
pub use sgd::{Sgd, SgdConfig};

/// A gradient-descent optimizer over a fixed list of parameters.
pub trait Optimizer: Send {
    /// The optimizer's name (`adam`, `sgd`, ...).
    fn name(&self) -> &'static str;

    /// Applies one update. `grads[i]` belongs to `params[i]`; an undefined gradient (a parameter
    /// the loss does not depend on) leaves its parameter untouched.
    fn step(&mut self, params: &[Tensor], grads: &[Tensor]) -> Result<(), tch::TchError>;

    /// Mixed precision without a host-device sync: applies the update unless `found_inf` (a
    /// one-element 0/1 float flag on the parameters' device) is 1, deciding on the device, and
    /// returns `true`. Returns `false`, doing nothing, when this optimizer cannot; the caller
    /// then reads the flag and calls [`Optimizer::step`] or not.
    fn step_unless_overflow(
        &mut self,
        _params: &[Tensor],
        _grads: &[Tensor],
        _found_inf: &Tensor,
    ) -> Result<bool, tch::TchError> {
        Ok(false)
    }

    /// The current learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (LR schedules).
    fn set_lr(&mut self, lr: f64);

    /// Hyper-parameters and step count, as JSON.
    fn hyper_state(&self) -> serde_json::Value;

    /// Per-parameter state tensors, named `<state name>/<param index>`.
    fn tensor_state(&self) -> Vec<(String, Tensor)>;

    /// Restores what `hyper_state` and `tensor_state` returned, for the parameters `params`.
    /// State that does not fit them (a tensor missing, extra, or of another shape or dtype
    /// than its parameter) is refused before anything changes.
    fn load_state(
        &mut self,
        hyper: &serde_json::Value,
        tensors: &[(String, Tensor)],
        params: &Parameters<'_>,
    ) -> Result<(), String>;
}

/// An optimizer as the manifest describes it: the optimizer, and the schedule its learning
/// rate follows when `lr` is a schedule table rather than a number.
pub struct Configured {
    /// The optimizer, its learning rate set to the schedule's first value.
    pub optimizer: Box<dyn Optimizer>,
    /// The learning-rate schedule, if any.
    pub lr_schedule: Option<LrSchedule>,
}

/// Builds an optimizer from its manifest table (`type` plus hyper-parameters; `lr` a number
/// or a schedule table).
pub fn build(table: &toml::Table) -> Result<Configured, fe_plugin_api::Error> {
    if let Some((field, message)) = check::unmeant_number(table, "") {
        return Err(fe_plugin_api::Error::config(field, message));
    }
    let mut table = table.clone();
    let lr_schedule = match table.get("lr") {
        Some(toml::Value::Table(lr)) => {
            let text = toml::to_string(lr).unwrap_or_default();
            let schedule: LrSchedule = fe_plugin_api::parse_config(&text)
                .map_err(|e| fe_plugin_api::Error::config(lr_field(e.field()), e.message()))?;
            schedule.validate().map_err(|(field, message)| {
                fe_plugin_api::Error::config(lr_field(field), message)
            })?;
            table.insert("lr".into(), toml::Value::Float(schedule.lr_at(1)));
            Some(schedule)
        }
        _ => None,
    };
    let optimizer = build_optimizer(table)?;
    Ok(Configured {
        optimizer,
        lr_schedule,
    })
}

fn lr_field(field: &str) -> String {
    if field.is_empty() {
        "lr".to_owned()
    } else {
        format!("lr.{field}")
    }
}

fn build_optimizer(mut table: toml::Table) -> Result<Box<dyn Optimizer>, fe_plugin_api::Error> {
    let kind = match table.remove("type") {
        Some(toml::Value::String(kind)) => kind,
        _ => {
            return Err(fe_plugin_api::Error::config(
                "type",
                "missing optimizer `type` (adam, adamw, sgd, rmsprop)",
            ))
        }
    };
    let text = toml::to_string(&table).unwrap_or_default();
    fn parse<T: DeserializeOwned>(text: &str) -> Result<T, fe_plugin_api::Error> {
        fe_plugin_api::parse_config(text)
    }
    Ok(match kind.as_str() {
        "adam" => Box::new(Adam::new(parse::<AdamConfig>(&text)?, false)),
        "adamw" => Box::new(Adam::new(parse::<AdamConfig>(&text)?, true)),
        "sgd" => Box::new(Sgd::new(parse(&text)?)),
        "rmsprop" => Box::new(RmsProp::new(parse(&text)?)),
        other => {
            return Err(fe_plugin_api::Error::config(
                "type",
                format!("unknown optimizer `{other}` (adam, adamw, sgd, rmsprop)"),
            ))
        }
    })
}

/// Lazily created per-parameter state: one optional tensor per parameter.
#[derive(Default)]
pub(crate) struct PerParameter {
    tensors: Vec<Option<Tensor>>,
}

impl PerParameter {
    pub(crate) fn get_or_zeros(
        &mut self,
        index: usize,
        like: &Tensor,
    ) -> Result<&mut Tensor, tch::TchError> {
        if self.tensors.len() <= index {
            self.tensors.resize_with(index + 1, || None);
        }
        let entry = &mut self.tensors[index];
        let tensor = match entry.take() {
            Some(tensor) => tensor,
            None => like.f_zeros_like()?,
        };
        Ok(entry.insert(tensor))
    }

    pub(crate) fn is_set(&self, index: usize) -> bool {
        matches!(self.tensors.get(index), Some(Some(_)))
    }

    pub(crate) fn set(&mut self, index: usize, tensor: Tensor) {
        if self.tensors.len() <= index {
            self.tensors.resize_with(index + 1, || None);
        }
        self.tensors[index] = Some(tensor);
    }

    pub(crate) fn export(&self, name: &str, out: &mut Vec<(String, Tensor)>) {
        for (i, tensor) in self.tensors.iter().enumerate() {
            if let Some(tensor) = tensor {
                out.push((format!("{name}/{i}"), tensor.shallow_clone()));
            }
        }
    }

    pub(crate) fn import(
        &mut self,
        name: &str,
        tensors: &[(String, Tensor)],
    ) -> Result<(), String> {
        self.tensors.clear();
        let prefix = format!("{name}/");
        for (name, tensor) in tensors {
            if let Some(index) = name.strip_prefix(&prefix) {
                let index: usize = index
                    .parse()
                    .map_err(|_| format!("bad optimizer state name `{name}`"))?;
                self.set(index, tensor.copy());
            }
        }
        Ok(())
    }
}

/// Runs `f` with autograd recording off: optimizer updates are not part of any graph.
pub(crate) fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    let _guard = tch::no_grad_guard();
    f()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod parity;
