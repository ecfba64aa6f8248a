//! Registrations of GridMask and the box, zoom and glass blurs: what `fe-host plugins list`
//! shows.

use fe_plugin_api::{inventory, Field, Registration};

use crate::{Blur, GridMask, ZoomBlur};

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
    Registration::numpy_op::<ZoomBlur>("ZoomBlur", "Mean of the image and its central zooms 1, 1 + s, ... below a random factor (radial blur)")
    .fields(&[
        Field::optional("max_factor", "float | [float, float]", "[1, 1.31]", "Largest zoom factor range, at least 1 (f means [1, f])"),
        Field::optional("step_factor", "float | [float, float]", "[0.01, 0.03]", "Step between zoom factors, above 0 (s means [s, s])"),
        MASKS, P,
    ])
}
