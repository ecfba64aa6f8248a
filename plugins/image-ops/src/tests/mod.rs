//! Tests through the registrations: `testing::numpy_op` (the adapter the host calls) for
//! fixed-seed calls, and the registered factory for calls with a chosen `ctx.seed`.

mod affine;
mod autocontrast;
mod bbox_crops;
mod blur;
mod border_crop;
mod box_blur;
mod clahe;
mod color_more;
mod crop;
mod crop_and_pad;
mod cv_gaussian;
mod defocus;
mod degrade;
mod distort;
mod elastic;
mod flip;
mod geometric;
mod glass_blur;
mod grid_mask;
mod grid_shuffle;
mod invert_noise;
mod iso_noise;
mod keypoint_formats;
mod mask_crop;
mod mask_dropout;
mod motion;
mod optical;
mod perspective;
mod photometric;
mod piecewise;
mod pil;
mod random_scale;
mod read;
mod reference;
mod resize;
mod resized_crops;
mod rotate;
mod rua;
mod sharpen;
mod targets;
mod targets_bbox;
mod targets_distort;
mod targets_extra;
mod targets_geometry;
mod thin_plate;
mod xy_masking;
mod zoom_blur;

use std::path::{Path, PathBuf};

use fe_plugin_api::abi_stable::std_types::{RSlice, RString};
use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::testing::{self, TestNumpyOp};
use fe_plugin_api::{
    find_registration, ComponentKind, CreateContext, Factory, NumpyOp, StepContext,
};

/// Builds op `name` through the adapter, writing each input key back to itself.
fn op(name: &str, config: &str, keys: &[&str]) -> TestNumpyOp {
    testing::numpy_op(name, config, keys, keys).unwrap()
}

/// Builds op `name` through its registered factory, so tests can pick `ctx.seed` and read
/// `batchable()` (which `TestNumpyOp` does not expose).
fn direct(name: &str, config: &str, keys: &[&str]) -> Box<dyn NumpyOp> {
    let registration = find_registration(ComponentKind::NumpyOp, name).unwrap();
    let Factory::NumpyOp(make) = registration.factory() else {
        panic!("{name} is not a numpy op");
    };
    let keys: Vec<RString> = keys.iter().map(|k| RString::from(*k)).collect();
    let ctx = CreateContext {
        inputs: RSlice::from_slice(&keys),
        outputs: RSlice::from_slice(&keys),
        ..CreateContext::detached("test")
    };
    make(config, &ctx).unwrap()
}

/// Builds op type `T` from `config` with input (and output) `keys`, so tests can read the
/// parameters it draws.
fn typed<T: fe_plugin_api::FromConfig>(config: &str, keys: &[&str]) -> T {
    let keys: Vec<RString> = keys.iter().map(|k| RString::from(*k)).collect();
    let ctx = CreateContext {
        inputs: RSlice::from_slice(&keys),
        outputs: RSlice::from_slice(&keys),
        ..CreateContext::detached("test")
    };
    T::from_config(fe_plugin_api::parse_config(config).unwrap(), &ctx).unwrap()
}

/// A uint8 image of `shape` with values spread over 0..=255, the same for the same `seed`.
fn noise(shape: &[i64], seed: i64) -> Tensor {
    fe_plugin_api::tch::manual_seed(seed);
    Tensor::randint(256, shape, (Kind::Uint8, Device::Cpu))
}

/// A pipeline context whose seed is `seed`.
fn seeded(seed: u64) -> StepContext<'static> {
    StepContext {
        seed,
        ..StepContext::for_tests()
    }
}

/// Runs `op` on one sample with `ctx.seed = seed`.
fn run(op: &dyn NumpyOp, inputs: &[&Tensor], seed: u64) -> Vec<Tensor> {
    op.forward(inputs, &seeded(seed)).unwrap()
}

/// `0, 1, 2, ...` in `shape`, as `kind`.
fn ramp(shape: &[i64], kind: Kind) -> Tensor {
    let n: i64 = shape.iter().product();
    Tensor::arange(n, (Kind::Int64, Device::Cpu))
        .reshape(shape)
        .to_kind(kind)
}

/// A tensor's values, flattened, as `i64`.
fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64).flatten(0, -1)).unwrap()
}

/// A tensor's values, flattened, as `f64`.
fn floats(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
}

/// `uint8` tensor of `shape` holding `values`.
fn bytes(values: &[u8], shape: &[i64]) -> Tensor {
    Tensor::from_slice(values).reshape(shape)
}

/// A directory removed when dropped, unique to the test process and `name`.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("fe-image-ops-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every `[[pipeline.ops]]` snippet in the README builds: the op exists and its config keys
/// are accepted.
#[test]
fn readme_snippets_build() {
    let readme = include_str!("../../README.md");
    let mut built = Vec::new();
    for block in readme.split("```toml").skip(1) {
        let block = block.split("```").next().unwrap();
        // Trace snippets (`[[traces]]`, e.g. ImageSaver) are not ops.
        if !block.contains("[[pipeline.ops]]") {
            continue;
        }
        let (mut name, mut keys, mut config) = (String::new(), Vec::new(), String::new());
        for line in block.lines().map(|l| l.split('#').next().unwrap().trim()) {
            let (key, value) = match line.split_once(" = ") {
                Some(pair) => pair,
                None => continue,
            };
            match key {
                "op" => name = value.trim_matches('"').to_owned(),
                "inputs" => {
                    keys = value
                        .trim_matches(|c| c == '[' || c == ']')
                        .split(',')
                        .map(|k| k.trim().trim_matches('"').to_owned())
                        .collect()
                }
                "outputs" | "mode" => {}
                _ => config.push_str(&format!("{line}\n")),
            }
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        testing::numpy_op(&name, &config, &keys, &keys)
            .unwrap_or_else(|e| panic!("README snippet for {name}: {e}"));
        built.push(name);
    }
    assert_eq!(
        built,
        [
            "ReadImage",
            "Resize",
            "CenterCrop",
            "RandomCrop",
            "HorizontalFlip",
            "Rotate",
            "RandomRotate90",
            "PadIfNeeded",
            "SmallestMaxSize",
            "RandomScale",
            "Crop",
            "RandomResizedCrop",
            "RandomSizedCrop",
            "RandomCropFromBorders",
            "CropNonEmptyMaskIfExists",
            "CropAndPad",
            "RandomSizedBBoxSafeCrop",
            "RandomCropNearBBox",
            "CoarseDropout",
            "GridMask",
            "RandomGridShuffle",
            "XYMasking",
            "MaskDropout",
            "ShiftScaleRotate",
            "GridDistortion",
            "Perspective",
            "OpticalDistortion",
            "PiecewiseAffine",
            "ThinPlateSpline",
            "ColorJitter",
            "RandomBrightnessContrast",
            "ImageCompression",
            "ShearX",
            "RUA",
            "RandomResizedCrop",
        ]
    );
}
