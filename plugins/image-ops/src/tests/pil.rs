//! FastEstimator's PIL-based ops (`Brightness` ... `TranslateY`) against PIL itself, through
//! `pil_ref.py`: the same arrays and the value the Rust op drew.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::json;

use super::reference::max_diff;
use super::{noise, run, seeded, typed, TempDir};
use crate::enhance::{PilOp, PilTransform};
use crate::pil::Raster;
use crate::{Brightness, Color, Contrast, Sharpness, ShearX, ShearY, TranslateX, TranslateY};

/// PIL's result of running each image through its `[name, value]` steps (`pil_ref.py`).
pub(super) fn pil(cases: &[(Tensor, Vec<(&str, f64)>)]) -> Vec<Tensor> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = TempDir::new(&format!("pil-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    let path = |name: String| dir.path().join(name).to_string_lossy().into_owned();
    let mut spec = Vec::new();
    for (i, (image, steps)) in cases.iter().enumerate() {
        let input = path(format!("{i}-in.npy"));
        image.write_npy(&input).unwrap();
        spec.push(json!({"image": input, "out": path(format!("{i}-out.npy")), "steps": steps}));
    }
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_string(&spec).unwrap()).unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("../../.venv/bin/python"))
        .arg(root.join("src/tests/pil_ref.py"))
        .arg(&spec_path)
        .output()
        .expect("run .venv/bin/python (scripts/env.sh creates it)");
    assert!(
        out.status.success(),
        "PIL reference failed (scripts/test.sh installs pillow):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (0..cases.len())
        .map(|i| Tensor::read_npy(path(format!("{i}-out.npy"))).unwrap())
        .collect()
}

/// The eight ops: name, config field, and a wide range to exercise extrapolation.
const OPS: [(&str, &str, &str); 8] = [
    ("Brightness", "limit", "0.9"),
    ("Color", "limit", "0.9"),
    ("Contrast", "limit", "0.9"),
    ("Sharpness", "limit", "[-1.0, 1.5]"),
    ("ShearX", "shear_coef", "0.5"),
    ("ShearY", "shear_coef", "0.5"),
    ("TranslateX", "shift_limit", "0.33"),
    ("TranslateY", "shift_limit", "[-0.6, 0.2]"),
];

/// Op `name` built from `config` on input `x`.
fn pil_op(name: &str, config: &str) -> PilOp {
    let keys = ["x"];
    match name {
        "Brightness" => typed::<Brightness>(config, &keys).0,
        "Color" => typed::<Color>(config, &keys).0,
        "Contrast" => typed::<Contrast>(config, &keys).0,
        "Sharpness" => typed::<Sharpness>(config, &keys).0,
        "ShearX" => typed::<ShearX>(config, &keys).0,
        "ShearY" => typed::<ShearY>(config, &keys).0,
        "TranslateX" => typed::<TranslateX>(config, &keys).0,
        "TranslateY" => typed::<TranslateY>(config, &keys).0,
        other => panic!("no op {other}"),
    }
}

/// A smooth picture with edges: gradients plus a bright square, for interpolation checks.
fn picture(shape: &[i64]) -> Tensor {
    let (h, w) = (shape[0], shape[1]);
    let c = shape.get(2).copied().unwrap_or(1);
    let mut data = Vec::new();
    for y in 0..h {
        for x in 0..w {
            for b in 0..c {
                let square = (h / 4..h / 2).contains(&y) && (w / 3..2 * w / 3).contains(&x);
                let v = if square {
                    250
                } else {
                    (x * 9 + y * 5 + b * 60) % 230 + 10
                };
                data.push(v as u8);
            }
        }
    }
    Tensor::from_slice(&data).reshape(shape)
}

/// The shapes the comparisons cover: RGB, plain and single-channel grey, odd sizes, and
/// images under the 3x3 smoothing kernel.
const SHAPES: [&[i64]; 5] = [&[19, 26, 3], &[24, 17], &[13, 11, 1], &[2, 5, 3], &[1, 1]];

/// Every op, run with its drawn value, equals PIL with that value, on noise and pictures.
#[test]
fn pil_ops_match_pil_for_drawn_values() {
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for (name, field, wide) in OPS {
        for (k, config) in ["".to_owned(), format!("{field} = {wide}")]
            .iter()
            .enumerate()
        {
            let op = pil_op(name, config);
            for (s, shape) in SHAPES.iter().enumerate() {
                let seed = (k * 10 + s) as u64;
                let image = if s % 2 == 0 {
                    noise(shape, seed as i64)
                } else {
                    picture(shape)
                };
                ours.push(run(&op, &[&image], seed).remove(0));
                cases.push((image, vec![(name, op.value(seed))]));
            }
        }
    }
    for ((image, steps), (reference, ours)) in cases.iter().zip(pil(&cases).iter().zip(&ours)) {
        assert_eq!(ours.size(), image.size());
        assert_eq!(ours.kind(), Kind::Uint8);
        let diff = max_diff(ours, reference);
        assert_eq!(diff, 0.0, "{steps:?} on {:?}", image.size());
    }
}

/// Chosen values, extrapolating ones included (negative factors, factors above 2, shears
/// both ways, shifts past the middle), equal PIL's.
#[test]
fn pil_transforms_match_pil_at_chosen_values() {
    let transforms = [
        (
            "Brightness",
            PilTransform::Brightness,
            [-0.3, 0.0, 0.46, 1.0, 1.54, 2.7],
        ),
        (
            "Color",
            PilTransform::Color,
            [-0.5, 0.0, 0.3, 1.0, 1.9, 3.0],
        ),
        (
            "Contrast",
            PilTransform::Contrast,
            [-0.5, 0.0, 0.3, 1.0, 1.9, 3.0],
        ),
        (
            "Sharpness",
            PilTransform::Sharpness,
            [-1.0, 0.0, 0.5, 1.0, 2.0, 4.0],
        ),
        (
            "ShearX",
            PilTransform::ShearX,
            [-0.9, -0.5, -0.02, 0.0, 0.3, 1.2],
        ),
        (
            "ShearY",
            PilTransform::ShearY,
            [-0.9, -0.5, -0.02, 0.0, 0.3, 1.2],
        ),
        (
            "TranslateX",
            PilTransform::TranslateX,
            [-0.7, -0.33, -0.01, 0.0, 0.25, 1.1],
        ),
        (
            "TranslateY",
            PilTransform::TranslateY,
            [-0.7, -0.33, -0.01, 0.0, 0.25, 1.1],
        ),
    ];
    let images = [
        noise(&[15, 22, 3], 7),
        picture(&[21, 16, 3]),
        picture(&[18, 18]),
    ];
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for (name, transform, values) in transforms {
        for value in values {
            for image in &images {
                let raster = Raster::of("x", image).unwrap();
                ours.push(transform.apply(&raster, value).tensor_like(image).unwrap());
                cases.push((image.shallow_clone(), vec![(name, value)]));
            }
        }
    }
    for ((image, steps), (reference, ours)) in cases.iter().zip(pil(&cases).iter().zip(&ours)) {
        assert_eq!(
            max_diff(ours, reference),
            0.0,
            "{steps:?} on {:?}",
            image.size()
        );
    }
}

/// One-sample Kolmogorov–Smirnov statistic of `values` against `U(lo, hi)`.
pub(super) fn ks_uniform(values: &[f64], [lo, hi]: [f64; 2]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
            (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
        })
        .fold(0.0, f64::max)
}

/// The drawn values follow FastEstimator's `base + uniform(lo, hi)`: `param_to_range(l)` is
/// `(-|l|, |l|)`, pairs stay as given, enhancers add 1.
#[test]
fn pil_ops_draw_fastestimators_distribution() {
    let n = 3000;
    let cases = [
        ("Brightness", "", [0.46, 1.54]),
        ("Color", "limit = -0.2", [0.8, 1.2]),
        ("Contrast", "limit = [0.1, 0.3]", [1.1, 1.3]),
        ("Sharpness", "limit = 0.9", [0.1, 1.9]),
        ("ShearX", "", [-0.3, 0.3]),
        ("ShearY", "shear_coef = [0.0, 0.5]", [0.0, 0.5]),
        ("TranslateX", "", [-0.2, 0.2]),
        ("TranslateY", "shift_limit = 0.33", [-0.33, 0.33]),
    ];
    for (name, config, range) in cases {
        let op = pil_op(name, config);
        let values: Vec<f64> = (0..n).map(|seed| op.value(seed)).collect();
        assert!(
            values.iter().all(|v| (range[0]..=range[1]).contains(v)),
            "{name}"
        );
        // 99.9% critical value of the one-sample KS statistic.
        let d = ks_uniform(&values, range);
        assert!(d < 1.95 / (n as f64).sqrt(), "{name} {config}: KS {d}");
        assert_ne!(
            op.value(1),
            op.value(2),
            "{name}: seeds give different draws"
        );
        assert_eq!(op.value(5), op.value(5));
    }
}

/// One draw per call applies to every input, whatever their shapes.
#[test]
fn pil_ops_apply_one_draw_to_all_inputs() {
    let (a, b) = (noise(&[12, 14, 3], 1), picture(&[9, 20]));
    for (name, _, _) in OPS {
        let op = super::direct(name, "", &["a", "b"]);
        let single = pil_op(name, "");
        let both = op.forward(&[&a, &b], &seeded(3)).unwrap();
        let value = single.value(3);
        let transform = |x: &Tensor| {
            let t = match name {
                "Brightness" => PilTransform::Brightness,
                "Color" => PilTransform::Color,
                "Contrast" => PilTransform::Contrast,
                "Sharpness" => PilTransform::Sharpness,
                "ShearX" => PilTransform::ShearX,
                "ShearY" => PilTransform::ShearY,
                "TranslateX" => PilTransform::TranslateX,
                _ => PilTransform::TranslateY,
            };
            t.apply(&Raster::of("x", x).unwrap(), value)
                .tensor_like(x)
                .unwrap()
        };
        assert!(both[0].equal(&transform(&a)), "{name}");
        assert!(both[1].equal(&transform(&b)), "{name}");
    }
}

/// Bad configs and inputs are errors naming the problem.
#[test]
fn pil_ops_reject_bad_configs_and_inputs() {
    let build = |name: &str, config: &str| {
        fe_plugin_api::testing::numpy_op(name, config, &["x"], &["x"]).err()
    };
    let err = build("Brightness", "p = 0.5").expect("unknown key");
    assert!(err.to_string().contains('p'), "{err}");
    let err = build("ShearX", "shear_coef = [0.1, inf]").expect("infinite range");
    assert!(err.to_string().contains("finite"), "{err}");
    assert!(
        build("TranslateY", "limit = 0.1").is_some(),
        "limit is not TranslateY's"
    );
    let op = super::direct("Contrast", "", &["x"]);
    let float = Tensor::zeros([4, 4, 3], (Kind::Float, fe_plugin_api::tch::Device::Cpu));
    let err = op.forward(&[&float], &seeded(0)).unwrap_err();
    assert!(err.to_string().contains("uint8"), "{err}");
    let rgba = noise(&[4, 4, 4], 0);
    let err = op.forward(&[&rgba], &seeded(0)).unwrap_err();
    assert!(err.to_string().contains("(H, W, 3)"), "{err}");
}
