//! Image transforms and augmentations for fe-host pipelines, after FastEstimator's image
//! NumpyOps: `ReadImage`, `Resize`, `RandomCrop`, `CenterCrop`, `HorizontalFlip`, `Rotate`.
//!
//! Images follow FastEstimator's layout: `(H, W, C)`, or `(H, W)` for a plain 2-D array; a
//! batch adds a leading `N`. Every op except `ReadImage` accepts several inputs (an image and
//! its mask, say), writes one output per input, and applies the *same* random choice to all
//! of them. Random ops draw only from `ctx.seed`, so a sample gets the same augmentation
//! whatever the number of pipeline workers.
#![warn(missing_docs)]

mod crop;
mod flip;
mod layout;
mod read;
mod resize;
mod rotate;

pub use crop::{CenterCrop, CropConfig, RandomCrop};
pub use flip::{HorizontalFlip, HorizontalFlipConfig};
pub use layout::Interpolation;
pub use read::{ColorFlag, ReadImage, ReadImageConfig};
pub use resize::{Resize, ResizeConfig};
pub use rotate::{BorderMode, Limit, Rotate, RotateConfig};

use fe_plugin_api::{inventory, Registration};

inventory::submit! {
    Registration::numpy_op::<ReadImage>("ReadImage", "Reads image files (PNG, JPEG, BMP) into uint8 (H, W, 3) RGB or (H, W, 1) gray")
}
inventory::submit! {
    Registration::numpy_op::<Resize>("Resize", "Resizes images to height x width (nearest, bilinear or bicubic)")
}
inventory::submit! {
    Registration::numpy_op::<RandomCrop>("RandomCrop", "Crops a height x width window at a random position")
}
inventory::submit! {
    Registration::numpy_op::<CenterCrop>("CenterCrop", "Crops the central height x width window")
}
inventory::submit! {
    Registration::numpy_op::<HorizontalFlip>("HorizontalFlip", "Mirrors images left-right with probability p")
}
inventory::submit! {
    Registration::numpy_op::<Rotate>("Rotate", "Rotates images by a random angle in [-limit, limit] degrees")
}

fe_plugin_api::export_plugin!();

#[cfg(test)]
mod tests;
