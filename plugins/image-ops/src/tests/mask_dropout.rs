//! `MaskDropout` against albumentations 2.0.8: the same image and mask for the objects the
//! op reports it erased, and the object draws against their distribution.

use fe_plugin_api::tch::{Kind, Tensor};
use serde_json::json;

use super::reference::{albumentations, Case};
use super::{direct, floats, noise, run, typed};
use crate::mask_dropout::objects;
use crate::MaskDropout;

/// A 12 × 15 label mask: value 1 in two separate blobs, value 2 in one touching a 1 blob
/// (another object: a different value), value 3 in a diagonal chain (one object).
pub(super) fn labels() -> Tensor {
    let mut m = vec![0u8; 12 * 15];
    let mut put = |y0: usize, y1: usize, x0: usize, x1: usize, v: u8| {
        for y in y0..y1 {
            m[y * 15 + x0..y * 15 + x1].fill(v);
        }
    };
    put(1, 4, 1, 5, 1);
    put(7, 11, 9, 14, 1);
    put(1, 4, 5, 8, 2);
    for i in 0..4 {
        put(6 + i, 7 + i, 1 + i, 2 + i, 3);
    }
    Tensor::from_slice(&m).reshape([12, 15])
}

fn as_lists(dropped: &[bool]) -> serde_json::Value {
    json!(dropped.chunks(15).collect::<Vec<_>>())
}

#[test]
fn mask_dropout_matches_albumentations_for_the_drawn_objects() {
    let image = noise(&[12, 15, 3], 60);
    let float = image.to_kind(Kind::Float) / 255.0;
    let mask = labels();
    let values = floats(&mask);
    let keys = ["image", "mask"];
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for (x, max_objects) in [(&image, "[1, 3]"), (&float, "4"), (&image, "2")] {
        let config = format!(
            "max_objects = {max_objects}\nfill = 0.5\nmask_fill_value = 9\nmasks = [\"mask\"]\np = 1.0"
        );
        let op = direct("MaskDropout", &config, &keys);
        let draws = typed::<MaskDropout>(&config, &keys);
        for seed in 0..4 {
            let dropped = draws.dropped(&values, (12, 15), seed).unwrap();
            ours.push((
                format!("{config} {:?} seed {seed}", x.kind()),
                run(op.as_ref(), &[x, &mask], seed),
            ));
            let init =
                json!({"fill": if x.kind() == Kind::Uint8 { 0.0 } else { 0.5 }, "fill_mask": 9});
            let params = json!({ "dropout_mask": as_lists(&dropped) });
            cases.push(Case::apply("MaskDropout", init, params, x, Some(&mask)));
        }
    }
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(out[0].equal(&r), "{what}: image");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
        assert!(!out[1].equal(&labels()), "{what}: something was erased");
    }
}

#[test]
fn objects_are_pieces_of_one_value_and_draws_are_uniform() {
    let values = floats(&labels());
    let found = objects(&values, 12, 15);
    let sizes: Vec<usize> = found.iter().map(Vec::len).collect();
    assert_eq!(sizes, [12, 20, 9, 4], "value 1 twice, then 2, then 3");
    // [1, 3] objects of 4: 1, 2 or 3 with probability 1/3 each, each object erased with
    // probability (1/4 + 2/4 + 3/4) / 3 = 1/2. Binomial bounds at about 4.5 sigma.
    let op = typed::<MaskDropout>("max_objects = [1, 3]\nmasks = [\"x\"]\np = 1.0", &["x"]);
    let n = 3000;
    let (mut per_count, mut per_object) = ([0usize; 4], [0usize; 4]);
    for seed in 0..n as u64 {
        let d = op.dropped(&values, (12, 15), seed).unwrap();
        let hit: Vec<bool> = found.iter().map(|o| d[o[0]]).collect();
        for (i, o) in found.iter().enumerate() {
            assert!(o.iter().all(|&p| d[p] == hit[i]), "objects go whole");
        }
        per_count[hit.iter().filter(|&&h| h).count() - 1] += 1;
        for (i, &h) in hit.iter().enumerate() {
            per_object[i] += usize::from(h);
        }
    }
    let near = |count: usize, p: f64| {
        let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
        (count as f64 - mean).abs() < 4.5 * sd
    };
    assert!(
        per_count[..3].iter().all(|&c| near(c, 1.0 / 3.0)),
        "{per_count:?}"
    );
    assert_eq!(per_count[3], 0);
    assert!(per_object.iter().all(|&c| near(c, 0.5)), "{per_object:?}");
    // p = 0 and an empty mask leave everything alone.
    let off = direct("MaskDropout", "masks = [\"x\"]\np = 0.0", &["x"]);
    assert!(run(off.as_ref(), &[&labels()], 0)[0].equal(&labels()));
    assert!(op.dropped(&[0.0; 6], (2, 3), 0).is_none());
}

#[test]
fn mask_dropout_needs_a_mask() {
    let made = fe_plugin_api::testing::numpy_op("MaskDropout", "p = 1.0", &["x"], &["x"]);
    let Err(e) = made else {
        panic!("no mask listed")
    };
    assert_eq!(e.field.as_str(), "masks");
}
