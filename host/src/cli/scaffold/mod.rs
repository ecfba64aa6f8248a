//! `fe-host new plugin NAME --kind KIND`: a plugin crate that builds with plain `cargo build`
//! outside this repository and loads the first time — one component of the chosen kind with a
//! unit test through `fe_plugin_api::testing`, the libtorch location this fe-host was built
//! with, and a README saying how to build, test and use it.

mod build;
mod templates;
mod templates_data;

pub use build::{build_plugin, BuildPluginArgs};

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::error::{Error, Result};

/// The component a new plugin starts with.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A network op over tensors (losses, utilities).
    TensorOp,
    /// A per-sample CPU data transform.
    NumpyOp,
    /// A callback around the run.
    Trace,
    /// A metric (accumulate per batch, reduce over workers).
    Metric,
    /// A model architecture.
    Model,
    /// A source of samples.
    Dataset,
    /// Cuts batches into minibatches.
    Slicer,
}

impl Kind {
    fn source(self) -> &'static str {
        match self {
            Kind::TensorOp => templates::TENSOR_OP,
            Kind::NumpyOp => templates::NUMPY_OP,
            Kind::Trace => templates::TRACE,
            Kind::Metric => templates::METRIC,
            Kind::Model => templates_data::MODEL,
            Kind::Dataset => templates_data::DATASET,
            Kind::Slicer => templates::SLICER,
        }
    }

    /// How a manifest uses the component, for the README.
    fn manifest_use(self, component: &str) -> String {
        match self {
            Kind::TensorOp => format!(
                "[[network.ops]]\nop = \"{component}\"\ninputs = \"ce\"\noutputs = \"ce_scaled\"\nfactor = 0.5"
            ),
            Kind::NumpyOp => format!(
                "[[pipeline.ops]]\nop = \"{component}\"\ninputs = \"x\"\noutputs = \"x\"\nmin = 0.0\nmax = 1.0"
            ),
            Kind::Trace => format!(
                "[[traces]]\ntrace = \"{component}\"\ninputs = \"ce\"\ntarget = 0.1"
            ),
            Kind::Metric => format!(
                "[[traces]]\ntrace = \"{component}\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"mae\""
            ),
            Kind::Model => format!(
                "[[models]]\nname = \"net\"\narchitecture = \"{component}\"\ninputs = 784\noptimizer = {{ type = \"adam\", lr = 0.001 }}"
            ),
            Kind::Dataset => format!(
                "[pipeline.data.train]\ntype = \"{component}\"\nsamples = 1000"
            ),
            Kind::Slicer => format!(
                "[[network.slicers]]\nslicer = \"{component}\"\nslice = [\"x\", \"y\"]\nparts = 2"
            ),
        }
    }
}

/// `fe-host new plugin`
#[derive(Args, Debug)]
pub struct NewPluginArgs {
    /// The crate name (lowercase letters, digits, `-` and `_`); the component is named after
    /// it in CamelCase (`my-scale` → `MyScale`).
    pub name: String,
    /// The component the crate starts with.
    #[arg(long, value_enum, default_value = "tensor-op")]
    pub kind: Kind,
    /// Where to create the crate (default: `./NAME`); must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The fe-plugin-api source to depend on (default: the installed one,
    /// `PREFIX/share/fe-host/plugin-api`, else the checkout this fe-host was built from).
    #[arg(long, value_name = "PATH")]
    pub plugin_api: Option<PathBuf>,
}

/// Writes the crate; returns its directory.
pub fn new_plugin(args: &NewPluginArgs) -> Result<PathBuf> {
    let component = component_name(&args.name).map_err(Error::Usage)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::Usage(format!(
            "{} already exists and is not empty; nothing was written (choose another --dir)",
            dir.display()
        )));
    }
    let plugin_api = match &args.plugin_api {
        Some(path) => path.clone(),
        None => build::plugin_api_source(),
    };
    let plugin_api = plugin_api
        .canonicalize()
        .ok()
        .filter(|p| p.join("Cargo.toml").is_file())
        .ok_or_else(|| {
            Error::Usage(format!(
                "no fe-plugin-api crate at {}; pass --plugin-api PATH (the plugin-api folder of an fe-host checkout)",
                plugin_api.display()
            ))
        })?;
    let files = files(args, &component, &plugin_api);
    write_all(&dir, &files).inspect_err(|_| {
        // Nothing half-written is left behind.
        let _ = std::fs::remove_dir_all(&dir);
    })?;
    Ok(dir)
}

/// Every Rust keyword, reserved ones included (2021 edition): a library named so cannot be
/// referred to (`use fn::X` does not parse) and cargo refuses it.
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "union", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Crates every Rust program can name without depending on them: a plugin library named so
/// shadows them (cargo refuses most of these too).
const BUILTIN_CRATES: &[&str] = &["std", "core", "alloc", "test", "proc_macro"];

/// `my-scale` → `MyScale`; refuses names cargo would refuse.
fn component_name(crate_name: &str) -> std::result::Result<String, String> {
    let valid = crate_name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase())
        && crate_name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        return Err(format!(
            "`{crate_name}` is not a crate name: use lowercase letters, digits, `-` and `_`, starting with a letter"
        ));
    }
    let lib_name = crate_name.replace('-', "_");
    if RUST_KEYWORDS.contains(&lib_name.as_str()) {
        return Err(format!(
            "`{crate_name}` is a Rust keyword, so its library `{lib_name}` could not be named in Rust code; choose another name (e.g. `{crate_name}-plugin`)"
        ));
    }
    if BUILTIN_CRATES.contains(&lib_name.as_str()) {
        return Err(format!(
            "`{crate_name}` is the name of Rust's built-in crate `{lib_name}`, which a plugin's library would shadow; choose another name (e.g. `{crate_name}-plugin`)"
        ));
    }
    Ok(crate_name
        .split(['-', '_'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect())
}

fn files(args: &NewPluginArgs, component: &str, plugin_api: &Path) -> Vec<(&'static str, String)> {
    let lib_name = args.name.replace('-', "_");
    let libtorch = build::libtorch_root().join("lib");
    let torch_root = build::libtorch_root().display().to_string();
    // Shared with every plugin (and pre-built by setup): a new crate compiles only itself.
    let target_dir = match build::shared_target_dir() {
        Some(dir) => format!(
            "\n# Shared by every plugin this fe-host builds: tch and libtorch's C++ wrapper compile\n# once there (setup pre-builds them), so a new plugin's first build compiles only itself.\n[build]\ntarget-dir = \"{}\"\n",
            dir.display()
        ),
        None => String::new(),
    };
    let source = [templates::HEADER, args.kind.source(), templates::FOOTER]
        .concat()
        .replace("COMPONENT", component)
        .replace("CRATE_LIB", &lib_name);
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

[lib]
# cdylib: the file fe-host loads; rlib: lets tests and other crates link it.
crate-type = ["cdylib", "rlib"]

[dependencies]
# Plugins must be built against the fe-plugin-api, tch and libtorch of the fe-host that loads
# them; fe-plugin-api re-exports tch and serde, so it is the only dependency.
fe-plugin-api = {{ path = "{api}" }}

# The crate is a workspace of its own, even when created inside another one.
[workspace]

# fe-host's profile: libtorch's C++ wrapper is compiled optimised once, and shared.
[profile.dev]
opt-level = 3
debug = "line-tables-only"
incremental = true

[profile.dev.package."*"]
debug = false
"#,
        name = args.name,
        api = plugin_api.display(),
    );
    let config = format!(
        r#"# The libtorch fe-host was built against: plugins must use exactly this one.
[env]
LIBTORCH = {{ value = "{torch_root}" }}
LIBTORCH_CXX11_ABI = "1"
# `cargo test` runs binaries linked to libtorch.
LD_LIBRARY_PATH = {{ value = "{lib}", force = true }}
{target_dir}"#,
        lib = libtorch.display(),
    );
    let readme = format!(
        r#"# {name}

An fe-host plugin providing the {kind:?} `{component}`, generated by `fe-host new plugin`.

```sh
cargo test                  # the unit tests in src/lib.rs, through fe_plugin_api::testing
fe-host plugins build .     # builds it and installs lib{lib_name}.so where fe-host finds it
fe-host plugins show {component}
```

`.cargo/config.toml` points at the libtorch fe-host was built with and at the target directory
every plugin shares ({target}): tch and libtorch's C++ wrapper are compiled there once (fe-host's
setup does it), so this crate's first build compiles only itself. A plugin must be built against
the same fe-plugin-api, tch and libtorch as the fe-host that loads it; fe-host refuses it,
naming what differs, otherwise. Plain `cargo build` works too: the library is then
`{target}/debug/lib{lib_name}.so` (pass it to `--plugin-dir`, or list it under `[plugins] paths`).

Use it from a manifest (once installed, no `[plugins]` entry is needed):

```toml
{usage}
```

See the plugin author guide in fe-host's `plugin-api/README.md`.
"#,
        name = args.name,
        kind = args.kind,
        target = build::shared_target_dir()
            .map_or_else(|| "target".to_owned(), |d| d.display().to_string()),
        usage = args.kind.manifest_use(component),
    );
    vec![
        ("Cargo.toml", cargo),
        (".cargo/config.toml", config),
        ("src/lib.rs", source),
        ("README.md", readme),
        (".gitignore", "/target\n".to_owned()),
        // The versions the shared target directory was built with: without it cargo resolves
        // the newest ones (online) and recompiles tch and libtorch's wrapper.
        ("Cargo.lock", HOST_LOCK.to_owned()),
    ]
}

/// fe-host's own lock file: the dependency versions its plugins must use.
const HOST_LOCK: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"));

fn write_all(dir: &Path, files: &[(&str, String)]) -> Result<()> {
    for (name, contents) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(&path, contents).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names_are_camel_case_crate_names() {
        assert_eq!(component_name("my-scale").unwrap(), "MyScale");
        assert_eq!(component_name("clip_2x").unwrap(), "Clip2x");
        assert!(component_name("My-Scale").is_err());
        assert!(component_name("1st").is_err());
        assert!(component_name("a b").is_err());
    }

    #[test]
    fn keywords_and_builtin_crates_are_refused() {
        for name in [
            "fn",
            "std",
            "core",
            "alloc",
            "test",
            "proc-macro",
            "proc_macro",
            "self",
            "async",
            "try",
            "gen",
        ] {
            let err = component_name(name).unwrap_err();
            assert!(err.contains(&format!("`{name}`")), "{name}: {err}");
            assert!(err.contains("choose another name"), "{name}: {err}");
        }
        // Names that only contain a keyword are fine.
        assert_eq!(component_name("fn-ops").unwrap(), "FnOps");
        assert_eq!(component_name("std-scale").unwrap(), "StdScale");
    }
}
