//! Boxes and keypoints of the box-driven crops against albumentations 2.0.8's `Compose` for
//! the window the Rust op drew, in every box format.

use fe_plugin_api::tch::Tensor;
use serde_json::json;

use super::reference::{albumentations_targets, TargetCase};
use super::targets::{
    assert_targets_match, bbox_settings, boxes, compare_targets, keypoints, pascal, Call, Compared,
    H, W,
};
use super::{direct, noise, run, typed};
use crate::{BBoxSafeRandomCrop, RandomCropNearBBox, RandomSizedBBoxSafeCrop};

const WITH_BOXES: &str = "bboxes = [\"bbox\"]\nbbox_params = \"pascal_voc\"";

/// The fixture boxes in pixels, as the ops read them.
fn fixture_rows() -> Vec<Vec<f64>> {
    pascal().iter().map(|r| r[..4].to_vec()).collect()
}

fn safe_calls() -> Vec<Call> {
    let keys = ["image", "bbox", "kp"];
    let mut calls = Vec::new();
    for (config, erosion) in [
        ("erosion_rate = 0.0", 0.0),
        ("erosion_rate = 0.5", 0.5),
        ("erosion_rate = 1.0", 1.0),
    ] {
        let draws = typed::<BBoxSafeRandomCrop>(&format!("{config}\n{WITH_BOXES}"), &keys);
        for seed in 0..4 {
            let window = draws.window((H, W), &fixture_rows(), seed).unwrap();
            calls.push(Call {
                name: "BBoxSafeRandomCrop",
                config,
                transform: "BBoxSafeRandomCrop",
                init: json!({ "erosion_rate": erosion }),
                params: json!({ "crop_coords": window }),
                seed,
            });
        }
    }
    let config = "height = 20\nwidth = 16\nerosion_rate = 0.5";
    let draws = typed::<RandomSizedBBoxSafeCrop>(&format!("{config}\n{WITH_BOXES}"), &keys);
    for seed in 0..4 {
        let window = draws.window((H, W), &fixture_rows(), seed).unwrap();
        calls.push(Call {
            name: "RandomSizedBBoxSafeCrop",
            config,
            transform: "RandomSizedBBoxSafeCrop",
            init: json!({"height": 20, "width": 16, "erosion_rate": 0.5}),
            params: json!({ "crop_coords": window }),
            seed,
        });
    }
    calls
}

#[test]
fn bbox_safe_crop_targets_match_albumentations_for_the_drawn_window() {
    let (mut cut, mut whole) = (0, 0);
    for Compared { what, out, given } in compare_targets(&safe_calls(), &noise(&[H, W, 3], 34)) {
        if what.contains("erosion_rate = 0.0") {
            // The formats whose filters keep every fixture box on the uncut image.
            if what.ends_with("pascal_voc") || what.ends_with("yolo") {
                assert_eq!(out[1].size(), given.size(), "{what}: every box kept");
                whole += 1;
            }
        } else {
            cut += i64::from(out[1].size()[0] < given.size()[0]);
        }
    }
    assert!(whole == 8 && cut >= 8, "whole {whole}, cut {cut}");
}

#[test]
fn near_bbox_crop_targets_match_albumentations_for_the_drawn_window() {
    let image = noise(&[H, W, 3], 35);
    let kp = keypoints();
    let keys = ["image", "bbox", "kp", "crop_box"];
    let base = "max_part_shift = [0.3, 0.6]\ncropping_bbox_key = \"crop_box\"";
    let draws = typed::<RandomCropNearBBox>(base, &keys);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (i, bbox) in [[4, 3, 20, 15], [14, 8, 32, 24]].into_iter().enumerate() {
        let crop_box = Tensor::from_slice(&bbox);
        for seed in 0..3 {
            let window = draws.window((H, W), bbox, seed).unwrap();
            for (format, table, bbox_params) in bbox_settings() {
                let config = format!(
                    "{base}\nbboxes = [\"bbox\"]\nbbox_params = {table}\nkeypoints = [\"kp\"]"
                );
                let op = direct("RandomCropNearBBox", &config, &keys);
                let given = boxes(format);
                let out = run(op.as_ref(), &[&image, &given, &kp, &crop_box], seed);
                assert!(out[3].equal(&crop_box), "the cropping box passes through");
                let what = format!("RandomCropNearBBox box {i} seed {seed} {format} {window:?}");
                ours.push((what, format, out, given.size()[0]));
                cases.push(TargetCase {
                    transform: "RandomCropNearBBox",
                    init: json!({"max_part_shift": [0.3, 0.6]}),
                    params: json!({"crop_coords": window, "cropping_bbox": bbox}),
                    bbox_params,
                    image: image.shallow_clone(),
                    bboxes: given,
                    keypoints: kp.shallow_clone(),
                });
            }
        }
    }
    let mut cut = 0;
    for ((what, format, out, n), [image, bbox, points]) in
        ours.iter().zip(albumentations_targets(&cases))
    {
        assert_targets_match(what, format, out, [&image, &bbox, &points]);
        cut += i64::from(out[1].size()[0] < *n);
    }
    assert!(cut >= 8, "boxes cut in only {cut} calls");
}
