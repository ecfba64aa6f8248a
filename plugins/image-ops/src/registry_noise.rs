//! Registrations of the last ops of issue 32 (GridMask, Perspective, OpticalDistortion,
//! the box, glass and zoom blurs) and of PiecewiseAffine: what `fe-host plugins list` shows.

use crate::targets::TARGET_FIELDS;
use fe_plugin_api::{inventory, Field, Registration};

use crate::{Blur, GlassBlur, GridMask, OpticalDistortion, Perspective, PiecewiseAffine, ZoomBlur};

const P: Field = Field::optional(
    "p",
    "float",
    "0.5",
    "Probability of transforming a sample, in [0, 1]",
);
const MASKS: Field = Field::optional(
    "masks",
    "[string]",
    "[]",
    "Inputs left untouched (label masks)",
);

inventory::submit! {
    Registration::numpy_op::<GridMask>("GridMask", "FastEstimator's GridMask: a random, optionally rotated grid of dropped squares (image and masks alike)")
    .fields(&[
        Field::optional("d_range", "[integer, integer]", "[96, 224]", "Grid cell size range in pixels, both included"),
        Field::optional("ratio", "float", "0.6", "Dropped square side / cell size, in (0, 1)"),
        Field::optional("rotate_angle", "float", "0", "Largest grid rotation in degrees (0: axis-aligned)"),
        Field::optional("fill_value", "float", "0", "Value of dropped image pixels"),
        Field::optional("mask_fill_value", "float", "none", "Value of dropped mask pixels; unset leaves masks untouched"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks"),
        Field::optional("p", "float", "1.0", "Probability of masking a sample (FastEstimator always masks)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<Blur>("Blur", "Mean of a random odd k x k window (cv2.blur, border reflect-101)")
    .fields(&[
        Field::optional("blur_limit", "integer | [integer, integer]", "[3, 7]", "Odd kernel size range (l means [3, l])"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<GlassBlur>("GlassBlur", "Gaussian blur, swaps of nearby pixels at random offsets, and a second blur (frosted glass)")
    .fields(&[
        Field::optional("sigma", "float", "0.7", "Gaussian sigma, above 0 (cv2.GaussianBlur sizes the kernel from it)"),
        Field::optional("max_delta", "integer", "4", "Largest swap distance in pixels, at least 1"),
        Field::optional("iterations", "integer", "2", "Rounds of swaps, at least 1"),
        Field::optional("mode", "\"fast\" | \"exact\"", "\"fast\"", "Swap a whole round at once, or pixel by pixel"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<ZoomBlur>("ZoomBlur", "Mean of the image and its central zooms 1, 1 + s, ... below a random factor (radial blur)")
    .fields(&[
        Field::optional("max_factor", "float | [float, float]", "[1, 1.31]", "Largest zoom factor range, at least 1 (f means [1, f])"),
        Field::optional("step_factor", "float | [float, float]", "[0.01, 0.03]", "Step between zoom factors, above 0 (s means [s, s])"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<Perspective>("Perspective", "Corners moved inwards at random, the quad warped onto the image (cv2.warpPerspective; image and masks alike)")
    .fields(&[
        Field::optional("scale", "float | [float, float]", "[0.05, 0.1]", "Corner jitter std range as a fraction of the size (s means [0, s])"),
        Field::optional("keep_size", "bool", "true", "Resize the warped canvas back to the input size; false outputs the canvas (sizes vary per sample)"),
        Field::optional("fit_output", "bool", "false", "Grow the canvas so the whole warped image shows"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\"", "\"bilinear\"", "Sampling of images; masks always use nearest"),
        Field::optional("border_mode", "\"constant\" | \"reflect_101\" | \"reflect\" | \"replicate\"", "\"constant\"", "How points from outside the image are filled"),
        Field::optional("fill", "float", "0", "Image fill for border_mode = \"constant\" (alias value)"),
        Field::optional("fill_mask", "float", "0", "Mask fill for border_mode = \"constant\" (alias mask_value)"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (nearest sampling, mask fill)"),
        P,
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<OpticalDistortion>("OpticalDistortion", "Barrel / pincushion lens distortion of random strength (cv2.remap; image and masks alike)")
    .fields(&[
        Field::optional("distort_limit", "float | [float, float]", "0.05", "Range of the coefficient k (l means [-l, l])"),
        Field::optional("distortion_mode", "\"camera\" | \"fisheye\"", "\"camera\"", "albumentations' mode: OpenCV's camera model (k1 = k2 = k) or a radial fisheye"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\"", "\"bilinear\"", "Sampling of images; masks always use nearest"),
        Field::optional("border_mode", "\"constant\" | \"reflect_101\" | \"reflect\" | \"replicate\"", "\"constant\"", "How points from outside the image are filled"),
        Field::optional("fill", "float", "0", "Image fill for border_mode = \"constant\" (alias value)"),
        Field::optional("fill_mask", "float", "0", "Mask fill for border_mode = \"constant\" (alias mask_value)"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (nearest sampling, mask fill)"),
        P,
        Field::optional("keypoint_remapping_method", "\"mask\" | \"direct\"", "\"mask\"", "How keypoints follow the map (albumentations' option)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<PiecewiseAffine>("PiecewiseAffine", "A grid of control points moved by normal noise, every pixel following their inverse-distance mean (cv2.remap; image and masks alike)")
    .fields(&[
        Field::optional("scale", "float | [float, float]", "[0.03, 0.05]", "Range of 3 sigma of the jitter, a fraction of the shorter side (s means [0, s])"),
        Field::optional("nb_rows", "integer | [integer, integer]", "4", "Rows of control points, at least 2 (a range is drawn per call)"),
        Field::optional("nb_cols", "integer | [integer, integer]", "4", "Columns of control points, at least 2 (a range is drawn per call)"),
        Field::optional("absolute_scale", "bool", "false", "Read scale in pixels"),
        Field::optional("interpolation", "\"bilinear\" | \"nearest\"", "\"bilinear\"", "Sampling of images"),
        Field::optional("mask_interpolation", "\"nearest\" | \"bilinear\"", "\"nearest\"", "Sampling of masks"),
        Field::optional("border_mode", "\"constant\" | \"reflect_101\" | \"reflect\" | \"replicate\"", "\"constant\"", "How points from outside the image are filled"),
        Field::optional("fill", "float", "0", "Image fill for border_mode = \"constant\" (alias cval, value)"),
        Field::optional("fill_mask", "float", "0", "Mask fill for border_mode = \"constant\" (alias cval_mask, mask_value)"),
        Field::optional("masks", "[string]", "[]", "Inputs that are label masks (nearest sampling, mask fill)"),
        P,
        Field::optional("keypoint_remapping_method", "\"mask\" | \"direct\"", "\"mask\"", "How keypoints follow the map (albumentations' option)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
