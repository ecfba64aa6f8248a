//! Gradient clipping, as `torch.nn.utils.clip_grad_norm_` and `clip_grad_value_` do it (the
//! same ATen ops through the shim, csrc/optim.cpp, so the clipped gradients are bit-identical
//! to theirs on CPU). The UpdateOp applies it to the gradients the optimizer is about to use:
//! unscaled, averaged over the ranks, merged over `merge_grad` calls.

use std::os::raw::{c_char, c_int};

use tch::Tensor;
use torch_sys::C_tensor;

extern "C" {
    fn fe_clip_grad_norm(
        grads: *const *mut C_tensor,
        count: c_int,
        max_norm: f64,
        norm_type: f64,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
    fn fe_clip_grad_value(
        grads: *const *mut C_tensor,
        count: c_int,
        value: f64,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
}

/// How an update clips its gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clip {
    /// Scale every gradient by `min(1, max_norm / (total_norm + 1e-6))`, the total norm taken
    /// over all of them as one vector (`norm_type` 2 by default, `inf` the largest magnitude).
    Norm {
        /// The largest total norm let through.
        max_norm: f64,
        /// The p of the p-norm.
        norm_type: f64,
    },
    /// Clamp every gradient element into `[-value, value]`.
    Value(f64),
}

/// The manifest's clipping fields of an update.
#[derive(Debug, Default, Clone, Copy)]
pub struct ClipConfig {
    /// `clip_norm`
    pub clip_norm: Option<f64>,
    /// `norm_type`
    pub norm_type: Option<f64>,
    /// `clip_value`
    pub clip_value: Option<f64>,
}

impl ClipConfig {
    /// The clipping these fields ask for, or `(field, message)` for a value that cannot be
    /// meant. One of `clip_norm` and `clip_value`: Lightning takes one clipping algorithm and
    /// Keras refuses more than one of its `clipnorm`/`clipvalue`, and either order of the two
    /// would surprise someone.
    pub fn resolve(self) -> Result<Option<Clip>, (&'static str, String)> {
        let positive = |field: &'static str, x: f64| {
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err((
                    field,
                    format!("must be a positive, finite number (got {x})"),
                ))
            }
        };
        match (self.clip_norm, self.clip_value) {
            (Some(_), Some(_)) => Err((
                "clip_value",
                "set either `clip_norm` or `clip_value`, not both".to_owned(),
            )),
            (Some(max_norm), None) => {
                let max_norm = positive("clip_norm", max_norm)?;
                let norm_type = self.norm_type.unwrap_or(2.0);
                if norm_type.is_nan() || norm_type < 1.0 {
                    return Err((
                        "norm_type",
                        format!("must be a number of at least 1, or inf (got {norm_type})"),
                    ));
                }
                Ok(Some(Clip::Norm {
                    max_norm,
                    norm_type,
                }))
            }
            (None, value) => {
                if self.norm_type.is_some() {
                    return Err(("norm_type", "needs `clip_norm`".to_owned()));
                }
                value
                    .map(|v| positive("clip_value", v).map(Clip::Value))
                    .transpose()
            }
        }
    }
}

impl Clip {
    /// The clipped gradients (new tensors: the inputs may be a batch's keys, which traces
    /// still read); undefined gradients stay undefined and count for nothing, as a `None`
    /// `.grad` in PyTorch. The defined ones must share a device and dtype.
    pub fn apply(&self, grads: &[Tensor]) -> Result<Vec<Tensor>, String> {
        let defined: Vec<*mut C_tensor> = grads
            .iter()
            .filter(|g| g.defined())
            .map(|g| g.as_ptr().cast_mut())
            .collect();
        if defined.is_empty() {
            return Ok(grads.iter().map(Tensor::shallow_clone).collect());
        }
        let mut out = vec![std::ptr::null_mut(); defined.len()];
        let count = defined.len() as c_int;
        // SAFETY: every pointer is a live tensor borrowed for the call; the shim writes one new
        // tensor per slot of `out` only on success.
        let error = unsafe {
            match *self {
                Clip::Norm {
                    max_norm,
                    norm_type,
                } => fe_clip_grad_norm(
                    defined.as_ptr(),
                    count,
                    max_norm,
                    norm_type,
                    out.as_mut_ptr(),
                ),
                Clip::Value(value) => {
                    fe_clip_grad_value(defined.as_ptr(), count, value, out.as_mut_ptr())
                }
            }
        };
        crate::shim::check(error).map_err(|e| format!("gradient clipping: {e}"))?;
        // SAFETY: on success every slot holds a tensor the shim allocated for us.
        let mut clipped = out.into_iter().map(|t| unsafe { Tensor::from_ptr(t) });
        grads
            .iter()
            .map(|g| {
                if g.defined() {
                    clipped
                        .next()
                        .ok_or_else(|| "gradient clipping: too few tensors returned".to_owned())
                } else {
                    Ok(Tensor::new())
                }
            })
            .collect()
    }
}
