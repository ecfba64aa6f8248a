//! An installed fe-host (`scripts/install.sh PREFIX`) finds the sample plugins in its plugin
//! root, and no run outside the tests ever sees the test-fixture plugin.

use std::process::Command;

use crate::util::{
    ensure_plugins, fe_host, fixture_plugin, lenet_manifest, plugin_dir, root, Run, TempDir,
};

const SAMPLE_PLUGINS: [&str; 8] = [
    "libfe_image_ops.so",
    "libfe_losses.so",
    "libfe_metrics.so",
    "libfe_models.so",
    "libfe_numpy_ops.so",
    "libfe_slicers.so",
    "libfe_tensor_ops.so",
    "libfe_text_ops.so",
];

#[test]
fn an_installed_fe_host_finds_the_sample_plugins_in_its_plugin_root() {
    ensure_plugins();
    let prefix = TempDir::new("install");
    let out: Run = Command::new("bash")
        .arg(root().join("scripts/install.sh"))
        .arg(prefix.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("install.sh")
        .into();
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    let bin = prefix.path().join("bin");
    let plugins = prefix.path().join("lib/fe-host/plugins");
    // PREFIX/bin is not on the tests' PATH: the script says how to put it there.
    assert_contains!(
        out.stdout,
        format!("export PATH=\"{}:$PATH\"", bin.display())
    );
    let mut installed: Vec<String> = std::fs::read_dir(&plugins)
        .expect("plugin root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    installed.sort();
    assert_eq!(installed, SAMPLE_PLUGINS);

    let installed_fe_host = || {
        let mut command = Command::new(bin.join("fe-host"));
        command
            .env_remove("FE_PLUGIN_PATH")
            .current_dir(prefix.path());
        command
    };
    let out: Run = installed_fe_host()
        .args(["plugins", "list"])
        .output()
        .expect("plugins list")
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(
        out.stdout,
        format!(
            "{}  (the plugin root of the fe-host executable)",
            plugins.display()
        )
    );
    assert_contains!(
        out.stdout,
        format!(
            "fe-models 0.1.0  {}",
            plugins.join("libfe_models.so").display()
        )
    );
    assert!(!out.stdout.contains("fe-faulty"), "{}", out.stdout);

    // And it trains.
    let manifest = prefix.write("m.toml", &lenet_manifest(1, ""));
    let out: Run = installed_fe_host()
        .args(["run", &manifest.to_string_lossy()])
        .args([
            "--set",
            "run.train_steps_per_epoch=2",
            "--set",
            "run.eval_steps_per_epoch=1",
        ])
        .output()
        .expect("run")
        .into();
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert_contains!(out.stdout, "fe-host finish: step: 2;");
}

#[test]
fn runs_of_the_build_never_see_the_test_fixture_plugin() {
    ensure_plugins();
    assert!(!plugin_dir().join("libfe_faulty.so").exists());
    assert!(fixture_plugin().is_file());
    let out: Run = Command::new(env!("CARGO_BIN_EXE_fe-host"))
        .env_remove("FE_PLUGIN_PATH")
        .args(["plugins", "list"])
        .output()
        .expect("plugins list")
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "fe-models 0.1.0");
    assert!(!out.stdout.contains("fe-faulty"), "{}", out.stdout);
    // The tests name it.
    let out: Run = fe_host()
        .args(["plugins", "list"])
        .output()
        .expect("plugins list")
        .into();
    assert_contains!(out.stdout, "tensor-op  Panic ");
}
