//! Boxes and keypoints of the ops in `registry_extra.rs` against albumentations 2.0.8's
//! `Compose` for the parameters the Rust op drew, in every box format.

use fe_plugin_api::tch::Tensor;
use serde_json::json;

use super::reference::{albumentations_targets, TargetCase};
use super::targets::{
    assert_targets_match, bbox_settings, boxes, compare_targets, keypoints, Call, Compared, H, W,
};
use super::{direct, floats, run, typed};
use crate::{
    CropNonEmptyMaskIfExists, MaskDropout, RandomCropFromBorders, RandomGridShuffle, RandomScale,
    XYMasking,
};

/// Every op and drawn parameter set the comparison covers, on `image`.
fn calls(image: &Tensor) -> Vec<Call> {
    let keys = ["image"];
    let mut calls = Vec::new();
    for (seed, config) in [(0, "grid = [3, 3]\np = 1.0"), (1, "grid = [2, 4]\np = 1.0")]
        .into_iter()
        .chain((2..6).map(|s| (s, "grid = [4, 5]\np = 1.0")))
    {
        let s = typed::<RandomGridShuffle>(config, &keys)
            .shuffle(H, W, seed)
            .unwrap();
        calls.push(Call {
            name: "RandomGridShuffle",
            config,
            transform: "RandomGridShuffle",
            init: json!({}),
            params: json!({"tiles": s.tiles, "mapping": s.mapping}),
            seed,
        });
    }
    let config = "num_masks_x = [1, 2]\nnum_masks_y = [0, 2]\nmask_x_length = [3, 9]\nmask_y_length = [2, 7]\np = 1.0";
    for seed in 0..6 {
        let holes = typed::<XYMasking>(config, &keys).holes(H, W, seed).unwrap();
        calls.push(Call {
            name: "XYMasking",
            config,
            transform: "XYMasking",
            init: json!({"mask_x_length": 9, "mask_y_length": 7}),
            params: json!({"holes": holes, "seed": 0}),
            seed,
        });
    }
    let config = "scale_limit = [-0.5, 0.8]\np = 1.0";
    for seed in 0..6 {
        let s = typed::<RandomScale>(config, &keys).scale(seed).unwrap();
        calls.push(Call {
            name: "RandomScale",
            config,
            transform: "RandomScale",
            init: json!({"scale_limit": [-0.5, 0.8]}),
            params: json!({ "scale": s }),
            seed,
        });
    }
    let config = "crop_left = 0.4\ncrop_right = 0.4\ncrop_top = 0.5\ncrop_bottom = 0.3";
    for seed in 0..6 {
        let window = typed::<RandomCropFromBorders>(config, &keys).window(H, W, seed);
        calls.push(Call {
            name: "RandomCropFromBorders",
            config,
            transform: "RandomCropFromBorders",
            init: json!({}),
            params: json!({ "crop_coords": window }),
            seed,
        });
    }
    // The image is its own mask here: the window holds one of its non-zero pixels.
    let config = "height = 14\nwidth = 17\nmasks = [\"image\"]";
    let op = typed::<CropNonEmptyMaskIfExists>(config, &["image", "bbox", "kp"]);
    let labelled = op.labelled(&[image, image, image]).unwrap();
    for seed in 0..6 {
        let window = op.draw(&labelled, (H, W), seed).unwrap().window;
        calls.push(Call {
            name: "CropNonEmptyMaskIfExists",
            config,
            transform: "CropNonEmptyMaskIfExists",
            init: json!({"height": 14, "width": 17}),
            params: json!({ "crop_coords": window }),
            seed,
        });
    }
    calls
}

#[test]
fn extra_ops_targets_match_albumentations_for_the_drawn_parameters() {
    let mut changed = std::collections::BTreeMap::new();
    let image = super::noise(&[H, W, 3], 32);
    for Compared { what, out, given } in compare_targets(&calls(&image), &image) {
        let moved = out[1].size() != given.size() || floats(&out[1]) != floats(&given);
        *changed
            .entry(what.split(' ').next().unwrap().to_owned())
            .or_insert(0) += i64::from(moved);
    }
    // Every op's fixtures move or cut boxes, not only pass them through.
    for (name, n) in changed {
        assert!(n >= 4, "{name}: boxes changed in only {n} calls");
    }
}

/// A `H × W` label mask with objects over some fixture boxes and keypoints.
fn label_mask() -> Tensor {
    let mut m = vec![0u8; (H * W) as usize];
    for (y0, y1, x0, x1, v) in [
        (2, 12, 1, 9, 1),
        (14, 22, 4, 16, 1),
        (0, 10, 18, 31, 2),
        (16, 24, 24, 32, 3),
        (6, 9, 12, 18, 4),
    ] {
        for y in y0..y1 {
            m[y * W as usize + x0..y * W as usize + x1].fill(v);
        }
    }
    Tensor::from_slice(&m).reshape([H, W])
}

#[test]
fn mask_dropout_targets_match_albumentations_for_the_drawn_objects() {
    let image = super::noise(&[H, W, 3], 33);
    let (mask, kp) = (label_mask(), keypoints());
    let values = floats(&mask);
    let keys = ["image", "mask", "bbox", "kp"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for seed in 0..6 {
        for (format, table, bbox_params) in bbox_settings() {
            let config = format!(
                "max_objects = [1, 4]\nmasks = [\"mask\"]\np = 1.0\nbboxes = [\"bbox\"]\nbbox_params = {table}\nkeypoints = [\"kp\"]"
            );
            let op = direct("MaskDropout", &config, &keys);
            let dropped = typed::<MaskDropout>(&config, &keys)
                .dropped(&values, (H, W), seed)
                .unwrap();
            let bbox = boxes(format);
            let out = run(op.as_ref(), &[&image, &mask, &bbox, &kp], seed);
            let out = vec![
                out[0].shallow_clone(),
                out[2].shallow_clone(),
                out[3].shallow_clone(),
            ];
            ours.push((
                format!("MaskDropout seed {seed} {format}"),
                format,
                out,
                bbox.shallow_clone(),
            ));
            let rows: Vec<&[bool]> = dropped.chunks(W as usize).collect();
            cases.push(TargetCase {
                transform: "MaskDropout",
                init: json!({}),
                params: json!({ "dropout_mask": rows }),
                bbox_params,
                image: image.shallow_clone(),
                bboxes: bbox,
                keypoints: kp.shallow_clone(),
            });
        }
    }
    let (mut boxes_cut, mut points_cut) = (0, 0);
    for ((what, format, out, given), [image, bbox, points]) in
        ours.iter().zip(albumentations_targets(&cases))
    {
        assert_targets_match(what, format, out, [&image, &bbox, &points]);
        boxes_cut += i64::from(out[1].size()[0] < given.size()[0]);
        points_cut += i64::from(out[2].size()[0] < 6);
    }
    assert!(
        boxes_cut >= 4 && points_cut >= 4,
        "{boxes_cut} {points_cut}"
    );
}
