//! An install outlives its checkout: `scripts/install.sh PREFIX` run from a copy of the
//! checkout, the copy deleted, and the prefix still trains, lists its plugins, scaffolds a new
//! plugin against the fe-plugin-api and libtorch it carries, builds it and loads it.
//!
//! Kept under `target/install-standalone` between runs (wiped at the start, never at the end):
//! the new plugin's build directory there is warm after the first run, whose cold build
//! compiles tch and libtorch's C++ wrapper against the prefix's libtorch once.

use std::path::Path;
use std::process::Command;

use crate::util::{copy_dir_except, ensure_plugins, lenet_manifest, plugin_dir, root, Run};

/// What a checkout copy leaves out: build outputs (the plugins' own too), the VCS, the runs
/// and the (generated) data; its libtorch is a link to the same torch package, as
/// `scripts/env.sh` makes it.
const NOT_COPIED: [&str; 6] = ["target", ".git", ".venv", ".libtorch", "data", "runs"];

fn copy_checkout(to: &Path) {
    copy_dir_except(&root(), to, &NOT_COPIED);
    let torch = root().join(".libtorch").canonicalize().expect(".libtorch");
    std::os::unix::fs::symlink(torch, to.join(".libtorch")).expect("link .libtorch");
}

fn run(command: &mut Command) -> Run {
    let out: Run = command.output().expect("spawn").into();
    assert_eq!(
        out.code, 0,
        "{command:?}\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    out
}

#[test]
fn an_install_works_after_its_checkout_is_deleted() {
    ensure_plugins();
    let base = root().join("target/install-standalone");
    let (checkout, prefix) = (base.join("checkout"), base.join("prefix"));
    for dir in [&checkout, &prefix, &base.join("standalone-op")] {
        let _ = std::fs::remove_dir_all(dir);
    }
    copy_checkout(&checkout);
    // The binaries this test run built (building in the copy would rebuild every workspace
    // crate under new paths, into the shared target directory).
    let out = run(Command::new("bash")
        .arg(checkout.join("scripts/install.sh"))
        .arg(&prefix)
        .env("FE_INSTALL_FROM", plugin_dir())
        .env_remove("LD_LIBRARY_PATH"));
    assert_contains!(out.stdout, "fe-plugin-api in");
    std::fs::remove_dir_all(&checkout).expect("delete the checkout copy");

    let fe_host = || {
        let mut command = Command::new(prefix.join("bin/fe-host"));
        command
            .env_remove("FE_PLUGIN_PATH")
            .env_remove("LD_LIBRARY_PATH")
            .env("FE_PLUGIN_TARGET_DIR", base.join("plugin-build"))
            .env("CARGO_NET_OFFLINE", "true")
            .current_dir(&base);
        command
    };

    // The loader takes libtorch from the prefix, not from the build's libtorch (which the
    // binary's rpath also names, after the prefix's).
    let ldd = run(Command::new("ldd")
        .arg(prefix.join("bin/fe-host"))
        .env_remove("LD_LIBRARY_PATH"));
    let torch_lib = prefix.join("lib/fe-host/torch/lib");
    for lib in ["libtorch_cpu.so", "libc10.so"] {
        let line = ldd
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(lib))
            .unwrap_or_else(|| panic!("{lib} not in ldd's output:\n{}", ldd.stdout));
        // `libx.so => PATH (0x...)`, PATH as the rpath spells it (`bin/../lib/...`).
        let found = line
            .split_once("=> ")
            .and_then(|(_, rest)| rest.split_once(" ("))
            .map(|(path, _)| Path::new(path).canonicalize().expect("ldd's path"));
        assert_eq!(
            found,
            Some(torch_lib.join(lib).canonicalize().expect("prefix lib")),
            "{lib} does not come from the prefix: {line}"
        );
    }

    let manifest = base.join("m.toml");
    std::fs::write(&manifest, lenet_manifest(1, "")).expect("manifest");
    let out = run(fe_host().arg("run").arg(&manifest).args([
        "--set",
        "run.train_steps_per_epoch=2",
        "--set",
        "run.eval_steps_per_epoch=1",
    ]));
    assert_contains!(out.stdout, "fe-host finish: step: 2;");
    let out = run(fe_host().args(["plugins", "list"]));
    assert_contains!(
        out.stdout,
        format!(
            "fe-models 0.1.0  {}",
            prefix.join("lib/fe-host/plugins/libfe_models.so").display()
        )
    );

    // A new plugin depends on the prefix's fe-plugin-api and compiles against its libtorch.
    let crate_dir = base.join("standalone-op");
    run(fe_host().args(["new", "plugin", "standalone-op"]));
    let cargo = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
    assert_contains!(
        cargo,
        format!(
            "path = \"{}\"",
            prefix.join("share/fe-host/plugin-api").display()
        )
    );
    let config =
        std::fs::read_to_string(crate_dir.join(".cargo/config.toml")).expect("config.toml");
    assert_contains!(
        config,
        format!(
            "LIBTORCH = {{ value = \"{}\" }}",
            prefix.join("lib/fe-host/torch").display()
        )
    );
    let started = std::time::Instant::now();
    let out = run(fe_host().args(["plugins", "build", "standalone-op"]));
    eprintln!(
        "install-standalone: the new plugin's build took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let installed = prefix.join("lib/fe-host/plugins/libstandalone_op.so");
    assert_contains!(out.stdout, installed.to_string_lossy());
    let out = run(fe_host().args(["plugins", "show", "StandaloneOp"]));
    assert_contains!(out.stdout, "StandaloneOp");
}
