//! `fe-host plugins build DIR`: compiles a plugin crate with this fe-host's libtorch, profile
//! and shared target directory, checks that this fe-host loads the result, and installs it
//! into the plugin root (nushell's `plugin add`, but compiled).
//!
//! The shared target directory is what makes a new plugin's first build fast: tch and
//! torch-sys (libtorch's C++ wrapper, most of a cold build) compile once into it, and every
//! plugin built with the same settings reuses them. The settings are the libtorch, the
//! profile (the scaffold's, fe-host's own), the lock file and the rustflags of the cargo
//! configuration around the crate: none outside a checkout, where setup builds its warm-up
//! plugin for that reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

use crate::error::{Error, Result};

/// `fe-host plugins build`
#[derive(Args, Debug)]
pub struct BuildPluginArgs {
    /// The plugin crate (the directory holding its Cargo.toml).
    pub dir: PathBuf,
    /// Where to install the library (default: the plugin root, `../lib/fe-host/plugins` from
    /// the fe-host executable's directory, which every run searches).
    #[arg(long, value_name = "DIR")]
    pub into: Option<PathBuf>,
}

/// The cargo target directory plugins share: `FE_PLUGIN_TARGET_DIR`, else `plugin-build`
/// beside the directory of the fe-host executable (`target/plugin-build` in a checkout,
/// `PREFIX/plugin-build` in an install).
pub fn shared_target_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FE_PLUGIN_TARGET_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("plugin-build"))
}

/// The plugin root (`../lib/fe-host/plugins` from the executable's directory), which every
/// run searches: `PREFIX/lib/fe-host/plugins` installed, `target/lib/fe-host/plugins` in a
/// checkout.
fn plugin_root() -> Result<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .and_then(|dir| dir.parent().map(|up| up.join("lib/fe-host/plugins")))
        .ok_or_else(|| {
            Error::Usage("cannot tell where fe-host is installed; pass --into DIR".to_owned())
        })
}

/// The directory above the fe-host executable's: `PREFIX` installed, `target` in a checkout.
fn install_root() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// The libtorch this fe-host was built against (its root, above `lib/` and `include/`): the
/// copy an install carries (`PREFIX/lib/fe-host/torch`, see scripts/install.sh), else the one
/// the build used. The installed copy comes first so that an install never depends on the
/// checkout it came from.
pub fn libtorch_root() -> PathBuf {
    if let Some(installed) = install_root()
        .map(|root| root.join("lib/fe-host/torch"))
        .filter(|torch| torch.join("lib").is_dir() && torch.join("include").is_dir())
    {
        return installed;
    }
    let lib = PathBuf::from(env!("FE_LIBTORCH_LIB"));
    lib.parent().map_or_else(|| lib.clone(), Path::to_path_buf)
}

/// The fe-plugin-api sources new plugins depend on: an install's
/// (`PREFIX/share/fe-host/plugin-api`), else the checkout's this fe-host was built from.
pub fn plugin_api_source() -> PathBuf {
    install_root()
        .map(|root| root.join("share/fe-host/plugin-api"))
        .filter(|api| api.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugin-api"))
}

/// Builds, checks and installs; returns the installed file.
pub fn build_plugin(args: &BuildPluginArgs) -> Result<PathBuf> {
    let manifest = args.dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(Error::Usage(format!(
            "{}: no Cargo.toml; `fe-host plugins build` takes a plugin crate's directory",
            args.dir.display()
        )));
    }
    let target = shared_target_dir().ok_or_else(|| {
        Error::Usage("cannot tell where fe-host is installed; set FE_PLUGIN_TARGET_DIR".to_owned())
    })?;
    let libtorch = libtorch_root();
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--lib", "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .env("LIBTORCH", &libtorch)
        .env("LIBTORCH_CXX11_ABI", "1")
        // The libtorch above, not a Python torch torch-sys might otherwise pick.
        .env_remove("LIBTORCH_USE_PYTORCH")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::Usage(format!("cannot run cargo (is it on PATH?): {e}")))?;
    if !out.status.success() {
        return Err(Error::Usage(format!(
            "{}: cargo build failed (its errors are above)",
            manifest.display()
        )));
    }
    let library = built_cdylib(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        Error::Usage(format!(
            "{}: the build produced no shared library; a plugin's [lib] needs crate-type = [\"cdylib\"]",
            manifest.display()
        ))
    })?;
    check_loads(&library)?;
    let into = match &args.into {
        Some(dir) => dir.clone(),
        None => plugin_root()?,
    };
    std::fs::create_dir_all(&into).map_err(|e| Error::io(&into, e))?;
    let name = library
        .file_name()
        .ok_or_else(|| Error::Internal(format!("{}: no file name", library.display())))?;
    let installed = into.join(name);
    // Written beside, then renamed: a run that loads the old file meanwhile keeps its mapping.
    let partial = into.join(format!(".{}.partial", name.to_string_lossy()));
    std::fs::copy(&library, &partial).map_err(|e| Error::io(&partial, e))?;
    std::fs::rename(&partial, &installed).map_err(|e| Error::io(&installed, e))?;
    Ok(installed)
}

/// The cdylib among cargo's `compiler-artifact` messages.
fn built_cdylib(messages: &str) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
        })
        .rfind(|f| f.extension().is_some_and(|e| e == "so" || e == "dylib"))
}

/// A library this fe-host would refuse is not installed: refusing it later, at every run,
/// would be worse.
fn check_loads(library: &Path) -> Result<()> {
    let search = crate::plugins::search_path(&[], &[library.to_path_buf()], None, None);
    let set = crate::plugins::load_all_listing(&search, &Default::default());
    if set.refused.is_empty() {
        Ok(())
    } else {
        Err(Error::Plugins(set.refused))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cdylib_is_found_among_cargo_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libdep.rlib"]}"#,
            r#"{"reason":"compiler-artifact","target":{"kind":["cdylib","rlib"]},"filenames":["/t/libp.so","/t/libp.rlib"]}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(built_cdylib(&messages), Some(PathBuf::from("/t/libp.so")));
        assert_eq!(built_cdylib(r#"{"reason":"build-finished"}"#), None);
    }
}
