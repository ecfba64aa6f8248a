//! `ReadImage`: image files to uint8 tensors.

use std::path::{Path, PathBuf};

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{tensor_text, CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use image::{DynamicImage, ImageReader};
use serde::Deserialize;

use crate::layout::{check_count, paired_keys};

/// How `ReadImage` returns pixels.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ColorFlag {
    /// RGB, shape `(H, W, 3)`; alpha is dropped, gray files are repeated over 3 channels.
    #[default]
    Color,
    /// Luma, shape `(H, W, 1)`: `0.299 R + 0.587 G + 0.114 B` as OpenCV computes it.
    /// `"grey"` also works.
    #[serde(alias = "grey")]
    Gray,
}

/// `ReadImage` configuration.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ReadImageConfig {
    /// Directory the paths are relative to, itself relative to the manifest's directory
    /// (default: none, paths are used as given; absolute paths ignore it).
    #[serde(default)]
    pub parent_path: PathBuf,
    /// `"color"` (default) for `(H, W, 3)` RGB, `"gray"` / `"grey"` for `(H, W, 1)`.
    #[serde(default)]
    pub color_flag: ColorFlag,
}

/// Reads each input path (a text tensor), or the encoded image itself (bytes that are no
/// text), into a uint8 image: `(H, W, 3)` RGB or `(H, W, 1)` gray. The format (PNG, JPEG,
/// BMP) is recognised from the content.
pub struct ReadImage {
    keys: Vec<String>,
    parent_path: PathBuf,
    color_flag: ColorFlag,
}

impl FromConfig for ReadImage {
    type Config = ReadImageConfig;
    fn from_config(config: ReadImageConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Ok(ReadImage {
            keys: paired_keys(ctx)?,
            // Relative to the manifest, like every path a manifest names, so a run works
            // from any working directory.
            parent_path: if config.parent_path.as_os_str().is_empty() {
                config.parent_path
            } else {
                ctx.resolve_path(&config.parent_path)
            },
            color_flag: config.color_flag,
        })
    }
}

impl NumpyOp for ReadImage {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        check_count(&self.keys, inputs)?;
        self.keys
            .iter()
            .zip(inputs)
            .map(|(key, value)| {
                if let Some(bytes) = in_memory(value) {
                    let fail = |reason: String| {
                        Error::msg(format!(
                            "input `{key}`: cannot decode the image bytes: {reason}"
                        ))
                    };
                    let image = ImageReader::new(std::io::Cursor::new(bytes))
                        .with_guessed_format()
                        .map_err(|e| fail(e.to_string()))?
                        .decode()
                        .map_err(|e| fail(e.to_string()))?;
                    return self.pixels_of(&image);
                }
                let relative = tensor_text(value)
                    .map_err(|e| Error::msg(format!("input `{key}`: {}", e.message())))?;
                self.read(&self.parent_path.join(relative))
            })
            .collect()
    }
}

impl ReadImage {
    fn read(&self, path: &Path) -> Result<Tensor> {
        self.pixels_of(&decode(path)?)
    }

    fn pixels_of(&self, image: &DynamicImage) -> Result<Tensor> {
        let (width, height) = (i64::from(image.width()), i64::from(image.height()));
        match self.color_flag {
            ColorFlag::Color => pixels(image.to_rgb8().as_raw(), [height, width, 3]),
            ColorFlag::Gray if !image.color().has_color() => {
                pixels(image.to_luma8().as_raw(), [height, width, 1])
            }
            ColorFlag::Gray => luma(&pixels(image.to_rgb8().as_raw(), [height, width, 3])?),
        }
    }
}

/// The bytes of an encoded image handed over in memory (a Parquet binary column, a
/// WebDataset `.png` member) rather than a path: a 1-D uint8 value that cannot be a path,
/// being no UTF-8 or holding a NUL byte, as PNG, JPEG and BMP headers all do.
fn in_memory(value: &Tensor) -> Option<Vec<u8>> {
    if value.kind() != Kind::Uint8 || value.dim() != 1 {
        return None;
    }
    let bytes = Vec::<u8>::try_from(value).ok()?;
    (std::str::from_utf8(&bytes).is_err() || bytes.contains(&0)).then_some(bytes)
}

/// Opens and decodes `path`; every failure names the file and the reason.
fn decode(path: &Path) -> Result<DynamicImage> {
    let fail =
        |reason: String| Error::msg(format!("cannot read image `{}`: {reason}", path.display()));
    ImageReader::open(path)
        .map_err(|e| fail(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| fail(e.to_string()))?
        .decode()
        .map_err(|e| fail(e.to_string()))
}

fn pixels(bytes: &[u8], shape: [i64; 3]) -> Result<Tensor> {
    Ok(Tensor::f_from_slice(bytes)?.f_reshape(shape)?)
}

/// OpenCV's RGB → gray in its fixed-point form: `(4899 R + 9617 G + 1868 B + 2^13) >> 14`.
fn luma(rgb: &Tensor) -> Result<Tensor> {
    let weights = Tensor::f_from_slice(&[4899i32, 9617, 1868])?;
    Ok(rgb
        .f_to_kind(Kind::Int)?
        .f_mul(&weights)?
        .f_sum_dim_intlist([-1i64].as_slice(), true, Kind::Int)?
        .f_add_scalar(1 << 13)?
        .f_div_scalar_mode(1 << 14, "floor")?
        .f_to_kind(Kind::Uint8)?)
}
