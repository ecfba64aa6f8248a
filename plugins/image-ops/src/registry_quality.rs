//! Registrations of the image-degradation ops (down-up scaling, JPEG, motion and defocus
//! blur, CLAHE):
//! what `fe-host plugins list` shows.

use fe_plugin_api::{inventory, Field, Registration};

use crate::{Defocus, Downscale, ISONoise, ImageCompression, MotionBlur, CLAHE};

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
    Registration::numpy_op::<Downscale>("Downscale", "Shrinks by a random factor and enlarges back (cv2.resize pair; floats through uint8)")
    .fields(&[
        Field::optional("scale_range", "float | [float, float]", "0.25", "Factor of the intermediate size, in (0, 1]"),
        Field::optional("interpolation_pair", "{downscale, upscale}", "nearest, nearest", "Sampling of each resize: \"nearest\" | \"bilinear\" | \"bicubic\""),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<ImageCompression>("ImageCompression", "JPEG encode / decode at a random quality (image crate codec; floats through uint8)")
    .fields(&[
        Field::optional("quality_range", "[integer, integer]", "[99, 100]", "JPEG quality range, within [1, 100]"),
        Field::optional("compression_type", "\"jpeg\"", "\"jpeg\"", "Codec; WebP is not supported"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<MotionBlur>("MotionBlur", "Average along a random line: albumentations' motion kernel, cv2.filter2D (border reflect-101)")
    .fields(&[
        Field::optional("blur_limit", "integer | [integer, integer]", "[3, 7]", "Odd kernel size range (l means [3, l])"),
        Field::optional("allow_shifted", "bool", "true", "Let the line move off the kernel centre"),
        Field::optional("angle_range", "[float, float]", "[0, 360]", "Line angle range in degrees"),
        Field::optional("direction_range", "[float, float]", "[-1, 1]", "Bias: -1 backward only, 0 symmetric, 1 forward only"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<Defocus>("Defocus", "Average over a disc of random radius softened by a small Gaussian (out-of-focus lens), cv2.filter2D (border reflect-101)")
    .fields(&[
        Field::optional("radius", "integer | [integer, integer]", "[3, 10]", "Disc radius range in pixels (r means [1, r]), at least 1"),
        Field::optional("alias_blur", "float | [float, float]", "[0.1, 0.5]", "Sigma range of the Gaussian softening the disc (s means [0, s]), at least 0"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<CLAHE>("CLAHE", "Contrast-limited adaptive histogram equalisation (OpenCV's; RGB on Lab's L; floats through uint8)")
    .fields(&[
        Field::optional("clip_limit", "float | [float, float]", "4", "Clip limit range (c means [1, c]), at least 1"),
        Field::optional("tile_grid_size", "[integer, integer]", "[8, 8]", "Tiles across and down"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<ISONoise>("ISONoise", "Camera sensor noise: Poisson lightness and normal hue noise in OpenCV's float32 HLS (RGB only)")
    .fields(&[
        Field::optional("color_shift", "[float, float]", "[0.01, 0.05]", "Hue noise std range, before intensity scales it (added to a 0..360 hue, as albumentations does)"),
        Field::optional("intensity", "[float, float]", "[0.1, 0.5]", "Noise strength range, within [0, 100]"),
        MASKS, P,
    ])
}
