//! The dihedral ops, `PadIfNeeded`, the max-size rescales and `CoarseDropout` against
//! albumentations 2.0.8 on the same arrays and the same drawn parameters.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::NumpyOp;
use serde_json::json;

use super::reference::{albumentations, max_diff, Case};
use super::{direct, noise, run, typed};
use crate::flips::Move;
use crate::{CoarseDropout, Flip, PadIfNeeded, RandomRotate90, Transpose, VerticalFlip};

/// Runs `op` on `(image, mask)` with `ctx.seed = seed`.
fn both(op: &dyn NumpyOp, image: &Tensor, mask: &Tensor, seed: u64) -> (Tensor, Tensor) {
    let mut out = run(op, &[image, mask], seed);
    let mask = out.remove(1);
    (out.remove(0), mask)
}

/// The reference call that makes move `m`.
fn dihedral_case(m: Move, image: &Tensor, mask: &Tensor) -> Case {
    match m {
        Move::Flip(d) => Case::new(
            "cv2",
            "flip",
            json!({}),
            json!({ "args": [d] }),
            image,
            Some(mask),
        ),
        Move::Transpose => Case::compose("Transpose", json!({}), image, Some(mask)),
        Move::Rot90(k) => Case::apply(
            "RandomRotate90",
            json!({}),
            json!({ "factor": k }),
            image,
            Some(mask),
        ),
        Move::Keep => panic!("p = 1 always moves"),
    }
}

#[test]
fn dihedral_ops_match_albumentations_for_the_drawn_move() {
    let image = noise(&[5, 7, 3], 1);
    let mask = noise(&[5, 7], 2);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for name in ["VerticalFlip", "Flip", "Transpose", "RandomRotate90"] {
        let op = direct(name, "p = 1.0", &["image", "mask"]);
        for seed in 0..6 {
            let m = match name {
                "VerticalFlip" => typed::<VerticalFlip>("p = 1.0", &["image", "mask"])
                    .0
                    .draw(seed),
                "Flip" => typed::<Flip>("p = 1.0", &["image", "mask"]).0.draw(seed),
                "Transpose" => typed::<Transpose>("p = 1.0", &["image", "mask"])
                    .0
                    .draw(seed),
                _ => typed::<RandomRotate90>("p = 1.0", &["image", "mask"])
                    .0
                    .draw(seed),
            };
            cases.push(dihedral_case(m, &image, &mask));
            ours.push((name, m, both(op.as_ref(), &image, &mask, seed)));
        }
    }
    // VerticalFlip is cv2.flip code 0; check it against albumentations' own op once too.
    cases.push(Case::compose(
        "VerticalFlip",
        json!({}),
        &image,
        Some(&mask),
    ));
    let reference = albumentations(&cases);
    for ((name, m, (y, ym)), (r, rm)) in ours.iter().zip(&reference) {
        assert!(y.equal(r), "{name} {m:?} image");
        assert!(ym.equal(rm.as_ref().unwrap()), "{name} {m:?} mask");
    }
    assert!(ours[0].2 .0.equal(&reference.last().unwrap().0));
}

#[test]
fn dihedral_moves_are_uniform_and_p_zero_keeps_the_input() {
    let rot = typed::<RandomRotate90>("p = 1.0", &["x"]);
    let mut counts = [0usize; 4];
    for seed in 0..2000 {
        match rot.0.draw(seed) {
            Move::Rot90(k) => counts[k as usize] += 1,
            other => panic!("{other:?}"),
        }
    }
    // Chi-square with 3 degrees of freedom; 16.27 is the 0.1% critical value.
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - 500.0).powi(2) / 500.0)
        .sum();
    assert!(chi2 < 16.27, "factors {counts:?}");
    let flip = typed::<Flip>("p = 1.0", &["x"]);
    let codes: std::collections::BTreeSet<_> =
        (0..100).map(|s| format!("{:?}", flip.0.draw(s))).collect();
    assert_eq!(codes.len(), 3, "{codes:?}");
    let x = noise(&[4, 6], 3);
    for name in ["VerticalFlip", "Flip", "Transpose", "RandomRotate90"] {
        let op = direct(name, "p = 0.0", &["x"]);
        assert!(
            (0..20).all(|s| run(op.as_ref(), &[&x], s)[0].equal(&x)),
            "{name}"
        );
    }
    let half = typed::<Transpose>("", &["x"]);
    let moved = (0..1000).filter(|&s| half.0.draw(s) != Move::Keep).count();
    assert!(
        (430..=570).contains(&moved),
        "default p = 0.5 moved {moved} of 1000"
    );
}

#[test]
fn pad_if_needed_matches_albumentations() {
    let image = noise(&[3, 5, 3], 4);
    let mask = noise(&[3, 5], 5);
    // cv2 border codes: constant 0, replicate 1, reflect 2, reflect_101 4.
    let borders = [
        ("constant", 0),
        ("replicate", 1),
        ("reflect", 2),
        ("reflect_101", 4),
    ];
    let sizes = [
        (
            "min_height = 10\nmin_width = 12",
            json!({"min_height": 10, "min_width": 12}),
        ),
        (
            "min_height = 4\nmin_width = 2",
            json!({"min_height": 4, "min_width": 2}),
        ),
        (
            "pad_height_divisor = 4\npad_width_divisor = 8",
            json!({"min_height": null, "min_width": null, "pad_height_divisor": 4, "pad_width_divisor": 8}),
        ),
    ];
    let positions = ["center", "top_left", "bottom_right", "top_right"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (border, code) in borders {
        for (size, size_init) in &sizes {
            for position in positions {
                let config = format!(
                    "{size}\nborder_mode = \"{border}\"\nposition = \"{position}\"\nvalue = 7\nmask_value = 3\nmasks = [\"mask\"]"
                );
                let op = direct("PadIfNeeded", &config, &["image", "mask"]);
                ours.push((config, both(op.as_ref(), &image, &mask, 0)));
                let mut init = size_init.clone();
                init["border_mode"] = json!(code);
                init["position"] = json!(position);
                init["fill"] = json!(7);
                init["fill_mask"] = json!(3);
                cases.push(Case::compose("PadIfNeeded", init, &image, Some(&mask)));
            }
        }
    }
    // A random position: the margins the op reports, applied by albumentations.
    let config = "min_height = 9\nmin_width = 9\nposition = \"random\"";
    let pad = typed::<PadIfNeeded>(config, &["image", "mask"]);
    let op = direct("PadIfNeeded", config, &["image", "mask"]);
    let mut tops = std::collections::BTreeSet::new();
    for seed in 0..5 {
        let [t, b, l, r] = pad.margins(3, 5, seed);
        tops.insert(t);
        ours.push((
            format!("{config} seed {seed}"),
            both(op.as_ref(), &image, &mask, seed),
        ));
        let params = json!({"pad_top": t, "pad_bottom": b, "pad_left": l, "pad_right": r});
        let init = json!({"min_height": 9, "min_width": 9, "border_mode": 4});
        cases.push(Case::apply(
            "PadIfNeeded",
            init,
            params,
            &image,
            Some(&mask),
        ));
    }
    assert!(tops.len() > 1, "random positions vary: {tops:?}");
    for ((config, (y, ym)), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(y.equal(&r), "{config}:\n{y}\n{r}");
        assert!(ym.equal(rm.as_ref().unwrap()), "{config} mask");
    }
    // Float images pad alike.
    let float = image.to_kind(Kind::Float) / 255.0;
    let op = direct("PadIfNeeded", "min_height = 8\nmin_width = 8", &["x"]);
    let y = run(op.as_ref(), &[&float], 0).remove(0);
    let r = &albumentations(&[Case::compose(
        "PadIfNeeded",
        json!({"min_height": 8, "min_width": 8, "border_mode": 4}),
        &float,
        None,
    )])[0]
        .0;
    assert_eq!(max_diff(&y, r), 0.0);
}

#[test]
fn max_size_rescales_match_albumentations() {
    let image = noise(&[13, 8, 3], 6);
    let mask = noise(&[13, 8], 7);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (name, max_size) in [
        ("LongestMaxSize", 20),
        ("LongestMaxSize", 5),
        ("SmallestMaxSize", 6),
        ("SmallestMaxSize", 11),
    ] {
        for (interp, code) in [("bilinear", 1), ("nearest", 0)] {
            let config =
                format!("max_size = {max_size}\ninterpolation = \"{interp}\"\nmasks = [\"mask\"]");
            let op = direct(name, &config, &["image", "mask"]);
            ours.push((
                format!("{name} {config}"),
                both(op.as_ref(), &image, &mask, 0),
            ));
            let init = json!({"max_size": max_size, "interpolation": code});
            cases.push(Case::compose(name, init, &image, Some(&mask)));
        }
    }
    for ((config, (y, ym)), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(max_diff(y, &r) <= 1.0, "{config}: {}", max_diff(y, &r));
        assert!(
            ym.equal(rm.as_ref().unwrap()),
            "{config} mask is resized with nearest"
        );
    }
}

#[test]
fn coarse_dropout_matches_albumentations_for_the_drawn_holes() {
    let image = noise(&[12, 10, 3], 8);
    let mask = noise(&[12, 10], 9);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (config, fill_mask) in [
        ("max_holes = 4\nmin_holes = 1\nmax_height = 5\nmin_height = 2\nmax_width = 6\nmin_width = 1\nfill_value = 9\nmask_fill_value = 1", json!(1)),
        ("max_holes = 3\nmax_height = 20\nmax_width = 3", json!(null)),
    ] {
        let config = format!("{config}\np = 1.0\nmasks = [\"mask\"]");
        let dropout = typed::<CoarseDropout>(&config, &["image", "mask"]);
        let op = direct("CoarseDropout", &config, &["image", "mask"]);
        for seed in 0..4 {
            let holes = dropout.holes(12, 10, seed);
            assert!(!holes.is_empty());
            ours.push((format!("{config} seed {seed}"), both(op.as_ref(), &image, &mask, seed)));
            let fill = if config.contains("fill_value = 9") { 9 } else { 0 };
            let init = json!({"fill": fill, "fill_mask": fill_mask});
            cases.push(Case::apply("CoarseDropout", init, json!({"holes": holes, "seed": 0}), &image, Some(&mask)));
        }
    }
    for ((config, (y, ym)), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(y.equal(&r), "{config}");
        assert!(ym.equal(rm.as_ref().unwrap()), "{config} mask");
    }
    // p = 0 never cuts; holes never leave the image.
    let op = direct("CoarseDropout", "p = 0.0", &["x"]);
    assert!(run(op.as_ref(), &[&image], 3)[0].equal(&image));
    let dropout = typed::<CoarseDropout>("max_height = 30\nmax_width = 4\np = 1.0", &["x"]);
    for seed in 0..50 {
        for [x0, y0, x1, y1] in dropout.holes(12, 10, seed) {
            assert!(0 <= x0 && x1 <= 10 && 0 <= y0 && y1 <= 12 && y1 - y0 == 12);
        }
    }
}

#[test]
fn geometry_is_shared_by_image_and_mask() {
    // The mask is the image's middle channel: with nearest sampling, every geometric op must
    // leave it equal to the transformed image's middle channel.
    let image = noise(&[11, 9, 3], 10);
    let mask = image.select(2, 1).contiguous();
    let ops = [
        ("PadIfNeeded", "min_height = 15\nmin_width = 16\nposition = \"random\"\nmasks = [\"mask\"]"),
        ("LongestMaxSize", "max_size = 17\ninterpolation = \"nearest\"\nmasks = [\"mask\"]"),
        ("SmallestMaxSize", "max_size = 5\ninterpolation = \"nearest\"\nmasks = [\"mask\"]"),
        ("RandomResizedCrop", "height = 6\nwidth = 7\ninterpolation = \"nearest\"\nmasks = [\"mask\"]"),
        ("RandomSizedCrop", "min_max_height = [3, 8]\nheight = 10\nwidth = 10\nw2h_ratio = 0.8\ninterpolation = \"nearest\""),
        ("Crop", "x_min = 2\ny_min = 1\nx_max = 7\ny_max = 11"),
        ("Flip", "p = 1.0"),
        ("RandomRotate90", "p = 1.0"),
        ("Transpose", "p = 1.0"),
        ("VerticalFlip", "p = 1.0"),
    ];
    for (name, config) in ops {
        let op = direct(name, config, &["image", "mask"]);
        for seed in 0..5 {
            let (y, ym) = both(op.as_ref(), &image, &mask, seed);
            assert!(y.select(2, 1).equal(&ym), "{name} seed {seed}");
            assert_eq!(y.kind(), Kind::Uint8);
        }
    }
}
