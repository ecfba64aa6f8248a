//! Labels and predictions to class indices, the way FastEstimator's classification traces
//! read them.
//!
//! * Predictions with several scores per sample (`[..., C]`, `C > 1`) give `argmax` over the
//!   last dimension; probabilities and logits give the same classes.
//! * Predictions with one value per sample (`[N]` or `[N, 1]`) are binary: class 1 when the
//!   value is above the threshold, else class 0. With the default threshold 0.5 this is
//!   FastEstimator's `np.round` on probabilities (0.5 itself is class 0).
//! * Labels are one-hot (argmax over the last dimension) when their last dimension is > 1 and
//!   they do not already hold one value per prediction; otherwise they are class indices
//!   (floating labels are rounded).

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{Error, Result};

/// The default binarisation threshold for one-value-per-sample predictions.
pub(crate) fn default_threshold() -> f64 {
    0.5
}

/// One batch as class indices.
pub(crate) struct Classes {
    /// The true class of each sample, `[n]`, Int64, on the predictions' device.
    pub truth: Tensor,
    /// The predicted class of each sample, `[n]`, Int64.
    pub predicted: Tensor,
    /// Number of classes the prediction shape implies: `C` for `C` scores, 2 for one value.
    pub implied_classes: usize,
    /// `true` when the predictions held one value per sample (binary).
    pub single_column: bool,
}

/// Predicted classes: argmax over the last dimension, or `> threshold` for one value per sample.
pub(crate) fn predicted_classes(y_pred: &Tensor, threshold: f64) -> Result<(Tensor, usize, bool)> {
    let size = y_pred.size();
    let columns = size.last().copied().unwrap_or(1);
    if size.len() >= 2 && columns > 1 {
        let classes = y_pred.f_argmax(-1, false)?.f_reshape([-1])?;
        Ok((classes, columns as usize, false))
    } else {
        let classes = y_pred
            .f_reshape([-1])?
            .f_gt(threshold)?
            .f_to_kind(Kind::Int64)?;
        Ok((classes, 2, true))
    }
}

/// True classes for `count` predictions (see the module documentation).
pub(crate) fn true_classes(y_true: &Tensor, count: usize, device: Device) -> Result<Tensor> {
    let size = y_true.size();
    let one_hot =
        size.len() > 1 && size.last().copied().unwrap_or(1) > 1 && y_true.numel() != count;
    let labels = if one_hot {
        y_true.f_argmax(-1, false)?
    } else if y_true.f_is_floating_point()? {
        y_true.f_round()?.f_to_kind(Kind::Int64)?
    } else {
        y_true.f_to_kind(Kind::Int64)?
    };
    let labels = labels.f_reshape([-1])?.f_to_device(device)?;
    if labels.numel() != count {
        return Err(Error::msg(format!(
            "{} labels (shape {:?}) for {} predictions",
            labels.numel(),
            size,
            count
        )));
    }
    Ok(labels)
}

/// Reads one batch `[y_true, y_pred]` as class indices.
pub(crate) fn classes(y_true: &Tensor, y_pred: &Tensor, threshold: f64) -> Result<Classes> {
    let (predicted, implied_classes, single_column) = predicted_classes(y_pred, threshold)?;
    let truth = true_classes(y_true, predicted.numel(), predicted.device())?;
    Ok(Classes {
        truth,
        predicted,
        implied_classes,
        single_column,
    })
}

/// Splits a metric's inputs into `[y_true, y_pred]`.
pub(crate) fn pair<'a>(inputs: &[&'a Tensor]) -> Result<(&'a Tensor, &'a Tensor)> {
    match inputs {
        [y_true, y_pred] => Ok((y_true, y_pred)),
        _ => Err(Error::msg(format!(
            "expected inputs [y_true, y_pred], got {} input(s)",
            inputs.len()
        ))),
    }
}
