//! Plugins built outside the workspace: one depending only on fe-plugin-api (what a third
//! party writes), one built against a different fe-plugin-api version, and one against a
//! modified fe-plugin-api whose types differ although the version does not.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::util::{build_out_of_tree, lenet_manifest, root, run, run_failing, TempDir};

const EXTERNAL_CARGO: &str = r#"[package]
name = "scale-plugin"
version = "1.2.3"
edition = "2021"

[lib]
crate-type = ["cdylib"]

[dependencies]
fe-plugin-api = { path = "PLUGIN_API" }
"#;

const EXTERNAL_LIB: &str = r#"//! A third-party plugin: depends on fe-plugin-api alone.
use fe_plugin_api::serde::Deserialize;
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{inventory, CreateContext, FromConfig, Registration, Result, StepContext, TensorOp};

#[derive(Deserialize)]
#[serde(crate = "fe_plugin_api::serde", deny_unknown_fields)]
pub struct ScaleConfig {
    factor: f64,
}

pub struct Scale {
    factor: f64,
}

impl FromConfig for Scale {
    type Config = ScaleConfig;
    fn from_config(config: ScaleConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        Ok(Scale { factor: config.factor })
    }
}

impl TensorOp for Scale {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].f_mul_scalar(self.factor)?])
    }
}

inventory::submit! { Registration::tensor_op::<Scale>("Scale", "Multiplies by a constant") }

fe_plugin_api::export_plugin!();
"#;

/// Builds the third-party plugin on its own; returns the library.
pub(crate) fn external_plugin() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo =
            EXTERNAL_CARGO.replace("PLUGIN_API", &root().join("plugin-api").to_string_lossy());
        let dir = build_out_of_tree(
            "external",
            &[(
                "scale-plugin",
                vec![
                    ("Cargo.toml", cargo),
                    ("src/lib.rs", EXTERNAL_LIB.to_owned()),
                ],
            )],
        );
        dir.join("libscale_plugin.so")
    })
}

/// A copy of fe-plugin-api's sources under package name `package` and `version`, with
/// `patch` applied to `(file, from, to)`.
fn api_copy(
    package: &str,
    version: &str,
    patch: Option<(&str, &str, &str)>,
) -> Vec<(&'static str, String)> {
    api_copy_patched(package, version, patch.as_slice())
}

/// [`api_copy`] with every `(file, from, to)` of `patches` applied.
pub(crate) fn api_copy_patched(
    package: &str,
    version: &str,
    patches: &[(&str, &str, &str)],
) -> Vec<(&'static str, String)> {
    let api = root().join("plugin-api");
    // plugin-api's own manifest, renamed: it must build outside fe-host's workspace.
    let real = read(&api.join("Cargo.toml"));
    let current_version = format!(
        "version = \"{}\"",
        fe_plugin_api::build_info::PLUGIN_API_VERSION
    );
    assert!(
        real.contains(&current_version),
        "plugin-api/Cargo.toml: {current_version}"
    );
    let manifest = real
        .replacen(
            "name = \"fe-plugin-api\"",
            &format!("name = \"{package}\""),
            1,
        )
        .replacen(&current_version, &format!("version = \"{version}\""), 1);
    let mut files = vec![
        ("Cargo.toml", manifest),
        ("build.rs", read(&api.join("build.rs"))),
    ];
    for entry in std::fs::read_dir(api.join("src")).expect("plugin-api/src") {
        let path = entry.expect("entry").path();
        let name: &'static str = Box::leak(
            format!("src/{}", path.file_name().expect("name").to_string_lossy()).into_boxed_str(),
        );
        let mut text = read(&path);
        for (file, from, to) in patches {
            if name.ends_with(file) {
                assert!(
                    text.contains(from),
                    "patch target `{from}` not found in {file}"
                );
                text = text.replace(from, to);
            }
        }
        files.push((name, text));
    }
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read source")
}

/// A plugin with one tensor op, `Identity`.
pub(crate) const IDENTITY_LIB: &str = r#"use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{inventory, CreateContext, FromConfig, NoConfig, Registration, Result, StepContext, TensorOp};
pub struct Identity;
impl FromConfig for Identity {
    type Config = NoConfig;
    fn from_config(_: NoConfig, _: &CreateContext<'_>) -> Result<Self> { Ok(Identity) }
}
impl TensorOp for Identity {
    fn forward(&mut self, x: &[&Tensor], _: &StepContext<'_>) -> Result<Vec<Tensor>> {
        Ok(x.iter().map(|t| t.shallow_clone()).collect())
    }
}
inventory::submit! { Registration::tensor_op::<Identity>("Identity", "Passes its inputs through") }
fe_plugin_api::export_plugin!();
"#;

/// The Identity plugin `<api_dir>-plugin`, built against the fe-plugin-api copy in
/// `../<api_dir>` whose package is `api_package`.
fn fixture_plugin(api_dir: &str, api_package: &str) -> Vec<(&'static str, String)> {
    let cargo = format!(
        r#"[package]
name = "{api_dir}-plugin"
version = "0.9.0"
edition = "2021"

[lib]
crate-type = ["cdylib"]

[dependencies]
fe-plugin-api = {{ package = "{api_package}", path = "../{api_dir}" }}
"#
    );
    vec![
        ("Cargo.toml", cargo),
        ("src/lib.rs", IDENTITY_LIB.to_owned()),
    ]
}

/// Builds the two incompatible plugins together; returns (version mismatch, layout mismatch).
fn incompatible_plugins() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let layout_patch = (
            "error.rs",
            "    Unsupported = 3,\n}",
            "    Unsupported = 3,\n    /// Breaks the layout.\n    Extra = 4,\n}",
        );
        let dir = build_out_of_tree(
            "incompatible",
            &[
                ("api-next", api_copy("api-next", "0.2.0", None)),
                ("api-next-plugin", fixture_plugin("api-next", "api-next")),
                // Under fe-host's own package name and version: only the layout differs, so
                // only abi_stable's layout check can refuse it (a renamed copy would be
                // refused as another package whatever the patch).
                (
                    "api-changed",
                    api_copy(
                        "fe-plugin-api",
                        fe_plugin_api::build_info::PLUGIN_API_VERSION,
                        Some(layout_patch),
                    ),
                ),
                (
                    "api-changed-plugin",
                    fixture_plugin("api-changed", "fe-plugin-api"),
                ),
            ],
        );
        (
            dir.join("libapi_next_plugin.so"),
            dir.join("libapi_changed_plugin.so"),
        )
    })
}

#[test]
fn third_party_plugin_builds_alone_and_loads() {
    let plugin = external_plugin();
    let out = run(&["plugins", "list", "--plugin-dir", &plugin.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(
        out.stdout,
        format!("scale-plugin 1.2.3  {}", plugin.display())
    );
    assert_contains!(
        out.stdout,
        "tensor-op  Scale              Multiplies by a constant"
    );
}

#[test]
fn third_party_op_runs_in_a_manifest() {
    let plugin = external_plugin();
    let dir = TempDir::new("third-party-run");
    let extra = format!("\n[plugins]\npaths = [\"{}\"]\n", plugin.display());
    let text = lenet_manifest(1, &extra)
        .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 10\neval_steps_per_epoch = 2\n")
        .replace(
            "[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce\"",
            "[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce0\"\n\n[[network.ops]]\nop = \"Scale\"\ninputs = \"ce0\"\noutputs = \"ce\"\nfactor = 0.5",
        );
    let (out, scaled) = crate::util::run_with_summary(&dir, &text);
    assert_contains!(out.stdout, "fe-host finish: step: 10;");
    // The op really ran: the first step's loss (same seed, same weights, same batch) is half
    // the unscaled one.
    let plain = lenet_manifest(1, "").replace(
        "[run]\n",
        "[run]\ntrain_steps_per_epoch = 10\neval_steps_per_epoch = 2\n",
    );
    let (_, unscaled) = crate::util::run_with_summary(&dir, &plain);
    let first = |summary: &serde_json::Value| crate::util::steps(summary, "train", "ce")[0];
    let (scaled, unscaled) = (first(&scaled), first(&unscaled));
    assert_eq!(scaled.0, 1);
    assert!(
        (scaled.1 - 0.5 * unscaled.1).abs() < 1e-6,
        "{scaled:?} vs half of {unscaled:?}"
    );
}

#[test]
fn plugin_built_against_another_plugin_api_version_is_refused() {
    let (next, _) = incompatible_plugins();
    let out = run_failing(
        &["plugins", "list", "--plugin-dir", &next.to_string_lossy()],
        3,
    );
    assert_text_eq!(
        out.stderr,
        format!(
            "error: {}: plugin `api-next-plugin` was built against fe-plugin-api 0.2.0 (fe-host has {}); rebuild it against fe-plugin-api 0.1.x\n",
            next.display(),
            fe_plugin_api::build_info::PLUGIN_API_VERSION
        )
    );
}

#[test]
fn plugin_whose_types_differ_is_refused_by_the_layout_check() {
    let (_, changed) = incompatible_plugins();
    let out = run_failing(
        &[
            "plugins",
            "list",
            "--plugin-dir",
            &changed.to_string_lossy(),
        ],
        3,
    );
    // Refused for the layout (ErrorKind gained a variant), not for the package: the copy
    // has fe-host's package name and version.
    let stderr = &out.stderr;
    assert_contains!(
        stderr,
        format!("error: {}: ABI layout mismatch at ", changed.display())
    );
    assert_contains!(stderr, "too many variants");
    assert!(!stderr.contains("mismatched package"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Another patch release of this fe-plugin-api: the previous one, or the next while this is
/// the first (`x.y.0`). Patch releases keep the ABI (see `ffi.rs`'s evolution rules).
fn other_patch_version() -> String {
    let host = fe_plugin_api::build_info::PLUGIN_API_VERSION;
    let (key, patch) = host.rsplit_once('.').expect("major.minor.patch");
    let patch: u32 = patch.parse().expect("numeric patch");
    let other = if patch > 0 { patch - 1 } else { patch + 1 };
    format!("{key}.{other}")
}

#[test]
fn a_plugin_built_against_another_patch_release_loads_and_runs() {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let plugin = BUILT.get_or_init(|| {
        let version = other_patch_version();
        // Under its real package name: abi_stable's layout check compares package names.
        let dir = build_out_of_tree(
            "patch-release",
            &[
                ("fe-plugin-api", api_copy("fe-plugin-api", &version, None)),
                (
                    "fe-plugin-api-plugin",
                    fixture_plugin("fe-plugin-api", "fe-plugin-api"),
                ),
            ],
        );
        dir.join("libfe_plugin_api_plugin.so")
    });
    // Alone in a directory: the fixtures' directory also holds the incompatible plugins.
    let dir = TempDir::new("patch-release-run");
    let copy = dir.path().join("libpatch_release_plugin.so");
    std::fs::copy(plugin, &copy).unwrap();
    let out = run(&[
        "plugins",
        "list",
        "--plugin-dir",
        &dir.path().to_string_lossy(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(
        out.stdout,
        format!("fe-plugin-api-plugin 0.9.0  {}", copy.display())
    );
    assert_contains!(out.stdout, "Identity");
    // Its op runs inside a training run.
    let plugin = &copy;
    let extra = format!("\n[plugins]\npaths = [\"{}\"]\n", plugin.display());
    let text = lenet_manifest(1, &extra)
        .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 4\neval_steps_per_epoch = 2\n")
        .replace(
            "[[network.ops]]\nop = \"CrossEntropy\"",
            "[[network.ops]]\nop = \"Identity\"\ninputs = \"y_pred\"\noutputs = \"y_pred\"\n\n[[network.ops]]\nop = \"CrossEntropy\"",
        );
    let path = dir.write("m.toml", &text);
    let out = run(&["run", &path.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "fe-host finish: step: 4;");
}

#[test]
fn a_failure_around_a_plugin_op_names_the_plugin_not_fe_host() {
    // Scale declares no mode, so it runs in `infer`, where the loss it scales does not exist:
    // the host detects the missing input, and the error must blame the plugin's op.
    let plugin = external_plugin();
    let dir = TempDir::new("third-party-attribution");
    let extra = format!("\n[plugins]\npaths = [\"{}\"]\n", plugin.display());
    let text = lenet_manifest(1, &extra).replace(
        "[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce\"",
        "[[network.ops]]\nop = \"CrossEntropy\"\ninputs = [\"y_pred\", \"y\"]\noutputs = \"ce0\"\n\n[[network.ops]]\nop = \"Scale\"\ninputs = \"ce0\"\noutputs = \"ce\"\nfactor = 0.5",
    );
    let path = dir.write("m.toml", &text);
    let [_, _, eval_x, _] = crate::util::digits();
    let out = run_failing(
        &[
            "predict",
            &path.to_string_lossy(),
            "--random-weights",
            "--input",
            &format!("x={}", eval_x.display()),
            "--limit",
            "4",
            "--out",
            &dir.path().join("p.csv").to_string_lossy(),
        ],
        1,
    );
    assert_contains!(out.stderr, "scale-plugin::Scale failed in forward");
    assert_contains!(out.stderr, "input key `ce0` has no value");
    assert!(!out.stderr.contains("fe-host::"), "{}", out.stderr);
}
