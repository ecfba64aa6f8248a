//! `RUA` against FastEstimator's rules (how many ops, which, how strong) and, step by step,
//! against PIL (`pil_ref.py`).

use fe_plugin_api::tch::Tensor;

use super::pil::{ks_uniform, pil};
use super::reference::max_diff;
use super::{noise, run, typed};
use crate::rua::{Aug, Choice, Step};
use crate::RUA;

fn rua(config: &str) -> RUA {
    typed::<RUA>(config, &["x"])
}

const NAMES: [&str; 14] = [
    "Rotate",
    "Identity",
    "AutoContrast",
    "Equalize",
    "Posterize",
    "Solarize",
    "Sharpness",
    "Contrast",
    "Color",
    "Brightness",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
];

/// `N = level (min(#choices, 5) - 1) / 30 + 1`: `int(N)` ops always, one more with `N % 1`
/// (values from Python).
#[test]
fn rua_op_count_follows_fastestimator() {
    let cases: [(&str, usize, f64); 7] = [
        ("level = 0", 1, 0.0),
        ("level = 3", 1, 0.3999999999999999),
        ("", 3, 0.3999999999999999),
        ("level = 20", 3, 0.6666666666666665),
        ("level = 27.0", 4, 0.5999999999999996),
        ("level = 30", 5, 0.0),
        ("level = 15\nchoices = [\"Rotate\", \"Color\"]", 1, 0.5),
    ];
    for (config, guaranteed, extra) in cases {
        assert_eq!(rua(config).count(), (guaranteed, extra), "{config}");
    }
}

/// `set_rua_level(level / 30)`: ranges narrowed about their middle; Posterize keeps
/// `round(8 - 7 m)` (half to even) to 8 bits; Solarize draws from `[0, 256 m]`.
#[test]
fn rua_magnitudes_follow_fastestimator() {
    let m = 0.6;
    let expected: [(&str, [f64; 2]); 14] = [
        ("Rotate", [-90.0 * m, 90.0 * m]),
        ("Identity", [0.0, 0.0]),
        ("AutoContrast", [0.0, 0.0]),
        ("Equalize", [0.0, 0.0]),
        ("Posterize", [4.0, 8.0]),
        ("Solarize", [0.0, 256.0 * m]),
        ("Sharpness", [-0.9 * m, 0.9 * m]),
        ("Contrast", [-0.9 * m, 0.9 * m]),
        ("Color", [-0.9 * m, 0.9 * m]),
        ("Brightness", [-0.9 * m, 0.9 * m]),
        ("ShearX", [-0.5 * m, 0.5 * m]),
        ("ShearY", [-0.5 * m, 0.5 * m]),
        ("TranslateX", [-0.33 * m, 0.33 * m]),
        ("TranslateY", [-0.33 * m, 0.33 * m]),
    ];
    let op = rua("");
    assert_eq!(op.choices().len(), 14);
    for (choice, (name, range)) in op.choices().iter().zip(expected) {
        assert_eq!(choice.name, name);
        for (got, want) in choice.range.iter().zip(range) {
            assert!((got - want).abs() < 1e-12, "{name}: {:?}", choice.range);
        }
    }
    // Python's round(8 - level / 30 * 7) for these levels.
    for (level, bits) in [
        (0, 8),
        (3, 7),
        (5, 7),
        (10, 6),
        (15, 4),
        (20, 3),
        (25, 2),
        (27, 2),
        (30, 1),
    ] {
        let op = rua(&format!("level = {level}\nchoices = \"Posterize\""));
        assert_eq!(op.choices()[0].range, [bits as f64, 8.0], "level {level}");
    }
}

/// Over many calls: ops picked uniformly (with repetition), the extra op with probability
/// `N % 1`, and each op's value drawn from its narrowed range.
#[test]
fn rua_draws_follow_fastestimator() {
    let op = rua("");
    let n = 6000;
    let mut counts = [0usize; 14];
    let mut four = 0;
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); 14];
    for seed in 0..n {
        let plan = op.plan(seed);
        assert!(plan.len() == 3 || plan.len() == 4, "{}", plan.len());
        four += usize::from(plan.len() == 4);
        for step in plan {
            let i = NAMES.iter().position(|&n| n == step.choice.name).unwrap();
            counts[i] += 1;
            values[i].push(step.value);
        }
    }
    let share = four as f64 / n as f64;
    assert!(
        (share - 0.4).abs() < 4.0 * (0.24 / n as f64).sqrt(),
        "{share}"
    );
    let picks: usize = counts.iter().sum();
    let expect = picks as f64 / 14.0;
    for (name, &count) in NAMES.iter().zip(&counts) {
        let sigma = (expect * 13.0 / 14.0).sqrt();
        assert!(
            (count as f64 - expect).abs() < 5.0 * sigma,
            "{name}: {count} of {picks}"
        );
    }
    let m = 0.6;
    let uniform = [
        (0, [-90.0 * m, 90.0 * m], 0.0),
        (6, [-0.9 * m, 0.9 * m], 1.0),
        (9, [-0.9 * m, 0.9 * m], 1.0),
        (10, [-0.5 * m, 0.5 * m], 0.0),
        (13, [-0.33 * m, 0.33 * m], 0.0),
    ];
    for (i, [lo, hi], base) in uniform {
        let v = &values[i];
        let d = ks_uniform(v, [lo + base, hi + base]);
        assert!(d < 1.95 / (v.len() as f64).sqrt(), "{}: KS {d}", NAMES[i]);
    }
    // Posterize: randint(4, 8), every value; Solarize: 256 - round(U(0, 153.6)).
    let bits = &values[4];
    for b in 4..=8 {
        let share = bits.iter().filter(|&&v| v == b as f64).count() as f64 / bits.len() as f64;
        assert!((share - 0.2).abs() < 0.06, "bits {b}: {share}");
    }
    let thresholds = &values[5];
    assert!(thresholds
        .iter()
        .all(|t| t.fract() == 0.0 && (102.0..=256.0).contains(t)));
    let raw: Vec<f64> = thresholds.iter().map(|t| 256.0 - t).collect();
    assert!(ks_uniform(&raw, [0.0, 153.6]) < 1.95 / (raw.len() as f64).sqrt() + 1.0 / 153.6);
}

/// Every augmentation, chained as RUA picks them, equals PIL step by step; level 30 with a
/// single choice runs it 5 times at full strength.
#[test]
fn rua_matches_pil_step_by_step() {
    let images = [
        noise(&[17, 23, 3], 4),
        noise(&[20, 20], 5),
        noise(&[9, 14, 1], 6),
    ];
    let mut configs: Vec<String> = NAMES
        .iter()
        .map(|name| format!("level = 30\nchoices = [\"{name}\"]"))
        .collect();
    configs.extend([
        "".to_owned(),
        "level = 7".to_owned(),
        "level = 30".to_owned(),
    ]);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for (c, config) in configs.iter().enumerate() {
        let op = rua(config);
        for (i, image) in images.iter().enumerate() {
            let seed = (c * 3 + i) as u64;
            let steps: Vec<(&str, f64)> = op
                .plan(seed)
                .iter()
                .map(|s| (s.choice.name, s.value))
                .collect();
            ours.push(run(&op, &[image], seed).remove(0));
            cases.push((image.shallow_clone(), steps));
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

/// PIL's special rotations (exact transposes at 90, 180, 270 degrees on square images, the
/// affine path at 90 on others) and Posterize / Solarize at their extremes.
#[test]
fn rua_edge_values_match_pil() {
    let step = |name: &'static str, aug: Aug, value: f64| Step {
        choice: Choice {
            name,
            aug,
            range: [0.0, 0.0],
        },
        value,
    };
    let steps = [
        step("Rotate", Aug::Rotate, 90.0),
        step("Rotate", Aug::Rotate, 180.0),
        step("Rotate", Aug::Rotate, -90.0),
        step("Rotate", Aug::Rotate, 0.0),
        step("Rotate", Aug::Rotate, 33.3),
        step("Posterize", Aug::Posterize, 0.0),
        step("Posterize", Aug::Posterize, 8.0),
        step("Solarize", Aug::Solarize, 0.0),
        step("Solarize", Aug::Solarize, 256.0),
    ];
    let images = [
        noise(&[12, 12, 3], 1),
        noise(&[10, 15, 3], 2),
        noise(&[7, 7], 3),
    ];
    let mut cases = Vec::new();
    let mut ours: Vec<Tensor> = Vec::new();
    for s in &steps {
        for image in &images {
            let raster = crate::pil::Raster::of("x", image).unwrap();
            ours.push(s.apply(&raster).tensor_like(image).unwrap());
            cases.push((image.shallow_clone(), vec![(s.choice.name, s.value)]));
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

/// `choices` as FastEstimator parses it: names in the given order, `!Name`s out of the
/// defaults in default order, and its errors (plus repeated names, which it mishandles).
#[test]
fn rua_choices_follow_fastestimator() {
    let names =
        |config: &str| -> Vec<&str> { rua(config).choices().iter().map(|c| c.name).collect() };
    assert_eq!(
        names("choices = [\"Color\", \"Rotate\"]"),
        ["Color", "Rotate"]
    );
    assert_eq!(names("choices = \"defaults\""), NAMES);
    let without = names("choices = [\"!Rotate\", \"!TranslateY\"]");
    assert_eq!(without, NAMES[1..13]);
    let build = |config: &str| {
        fe_plugin_api::testing::numpy_op("RUA", config, &["x"], &["x"])
            .err()
            .unwrap_or_else(|| panic!("{config} should fail"))
            .to_string()
    };
    let all_out: Vec<String> = NAMES.iter().map(|n| format!("\"!{n}\"")).collect();
    let all_out = format!("choices = [{}]", all_out.join(", "));
    let errors = [
        ("choices = [\"Rotate\", \"!Color\"]", "not both"),
        ("choices = [\"defaults\", \"!Rotate\"]", "defaults"),
        ("choices = [\"defaults\", \"Rotate\"]", "defaults"),
        ("choices = [\"Nope\"]", "unknown augmentation `Nope`"),
        ("choices = [\"!Nope\"]", "unknown augmentation `Nope`"),
        ("choices = [\"Rotate\", \"Rotate\"]", "twice"),
        ("choices = []", "no augmentation"),
        (all_out.as_str(), "no augmentation"),
        ("level = 31", "[0, 30]"),
        ("level = -1", "[0, 30]"),
        ("magnitude = 3", "magnitude"),
    ];
    for (config, needle) in errors {
        let err = build(config);
        assert!(err.contains(needle), "{config}: {err}");
    }
}
