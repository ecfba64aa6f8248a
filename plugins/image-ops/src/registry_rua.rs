//! Registrations of FastEstimator's PIL-based augmentations and `RUA`: what `fe-host plugins
//! list` shows.

use fe_plugin_api::{inventory, Field, Registration};

use crate::{Brightness, Color, Contrast, Sharpness, ShearX, ShearY, TranslateX, TranslateY, RUA};

const LIMIT: Field = Field::optional(
    "limit",
    "float | [float, float]",
    "0.54",
    "Range of the factor's offset from 1: l for [-l, l], or [lo, hi]",
);
const SHEAR: Field = Field::optional(
    "shear_coef",
    "float | [float, float]",
    "0.3",
    "Range of the shear coefficient: s for [-s, s], or [lo, hi]",
);
const SHIFT: Field = Field::optional(
    "shift_limit",
    "float | [float, float]",
    "0.2",
    "Range of the shift as a fraction of the side: l for [-l, l], or [lo, hi]",
);

inventory::submit! {
    Registration::numpy_op::<Brightness>("Brightness", "PIL ImageEnhance.Brightness with factor 1 + U(limit) (FastEstimator's; uint8)").fields(&[LIMIT])
}
inventory::submit! {
    Registration::numpy_op::<Color>("Color", "PIL ImageEnhance.Color (saturation) with factor 1 + U(limit) (FastEstimator's; uint8)").fields(&[LIMIT])
}
inventory::submit! {
    Registration::numpy_op::<Contrast>("Contrast", "PIL ImageEnhance.Contrast with factor 1 + U(limit) (FastEstimator's; uint8)").fields(&[LIMIT])
}
inventory::submit! {
    Registration::numpy_op::<Sharpness>("Sharpness", "PIL ImageEnhance.Sharpness with factor 1 + U(limit) (FastEstimator's; uint8)").fields(&[LIMIT])
}
inventory::submit! {
    Registration::numpy_op::<ShearX>("ShearX", "PIL bicubic shear along x by U(shear_coef), resized back to the width (FastEstimator's; uint8)").fields(&[SHEAR])
}
inventory::submit! {
    Registration::numpy_op::<ShearY>("ShearY", "PIL bicubic shear along y by U(shear_coef), resized back to the height (FastEstimator's; uint8)").fields(&[SHEAR])
}
inventory::submit! {
    Registration::numpy_op::<TranslateX>("TranslateX", "PIL bicubic shift along x by U(shift_limit) x width, black fill (FastEstimator's; uint8)").fields(&[SHIFT])
}
inventory::submit! {
    Registration::numpy_op::<TranslateY>("TranslateY", "PIL bicubic shift along y by U(shift_limit) x height, black fill (FastEstimator's; uint8)").fields(&[SHIFT])
}
inventory::submit! {
    Registration::numpy_op::<RUA>("RUA", "FastEstimator's RandAugment: level-scaled ops picked at random from choices (uint8)")
    .fields(&[
        Field::optional("choices", "\"defaults\" | [string]", "\"defaults\"", "Names to pick from, or [\"!Name\", ...] to leave some of the 14 defaults out"),
        Field::optional("level", "float", "18", "Strength in [0, 30]: magnitude level / 30 and ops per call level (min(#choices, 5) - 1) / 30 + 1"),
    ])
}
