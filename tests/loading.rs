//! Plugin discovery and loading through the real loader, and every way it can fail.

use crate::util::{plugin_dir, root, run, run_failing, TempDir};

#[test]
fn plugins_list_shows_each_plugin_its_file_version_and_components() {
    let out = run(&["plugins", "list"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let dir = plugin_dir();
    for (plugin, file) in [
        ("fe-models", "libfe_models.so"),
        ("fe-losses", "libfe_losses.so"),
        ("fe-numpy-ops", "libfe_numpy_ops.so"),
        ("fe-metrics", "libfe_metrics.so"),
    ] {
        assert_contains!(
            out.stdout,
            format!("{plugin} 0.1.0  {}", dir.join(file).display())
        );
    }
    for line in [
        "model      LeNet ",
        "model      MLP ",
        "tensor-op  CrossEntropy ",
        "tensor-op  MeanSquaredError ",
        "numpy-op   Minmax ",
        "numpy-op   ExpandDims ",
        "numpy-op   Onehot ",
        "metric     Accuracy ",
        "tensor-op  ModelOp ",
        "tensor-op  UpdateOp ",
    ] {
        assert_contains!(out.stdout, line);
    }
    assert_contains!(out.stdout, "[mode: !infer]");
    assert_contains!(
        out.stdout,
        format!(
            "fe-plugin-api {}, tch 0.24.0, libtorch 2.11.0",
            fe_plugin_api::build_info::PLUGIN_API_VERSION
        )
    );
}

#[test]
fn missing_plugin_file_is_named() {
    let missing = root().join("target/no-such-dir/libnope.so");
    let out = run_failing(
        &[
            "plugins",
            "list",
            "--plugin-dir",
            &missing.to_string_lossy(),
        ],
        3,
    );
    assert_text_eq!(
        out.stderr,
        format!(
            "error: {}: plugin file or directory not found (from --plugin-dir)\n",
            missing.display()
        )
    );
}

#[test]
fn file_that_is_not_a_shared_library_is_refused() {
    let dir = TempDir::new("not-a-plugin");
    let file = dir.write("libnotes.so", "just some text\n");
    let out = run_failing(
        &["plugins", "list", "--plugin-dir", &file.to_string_lossy()],
        3,
    );
    assert!(
        out.stderr.starts_with(&format!(
            "error: {}: not a shared library (",
            file.display()
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn shared_library_that_is_not_a_plugin_is_refused_when_named() {
    let c10 = root()
        .join(".libtorch/lib/libc10.so")
        .canonicalize()
        .expect("libc10");
    let out = run_failing(
        &["plugins", "list", "--plugin-dir", &c10.to_string_lossy()],
        3,
    );
    assert_text_eq!(
        out.stderr,
        format!(
            "error: {}: a shared library but not an fe-host plugin (no `FE_PLUGIN_BUILD_INFO`; plugins call fe_plugin_api::export_plugin!())\n",
            c10.display()
        )
    );
}

#[test]
fn non_plugins_in_a_plugin_directory_are_skipped_not_fatal() {
    let dir = TempDir::new("scan");
    std::fs::copy(
        root().join(".libtorch/lib/libc10.so"),
        dir.path().join("libother.so"),
    )
    .expect("copy");
    let out = run(&[
        "plugins",
        "list",
        "--plugin-dir",
        &dir.path().to_string_lossy(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(
        out.stdout,
        format!(
            "skipped {}: a shared library but not an fe-host plugin",
            dir.path().join("libother.so").display()
        )
    );
}

#[test]
fn duplicate_component_names_name_both_plugins() {
    let dir = TempDir::new("duplicate");
    let copy = dir.path().join("libfe_losses_copy.so");
    std::fs::copy(plugin_dir().join("libfe_losses.so"), &copy).expect("copy");
    let out = run(&[
        "plugins",
        "list",
        "--plugin-dir",
        &dir.path().to_string_lossy(),
    ]);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert_contains!(
        out.stderr,
        format!(
            "tensor-op `CrossEntropy` is provided by both plugin `fe-losses` ({}) and plugin `fe-losses` ({}); remove one of them from the plugin search path",
            copy.display(),
            plugin_dir().join("libfe_losses.so").display()
        )
    );
    // Every duplicated component is reported, together.
    assert!(
        out.stderr.starts_with("error: ") && out.stderr.contains(" plugin problems:\n  - "),
        "{}",
        out.stderr
    );
    assert_contains!(
        out.stderr,
        "tensor-op `MeanSquaredError` is provided by both"
    );
}

#[test]
fn every_loading_problem_is_reported_at_once() {
    let dir = TempDir::new("many");
    let text = dir.write("libtext.so", "text");
    let missing = dir.path().join("libmissing.so");
    let out = run(&[
        "plugins",
        "list",
        "--plugin-dir",
        &text.to_string_lossy(),
        "--plugin-dir",
        &missing.to_string_lossy(),
    ]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.starts_with("error: 2 plugin problems:\n  - "),
        "{}",
        out.stderr
    );
    assert_contains!(
        out.stderr,
        format!("{}: plugin file or directory not found", missing.display())
    );
    assert_contains!(
        out.stderr,
        format!("{}: not a shared library", text.display())
    );
}

#[test]
fn pinned_sha256_mismatch_refuses_the_plugin() {
    let dir = TempDir::new("pinned");
    let manifest = dir.write(
        "m.toml",
        &format!(
            "[plugins]\nsha256 = {{ \"libfe_models.so\" = \"{}\" }}\n[pipeline]\nbatch_size = 1\n",
            "0".repeat(64)
        ),
    );
    let out = run_failing(
        &["plugins", "list", "--manifest", &manifest.to_string_lossy()],
        3,
    );
    assert_contains!(
        out.stderr,
        format!(
            "{}: sha256 is ",
            plugin_dir().join("libfe_models.so").display()
        )
    );
    assert_contains!(
        out.stderr,
        format!(
            "but the manifest pins {}; refusing to load it",
            "0".repeat(64)
        )
    );
}

#[test]
fn a_pin_naming_no_plugin_file_is_refused_listing_the_files_found() {
    // A misspelt pin matched nothing and was silently accepted: pinning was off.
    let dir = TempDir::new("pin-typo");
    let manifest = dir.write(
        "m.toml",
        &format!(
            "[plugins]\nsha256 = {{ \"libfe_losss.so\" = \"{}\" }}\n[pipeline]\nbatch_size = 1\n",
            "0".repeat(64)
        ),
    );
    for command in ["list", "show"] {
        let mut args = vec!["plugins", command];
        if command == "show" {
            args.push("CrossEntropy");
        }
        let path = manifest.to_string_lossy();
        args.extend(["--manifest", &path]);
        let out = run_failing(&args, 3);
        assert_contains!(
            out.stderr,
            "[plugins] sha256 pins `libfe_losss.so`, but no plugin file on the search path is called that (files found: "
        );
        assert_contains!(out.stderr, "libfe_losses.so");
    }
}

#[test]
fn a_missing_component_with_plugin_files_that_failed_to_load_is_a_plugin_problem() {
    // Damaged files in a plugin directory were skipped quietly and a component they may have
    // provided was reported as a manifest mistake (exit 2).
    let dir = TempDir::new("damaged");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    std::fs::write(plugins.join("libempty.so"), b"").expect("write");
    let losses = std::fs::read(plugin_dir().join("libfe_losses.so")).expect("read");
    std::fs::write(plugins.join("libtrunc.so"), &losses[..4096]).expect("write");
    // Entries named like plugins that are no file at all were ignored without a word.
    std::os::unix::fs::symlink("/nonexistent/libgone.so", plugins.join("libgone.so"))
        .expect("symlink");
    std::fs::create_dir_all(plugins.join("libdir.so")).expect("mkdir");
    let manifest = dir.write(
        "m.toml",
        "[plugins]\npaths = [\"plugins\"]\n[pipeline]\nbatch_size = 1\n[pipeline.data.train]\ntype = \"NoSuchData\"\n",
    );
    let out = run_failing(&["run", &manifest.to_string_lossy()], 3);
    assert_contains!(out.stderr, "unknown dataset `NoSuchData`");
    for file in ["libempty.so", "libtrunc.so"] {
        assert_contains!(
            out.stderr,
            format!(
                "note: {} could not be loaded: ",
                plugins.join(file).display()
            )
        );
    }
    assert_contains!(
        out.stderr,
        format!(
            "note: {} could not be loaded: a symbolic link to /nonexistent/libgone.so, which does not exist",
            plugins.join("libgone.so").display()
        )
    );
    assert_contains!(
        out.stderr,
        format!(
            "note: {} could not be loaded: a directory, not a library file",
            plugins.join("libdir.so").display()
        )
    );
    let out = run_failing(
        &[
            "plugins",
            "show",
            "NoSuchOp",
            "--plugin-dir",
            &plugins.to_string_lossy(),
        ],
        3,
    );
    assert_contains!(
        out.stderr,
        format!(
            "note: {} could not be loaded: ",
            plugins.join("libempty.so").display()
        )
    );
    // Without damaged files, an unknown name stays a manifest mistake.
    std::fs::remove_file(plugins.join("libempty.so")).expect("rm");
    std::fs::remove_file(plugins.join("libtrunc.so")).expect("rm");
    std::fs::remove_file(plugins.join("libgone.so")).expect("rm");
    std::fs::remove_dir(plugins.join("libdir.so")).expect("rm");
    let out = run_failing(&["run", &manifest.to_string_lossy()], 2);
    assert_contains!(out.stderr, "unknown dataset `NoSuchData`");
}

#[test]
fn pinned_sha256_match_loads() {
    let dir = TempDir::new("pinned-ok");
    let hash = fe_host::plugins::sha256_file(&plugin_dir().join("libfe_models.so")).expect("hash");
    let manifest = dir.write("m.toml", &format!("[plugins]\nsha256 = {{ \"libfe_models.so\" = \"{hash}\" }}\n[pipeline]\nbatch_size = 1\n"));
    let out = run(&["plugins", "list", "--manifest", &manifest.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The pinned file itself was loaded, with what it provides.
    assert_contains!(
        out.stdout,
        format!(
            "fe-models 0.1.0  {}",
            plugin_dir().join("libfe_models.so").display()
        )
    );
    assert_contains!(out.stdout, "LeNet");
}

#[test]
fn fe_plugin_path_is_searched_before_the_executable_directory() {
    let dir = TempDir::new("env-path");
    std::fs::copy(
        plugin_dir().join("libfe_models.so"),
        dir.path().join("libfe_models.so"),
    )
    .expect("copy");
    let out = crate::util::fe_host()
        .args(["plugins", "list"])
        .env("FE_PLUGIN_PATH", dir.path())
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_contains!(
        stdout,
        format!("{}  (FE_PLUGIN_PATH)", dir.path().display())
    );
    assert_contains!(
        stdout,
        format!(
            "fe-models 0.1.0  {}",
            dir.path().join("libfe_models.so").display()
        )
    );
    assert_contains!(
        stdout,
        format!(
            "shadowed {}",
            plugin_dir().join("libfe_models.so").display()
        )
    );
}
