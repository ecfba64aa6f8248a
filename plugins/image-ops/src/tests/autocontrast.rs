//! `AutoContrast` against albumentations 2.0.8 on images whose ranges it stretches: both
//! methods, with and without a cutoff, an ignored value, and floats (through uint8).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::testing;
use serde_json::json;

use super::reference::{albumentations, max_diff, Case};
use super::{direct, noise, run};

/// A `(9, 11, 3)` uint8 image squeezed into [40, 199] per channel differently, with a few
/// pixels at 255 (which albumentations' histogram leaves out) and at 0.
fn narrow() -> Tensor {
    let base = noise(&[9, 11, 3], 7).to_kind(Kind::Int64);
    let scaled = base * Tensor::from_slice(&[5i64, 4, 3]) / 8 + 40;
    let x = scaled.to_kind(Kind::Uint8);
    let _ = x.get(0).get(0).fill_(255);
    let _ = x.get(8).get(10).fill_(0);
    x
}

#[test]
fn auto_contrast_matches_albumentations() {
    let image = narrow();
    let float = image.to_kind(Kind::Float) / 255.0;
    let gray = image.select(2, 1);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, init) in [
        ("", json!({})),
        ("method = \"pil\"", json!({"method": "pil"})),
        ("cutoff = 5", json!({"cutoff": 5})),
        (
            "cutoff = 20\nmethod = \"pil\"",
            json!({"cutoff": 20, "method": "pil"}),
        ),
        ("ignore = 255", json!({"ignore": 255})),
        (
            "cutoff = 2.5\nignore = 255",
            json!({"cutoff": 2.5, "ignore": 255}),
        ),
    ] {
        for x in [&image, &float, &gray] {
            let op = direct("AutoContrast", &format!("p = 1.0\n{config}"), &["x"]);
            ours.push((
                format!("{config:?} {:?} {:?}", x.kind(), x.size()),
                run(op.as_ref(), &[x], 0).remove(0),
            ));
            cases.push(Case::compose("AutoContrast", init.clone(), x, None));
        }
    }
    for ((what, y), (reference, _)) in ours.iter().zip(albumentations(&cases)) {
        assert_eq!(y.kind(), reference.kind(), "{what}");
        assert_eq!(y.size(), reference.size(), "{what}");
        let tolerance = if y.kind() == Kind::Uint8 { 0.0 } else { 1e-6 };
        let d = max_diff(y, &reference);
        assert!(d <= tolerance, "{what}: differs by {d}");
    }
    // The comparison can fail: the op did change the image.
    assert!(max_diff(&ours[0].1, &image) > 20.0);
}

#[test]
fn bad_settings_are_errors_naming_the_key() {
    for (config, key) in [
        ("cutoff = 120", "cutoff"),
        ("method = \"linear\"", "method"),
    ] {
        let Err(e) = testing::numpy_op("AutoContrast", config, &["x"], &["x"]) else {
            panic!("{config} should fail");
        };
        assert_eq!(e.field.to_string(), key, "{config}: {e}");
    }
}
