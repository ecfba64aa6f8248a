//! `fe-host datagen shards`: a manifest's dataset (image folder, NPY, CSV, IDX, Parquet, ...)
//! cut into WebDataset tar shards that `type = "webdataset"` reads back as the same samples.
//!
//! Sample `i` becomes the members `{i:09}.{key}.npy` (each key's tensor as an NPY array), or
//! for the keys named as images, `{i:09}.{key}.{ext}` holding the bytes of the file the key's
//! text names (what `ReadImage` decodes). Members carry no timestamps or owners, so the same
//! data gives the same shards, byte for byte.

use std::path::{Path, PathBuf};

use fe_plugin_api::Mode;

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::plugins::Registry;

/// What to convert and where.
pub struct ShardSpec<'a> {
    /// The dataset's mode.
    pub mode: Mode,
    /// Its dataset id (`""`: the mode's only one).
    pub ds_id: &'a str,
    /// Output directory.
    pub out: &'a Path,
    /// Samples per shard.
    pub per_shard: usize,
    /// Keys whose text names an image file, stored as the file's bytes.
    pub images: &'a [String],
}

/// What was written: samples, the shard files, and the `keys` table that reads them back.
pub struct Written {
    /// Samples written.
    pub samples: u64,
    /// Shard files, in order.
    pub shards: Vec<PathBuf>,
    /// Member extension → key, for `[pipeline.data.*] keys`.
    pub keys: Vec<(String, String)>,
}

/// Writes the dataset of `spec.mode`/`spec.ds_id` of `manifest` as shards.
pub fn write(manifest: &Manifest, registry: &Registry, spec: &ShardSpec<'_>) -> Result<Written> {
    if spec.per_shard == 0 {
        return Err(Error::Usage(
            "--samples-per-shard must be at least 1".into(),
        ));
    }
    let source = crate::pipeline::datasets::open_all(manifest, registry)?
        .into_iter()
        .find(|(mode, ds_id, _, _)| *mode == spec.mode && ds_id == spec.ds_id)
        .map(|(_, _, _, source)| source)
        .ok_or_else(|| {
            Error::Usage(format!(
                "{} has no {} dataset{}",
                manifest.file.display(),
                spec.mode,
                if spec.ds_id.is_empty() {
                    String::new()
                } else {
                    format!(" with ds_id `{}`", spec.ds_id)
                }
            ))
        })?;
    for key in spec.images {
        if !source.keys().contains(key) {
            return Err(Error::Usage(format!(
                "--image {key}: the dataset's keys are {:?}",
                source.keys()
            )));
        }
    }
    if let Some(key) = source
        .keys()
        .iter()
        .find(|k| k.contains('.') || k.contains('/'))
    {
        return Err(Error::Usage(format!(
            "key `{key}` holds a `.` or `/`, which WebDataset reads as part of the sample name or extension"
        )));
    }
    std::fs::create_dir_all(spec.out)
        .map_err(|e| Error::data(spec.out, format!("cannot create: {e}")))?;
    let prefix = if spec.ds_id.is_empty() {
        spec.mode.to_string()
    } else {
        format!("{}-{}", spec.mode, spec.ds_id)
    };
    let base = manifest.dir();
    let n = source.len();
    let mut shards = Vec::new();
    let mut extensions: Vec<String> = Vec::new();
    let mut start = 0;
    while start < n {
        let end = (start + spec.per_shard as u64).min(n);
        let path = spec.out.join(format!("{prefix}-{:06}.tar", shards.len()));
        let file = std::fs::File::create(&path)
            .map_err(|e| Error::data(&path, format!("cannot create: {e}")))?;
        let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
        for index in start..end {
            let values = source
                .get(index)
                .map_err(|m| Error::Run(format!("dataset sample {index}: {m}")))?;
            for (key, value) in source.keys().iter().zip(values) {
                let (ext, bytes) = member(key, &value, spec.images, &base)
                    .map_err(|m| Error::Run(format!("dataset sample {index}, key `{key}`: {m}")))?;
                let extension = format!("{key}.{ext}");
                let mut header = tar::Header::new_ustar();
                header.set_size(bytes.len() as u64);
                header.set_mode(0o644);
                header.set_mtime(0);
                header.set_cksum();
                tar.append_data(&mut header, format!("{index:09}.{extension}"), &bytes[..])
                    .map_err(|e| Error::data(&path, format!("cannot write: {e}")))?;
                if !extensions.contains(&extension) {
                    extensions.push(extension);
                }
            }
        }
        tar.into_inner()
            .and_then(|mut w| std::io::Write::flush(&mut w))
            .map_err(|e| Error::data(&path, format!("cannot write: {e}")))?;
        shards.push(path);
        start = end;
    }
    let keys = extensions
        .into_iter()
        .map(|ext| {
            let key = ext.split('.').next().unwrap_or_default().to_owned();
            (ext, key)
        })
        .collect();
    Ok(Written {
        samples: n,
        shards,
        keys,
    })
}

/// The member extension (after the key) and bytes of one value.
fn member(
    key: &str,
    value: &tch::Tensor,
    images: &[String],
    base: &Path,
) -> std::result::Result<(String, Vec<u8>), String> {
    if !images.iter().any(|k| k == key) {
        return Ok(("npy".to_owned(), crate::predict::output::npy_bytes(value)?));
    }
    let text = fe_plugin_api::tensor_text(value).map_err(|e| e.to_string())?;
    let path = base.join(&text);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| format!("{text} has no file extension to name the image format"))?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((ext, bytes))
}
