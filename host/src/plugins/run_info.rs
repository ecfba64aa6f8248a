//! What every plugin is told about the run before any component is created: the manifest's
//! directory (for relative paths in configurations), the run's output directory and the
//! data-parallel rank. See `fe_plugin_api::RunInfo`.

use std::path::Path;

use fe_plugin_api::run::FfiRunInfo;
use fe_plugin_api::RunInfo;

use super::registry::Registry;
use crate::manifest::Manifest;

/// Which data-parallel rank this process is, as plugins see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    /// This process's rank, `0..world`.
    pub rank: u32,
    /// How many processes train together.
    pub world: u32,
}

impl Membership {
    /// A run on its own.
    pub const SINGLE: Membership = Membership { rank: 0, world: 1 };

    /// The rank and world size of a process that joined a group (see `crate::dist`).
    pub fn of(membership: &crate::dist::Membership) -> Self {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Membership {
            rank: narrow(membership.rank),
            world: narrow(membership.world),
        }
    }
}

/// The run as plugins see it. Its outputs go where the host's own traces put theirs: the
/// log directory when the manifest has one (redirected by `--smoke` and `--log-dir`), else
/// the manifest's directory (or `--smoke`'s temporary one).
pub fn run_info(manifest: &Manifest, membership: Membership) -> RunInfo {
    let output_dir = match &manifest.run.log_dir {
        Some(dir) => dir.clone(),
        None => manifest.output_path(Path::new("")),
    };
    RunInfo {
        manifest_dir: Some(absolute(&manifest.dir())),
        output_dir: Some(absolute(&output_dir)),
        rank: membership.rank,
        world_size: membership.world.max(1),
    }
}

/// Plugins may change directory or run threads elsewhere: give them absolute paths.
fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl Registry {
    /// Tells every loaded plugin (and the host's own registrations) about the run, and
    /// gives them the host's functions. Plugins built before fe-plugin-api 0.1.1 (0.1.2 for
    /// the functions) lack the module and are skipped: their components never ask.
    pub fn announce(&self, info: &RunInfo) {
        fe_plugin_api::run::set_process(info.clone());
        let host = super::graphs::ffi_host();
        fe_plugin_api::host_link::set_host(host);
        let ffi = FfiRunInfo::leak(info);
        for plugin in &self.plugins.plugins {
            if let Some(ext) = plugin.ext {
                ext.set_run_info()(ffi);
            }
            if let Some(link) = plugin.host_link {
                link.set_host()(host);
            }
        }
    }
}
