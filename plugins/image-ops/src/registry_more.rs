//! Registrations of the ops issue 32 added (affine warps, HSV / colour jitter, blurs):
//! what `fe-host plugins list` shows.

use crate::targets::TARGET_FIELDS;
use fe_plugin_api::{inventory, Field, Registration};

use crate::{
    Affine, ColorJitter, ElasticTransform, GaussianBlur, GridDistortion, HueSaturationValue,
    MedianBlur, ShiftScaleRotate,
};

const P: Field = Field::optional(
    "p",
    "float",
    "0.5",
    "Probability of transforming a sample, in [0, 1]",
);
const COLOR_MASKS: Field = Field::optional(
    "masks",
    "[string]",
    "[]",
    "Inputs left untouched (label masks)",
);
const WARP_FIELDS: [Field; 6] = [
    Field::optional(
        "interpolation",
        "\"bilinear\" | \"nearest\"",
        "\"bilinear\"",
        "Sampling of images; masks always use nearest",
    ),
    Field::optional(
        "border_mode",
        "\"constant\" | \"reflect_101\" | \"reflect\" | \"replicate\"",
        "\"constant\"",
        "How points from outside the image are filled",
    ),
    Field::optional(
        "fill",
        "float",
        "0",
        "Image fill for border_mode = \"constant\" (alias value)",
    ),
    Field::optional(
        "fill_mask",
        "float",
        "0",
        "Mask fill for border_mode = \"constant\" (alias mask_value)",
    ),
    Field::optional(
        "masks",
        "[string]",
        "[]",
        "Inputs that are label masks (nearest sampling, mask fill)",
    ),
    P,
];

inventory::submit! {
    Registration::numpy_op::<Affine>("Affine", "Random scale, translation, rotation and shear about the centre (image and masks alike)")
    .fields(&[
        Field::optional("scale", "float | [float, float]", "1.0", "Scale factor, drawn per axis"),
        Field::optional("translate_percent", "float | [float, float]", "none", "Shift as a fraction of width / height, per axis"),
        Field::optional("translate_px", "integer | [integer, integer]", "0", "Shift in pixels, per axis"),
        Field::optional("rotate", "float | [float, float]", "0", "Rotation in degrees, counter-clockwise"),
        Field::optional("shear", "float | [float, float]", "0", "Shear in degrees, per axis"),
        Field::optional("keep_ratio", "bool", "false", "Use the x scale for y too"),
        WARP_FIELDS[0], WARP_FIELDS[1], WARP_FIELDS[2], WARP_FIELDS[3], WARP_FIELDS[4], WARP_FIELDS[5],
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<ShiftScaleRotate>("ShiftScaleRotate", "Random shift, scale and rotation about the centre (an Affine)")
    .fields(&[
        Field::optional("shift_limit", "float | [float, float]", "0.0625", "Shift range as a fraction of the size"),
        Field::optional("shift_limit_x", "float | [float, float]", "shift_limit", "Shift range of x"),
        Field::optional("shift_limit_y", "float | [float, float]", "shift_limit", "Shift range of y"),
        Field::optional("scale_limit", "float | [float, float]", "0.1", "Scale range around 1, drawn per axis"),
        Field::optional("rotate_limit", "float | [float, float]", "45", "Rotation range in degrees"),
        WARP_FIELDS[0], WARP_FIELDS[1], WARP_FIELDS[2], WARP_FIELDS[3], WARP_FIELDS[4], WARP_FIELDS[5],
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<GridDistortion>("GridDistortion", "Stretches num_steps bands per axis by random factors (cv2.remap; image and masks alike)")
    .fields(&[
        Field::optional("num_steps", "integer", "5", "Bands per axis"),
        Field::optional("distort_limit", "float | [float, float]", "0.3", "Stretch range of each band (l means [-l, l]), lo > -1"),
        Field::optional("normalized", "bool", "true", "Rescale the stretches so the bands span the image"),
        WARP_FIELDS[0], WARP_FIELDS[1], WARP_FIELDS[2], WARP_FIELDS[3], WARP_FIELDS[4], WARP_FIELDS[5],
        Field::optional("keypoint_remapping_method", "\"mask\" | \"direct\"", "\"mask\"", "How keypoints follow the map (albumentations' option)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<ElasticTransform>("ElasticTransform", "Smoothed random displacement of every pixel (cv2.remap; image and masks alike)")
    .fields(&[
        Field::optional("alpha", "float", "1", "Displacement scale in pixels"),
        Field::optional("sigma", "float", "50", "Gaussian smoothing of the noise, in pixels"),
        Field::optional("approximate", "bool", "false", "17 x 17 smoothing kernel instead of 8 sigma + 1"),
        Field::optional("same_dxdy", "bool", "false", "One field for both axes"),
        Field::optional("noise_distribution", "\"gaussian\" | \"uniform\"", "\"gaussian\"", "Noise before smoothing"),
        WARP_FIELDS[0], WARP_FIELDS[1], WARP_FIELDS[2], WARP_FIELDS[3], WARP_FIELDS[4], WARP_FIELDS[5],
        Field::optional("keypoint_remapping_method", "\"mask\" | \"direct\"", "\"mask\"", "How keypoints follow the map (albumentations' option)"),
        TARGET_FIELDS[0], TARGET_FIELDS[1], TARGET_FIELDS[2], TARGET_FIELDS[3],
    ])
}
inventory::submit! {
    Registration::numpy_op::<HueSaturationValue>("HueSaturationValue", "Random hue, saturation and value shifts in OpenCV's uint8 HSV (hue 0..180)")
    .fields(&[
        Field::optional("hue_shift_limit", "float | [float, float]", "20", "Hue shift range, in 0..180 hue units"),
        Field::optional("sat_shift_limit", "float | [float, float]", "30", "Saturation shift range, in 0..255 units"),
        Field::optional("val_shift_limit", "float | [float, float]", "20", "Value shift range, in 0..255 units"),
        COLOR_MASKS,
        P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<ColorJitter>("ColorJitter", "Random brightness, contrast, saturation and hue factors, applied in a random order")
    .fields(&[
        Field::optional("brightness", "float | [float, float]", "[0.8, 1.2]", "Factor range; b means [max(0, 1 - b), 1 + b]"),
        Field::optional("contrast", "float | [float, float]", "[0.8, 1.2]", "Factor range, as brightness"),
        Field::optional("saturation", "float | [float, float]", "[0.8, 1.2]", "Factor range, as brightness"),
        Field::optional("hue", "float | [float, float]", "0.5", "Hue shift in turns; h means [-h, h], within [-0.5, 0.5]"),
        COLOR_MASKS,
        P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<GaussianBlur>("GaussianBlur", "Separable Gaussian blur of random sigma (albumentations' PIL-style kernel, border reflect-101)")
    .fields(&[
        Field::optional("blur_limit", "integer | [integer, integer]", "0", "Kernel size range (l means [0, l]); 0 sizes it from sigma"),
        Field::optional("sigma_limit", "float | [float, float]", "[0.5, 3.0]", "Sigma range (s means [0, s])"),
        COLOR_MASKS,
        P,
    ])
}
inventory::submit! {
    Registration::numpy_op::<MedianBlur>("MedianBlur", "Median of a random odd k x k window (cv2.medianBlur, border replicate)")
    .fields(&[
        Field::optional("blur_limit", "integer | [integer, integer]", "[3, 7]", "Odd aperture range (l means [3, l])"),
        COLOR_MASKS,
        P,
    ])
}

inventory::submit! {
    Registration::trace::<crate::ImageSaver>(
        "ImageSaver",
        "Montage PNG per epoch of the first samples' images, masks, labels and predictions (and a TensorBoard image)",
    )
    .default_mode("eval,test")
    .fields(&[
        Field::optional("samples", "integer", "4", "Rows: the epoch's first samples on rank 0"),
        Field::optional("scale", "integer", "1", "Nearest-neighbour enlargement of image and mask cells"),
        Field::optional("save_dir", "path", "\"images\"", "Where <mode>_epoch_<n>.png go, inside the run's output directory"),
    ])
}
