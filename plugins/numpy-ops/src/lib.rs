//! CPU data transforms for fe-host pipelines, after FastEstimator's basic NumpyOps.
//!
//! * values ([`scaling`]): `Minmax`, `Normalize`, `ToFloat`, `Binarize`
//! * shapes ([`shape`]): `ExpandDims`, `Reshape`, `ChannelTranspose`
//! * sequences ([`sequence`]): `PadSequence`
//! * labels ([`label`]): `Onehot`
//! * filtering ([`filter`]): `RemoveIf`
//! * randomness ([`random`]): `Noise`
//! * generated data ([`blobs`]): the `GaussianBlobs` dataset
//!
//! Each op has a per-sample form (pipeline workers) and a batch form (dimension 0 is the
//! batch; network post-processing, and pipeline ops that report `batchable`). Ops that map
//! keys one to one accept several inputs and write one output per input. See the crate's
//! README for every op's configuration and a manifest snippet.
#![warn(missing_docs)]

pub mod blobs;
mod common;
pub mod filter;
pub mod label;
pub mod random;
pub mod scaling;
pub mod sequence;
pub mod shape;
#[cfg(test)]
mod test_util;

pub use blobs::{GaussianBlobs, GaussianBlobsConfig};
pub use common::OneOrMany;
pub use filter::{Combine, Compare, Reduce, RemoveIf, RemoveIfConfig};
pub use label::{Onehot, OnehotConfig};
pub use random::{Distribution, Noise, NoiseConfig};
pub use scaling::{
    Binarize, BinarizeConfig, Minmax, Normalize, NormalizeConfig, ToFloat, ToFloatConfig,
};
pub use sequence::{PadSequence, PadSequenceConfig};
pub use shape::{
    ChannelTranspose, ChannelTransposeConfig, ExpandDims, ExpandDimsConfig, Reshape, ReshapeConfig,
};

use fe_plugin_api::{inventory, Registration};

inventory::submit! {
    Registration::dataset::<GaussianBlobs>("GaussianBlobs", "Generated classification data: `samples` points around `classes` Gaussian centres (x float32, y int64)")
}

inventory::submit! {
    Registration::numpy_op::<Minmax>("Minmax", "Rescales each sample to [0, 1] by its own min and max")
}
inventory::submit! {
    Registration::numpy_op::<Normalize>("Normalize", "(x - mean * max_pixel_value) / (std * max_pixel_value) per channel (last axis), as float32")
}
inventory::submit! {
    Registration::numpy_op::<ToFloat>("ToFloat", "Divides by max_value (inferred from the dtype when absent) into float32")
}
inventory::submit! {
    Registration::numpy_op::<Binarize>("Binarize", "1.0 where x >= threshold, else 0.0 (float32)")
}
inventory::submit! {
    Registration::numpy_op::<ExpandDims>("ExpandDims", "Inserts a dimension of size 1 at `axis`")
}
inventory::submit! {
    Registration::numpy_op::<Reshape>("Reshape", "Reshapes each sample to `shape` (one size may be -1)")
}
inventory::submit! {
    Registration::numpy_op::<ChannelTranspose>("ChannelTranspose", "Permutes each sample's axes (default HWC -> CHW)")
}
inventory::submit! {
    Registration::numpy_op::<PadSequence>("PadSequence", "Pads or truncates each sequence along its first axis to max_len")
}
inventory::submit! {
    Registration::numpy_op::<Onehot>("Onehot", "Integer class label to a one-hot vector, with optional label smoothing")
}
inventory::submit! {
    Registration::numpy_op::<RemoveIf>("RemoveIf", "Drops samples whose inputs meet a condition (reduce, compare with a value)")
}

inventory::submit! {
    Registration::numpy_op::<Noise>("Noise", "Random values of a given shape (normal or uniform), seeded per sample")
}

fe_plugin_api::export_plugin!();

#[cfg(test)]
mod tests {
    use fe_plugin_api::{find_registration, ComponentKind};

    #[test]
    fn every_op_is_registered_as_a_numpy_op() {
        for name in [
            "Minmax",
            "Normalize",
            "ToFloat",
            "Binarize",
            "ExpandDims",
            "Reshape",
            "ChannelTranspose",
            "PadSequence",
            "Onehot",
            "RemoveIf",
            "Noise",
        ] {
            let registration = find_registration(ComponentKind::NumpyOp, name);
            assert!(registration.is_some_and(|r| !r.doc().is_empty()), "{name}");
        }
    }
}
