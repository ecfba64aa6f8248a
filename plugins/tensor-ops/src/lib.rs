//! Tensor utilities for fe-host networks, with FastEstimator's TensorOp semantics: `Average`,
//! `Constant`, `Reshape`, `Permute`, `Argmax`, `Normalize`, `Resize` and `Resize3D`; batch mixing
//! (`MixUpBatch`, `CutMixBatch`), adversarial examples (`Watch`, `FGSM`) and error-correcting
//! output codes (`Hadamard`, `UnHadamard`).
//!
//! They run on whole batches, exactly as FastEstimator's TensorOps do: `Reshape`'s `shape`,
//! `Permute`'s `permutation` and `Argmax`'s `axis` all count the batch dimension (dimension 0).
//! Every op runs in every mode unless the manifest says otherwise. See the crate's README for
//! the manifest syntax of each.

use fe_plugin_api::{inventory, Field, Registration};

mod adversarial;
mod argmax;
mod average;
mod beta;
mod constant;
mod hadamard;
mod mix;
mod normalize;
mod permute;
mod reshape;
mod resize;

pub use adversarial::{Fgsm, FgsmConfig, Watch};
pub use argmax::{Argmax, ArgmaxConfig};
pub use average::Average;
pub use constant::{Constant, ConstantConfig};
pub use hadamard::{Hadamard, HadamardConfig, UnHadamard};
pub use mix::{CutMixBatch, CutMixConfig, MixUpBatch, MixUpConfig};
pub use normalize::{Normalize, NormalizeConfig, Stat};
pub use permute::{Permute, PermuteConfig};
pub use reshape::{Reshape, ReshapeConfig, Shape};
pub use resize::{Resize, Resize3d, Resize3dConfig, ResizeConfig};

inventory::submit! {
    Registration::tensor_op::<Watch>(
        "Watch",
        "Makes its keys leaves that record gradients, so a later op (FGSM) can differentiate a loss with respect to them",
    )
    .fields(&[])
}

inventory::submit! {
    Registration::tensor_op::<Fgsm>(
        "FGSM",
        "Fast gradient sign method: clip(x + epsilon·sign(d loss/dx)), inputs [data, loss], data from a Watch",
    )
    .fields(&[
        Field::optional("epsilon", "float", "0.01", "Step size, ≥ 0"),
        Field::optional("clip_low", "float", "the batch's minimum", "Lower bound of the result"),
        Field::optional("clip_high", "float", "the batch's maximum", "Upper bound of the result"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<MixUpBatch>(
        "MixUpBatch",
        "MixUp: each input becomes λx + (1-λ)·roll(x), λ = max(λ0, 1-λ0), λ0 ~ Beta(alpha, alpha); the same λ for images and labels",
    )
    .default_mode("train")
    .fields(&[
        Field::optional("alpha", "float", "1.0", "Beta(alpha, alpha) parameter, > 0"),
        Field::optional("shared_beta", "bool", "false", "One λ for the whole batch instead of one per sample"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<CutMixBatch>(
        "CutMixBatch",
        "CutMix: pastes a patch of the neighbouring image into [B, C, H, W] images; labels mixed by the pixel share kept",
    )
    .default_mode("train")
    .fields(&[
        Field::optional("alpha", "float", "1.0", "Beta(alpha, alpha) parameter, > 0"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Average>(
        "Average",
        "Element-wise mean of its input tensors",
    )
    .fields(&[])
}

inventory::submit! {
    Registration::tensor_op::<Reshape>(
        "Reshape",
        "Reshapes the whole batch tensor to `shape` (batch dimension included, -1 inferred)",
    )
    .fields(&[
        Field::required("shape", "[integer]", "The whole output's shape, batch dimension included; one entry may be -1"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Permute>(
        "Permute",
        "Reorders the dimensions of the batch tensor (batch dimension included; default NHWC to NCHW)",
    )
    .fields(&[
        Field::optional("permutation", "[integer]", "[0, 3, 1, 2]", "Output dimension i is input dimension permutation[i]"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Argmax>(
        "Argmax",
        "Index of the maximum along `axis` (batch dimension included; default 0), per input",
    )
    .fields(&[
        Field::optional("axis", "integer", "0", "The dimension, batch included; use 1 or -1 for classes of [B, C]"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Normalize>(
        "Normalize",
        "(x - mean * max_pixel_value) / (std * max_pixel_value), per channel (dimension -3), per input",
    )
    .fields(&[
        Field::optional("mean", "float | [float]", "[0.485, 0.456, 0.406]", "Mean in units of max_pixel_value, one or per channel"),
        Field::optional("std", "float | [float]", "[0.229, 0.224, 0.225]", "Standard deviation in units of max_pixel_value"),
        Field::optional("max_pixel_value", "float", "255.0", "What mean and std are multiplied by (> 0)"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Constant>(
        "Constant",
        "A tensor shaped like its input, filled with `constant`",
    )
    .fields(&[
        Field::optional("constant", "float", "0.0", "The value every element takes"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Resize>(
        "Resize",
        "Resizes channels-first [B, C, *spatial] batches to `size` as torch's interpolate does (nearest, linear, bilinear, bicubic, trilinear, area), per input",
    )
    .fields(&[
        Field::required("size", "[integer]", "Output spatial size, batch and channels excluded: [L], [H, W] or [H, W, D]"),
        Field::optional("resize_mode", "string", "nearest", "nearest, linear (1-D), bilinear or bicubic (2-D), trilinear (3-D), area"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Resize3d>(
        "Resize3D",
        "FastEstimator's Resize3D: [B, C, H, W, D] batches to `output_shape`, nearest or area, per input",
    )
    .fields(&[
        Field::required("output_shape", "[integer]", "[H, W, D], batch and channels excluded"),
        Field::optional("resize_mode", "string", "nearest", "nearest or area"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<Hadamard>(
        "Hadamard",
        "Class labels [B] or [B, 1] to their Hadamard code rows [B, code_length] (error-correcting output codes), per input",
    )
    .fields(&[
        Field::required("n_classes", "integer", "How many classes there are"),
        Field::optional("code_length", "integer", "smallest power of 2 ≥ n_classes", "Code length, a power of 2 ≥ n_classes"),
    ])
}

inventory::submit! {
    Registration::tensor_op::<UnHadamard>(
        "UnHadamard",
        "Hadamard code outputs [B, code_length] to class probabilities [B, n_classes] by inverse L1 distance to each class's code, per input",
    )
    .fields(&[
        Field::required("n_classes", "integer", "How many classes there are, ≥ 2"),
        Field::optional("code_length", "integer", "smallest power of 2 ≥ n_classes", "Code length, a power of 2 ≥ n_classes"),
    ])
}

fe_plugin_api::export_plugin!();

/// Fails unless the op was given at least one input key and as many output keys as inputs
/// (FastEstimator's multi-io ops map input `i` to output `i`).
fn expect_paired_keys(ctx: &fe_plugin_api::CreateContext<'_>) -> fe_plugin_api::Result<()> {
    let inputs = ctx.inputs.len();
    if inputs == 0 {
        return Err(fe_plugin_api::Error::config(
            "inputs",
            "expected at least 1 key, got 0",
        ));
    }
    ctx.expect_arity(Some(inputs), Some(inputs))
}

#[cfg(test)]
mod readme {
    use fe_plugin_api::testing;

    /// `inputs = ["a", "b"]` or `inputs = "a"` as a list of keys.
    fn keys(value: &str) -> Vec<String> {
        value
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|key| key.trim().trim_matches('"').to_owned())
            .filter(|key| !key.is_empty())
            .collect()
    }

    /// Every `[[network.ops]]` example in the README builds with its keys and config.
    #[test]
    fn every_manifest_example_builds() {
        let text = include_str!("../README.md");
        let mut built = Vec::new();
        for block in text.split("```toml").skip(1) {
            let block = block.split("```").next().unwrap();
            let (mut name, mut inputs, mut outputs) = (String::new(), Vec::new(), Vec::new());
            let mut config = String::new();
            for line in block.lines().map(str::trim) {
                if line.is_empty() || line == "[[network.ops]]" {
                    continue;
                }
                let (key, value) = line.split_once('=').unwrap();
                match key.trim() {
                    "op" => name = value.trim().trim_matches('"').to_owned(),
                    "inputs" => inputs = keys(value),
                    "outputs" => outputs = keys(value),
                    "mode" => {}
                    _ => config.push_str(&format!("{line}\n")),
                }
            }
            let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
            if let Err(err) = testing::tensor_op(&name, &config, &inputs, &outputs) {
                panic!("README example for {name} does not build: {err:?}");
            }
            built.push(name);
        }
        // Every op the plugin registers has a README example.
        let mut registered: Vec<&str> = fe_plugin_api::registrations().map(|r| r.name()).collect();
        registered.sort();
        built.sort();
        assert_eq!(built, registered);
    }
}
