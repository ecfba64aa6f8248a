//! Slicers for fe-host networks: cut batches into minibatches and join the results.
//!
//! Ports of FastEstimator's slicers (`fastestimator.slicer`, PyTorch branch):
//!
//! * [`AxisSlicer`]: cuts along one axis (one slice per index, or minibatches of a given size
//!   or count) and concatenates back along the same axis.
//! * [`MeanUnslicer`]: slices nothing; joins per-minibatch values (losses) by averaging.
//! * [`SlidingSlicer`]: sliding windows with per-axis strides and padding, joined back to the
//!   original shape by summing or averaging overlapping windows.
//!
//! In a manifest a slicer's `slice` keys reach the component as `CreateContext::inputs` and its
//! `unslice` keys as `CreateContext::outputs`. The host checks what spans several slicers
//! (overlapping keys, equal slice counts, unslicing without slicing); each slicer here checks
//! its own configuration and returns errors (never panics) for tensors it cannot handle.
#![deny(missing_docs)]

use fe_plugin_api::{inventory, Error, Field, Registration, Result};

mod axis;
mod mean;
mod sliding;

pub use axis::{AxisSlicer, AxisSlicerConfig};
pub use mean::MeanUnslicer;
pub use sliding::{PadMode, SlidingSlicer, SlidingSlicerConfig, Strides, UnsliceMode};

inventory::submit! {
    Registration::slicer::<AxisSlicer>(
        "AxisSlicer",
        "Cuts batches along one axis (per index, or into minibatches) and concatenates them back",
    )
    .fields(&[
        Field::required("axis", "integer", "The axis to cut along; negative counts from the end"),
        Field::optional("minibatch_size", "integer", "none", "Cut into minibatches of this many entries, keeping the axis"),
        Field::optional("num_slices", "integer", "none", "Cut into exactly this many minibatches, keeping the axis"),
    ])
}

inventory::submit! {
    Registration::slicer::<MeanUnslicer>(
        "MeanUnslicer",
        "Slices nothing; joins per-minibatch values (e.g. losses) by averaging them",
    )
    .fields(&[])
}

inventory::submit! {
    Registration::slicer::<SlidingSlicer>(
        "SlidingSlicer",
        "Cuts batches into sliding windows and joins them back by summing or averaging overlaps",
    )
    .fields(&[
        Field::required("window_size", "[integer]", "The window's size on every axis; -1 copies the input's length"),
        Field::optional("strides", "integer | [integer]", "window_size", "How far the window moves on each axis (0: not slid)"),
        Field::optional("pad_mode", "\"drop\" | \"partial\" | \"constant\" | \"nopad\" | \"mirror\"", "\"drop\"", "Where the windows do not tile an axis"),
        Field::optional("pad_val", "float", "0.0", "What constant mode pads with, and uncovered positions get"),
        Field::optional("unslice_mode", "\"avg\" | \"sum\"", "\"avg\"", "How unslicing combines overlapping windows"),
        Field::optional("unslice_shape", "[integer]", "the last sliced input's", "The shape unsliced values take"),
        Field::optional("squeeze_window", "bool", "false", "Remove axes of window size 1 from minibatches"),
    ])
}

fe_plugin_api::export_plugin!();

/// `axis` (negative counts from the end) as an index into a tensor of rank `rank`.
fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let rank = i64::try_from(rank).ok()?;
    let index = if axis < 0 { axis + rank } else { axis };
    if (0..rank).contains(&index) {
        usize::try_from(index).ok()
    } else {
        None
    }
}

/// The error for an empty `slices` list given to `unslice`.
fn no_slices(component: &str, key: &str) -> Error {
    Error::msg(format!(
        "{component} was given no minibatches of `{key}` to unslice"
    ))
}

/// Fails unless every slice has the shape of the first.
fn same_shapes(key: &str, slices: &[&fe_plugin_api::tch::Tensor]) -> Result<()> {
    let Some(first) = slices.first() else {
        return Ok(());
    };
    let shape = first.size();
    for (index, slice) in slices.iter().enumerate().skip(1) {
        if slice.size() != shape {
            return Err(Error::msg(format!(
                "minibatch {index} of `{key}` has shape {:?}, but minibatch 0 has {shape:?}",
                slice.size()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::normalize_axis;

    #[test]
    fn normalize_axis_accepts_both_ends_and_rejects_outside() {
        assert_eq!(normalize_axis(0, 3), Some(0));
        assert_eq!(normalize_axis(2, 3), Some(2));
        assert_eq!(normalize_axis(-1, 3), Some(2));
        assert_eq!(normalize_axis(-3, 3), Some(0));
        assert_eq!(normalize_axis(3, 3), None);
        assert_eq!(normalize_axis(-4, 3), None);
        assert_eq!(normalize_axis(0, 0), None);
    }

    #[test]
    fn all_three_slicers_are_registered_as_slicers() {
        use fe_plugin_api::{find_registration, ComponentKind};
        for name in ["AxisSlicer", "MeanUnslicer", "SlidingSlicer"] {
            let registration = find_registration(ComponentKind::Slicer, name);
            assert!(registration.is_some(), "{name} is not registered");
        }
    }
}
