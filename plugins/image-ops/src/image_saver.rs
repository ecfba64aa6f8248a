//! `ImageSaver`: FastEstimator's `ImageSaver`/`ImageViewer` for a headless run. It keeps the
//! first `samples` samples of each epoch (on this rank) of its input keys and, at epoch end,
//! draws them as one montage (see [`crate::montage`]): a PNG under `save_dir`, written by
//! rank 0, and — with an output key — the same picture as a uint8 `[H, W, 3]` value, which
//! the host's `TensorBoard` trace files as an image summary under that key.

use std::path::PathBuf;

use fe_plugin_api::tch::{Device, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, Trace, TraceContext, TraceData};
use serde::Deserialize;

use crate::montage::{cell, montage, Cell};

fn default_samples() -> usize {
    4
}

fn default_scale() -> usize {
    1
}

fn default_dir() -> PathBuf {
    PathBuf::from("images")
}

/// Configuration of `ImageSaver`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ImageSaverConfig {
    /// Rows of the montage: the epoch's first samples.
    #[serde(default = "default_samples")]
    pub samples: usize,
    /// Integer enlargement of image and mask cells (nearest neighbour).
    #[serde(default = "default_scale")]
    pub scale: usize,
    /// Directory of the PNG files, inside the run's output directory.
    #[serde(default = "default_dir")]
    pub save_dir: PathBuf,
}

/// Inputs: the keys to draw, one column each. Outputs: none, or one key for TensorBoard.
pub struct ImageSaver {
    keys: Vec<String>,
    samples: usize,
    scale: usize,
    dir: PathBuf,
    output: Option<String>,
    rows: Vec<Vec<Cell>>,
}

impl FromConfig for ImageSaver {
    type Config = ImageSaverConfig;
    fn from_config(config: ImageSaverConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if ctx.inputs.is_empty() {
            return Err(Error::config("inputs", "expected the key(s) to draw"));
        }
        if ctx.outputs.len() > 1 {
            return Err(Error::config(
                "outputs",
                format!(
                    "expected 0 or 1 key(s) (the montage), got {}",
                    ctx.outputs.len()
                ),
            ));
        }
        if config.samples == 0 || config.scale == 0 {
            let field = if config.samples == 0 {
                "samples"
            } else {
                "scale"
            };
            return Err(Error::config(field, "must be at least 1"));
        }
        Ok(Self {
            keys: ctx.inputs.iter().map(|k| k.to_string()).collect(),
            samples: config.samples,
            scale: config.scale,
            dir: ctx.output_path(&config.save_dir),
            output: ctx.outputs.first().map(|k| k.to_string()),
            rows: Vec::new(),
        })
    }
}

impl ImageSaver {
    /// Draws the first rows of one batch, up to `samples` in the epoch.
    fn take(&mut self, data: &TraceData<'_>) -> Result<()> {
        let wanted = self.samples - self.rows.len();
        let inputs: Vec<Tensor> = (0..self.keys.len())
            .map(|i| data.tensor(i).map(|t| t.shallow_clone()))
            .collect::<Result<_>>()?;
        let batch = inputs
            .iter()
            .map(|t| t.size().first().copied().unwrap_or(1))
            .min();
        let count = (batch.unwrap_or(0).max(0) as usize).min(wanted);
        for row in 0..count as i64 {
            let mut cells = Vec::with_capacity(inputs.len());
            for (key, tensor) in self.keys.iter().zip(&inputs) {
                let sample = tensor.f_get(row)?;
                // Numbers and vectors are bars of fixed size; only pictures grow.
                let picture = sample.dim() >= 2 && sample.numel() > 1;
                let scale = if picture { self.scale } else { 1 };
                cells.push(cell(key, &sample)?.scaled(scale));
            }
            self.rows.push(cells);
        }
        Ok(())
    }
}

/// The montage as a uint8 `[H, W, 3]` tensor.
pub fn montage_tensor(picture: &Cell) -> Result<Tensor> {
    Ok(Tensor::from_slice(&picture.rgb)
        .f_reshape([picture.height as i64, picture.width as i64, 3])?
        .f_to_device(Device::Cpu)?)
}

impl Trace for ImageSaver {
    fn on_epoch_begin(&mut self, _ctx: &TraceContext<'_>, _data: &mut TraceData<'_>) -> Result<()> {
        self.rows.clear();
        Ok(())
    }

    fn on_batch_end(&mut self, ctx: &TraceContext<'_>, data: &mut TraceData<'_>) -> Result<()> {
        if ctx.step.warmup || self.rows.len() >= self.samples {
            return Ok(());
        }
        self.take(data)
    }

    fn on_epoch_end(&mut self, ctx: &TraceContext<'_>, data: &mut TraceData<'_>) -> Result<()> {
        if self.rows.is_empty() || ctx.step.warmup {
            return Ok(());
        }
        let picture = montage(&self.rows);
        if ctx.rank() == 0 {
            let name = format!("{}_epoch_{}.png", ctx.step.mode, ctx.step.epoch);
            write_png(&self.dir, &name, &picture)?;
        }
        if let Some(output) = &self.output {
            data.write_without_log(output.clone(), montage_tensor(&picture)?);
        }
        Ok(())
    }
}

fn write_png(dir: &std::path::Path, name: &str, picture: &Cell) -> Result<()> {
    let path = dir.join(name);
    let fail = |e: String| Error::msg(format!("ImageSaver: cannot write {}: {e}", path.display()));
    std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    image::save_buffer(
        &path,
        &picture.rgb,
        picture.width as u32,
        picture.height as u32,
        image::ExtendedColorType::Rgb8,
    )
    .map_err(|e| fail(e.to_string()))
}
