//! Mixed precision: autocast around the forward pass and a dynamic gradient scaler per model
//! (PyTorch's `GradScaler` rules). On the CPU autocast uses bfloat16, which needs no scaling;
//! on CUDA it uses float16 with the scaler.

use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

/// Autocast on for as long as the guard lives.
pub struct Autocast {
    device: Device,
    half: bool,
}

impl Autocast {
    /// Enables autocast for `device` (float16 on CUDA, bfloat16 on the CPU).
    pub fn enable(device: Device) -> Result<Self, String> {
        let half = device.is_cuda();
        crate::shim::autocast(device, half, true)?;
        Ok(Self { device, half })
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // Disabling cannot meaningfully fail; an error here would only repeat an earlier one.
        let _ = crate::shim::autocast(self.device, self.half, false);
    }
}

/// The dynamic loss scale of one model. After a step decided on the device
/// ([`GradScaler::update_on_device`]) its fields are stale until [`GradScaler::snapshot`] or
/// [`GradScaler::update`] reads the device back.
#[derive(Debug, Serialize, Deserialize)]
pub struct GradScaler {
    /// The current scale.
    pub scale: f64,
    /// Multiplier after `growth_interval` steps without overflow.
    pub growth_factor: f64,
    /// Multiplier after an overflow.
    pub backoff_factor: f64,
    /// Steps without overflow before the scale grows.
    pub growth_interval: u32,
    /// Steps without overflow so far.
    pub growth_tracker: u32,
    /// Steps skipped because gradients overflowed.
    pub skipped_steps: u64,
    /// The same state on the device, once a step was decided there.
    #[serde(skip)]
    device: Option<DeviceScale>,
}

/// [`GradScaler`]'s state where PyTorch keeps it: on the gradients' device, updated by
/// `_amp_update_scale_` from the overflow flag without the host reading it.
#[derive(Debug)]
struct DeviceScale {
    /// float32 `[1]`.
    scale: Tensor,
    /// int32 `[1]`.
    growth_tracker: Tensor,
    /// float64 `[1]`.
    skipped_steps: Tensor,
}

impl Default for GradScaler {
    fn default() -> Self {
        Self {
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            growth_tracker: 0,
            skipped_steps: 0,
            device: None,
        }
    }
}

impl GradScaler {
    /// PyTorch's defaults, starting from `scale`.
    pub fn with_scale(scale: f64) -> Self {
        Self {
            scale,
            ..Self::default()
        }
    }

    /// The loss multiplied by the current scale.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor, tch::TchError> {
        match &self.device {
            Some(device) => loss.f_mul(
                &device
                    .scale
                    .f_reshape([] as [i64; 0])?
                    .f_to_kind(loss.kind())?,
            ),
            None => loss.f_mul_scalar(self.scale),
        }
    }

    /// Divides the gradients by the scale in place. Returns a one-element tensor on their
    /// device that is 1 when any is infinite or NaN: nothing is read back to the host here, so
    /// micro-steps and deferred updates cost no sync; [`overflowed`] reads it once per step.
    pub fn unscale(&self, grads: &mut [Tensor]) -> Result<Tensor, String> {
        let _guard = tch::no_grad_guard();
        let defined: Vec<Tensor> = grads
            .iter()
            .filter(|g| g.defined())
            .map(Tensor::shallow_clone)
            .collect();
        let device = defined.first().map_or(Device::Cpu, Tensor::device);
        let options = (tch::Kind::Float, device);
        // `full`/`zeros` fill on the device; uploading host scalars would block on CUDA.
        let found_inf = Tensor::f_zeros([1], options).map_err(crate::tch_message)?;
        let inverse = match &self.device {
            Some(state) => state.scale.f_reciprocal(),
            None => Tensor::f_full([1], 1.0 / self.scale, options),
        }
        .map_err(crate::tch_message)?;
        crate::shim::unscale_grads(&defined, &found_inf, &inverse)?;
        Ok(found_inf)
    }

    /// Updates the scale after a step (`overflow`: the step was skipped), on the host.
    pub fn update(&mut self, overflow: bool) -> Result<(), String> {
        self.read_back_device_state()?;
        if overflow {
            self.scale *= self.backoff_factor;
            self.growth_tracker = 0;
            self.skipped_steps += 1;
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker >= self.growth_interval {
                self.scale *= self.growth_factor;
                self.growth_tracker = 0;
            }
        }
        Ok(())
    }

    /// Updates the scale after a step from the overflow flag (0 or 1, on the device) without
    /// reading it, as PyTorch's `_amp_update_scale_`: the same rules as [`GradScaler::update`].
    pub fn update_on_device(&mut self, found_inf: &Tensor) -> Result<(), String> {
        let _guard = tch::no_grad_guard();
        if self.device.is_none() {
            // `full` fills on the device; no host-to-device copy.
            let on = |value: f64, kind| Tensor::f_full([1], value, (kind, found_inf.device()));
            self.device = Some(DeviceScale {
                scale: on(self.scale, tch::Kind::Float).map_err(crate::tch_message)?,
                growth_tracker: on(self.growth_tracker as f64, tch::Kind::Int)
                    .map_err(crate::tch_message)?,
                skipped_steps: on(self.skipped_steps as f64, tch::Kind::Double)
                    .map_err(crate::tch_message)?,
            });
        }
        let Some(state) = self.device.as_mut() else {
            return Ok(());
        };
        let _ = state
            .scale
            .f_internal_amp_update_scale_(
                &state.growth_tracker,
                found_inf,
                self.growth_factor,
                self.backoff_factor,
                i64::from(self.growth_interval),
            )
            .map_err(crate::tch_message)?;
        let _ = state
            .skipped_steps
            .f_add_(found_inf)
            .map_err(crate::tch_message)?;
        Ok(())
    }

    /// The scaler with its device state read back (a sync): for checkpoints and inspection.
    pub fn snapshot(&self) -> Result<GradScaler, String> {
        let mut copy = GradScaler {
            device: None,
            ..*self
        };
        if let Some(state) = &self.device {
            let read = |t: &Tensor| t.f_double_value(&[0]).map_err(crate::tch_message);
            copy.scale = read(&state.scale)?;
            copy.growth_tracker = read(&state.growth_tracker)? as u32;
            copy.skipped_steps = read(&state.skipped_steps)? as u64;
        }
        Ok(copy)
    }

    /// Brings the device state back into the fields and drops it: the host decides again.
    fn read_back_device_state(&mut self) -> Result<(), String> {
        if self.device.is_some() {
            *self = self.snapshot()?;
        }
        Ok(())
    }
}

/// Whether a `found_inf` flag from [`GradScaler::unscale`] (possibly summed over several
/// micro-steps) says the gradients overflowed. This reads the device: one sync per optimizer
/// step on the mixed-precision path, as PyTorch's `GradScaler.step` does.
pub fn overflowed(found_inf: &Tensor) -> Result<bool, String> {
    found_inf
        .f_double_value(&[0])
        .map(|value| value != 0.0)
        .map_err(crate::tch_message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_backs_off_and_skips() {
        let mut scaler = GradScaler::default();
        let mut grads = vec![
            Tensor::from_slice(&[1.0f32]),
            Tensor::from_slice(&[f32::INFINITY, 1.0]),
        ];
        assert!(overflowed(&scaler.unscale(&mut grads).unwrap()).unwrap());
        scaler.update(true).unwrap();
        assert_eq!((scaler.scale, scaler.skipped_steps), (32768.0, 1));
    }

    #[test]
    fn unscale_divides_and_growth_happens_after_the_interval() {
        let mut scaler = GradScaler {
            growth_interval: 2,
            ..GradScaler::default()
        };
        let mut grads = vec![Tensor::from_slice(&[65536.0f32]), Tensor::new()];
        assert!(!overflowed(&scaler.unscale(&mut grads).unwrap()).unwrap());
        assert_eq!(grads[0].double_value(&[0]), 1.0);
        scaler.update(false).unwrap();
        assert_eq!(scaler.scale, 65536.0);
        scaler.update(false).unwrap();
        assert_eq!(scaler.scale, 131072.0);
    }
}
