//! `RandomGridShuffle` against albumentations 2.0.8: the same image and mask for the cells
//! and mapping the op reports it drew, and the same draw distribution.

use serde_json::json;

use super::reference::{albumentations, albumentations_samples, ks_statistic, Case};
use super::{direct, noise, run, typed};
use crate::RandomGridShuffle;

#[test]
fn grid_shuffle_matches_albumentations_for_the_drawn_cells() {
    let image = noise(&[13, 17, 3], 40);
    let mask = noise(&[13, 17], 41);
    let (mut cases, mut ours) = (Vec::new(), Vec::new());
    for grid in [[3, 4], [2, 2], [1, 5], [13, 1]] {
        let config = format!("grid = {grid:?}\np = 1.0");
        let op = direct("RandomGridShuffle", &config, &["image", "mask"]);
        let draws = typed::<RandomGridShuffle>(&config, &["image", "mask"]);
        for seed in 0..4 {
            let s = draws.shuffle(13, 17, seed).expect("p = 1 always shuffles");
            ours.push((
                format!("grid {grid:?} seed {seed}"),
                run(op.as_ref(), &[&image, &mask], seed),
            ));
            let params = json!({"tiles": s.tiles, "mapping": s.mapping});
            cases.push(Case::apply(
                "RandomGridShuffle",
                json!({ "grid": grid }),
                params,
                &image,
                Some(&mask),
            ));
        }
    }
    let mut moved = 0;
    for ((what, out), (r, rm)) in ours.iter().zip(albumentations(&cases)) {
        assert!(out[0].equal(&r), "{what}: image");
        assert!(out[1].equal(rm.as_ref().unwrap()), "{what}: mask");
        let same = out[0].equal(&image);
        // A 2 x 2 grid of a 13 x 17 image has four cell shapes: nothing can move.
        assert!(!what.starts_with("grid [2, 2]") || same, "{what}");
        moved += usize::from(!same);
    }
    assert!(moved >= 10, "only {moved} calls moved cells");
    let off = direct("RandomGridShuffle", "p = 0.0", &["x"]);
    assert!(run(off.as_ref(), &[&image], 0)[0].equal(&image));
}

#[test]
fn grid_shuffle_draws_follow_albumentations_distribution() {
    // 7 rows split 4 + 3 in random order; 9 columns in three equal cells that trade places.
    let (n, shape) = (2000, [7, 9, 3]);
    let op = typed::<RandomGridShuffle>("grid = [2, 3]\np = 1.0", &["x"]);
    let ours: Vec<_> = (0..n as u64)
        .map(|s| op.shuffle(7, 9, s).unwrap())
        .collect();
    let init = json!({"grid": [2, 3]});
    let mappings = albumentations_samples("RandomGridShuffle", init.clone(), &shape, "mapping", n);
    let tiles = albumentations_samples("RandomGridShuffle", init, &shape, "tiles", n);
    let critical = 1.95 * (2.0 / n as f64).sqrt();
    for cell in 0..6 {
        let a: Vec<f64> = ours.iter().map(|s| s.mapping[cell] as f64).collect();
        let b: Vec<f64> = mappings.iter().map(|m| m[cell]).collect();
        let d = ks_statistic(&a, &b);
        assert!(d < critical, "mapping[{cell}]: KS {d} >= {critical}");
    }
    // The first row's height (tiles[0] = [y0, x0, y1, x1]).
    let a: Vec<f64> = ours.iter().map(|s| s.tiles[0][2] as f64).collect();
    let b: Vec<f64> = tiles.iter().map(|t| t[2]).collect();
    let d = ks_statistic(&a, &b);
    assert!(d < critical, "first row height: KS {d} >= {critical}");
    // Cells only trade places with cells of their shape: within their row here.
    assert!(ours
        .iter()
        .all(|s| s.mapping.iter().enumerate().all(|(i, &j)| i / 3 == j / 3)));
}
