//! Registrations of the FastEstimator ops added after issue 32's list (InvertImg,
//! MultiplicativeNoise, the grid shuffle, the masking dropouts, the box- and mask-aware
//! crops, CropAndPad): what `fe-host plugins list` shows.

use crate::targets::TARGET_FIELDS;
use fe_plugin_api::{inventory, Field, Registration};

use crate::{
    BBoxSafeRandomCrop, CropAndPad, CropNonEmptyMaskIfExists, InvertImg, MaskDropout,
    MultiplicativeNoise, RandomCropFromBorders, RandomCropNearBBox, RandomGridShuffle, RandomScale,
    RandomSizedBBoxSafeCrop, XYMasking,
};

const P: Field = Field::optional(
    "p",
    "float",
    "0.5",
    "Probability of transforming a sample, in [0, 1]",
);
const UNTOUCHED: Field = Field::optional(
    "masks",
    "[string]",
    "[]",
    "Inputs left untouched (label masks)",
);

inventory::submit! {
    Registration::numpy_op::<InvertImg>("InvertImg", "Inverts images: max - x (255 for uint8, 1 for floats)").fields(&[UNTOUCHED, P])
}
inventory::submit! {
    Registration::numpy_op::<MultiplicativeNoise>("MultiplicativeNoise", "Multiplies images by random factors (per image, channel, pixel, or pixel and channel)")
    .fields(&[
        Field::optional("multiplier", "float | [float, float]", "[0.9, 1.1]", "Factor range, drawn uniformly (m means always m)"),
        Field::optional("per_channel", "bool", "false", "A factor per channel"),
        Field::optional("elementwise", "bool", "false", "A factor per pixel"),
        UNTOUCHED, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomGridShuffle>("RandomGridShuffle", "Cuts images into a grid and shuffles the cells of equal shape (masks, boxes, keypoints alike)")
    .fields(&[
        Field::optional("grid", "[integer, integer]", "[3, 3]", "Rows and columns of the grid, each at least 1"),
        P,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<XYMasking>("XYMasking", "Fills random full-height and full-width bands of images (and optionally masks) with a constant")
    .fields(&[
        Field::optional("num_masks_x", "integer | [integer, integer]", "0", "Number of vertical bands: [lo, hi], or n for [0, n]"),
        Field::optional("num_masks_y", "integer | [integer, integer]", "0", "Number of horizontal bands: [lo, hi], or n for [0, n]"),
        Field::optional("mask_x_length", "integer | [integer, integer]", "0", "Width of a vertical band in pixels: [lo, hi], or n for [0, n]"),
        Field::optional("mask_y_length", "integer | [integer, integer]", "0", "Height of a horizontal band in pixels: [lo, hi], or n for [0, n]"),
        Field::optional("fill_value", "float", "0", "Fill of image bands (\"fill\" also works)"),
        Field::optional("mask_fill_value", "float", "none", "Fill of mask bands; unset leaves masks untouched (\"fill_mask\" also works)"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks"),
        P,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<MaskDropout>("MaskDropout", "Erases random objects (8-connected pieces of one label) of a mask from the image and the masks")
    .fields(&[
        Field::optional("max_objects", "integer | [integer, integer]", "1", "Objects erased: [lo, hi], or n for [1, n]"),
        Field::optional("image_fill_value", "float", "0", "Fill of erased image pixels (\"fill\" also works)"),
        Field::optional("mask_fill_value", "float", "0", "Fill of erased mask pixels (\"fill_mask\" also works)"),
        Field::required("masks", "[string]", "Inputs that are label masks; objects come from the first"),
        P,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomScale>("RandomScale", "Rescales by a random factor 1 + [lo, hi] (the output size varies per sample)")
    .fields(&[
        Field::optional("scale_limit", "float | [float, float]", "0.1", "Factor minus 1: l means [-l, l]"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\" | \"bicubic\"", "\"bilinear\"", "Sampling of images; masks always use nearest"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (nearest sampling)"),
        P,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomCropFromBorders>("RandomCropFromBorders", "Cuts a random amount off each side (the output size varies per sample)")
    .fields(&[
        Field::optional("crop_left", "float", "0.1", "Most of the width cut from the left, in [0, 1]"),
        Field::optional("crop_right", "float", "0.1", "Most of the width cut from the right; crop_left + crop_right <= 1"),
        Field::optional("crop_top", "float", "0.1", "Most of the height cut from the top, in [0, 1]"),
        Field::optional("crop_bottom", "float", "0.1", "Most of the height cut from the bottom; crop_top + crop_bottom <= 1"),
        Field::optional("p", "float", "1.0", "Probability of cropping a sample, in [0, 1]"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<CropNonEmptyMaskIfExists>("CropNonEmptyMaskIfExists", "Crops height x width around a random labelled pixel of the masks (anywhere when they are empty)")
    .fields(&[
        Field::required("height", "integer", "Height of the window in pixels, at most the image's"),
        Field::required("width", "integer", "Width of the window in pixels, at most the image's"),
        Field::optional("ignore_values", "[integer]", "[]", "Mask values that count as background, besides 0"),
        Field::optional("ignore_channels", "[integer]", "[]", "Channels of (H, W, C) masks not looked at"),
        Field::required("masks", "[string]", "Inputs whose labelled pixels choose the window (their union); all pixel inputs are cropped"),
        P1,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<CropAndPad>("CropAndPad", "Crops (negative) or pads (positive) each side by pixels or fractions, optionally resized back")
    .fields(&[
        Field::optional("px", "int | [int, int] | [top, right, bottom, left]", "none", "Pixels per side; [lo, hi] draws from lo..hi; sides may be [lo, hi] or lists to pick from. Set px or percent"),
        Field::optional("percent", "float | [float, float] | [top, right, bottom, left]", "none", "As px, in fractions of the height / width, truncated to pixels"),
        Field::optional("keep_size", "bool", "true", "Resize the result back to the input size"),
        Field::optional("sample_independently", "bool", "true", "With a [lo, hi] range: one draw per side (false: one for all)"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\" | \"bicubic\"", "\"bilinear\"", "Sampling of images when resizing back"),
        Field::optional("mask_interpolation", "\"nearest\" | \"bilinear\" | \"bicubic\"", "\"nearest\"", "Sampling of masks when resizing back"),
        Field::optional("border_mode", "\"constant\" | \"reflect_101\" | \"reflect\" | \"replicate\"", "\"constant\"", "How the padding is filled (pad_mode also works)"),
        Field::optional("fill", "float | [a, b] | [float]", "0", "Image fill for border_mode = \"constant\"; [a, b] uniform per call, longer lists picked from (pad_cval also works)"),
        Field::optional("fill_mask", "float | [a, b] | [float]", "0", "Mask fill, forms as fill (pad_cval_mask also works)"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (mask_interpolation, fill_mask)"),
        Field::optional("p", "float", "1.0", "Probability of transforming a sample, in [0, 1]"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
const P1: Field = Field::optional(
    "p",
    "float",
    "1.0",
    "Probability of cropping a sample, in [0, 1]",
);
const EROSION: Field = Field::optional(
    "erosion_rate",
    "float",
    "0.0",
    "How far the window may cut into the boxes' union, as a fraction of its size, in [0, 1]",
);
const SAFE_BOXES: Field = Field::required(
    "bboxes",
    "[string]",
    "Inputs that are bounding boxes ([N, 4 + k] rows): the window keeps their union",
);

inventory::submit! {
    Registration::numpy_op::<BBoxSafeRandomCrop>("BBoxSafeRandomCrop", "Crops a random window around the union of the boxes, so every box stays (the output size varies per sample)")
    .fields(&[EROSION, P1, SAFE_BOXES, TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3]])
}
inventory::submit! {
    Registration::numpy_op::<RandomSizedBBoxSafeCrop>("RandomSizedBBoxSafeCrop", "Crops a random window around the union of the boxes and resizes it to height x width")
    .fields(&[
        Field::required("height", "integer", "Output height"),
        Field::required("width", "integer", "Output width"),
        EROSION,
        Field::optional("interpolation", "\"bilinear\" | \"nearest\" | \"bicubic\"", "\"bilinear\"", "Sampling of images"),
        Field::optional("mask_interpolation", "\"nearest\" | \"bilinear\" | \"bicubic\"", "\"nearest\"", "Sampling of masks"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (mask_interpolation)"),
        Field::optional("p", "float", "1.0", "Probability of cropping a sample, in [0, 1]; a skipped sample keeps its size"),
        SAFE_BOXES, TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomCropNearBBox>("RandomCropNearBBox", "Crops the window of a given box, each side shifted at random by part of its size")
    .fields(&[
        Field::optional("max_part_shift", "float | [float, float]", "[0.0, 0.3]", "Most shift of a side as part of the box's [height, width] (h <= w); f means [0, f]"),
        Field::optional("cropping_bbox_key", "string", "\"cropping_bbox\"", "The input holding the box to crop near: [x_min, y_min, x_max, y_max] whole pixels, shape [4] or [1, 4]; passed through"),
        P1,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
