//! Runs albumentations (in the workspace's `.venv`, installed by `scripts/test.sh`) on the
//! same arrays the Rust ops see, through `albumentations_ref.py`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::{json, Value};

use super::TempDir;

/// One reference call; see `albumentations_ref.py` for the kinds.
pub(super) struct Case {
    pub kind: &'static str,
    pub transform: &'static str,
    pub init: Value,
    pub params: Value,
    pub image: Tensor,
    pub mask: Option<Tensor>,
}

impl Case {
    /// `A.<transform>(**init)` run through `A.Compose` with `p = 1`.
    pub fn compose(
        transform: &'static str,
        init: Value,
        image: &Tensor,
        mask: Option<&Tensor>,
    ) -> Case {
        Case::new("compose", transform, init, Value::Null, image, mask)
    }

    /// `A.<transform>(**init).apply(image, **params)` (and `apply_to_mask`).
    pub fn apply(
        transform: &'static str,
        init: Value,
        params: Value,
        image: &Tensor,
        mask: Option<&Tensor>,
    ) -> Case {
        Case::new("apply", transform, init, params, image, mask)
    }

    pub fn new(
        kind: &'static str,
        transform: &'static str,
        init: Value,
        params: Value,
        image: &Tensor,
        mask: Option<&Tensor>,
    ) -> Case {
        Case {
            kind,
            transform,
            init,
            params,
            image: image.shallow_clone(),
            mask: mask.map(Tensor::shallow_clone),
        }
    }
}

/// A number no other reference call of this process uses: tests of one op run in parallel.
fn unique() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn python() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/tests/albumentations_ref.py")
}

fn run_script(dir: &TempDir, spec: Vec<Value>) {
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_string(&spec).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(script())
        .arg(&spec_path)
        .output()
        .expect("run .venv/bin/python (scripts/env.sh creates it)");
    assert!(
        out.status.success(),
        "albumentations reference failed (scripts/test.sh installs it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The reference outputs `(image, mask)` of every case, in order.
pub(super) fn albumentations(cases: &[Case]) -> Vec<(Tensor, Option<Tensor>)> {
    let dir = TempDir::new(&format!("albu-{}-{}", cases[0].transform, unique()));
    let path = |name: String| dir.path().join(name).to_string_lossy().into_owned();
    let mut spec = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let image = path(format!("{i}-image.npy"));
        case.image.write_npy(&image).unwrap();
        let mask = case.mask.as_ref().map(|m| {
            let p = path(format!("{i}-mask.npy"));
            m.write_npy(&p).unwrap();
            p
        });
        spec.push(json!({
            "kind": case.kind, "transform": case.transform, "init": case.init,
            "params": case.params, "image": image, "mask": mask,
            "out_image": path(format!("{i}-out-image.npy")),
            "out_mask": path(format!("{i}-out-mask.npy")),
        }));
    }
    run_script(&dir, spec);
    (0..cases.len())
        .map(|i| {
            let image = Tensor::read_npy(path(format!("{i}-out-image.npy"))).unwrap();
            let mask = cases[i]
                .mask
                .as_ref()
                .map(|_| Tensor::read_npy(path(format!("{i}-out-mask.npy"))).unwrap());
            (image, mask)
        })
        .collect()
}

/// `n` parameter draws of `A.<transform>(**init)` for an image of `shape`: row `i` holds
/// draw `i`'s `key`, flattened.
pub(super) fn albumentations_samples(
    transform: &'static str,
    init: Value,
    shape: &[i64],
    key: &str,
    n: usize,
) -> Vec<Vec<f64>> {
    samples(transform, init, shape, None, key, n, json!({}))
}

/// [`albumentations_samples`] with the targets in `data` (e.g. `bboxes`) beside the image.
pub(super) fn albumentations_samples_with(
    transform: &'static str,
    init: Value,
    shape: &[i64],
    key: &str,
    n: usize,
    data: Value,
) -> Vec<Vec<f64>> {
    samples(transform, init, shape, None, key, n, data)
}

/// [`albumentations_samples`] for an op whose draws depend on the `mask` it sees.
pub(super) fn albumentations_mask_samples(
    transform: &'static str,
    init: Value,
    mask: &Tensor,
    key: &str,
    n: usize,
) -> Vec<Vec<f64>> {
    let size = mask.size();
    samples(
        transform,
        init,
        &[size[0], size[1], 3],
        Some(mask),
        key,
        n,
        json!({}),
    )
}

fn samples(
    transform: &'static str,
    init: Value,
    shape: &[i64],
    mask: Option<&Tensor>,
    key: &str,
    n: usize,
    data: Value,
) -> Vec<Vec<f64>> {
    let dir = TempDir::new(&format!("albu-samples-{transform}-{}", unique()));
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let (out, mask_path) = (path("samples.npy"), mask.map(|_| path("mask.npy")));
    if let (Some(m), Some(p)) = (mask, &mask_path) {
        m.write_npy(p).unwrap();
    }
    run_script(
        &dir,
        vec![json!({
            "kind": "sample", "transform": transform, "init": init, "shape": shape,
            "mask": mask_path, "key": key, "n": n, "out_image": out, "data": data,
        })],
    );
    let samples = Tensor::read_npy(&out).unwrap().to_kind(Kind::Double);
    (0..samples.size()[0])
        .map(|i| Vec::<f64>::try_from(samples.get(i)).unwrap())
        .collect()
}

/// Largest absolute difference between two tensors of the same shape, after checking it.
pub(super) fn max_diff(ours: &Tensor, reference: &Tensor) -> f64 {
    assert_eq!(ours.size(), reference.size(), "shapes differ");
    (ours.to_kind(Kind::Double) - reference.to_kind(Kind::Double))
        .abs()
        .max()
        .double_value(&[])
}

/// Two-sample Kolmogorov–Smirnov statistic of `a` and `b`.
pub(super) fn ks_statistic(a: &[f64], b: &[f64]) -> f64 {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut d) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

/// One reference call with boxes and keypoints (`targets` in `albumentations_ref.py`).
pub(super) struct TargetCase {
    pub transform: &'static str,
    pub init: Value,
    /// The drawn parameters to use, or `Value::Null` for albumentations' own (deterministic).
    pub params: Value,
    pub bbox_params: Value,
    pub image: Tensor,
    pub bboxes: Tensor,
    pub keypoints: Tensor,
}

/// albumentations' `(image, bboxes, keypoints)` for every case, in order.
pub(super) fn albumentations_targets(cases: &[TargetCase]) -> Vec<[Tensor; 3]> {
    albumentations_targets_with(cases, &json!({"format": "xy"}))
}

/// [`albumentations_targets`] with `A.KeypointParams(**keypoint_params)`.
pub(super) fn albumentations_targets_with(
    cases: &[TargetCase],
    keypoint_params: &Value,
) -> Vec<[Tensor; 3]> {
    let dir = TempDir::new(&format!("albu-targets-{}", unique()));
    let path = |name: String| dir.path().join(name).to_string_lossy().into_owned();
    let mut spec = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let files = ["image", "bboxes", "keypoints"].map(|k| path(format!("{i}-{k}.npy")));
        case.image.write_npy(&files[0]).unwrap();
        case.bboxes.write_npy(&files[1]).unwrap();
        case.keypoints.write_npy(&files[2]).unwrap();
        spec.push(json!({
            "kind": "targets", "transform": case.transform, "init": case.init,
            "params": case.params, "bbox_params": case.bbox_params,
            "keypoint_params": keypoint_params,
            "image": files[0], "bboxes": files[1], "keypoints": files[2],
            "out_image": path(format!("{i}-out-image.npy")),
            "out_bboxes": path(format!("{i}-out-bboxes.npy")),
            "out_keypoints": path(format!("{i}-out-keypoints.npy")),
        }));
    }
    run_script(&dir, spec);
    (0..cases.len())
        .map(|i| {
            ["image", "bboxes", "keypoints"]
                .map(|k| Tensor::read_npy(path(format!("{i}-out-{k}.npy"))).unwrap())
        })
        .collect()
}
