//! Devices on a machine without a GPU (CI): the CUDA link is there, requests for CUDA are
//! refused saying what exists, and the run-wide libtorch settings apply.

use crate::util::{
    fe_host, history_without_timings, lenet_manifest, run, run_failing, summary, Run, TempDir,
};

#[test]
fn libtorch_cuda_is_linked_so_cuda_is_never_silently_lost() {
    // Without the explicit --no-as-needed link the linker drops libtorch_cuda (nothing calls it
    // directly) and a GPU machine would train on the CPU without a word.
    let out = run(&["devices"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The CUDA version comes from the flavour of the libtorch this build links (`cu130` is
    // CUDA 13.0), not from what the machine that wrote the test had.
    match cuda_of_flavour(fe_plugin_api::build_info::LIBTORCH_FLAVOUR) {
        Some(cuda) => {
            assert_contains!(out.stdout, "libtorch_cuda loaded: true");
            assert_contains!(out.stdout, &format!("built with: CUDA {cuda}, cuDNN "));
        }
        None => assert!(!out.stdout.contains("built with: CUDA"), "{}", out.stdout),
    }
    assert_contains!(out.stdout, "driver: ");
    assert_contains!(out.stdout, "process groups: gloo (CPU)");
}

/// `cu130` → `13.0`, `cu118` → `11.8`; `None` for a CPU build.
fn cuda_of_flavour(flavour: &str) -> Option<String> {
    let digits = flavour.strip_prefix("cu")?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some(format!("{major}.{minor}"))
}

#[test]
fn cuda_versions_come_from_the_libtorch_flavour() {
    assert_eq!(cuda_of_flavour("cu130").as_deref(), Some("13.0"));
    assert_eq!(cuda_of_flavour("cu118").as_deref(), Some("11.8"));
    assert_eq!(cuda_of_flavour("cpu"), None);
}

#[test]
fn cuda_visible_devices_is_honoured_and_named_in_the_refusal() {
    let dir = TempDir::new("visible");
    let path = dir.write("m.toml", &lenet_manifest(1, ""));
    let out: Run = fe_host()
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["run", &path.to_string_lossy(), "--device", "cuda"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert_contains!(
        out.stderr,
        "libtorch sees 0 CUDA device(s), CUDA_VISIBLE_DEVICES=\"\""
    );
    let devices: Run = fe_host()
        .env("CUDA_VISIBLE_DEVICES", "")
        .arg("devices")
        .output()
        .unwrap()
        .into();
    assert_contains!(devices.stdout, "CUDA_VISIBLE_DEVICES=\"\"");
}

#[test]
fn deterministic_runs_repeat_exactly_and_exclude_cudnn_autotuning() {
    let dir = TempDir::new("deterministic");
    let manifest = lenet_manifest(1, "").replace(
        "[run]\n",
        "[run]\ndeterministic = true\ntrain_steps_per_epoch = 15\n",
    );
    let (a, b) = (summary(&dir, &manifest), summary(&dir, &manifest));
    assert_eq!(history_without_timings(a), history_without_timings(b));
    let both = manifest.replace(
        "deterministic = true",
        "deterministic = true\ncudnn_benchmark = true",
    );
    let path = dir.write("both.toml", &both);
    let out = run_failing(&["run", &path.to_string_lossy()], 2);
    assert_contains!(
        out.stderr,
        "run.deterministic and run.cudnn_benchmark exclude each other"
    );
}
