//! Registrations of the albumentations-style geometric and photometric ops: what
//! `fe-host plugins list` shows.

use crate::targets::TARGET_FIELDS;
use fe_plugin_api::{inventory, Field, Registration};

use crate::{
    CoarseDropout, Crop, Flip, LongestMaxSize, PadIfNeeded, RandomResizedCrop, RandomRotate90,
    RandomSizedCrop, SmallestMaxSize, Transpose, VerticalFlip,
};

const P: Field = Field::optional(
    "p",
    "float",
    "0.5",
    "Probability of transforming a sample, in [0, 1]",
);
const INTERPOLATION: Field = Field::optional(
    "interpolation",
    "\"bilinear\" | \"nearest\" | \"bicubic\"",
    "\"bilinear\"",
    "Sampling of images; masks always use nearest",
);
const MASKS: Field = Field::optional(
    "masks",
    "[string]",
    "[]",
    "Inputs that are label masks (nearest sampling, mask fill)",
);

inventory::submit! {
    Registration::numpy_op::<VerticalFlip>("VerticalFlip", "Mirrors images top-bottom with probability p").fields(&[P, TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3]])
}
inventory::submit! {
    Registration::numpy_op::<Flip>("Flip", "With probability p flips vertically, horizontally or both (uniform choice)").fields(&[P, TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3]])
}
inventory::submit! {
    Registration::numpy_op::<Transpose>("Transpose", "Swaps rows and columns with probability p").fields(&[P, TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3]])
}
inventory::submit! {
    Registration::numpy_op::<RandomRotate90>("RandomRotate90", "Rotates by a random multiple of 90 degrees with probability p").fields(&[P, TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3]])
}
inventory::submit! {
    Registration::numpy_op::<PadIfNeeded>("PadIfNeeded", "Pads images up to a minimum size or a multiple of a divisor")
    .fields(&[
        Field::optional("min_height", "integer", "1024", "Minimum output height (unset with pad_height_divisor)"),
        Field::optional("min_width", "integer", "1024", "Minimum output width (unset with pad_width_divisor)"),
        Field::optional("pad_height_divisor", "integer", "none", "Pad the height to a multiple of this instead"),
        Field::optional("pad_width_divisor", "integer", "none", "Pad the width to a multiple of this instead"),
        Field::optional("position", "\"center\" | \"top_left\" | \"top_right\" | \"bottom_left\" | \"bottom_right\" | \"random\"", "\"center\"", "Where the image sits in the output"),
        Field::optional("border_mode", "\"reflect_101\" | \"reflect\" | \"replicate\" | \"constant\"", "\"reflect_101\"", "How the border is filled"),
        Field::optional("value", "float", "0", "Image fill for border_mode = \"constant\""),
        Field::optional("mask_value", "float", "0", "Mask fill for border_mode = \"constant\""),
        MASKS,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<LongestMaxSize>("LongestMaxSize", "Rescales so the longest side is max_size, keeping the aspect ratio")
    .fields(&[
        Field::optional("max_size", "integer", "1024", "Length of the longest side after the rescale"),
        INTERPOLATION,
        MASKS,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<SmallestMaxSize>("SmallestMaxSize", "Rescales so the smallest side is max_size, keeping the aspect ratio")
    .fields(&[
        Field::optional("max_size", "integer", "1024", "Length of the smallest side after the rescale"),
        INTERPOLATION,
        MASKS,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<Crop>("Crop", "Cuts the fixed window [y_min, y_max) x [x_min, x_max)")
    .fields(&[
        Field::optional("x_min", "integer", "0", "Left column, included"),
        Field::optional("y_min", "integer", "0", "Top row, included"),
        Field::optional("x_max", "integer", "1024", "Right column, excluded"),
        Field::optional("y_max", "integer", "1024", "Bottom row, excluded"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomResizedCrop>("RandomResizedCrop", "Crops a window of random area and aspect ratio and resizes it to height x width")
    .fields(&[
        Field::required("height", "integer", "Output height"),
        Field::required("width", "integer", "Output width"),
        Field::optional("scale", "[float, float]", "[0.08, 1.0]", "Window area as a fraction of the image's"),
        Field::optional("ratio", "[float, float]", "[0.75, 1.3333]", "Window width / height, sampled log-uniformly"),
        INTERPOLATION,
        MASKS,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomSizedCrop>("RandomSizedCrop", "Crops a window of random height at a random position and resizes it to height x width")
    .fields(&[
        Field::required("min_max_height", "[integer, integer]", "Range of the window height, both included"),
        Field::required("height", "integer", "Output height"),
        Field::required("width", "integer", "Output width"),
        Field::optional("w2h_ratio", "float", "1.0", "Window width / height"),
        INTERPOLATION,
        MASKS,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<CoarseDropout>("CoarseDropout", "Cutout: fills random rectangles of images (and optionally masks) with a constant")
    .fields(&[
        Field::optional("max_holes", "integer", "8", "Most holes per image"),
        Field::optional("max_height", "integer", "8", "Most rows of a hole"),
        Field::optional("max_width", "integer", "8", "Most columns of a hole"),
        Field::optional("min_holes", "integer", "max_holes", "Fewest holes"),
        Field::optional("min_height", "integer", "max_height", "Fewest rows of a hole"),
        Field::optional("min_width", "integer", "max_width", "Fewest columns of a hole"),
        Field::optional("fill_value", "float", "0", "Fill of image holes"),
        Field::optional("mask_fill_value", "float", "none", "Fill of mask holes; unset leaves masks untouched"),
        MASKS,
        P,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
