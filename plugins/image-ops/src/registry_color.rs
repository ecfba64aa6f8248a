//! Registrations of the photometric ops: what `fe-host plugins list` shows.

use fe_plugin_api::{inventory, Field, Registration};

use crate::{
    ChannelDropout, ChannelShuffle, Equalize, GaussNoise, Posterize, RGBShift,
    RandomBrightnessContrast, RandomGamma, Solarize, ToGray, ToSepia,
};

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
    Registration::numpy_op::<RandomBrightnessContrast>("RandomBrightnessContrast", "x * (1 + contrast draw) + brightness draw * max, clipped")
    .fields(&[
        Field::optional("brightness_limit", "float | [float, float]", "0.2", "Brightness shift range as a fraction of the maximum value"),
        Field::optional("contrast_limit", "float | [float, float]", "0.2", "Contrast factor range around 1"),
        Field::optional("brightness_by_max", "bool", "true", "Shift by a fraction of the maximum (true) or of the image mean"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<RandomGamma>("RandomGamma", "Gamma curve with gamma drawn from gamma_limit / 100")
    .fields(&[
        Field::optional("gamma_limit", "[float, float]", "[80, 120]", "Range of 100 x gamma"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<Posterize>("Posterize", "Keeps the top num_bits bits of every channel value")
    .fields(&[
        Field::optional("num_bits", "integer | [integer, integer]", "4", "Bits kept, 0 to 8"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<Solarize>("Solarize", "Inverts values at or above a threshold")
    .fields(&[
        Field::optional("threshold", "float | [float, float]", "128", "Threshold in uint8 units (float images: /255)"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<Equalize>("Equalize", "Equalizes the histogram of every channel (cv2.equalizeHist)").fields(&[MASKS, P])
}
inventory::submit! {
    Registration::numpy_op::<crate::AutoContrast>("AutoContrast", "Stretches each channel's intensity range to the full one (cdf or linear)")
    .fields(&[
        Field::optional("cutoff", "float", "0", "Percent of the pixels cut from each end of the histogram"),
        Field::optional("ignore", "integer", "none", "An intensity left out of the histogram and kept"),
        Field::optional("method", "\"cdf\" | \"pil\"", "\"cdf\"", "Normalised CDF between the bounds, or a linear ramp"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<crate::Sharpen>("Sharpen", "Sharpens with a random blend of the identity and a 3x3 Laplacian-like kernel, or an unsharp mask")
    .fields(&[
        Field::optional("alpha", "[float, float]", "[0.2, 0.5]", "Range of the kernel's blend (or the unsharp mask's strength), within [0, 1]"),
        Field::optional("lightness", "[float, float]", "[0.5, 1.0]", "Range of the kernel centre's lightness (\"kernel\" only)"),
        Field::optional("method", "\"kernel\" | \"gaussian\"", "\"kernel\"", "3x3 kernel, or x + alpha (x - GaussianBlur(x))"),
        Field::optional("kernel_size", "integer", "5", "Gaussian kernel size for \"gaussian\", odd, at least 3"),
        Field::optional("sigma", "float", "1.0", "Gaussian sigma for \"gaussian\", above 0"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<GaussNoise>("GaussNoise", "Adds per-pixel normal noise of a random variance")
    .fields(&[
        Field::optional("var_limit", "[float, float]", "[10, 50]", "Noise variance range in uint8 units squared"),
        Field::optional("mean", "float", "0", "Noise mean in uint8 units"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<ToGray>("ToGray", "RGB to gray (OpenCV luma), kept as 3 channels").fields(&[MASKS, P])
}
inventory::submit! {
    Registration::numpy_op::<ToSepia>("ToSepia", "Sepia tone of an RGB image").fields(&[MASKS, P])
}
inventory::submit! {
    Registration::numpy_op::<ChannelShuffle>("ChannelShuffle", "Permutes the channels randomly").fields(&[MASKS, P])
}
inventory::submit! {
    Registration::numpy_op::<ChannelDropout>("ChannelDropout", "Fills randomly chosen channels with a constant")
    .fields(&[
        Field::optional("channel_drop_range", "[integer, integer]", "[1, 1]", "Range of the number of channels dropped"),
        Field::optional("fill_value", "float", "0", "Value of the dropped channels"),
        MASKS, P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<RGBShift>("RGBShift", "Shifts each RGB channel by a random amount")
    .fields(&[
        Field::optional("r_shift_limit", "float | [float, float]", "20", "Red shift range in uint8 units (float images: /255)"),
        Field::optional("g_shift_limit", "float | [float, float]", "20", "Green shift range"),
        Field::optional("b_shift_limit", "float | [float, float]", "20", "Blue shift range"),
        MASKS, P,
    ])
}
