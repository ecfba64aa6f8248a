//! Image transforms and augmentations for fe-host pipelines, after FastEstimator's image
//! NumpyOps (albumentations names and parameters); the README lists them. The newer ops are
//! registered in `registry.rs`.
//!
//! Images follow FastEstimator's layout: `(H, W, C)`, or `(H, W)` for a plain 2-D array; a
//! batch adds a leading `N`. Every op except `ReadImage` accepts several inputs (an image and
//! its mask, say), writes one output per input, and applies the *same* random choice to all
//! of them. Random ops draw only from `ctx.seed`, so a sample gets the same augmentation
//! whatever the number of pipeline workers.
#![warn(missing_docs)]

#[macro_use]
mod color;
mod affine;
mod autocontrast;
mod bbox_safe;
mod blur;
mod border_crop;
mod box_blur;
mod boxes;
mod bytes;
mod channel_ops;
mod clahe;
mod color_ops;
mod components;
mod compression;
mod crop;
mod crop_and_pad;
mod crop_and_pad_sides;
mod cv_gaussian;
mod defocus;
mod distort;
mod downscale;
mod dropout;
mod dropout_targets;
mod elastic;
mod enhance;
mod flip;
mod flips;
mod geometry;
mod glass_blur;
mod grid_mask;
mod grid_shuffle;
mod hls;
mod homography;
mod hsv;
mod hsv_pixels;
mod image_saver;
mod invert;
mod iso_noise;
mod jitter;
mod keypoint_formats;
mod keypoints;
mod lab;
mod layout;
mod mask_crop;
mod mask_dropout;
mod max_size;
pub mod montage;
mod motion;
mod multiplicative_noise;
mod near_bbox;
mod optical;
mod pad;
mod perspective;
mod piecewise;
mod pil;
mod pil_geometry;
mod random_scale;
mod read;
mod registry;
mod registry_color;
mod registry_extra;
mod registry_more;
mod registry_noise;
mod registry_quality;
mod registry_rua;
mod remap_targets;
mod resize;
mod rotate;
mod rua;
mod sharpen;
mod sized_crop;
mod targets;
mod thin_plate;
mod tps;
mod warp;
mod window;
mod xy_masking;
mod zoom_blur;

pub use affine::{Affine, AffineConfig, ShiftScaleRotate, ShiftScaleRotateConfig, Span};
pub use autocontrast::{AutoContrast, AutoContrastConfig};
pub use bbox_safe::{
    BBoxSafeRandomCrop, BBoxSafeRandomCropConfig, RandomSizedBBoxSafeCrop,
    RandomSizedBBoxSafeCropConfig,
};
pub use blur::{GaussianBlur, GaussianBlurConfig, MedianBlur, MedianBlurConfig};
pub use border_crop::{RandomCropFromBorders, RandomCropFromBordersConfig};
pub use box_blur::{Blur, BlurConfig};
pub use boxes::{BboxFormat, BboxParams, BboxParamsConfig};
pub use channel_ops::{
    ChannelDropout, ChannelDropoutConfig, ChannelShuffle, RGBShift, RgbShiftConfig, ToGray, ToSepia,
};
pub use clahe::{ClaheConfig, CLAHE};
pub use color_ops::{
    Bits, BrightnessContrastConfig, Equalize, GammaConfig, GaussNoise, GaussNoiseConfig,
    PlainConfig, Posterize, PosterizeConfig, RandomBrightnessContrast, RandomGamma, Solarize,
    SolarizeConfig, Threshold,
};
pub use compression::{ImageCompression, ImageCompressionConfig};
pub use crop::{CenterCrop, CropConfig, RandomCrop};
pub use crop_and_pad::{CropAndPad, CropAndPadConfig, Fill};
pub use crop_and_pad_sides::{Amounts, SideAmount};
pub use defocus::{Defocus, DefocusConfig};
pub use distort::{GridDistortion, GridDistortionConfig};
pub use downscale::{Downscale, DownscaleConfig, InterpolationPair};
pub use dropout::{CoarseDropout, CoarseDropoutConfig};
pub use elastic::{ElasticTransform, ElasticTransformConfig};
pub use enhance::{
    Brightness, Color, Contrast, EnhanceConfig, Sharpness, ShearConfig, ShearX, ShearY,
    TranslateConfig, TranslateX, TranslateY,
};
pub use flip::{HorizontalFlip, HorizontalFlipConfig};
pub use flips::{DihedralConfig, Flip, RandomRotate90, Transpose, VerticalFlip};
pub use glass_blur::{GlassBlur, GlassBlurConfig, GlassMode};
pub use grid_mask::{GridMask, GridMaskConfig};
pub use grid_shuffle::{RandomGridShuffle, RandomGridShuffleConfig};
pub use hsv::{HueSaturationValue, HueSaturationValueConfig};
pub use image_saver::{ImageSaver, ImageSaverConfig};
pub use invert::InvertImg;
pub use iso_noise::{ISONoise, IsoNoiseConfig};
pub use jitter::{ColorJitter, ColorJitterConfig};
pub use keypoints::{KeypointFormat, KeypointParams, KeypointParamsConfig};
pub use layout::Interpolation;
pub use mask_crop::{CropNonEmptyMaskIfExists, CropNonEmptyMaskIfExistsConfig};
pub use mask_dropout::{MaskDropout, MaskDropoutConfig, MaxObjects};
pub use max_size::{LongestMaxSize, MaxSizeConfig, SmallestMaxSize};
pub use motion::{MotionBlur, MotionBlurConfig};
pub use multiplicative_noise::{MultiplicativeNoise, MultiplicativeNoiseConfig, Multiplier};
pub use near_bbox::{PartShift, RandomCropNearBBox, RandomCropNearBBoxConfig};
pub use optical::{OpticalDistortion, OpticalDistortionConfig};
pub use pad::{PadIfNeeded, PadIfNeededConfig, Position};
pub use perspective::{Perspective, PerspectiveConfig};
pub use piecewise::{GridSize, PiecewiseAffine, PiecewiseAffineConfig};
pub use random_scale::{RandomScale, RandomScaleConfig};
pub use read::{ColorFlag, ReadImage, ReadImageConfig};
pub use resize::{Resize, ResizeConfig};
pub use rotate::{BorderMode, Limit, Rotate, RotateConfig};
pub use rua::{Choices, RuaConfig, RUA};
pub use sharpen::{Sharpen, SharpenConfig, SharpenMethod};
pub use sized_crop::{
    Crop, FixedCropConfig, RandomResizedCrop, RandomResizedCropConfig, RandomSizedCrop,
    RandomSizedCropConfig,
};
pub use thin_plate::{ThinPlateSpline, ThinPlateSplineConfig};
pub use xy_masking::{IntRange, XYMasking, XYMaskingConfig};
pub use zoom_blur::{ZoomBlur, ZoomBlurConfig};

use crate::targets::TARGET_FIELDS;
use fe_plugin_api::{inventory, Field, Registration};

inventory::submit! {
    Registration::numpy_op::<ReadImage>("ReadImage", "Reads image files (PNG, JPEG, BMP), or their bytes, into uint8 (H, W, 3) RGB or (H, W, 1) gray")
    .fields(&[
        Field::optional("parent_path", "string (path)", "\"\"", "Directory the paths are relative to, itself relative to the manifest"),
        Field::optional("color_flag", "\"color\" | \"gray\"", "\"color\"", "(H, W, 3) RGB or (H, W, 1) luma (\"grey\" also works)"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<Resize>("Resize", "Resizes images to height x width (nearest, bilinear or bicubic)")
    .fields(&[
        Field::required("height", "integer", "Output height in pixels"),
        Field::required("width", "integer", "Output width in pixels"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\" | \"bicubic\"", "\"bilinear\"", "Sampling (\"linear\" and \"cubic\" also work)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomCrop>("RandomCrop", "Crops a height x width window at a random position")
    .fields(&[
        Field::required("height", "integer", "Height of the window in pixels, at most the image's"),
        Field::required("width", "integer", "Width of the window in pixels, at most the image's"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<CenterCrop>("CenterCrop", "Crops the central height x width window")
    .fields(&[
        Field::required("height", "integer", "Height of the window in pixels, at most the image's"),
        Field::required("width", "integer", "Width of the window in pixels, at most the image's"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<HorizontalFlip>("HorizontalFlip", "Mirrors images left-right with probability p")
    .fields(&[
        Field::optional("p", "float", "0.5", "Probability of flipping a sample, in [0, 1]"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<Rotate>("Rotate", "Rotates images by a random angle in [-limit, limit] degrees")
    .fields(&[
        Field::optional("limit", "float | [float, float]", "90", "Angle range in degrees: l for [-l, l], or [lo, hi]"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\" | \"bicubic\"", "\"bilinear\"", "Sampling (\"linear\" and \"cubic\" also work)"),
        Field::optional("border_mode", "\"reflect_101\" | \"reflect\" | \"replicate\" | \"constant\"", "\"reflect_101\"", "How pixels outside the image are filled"),
        Field::optional("value", "float", "0", "Fill value for border_mode = \"constant\""),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}

fe_plugin_api::export_plugin!();

#[cfg(test)]
mod tests;
