//! CPU data transforms for fe-host pipelines, after FastEstimator's basic NumpyOps.
//!
//! * values ([`scaling`]): `Minmax`, `Normalize`, `ToFloat`, `Binarize`
//! * shapes ([`shape`]): `ExpandDims`, `Reshape`, `ChannelTranspose`; ([`concat`]): `Concat`
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
pub mod concat;
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
pub use concat::Concat;
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

use fe_plugin_api::{inventory, Field, Registration};

inventory::submit! {
    Registration::dataset::<GaussianBlobs>("GaussianBlobs", "Generated classification data: `samples` points around `classes` Gaussian centres (x float32, y int64)")
    .fields(&[
        Field::required("samples", "integer", "Number of samples"),
        Field::optional("features", "integer", "2", "Features per sample (x has this many float32 values)"),
        Field::optional("classes", "integer", "3", "Number of classes (y in 0..classes)"),
        Field::optional("spread", "float", "1.0", "Standard deviation around each centre"),
        Field::optional("center_box", "float", "10.0", "Centres lie in [-center_box, center_box] per feature"),
        Field::optional("seed", "integer", "0", "Seed of the centres and the samples"),
    ])
}

inventory::submit! {
    Registration::numpy_op::<Minmax>("Minmax", "Rescales each sample to [0, 1] by its own min and max")
    .fields(&[])
}
inventory::submit! {
    Registration::numpy_op::<Normalize>("Normalize", "(x - mean * max_pixel_value) / (std * max_pixel_value) per channel (last axis), as float32")
    .fields(&[
        Field::optional("mean", "float | [float]", "[0.485, 0.456, 0.406]", "Mean in units of max_pixel_value, one or per channel (last axis)"),
        Field::optional("std", "float | [float]", "[0.229, 0.224, 0.225]", "Standard deviation in units of max_pixel_value (> 0)"),
        Field::optional("max_pixel_value", "float", "255.0", "What mean and std are multiplied by"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<ToFloat>("ToFloat", "Divides by max_value (inferred from the dtype when absent) into float32")
    .fields(&[
        Field::optional("max_value", "float", "255 for uint8, 1 for floats", "The divisor (> 0); other dtypes need it given"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<Binarize>("Binarize", "1.0 where x >= threshold, else 0.0 (float32)")
    .fields(&[
        Field::required("threshold", "float", "Elements >= threshold become 1.0, the others 0.0"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<ExpandDims>("ExpandDims", "Inserts a dimension of size 1 at `axis`")
    .fields(&[
        Field::optional("axis", "integer", "-1", "Where the new dimension goes; negative counts from the end"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<Reshape>("Reshape", "Reshapes each sample to `shape` (one size may be -1)")
    .fields(&[
        Field::required("shape", "integer | [integer]", "Each output sample's shape; one entry may be -1"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<Concat>("Concat", "Flattens its inputs and joins them, in order, into one vector per sample (table columns into features)")
    .fields(&[])
}
inventory::submit! {
    Registration::numpy_op::<ChannelTranspose>("ChannelTranspose", "Permutes each sample's axes (default HWC -> CHW)")
    .fields(&[
        Field::optional("axes", "[integer]", "[2, 0, 1]", "Output axis i is input axis axes[i] (HWC to CHW by default)"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<PadSequence>("PadSequence", "Pads or truncates each sequence along its first axis to max_len")
    .fields(&[
        Field::required("max_len", "integer", "The length every sequence ends up with (>= 0)"),
        Field::optional("value", "float", "0", "The padding value, in the input's dtype"),
        Field::optional("append", "bool", "true", "Pad after the sequence; false: before it"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<Onehot>("Onehot", "Integer class label to a one-hot vector, with optional label smoothing")
    .fields(&[
        Field::required("num_classes", "integer", "Length of the one-hot vector"),
        Field::optional("label_smoothing", "float", "0.0", "Probability mass moved uniformly onto all classes"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<RemoveIf>("RemoveIf", "Drops samples whose inputs meet a condition (reduce, compare with a value)")
    .fields(&[
        Field::optional("reduce", "\"sum\" | \"mean\" | \"min\" | \"max\" | \"any\" | \"all\" | \"len\" | \"size\"", "none (one element per input)", "How each input becomes one number"),
        Field::required("compare", "\"lt\" | \"le\" | \"gt\" | \"ge\" | \"eq\" | \"ne\" | \"isnan\"", "The comparison that removes a sample"),
        Field::optional("value", "float", "none (required unless isnan)", "The number on the right of the comparison"),
        Field::optional("combine", "\"any\" | \"all\"", "\"any\"", "With several inputs: remove when any / all conditions hold"),
    ])
}

inventory::submit! {
    Registration::numpy_op::<Noise>("Noise", "Random values of a given shape (normal or uniform), seeded per sample")
    .fields(&[
        Field::required("shape", "[integer]", "Shape of one sample's values"),
        Field::optional("distribution", "\"normal\" | \"uniform\"", "\"normal\"", "Which distribution"),
        Field::optional("mean", "float", "0.0", "Mean of the normal distribution"),
        Field::optional("std", "float", "1.0", "Standard deviation of the normal distribution"),
        Field::optional("low", "float", "0.0", "Lower bound of the uniform distribution"),
        Field::optional("high", "float", "1.0", "Upper bound of the uniform distribution (exclusive)"),
    ])
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
            "Concat",
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
