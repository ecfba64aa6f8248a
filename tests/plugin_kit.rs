//! The plugin kit as an author outside the repository meets it: fe-plugin-api's manifest
//! stands alone, every example in its docs compiles against it alone, and its 0.1.1 additions
//! keep plugins built against 0.1.0 working in both directions.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::util::{build_out_of_tree, lenet_manifest, root, run, TempDir};

/// Every file of `dir` (recursively), as `(path relative to dir, contents)`.
fn files_of(dir: &Path) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let relative: &'static str = Box::leak(relative.into_boxed_str());
            out.push((relative, std::fs::read_to_string(&path).unwrap()));
        }
    }
    out
}

/// The code blocks of rustdoc comments (`///`, `//!`) in `source`, and of fenced ```rust
/// blocks in Markdown when `markdown` is set, as rustdoc compiles them (hidden `# ` lines
/// included). `ignore` blocks count: they are examples a reader copies too.
fn code_blocks(source: &str, markdown: bool) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in source.lines() {
        let text = if markdown {
            line
        } else {
            let trimmed = line.trim_start();
            match trimmed
                .strip_prefix("///")
                .or_else(|| trimmed.strip_prefix("//!"))
            {
                Some(rest) => rest.strip_prefix(' ').unwrap_or(rest),
                None => {
                    current = None;
                    continue;
                }
            }
        };
        if let Some(fence) = text.trim().strip_prefix("```") {
            match current.take() {
                Some(block) => blocks.push(block.join("\n")),
                None => {
                    let rust = if markdown {
                        fence == "rust"
                    } else {
                        matches!(fence, "" | "rust" | "ignore" | "no_run")
                    };
                    if rust {
                        current = Some(Vec::new());
                    } else {
                        // Skip a non-Rust block: collect it, then drop it at its end.
                        current = Some(vec!["\u{0}".to_owned()]);
                    }
                }
            }
            continue;
        }
        if let Some(block) = current.as_mut() {
            let hidden = text.strip_prefix("# ").or((text == "#").then_some(""));
            block.push(hidden.unwrap_or(text).to_owned());
        }
    }
    blocks.retain(|b| !b.starts_with('\u{0}'));
    blocks
}

/// A doc example as a binary crate root, wrapped as rustdoc wraps it. `#[test]` is dropped so
/// that a test function in an example is compiled too, not configured away.
fn as_example(code: &str) -> String {
    let code: String = code
        .lines()
        .filter(|l| l.trim() != "#[test]")
        .map(|l| format!("{l}\n"))
        .collect();
    if code.contains("fn main") {
        return format!("#![allow(unused)]\n{code}");
    }
    // rustdoc's rule: an example that ends in `Ok::<(), E>(())` may use `?`.
    let ends_in_ok = code
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.trim().starts_with("Ok::<"));
    let tail = if ends_in_ok {
        ""
    } else {
        "    Ok::<(), fe_plugin_api::Error>(())\n"
    };
    format!(
        "#![allow(unused)]\nfn main() {{\n    #[allow(unreachable_code)]\n    fn _inner() -> ::std::result::Result<(), impl ::std::fmt::Debug> {{\n{code}{tail}    }}\n    let _ = _inner;\n}}\n"
    )
}

#[test]
fn every_doc_and_readme_example_compiles_against_a_standalone_copy_of_plugin_api() {
    let api = root().join("plugin-api");
    let mut examples = Vec::new();
    let mut sources: Vec<(String, String, bool)> = std::fs::read_dir(api.join("src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap(), false)
        })
        .collect();
    sources.push((
        "readme".into(),
        std::fs::read_to_string(api.join("README.md")).unwrap(),
        true,
    ));
    sources.sort();
    for (name, text, markdown) in &sources {
        for (index, block) in code_blocks(text, *markdown).iter().enumerate() {
            examples.push((format!("examples/{name}_{index}.rs"), as_example(block)));
        }
    }
    assert!(
        examples.len() >= 20,
        "expected the crate's examples, found {}",
        examples.len()
    );
    let cargo = r#"[package]
name = "plugin-api-doc-examples"
version = "0.0.0"
edition = "2021"

[dependencies]
fe-plugin-api = { path = "../fe-plugin-api" }
"#;
    let mut crate_files: Vec<(&str, String)> = vec![
        ("Cargo.toml", cargo.to_owned()),
        ("src/lib.rs", String::new()),
    ];
    for (path, code) in &examples {
        let path: &'static str = Box::leak(path.clone().into_boxed_str());
        crate_files.push((path, code.clone()));
    }
    // plugin-api copied verbatim, its Cargo.toml included: it must build outside fe-host's
    // workspace (no `workspace = true` inheritance), as a vendored or git dependency does.
    let dir = build_out_of_tree(
        "doc-examples",
        &[
            ("fe-plugin-api", files_of(&api)),
            ("plugin-api-doc-examples", crate_files),
        ],
    );
    // build_out_of_tree builds libraries and binaries; the examples need their own pass.
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--examples",
            "--quiet",
            "-p",
            "plugin-api-doc-examples",
        ])
        .current_dir(root().join("target/out-of-tree/doc-examples"))
        .env("CARGO_TARGET_DIR", dir.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "doc examples failed to compile against plugin-api alone:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn plugin_api_manifest_inherits_nothing_from_the_workspace() {
    let manifest = std::fs::read_to_string(root().join("plugin-api/Cargo.toml")).unwrap();
    for line in manifest
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
    {
        assert!(
            !line.contains("workspace"),
            "plugin-api/Cargo.toml inherits from the workspace: {line}"
        );
    }
    // The pins it writes out are the workspace's, so host and plugins agree.
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for pin in [
        "tch = \"=0.24.0\"",
        "torch-sys = \"=0.24.0\"",
        "abi_stable = \"=0.11.3\"",
    ] {
        assert_contains!(manifest, pin);
        assert_contains!(workspace, pin);
    }
}

const OLD_API: &str = "tests/fixtures/plugin-api-0.1.0";

fn identity_plugin(name: &str) -> Vec<(&'static str, String)> {
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.9.0"
edition = "2021"

[lib]
crate-type = ["cdylib"]

[dependencies]
fe-plugin-api = {{ path = "../fe-plugin-api" }}
"#
    );
    vec![
        ("Cargo.toml", cargo),
        ("src/lib.rs", crate::out_of_tree::IDENTITY_LIB.to_owned()),
    ]
}

/// A host built against fe-plugin-api 0.1.0: loads the plugin named on its command line,
/// lists it, and runs its `Scale` op on 1.5 with `factor = 2.0`.
const OLD_HOST: &str = r#"use fe_plugin_api::abi_stable::library::lib_header_from_path;
use fe_plugin_api::abi_stable::std_types::{RSlice, RString};
use fe_plugin_api::ffi::PluginModRef;
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, StepContext, TensorRef};

fn main() {
    let path = std::env::args().nth(1).expect("usage: old-host PLUGIN");
    let module = match lib_header_from_path(path.as_ref())
        .and_then(|header| header.init_root_module::<PluginModRef>())
    {
        Ok(module) => module,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    };
    for component in module.describe()().components.iter() {
        println!("{} {}", component.kind, component.name);
    }
    let keys = [RString::from("x")];
    let ctx = CreateContext {
        inputs: RSlice::from_slice(&keys),
        outputs: RSlice::from_slice(&keys),
        ..CreateContext::detached("old-host")
    };
    let mut op = module.create_tensor_op()("Scale".into(), "factor = 2.0".into(), &ctx).unwrap();
    let x = Tensor::from_slice(&[1.5f32]);
    let inputs = [TensorRef::from(&x)];
    let out = op.forward(RSlice::from_slice(&inputs), &StepContext::for_tests()).unwrap();
    println!("Scale(1.5) = {}", out[0].view().double_value(&[0]));
}
"#;

/// Builds, against the 0.1.0 sources, a plugin and a host; returns (plugin, host binary).
fn built_against_0_1_0() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let host_cargo = r#"[package]
name = "old-host"
version = "0.1.0"
edition = "2021"

[dependencies]
fe-plugin-api = { path = "../fe-plugin-api" }
"#;
        let dir = build_out_of_tree(
            "plugin-api-0.1.0",
            &[
                ("fe-plugin-api", files_of(&root().join(OLD_API))),
                ("api-0-1-0-plugin", identity_plugin("api-0-1-0-plugin")),
                (
                    "old-host",
                    vec![
                        ("Cargo.toml", host_cargo.to_owned()),
                        ("src/main.rs", OLD_HOST.to_owned()),
                    ],
                ),
            ],
        );
        (dir.join("libapi_0_1_0_plugin.so"), dir.join("old-host"))
    })
}

#[test]
fn a_plugin_built_against_plugin_api_0_1_0_loads_runs_and_has_no_field_declarations() {
    let (plugin, _) = built_against_0_1_0();
    // Alone in a directory: the shared fixtures directory also holds incompatible plugins.
    let dir = TempDir::new("api-0-1-0");
    let copy = dir.path().join("libapi_0_1_0_plugin.so");
    std::fs::copy(plugin, &copy).unwrap();
    let plugins = dir.path().to_string_lossy().into_owned();
    let out = run(&["plugins", "list", "--plugin-dir", &plugins]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(
        out.stdout,
        format!(
            "api-0-1-0-plugin 0.9.0  {}  (built against fe-plugin-api 0.1.0)",
            copy.display()
        )
    );
    let out = run(&["plugins", "show", "Identity", "--plugin-dir", &plugins]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(
        out.stdout,
        "  no field declarations (built against fe-plugin-api 0.1.0; declarations need 0.1.1 or later)"
    );
    // It runs inside a training run of this host, which announces the run to every plugin
    // that has `set_run_info` and skips this one.
    let extra = format!("\n[plugins]\npaths = [\"{}\"]\n", copy.display());
    let text = lenet_manifest(1, &extra)
        .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 3\neval_steps_per_epoch = 1\n")
        .replace(
            "[[network.ops]]\nop = \"CrossEntropy\"",
            "[[network.ops]]\nop = \"Identity\"\ninputs = \"y_pred\"\noutputs = \"y_pred\"\n\n[[network.ops]]\nop = \"CrossEntropy\"",
        );
    let path = dir.write("m.toml", &text);
    let out = run(&["run", &path.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "fe-host finish: step: 3;");
}

#[test]
fn a_host_built_against_plugin_api_0_1_0_loads_a_current_plugin() {
    let (_, old_host) = built_against_0_1_0();
    let current = crate::out_of_tree::external_plugin();
    let out = Command::new(old_host)
        .arg(current)
        .env("LD_LIBRARY_PATH", root().join(".libtorch/lib"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_contains!(stdout, "tensor-op Scale");
    assert_contains!(stdout, "Scale(1.5) = 3");
}
