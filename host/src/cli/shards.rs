//! `fe-host datagen shards`: a manifest's dataset as WebDataset tar shards.

use std::path::PathBuf;

use clap::Args;
use fe_plugin_api::Mode;

use super::args::{OverrideArgs, PluginArgs};
use crate::components::load_manifest_registry;
use crate::datagen::shards::{write, ShardSpec};
use crate::error::{Error, Result};
use crate::plugins::default_search_path;

/// `fe-host datagen shards`.
#[derive(Args, Debug)]
pub struct ShardsArgs {
    /// The manifest whose dataset is converted (any dataset type it reads).
    pub manifest: PathBuf,
    /// The dataset's mode.
    #[arg(long, default_value = "train")]
    pub mode: String,
    /// The dataset's id (default: the mode's only dataset).
    #[arg(long = "ds-id", value_name = "ID", default_value = "")]
    pub ds_id: String,
    /// Output directory: `<mode>-000000.tar`, `<mode>-000001.tar`, ...
    #[arg(long)]
    pub out: PathBuf,
    /// Samples per shard.
    #[arg(long, default_value_t = 1000)]
    pub samples_per_shard: usize,
    /// A key whose text names an image file (an image folder's path key, a CSV `paths`
    /// column): stored as the file's bytes with its extension (repeatable).
    #[arg(long = "image", value_name = "KEY")]
    pub images: Vec<String>,
    /// Plugin search.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Manifest overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// Runs `fe-host datagen shards`.
pub fn run(args: ShardsArgs) -> Result<()> {
    let manifest = args.overrides.load(&args.manifest)?;
    let mode: Mode = args.mode.parse().map_err(Error::Usage)?;
    let search = default_search_path(&manifest.plugins.paths, &args.plugins.plugin_dirs);
    let registry = load_manifest_registry(&search, &manifest)?;
    let spec = ShardSpec {
        mode,
        ds_id: &args.ds_id,
        out: &args.out,
        per_shard: args.samples_per_shard,
        images: &args.images,
    };
    let written = write(&manifest, &registry, &spec)?;
    let last = written.shards.len().saturating_sub(1);
    let prefix = written
        .shards
        .first()
        .and_then(|p| p.file_name())
        .map(|n| {
            n.to_string_lossy()
                .trim_end_matches("-000000.tar")
                .to_owned()
        })
        .unwrap_or_default();
    let keys: Vec<String> = written
        .keys
        .iter()
        .map(|(ext, key)| format!("\"{ext}\" = \"{key}\""))
        .collect();
    println!(
        "wrote {} samples into {} shards in {}; read them with\n\n[pipeline.data.{mode}]\ntype = \"webdataset\"\nurls = \"{}/{prefix}-{{000000..{last:06}}}.tar\"\nkeys = {{ {} }}",
        written.samples,
        written.shards.len(),
        args.out.display(),
        args.out.display(),
        keys.join(", ")
    );
    Ok(())
}
