//! Each optimizer against libtorch's own implementation (through tch), step for step.

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

use super::*;

/// Trains a small linear model for `steps` steps with libtorch's optimizer and with ours from
/// the same start, and returns the largest parameter difference.
fn max_difference(ours: &mut dyn Optimizer, theirs: impl OptimizerConfig, steps: usize) -> f64 {
    let _lock = crate::shim::global_generator_lock();
    tch::manual_seed(7);
    let vs = nn::VarStore::new(Device::Cpu);
    let layer = nn::linear(vs.root() / "fc", 5, 3, Default::default());
    let mut reference = theirs.build(&vs, 0.05).unwrap();
    let mut params: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let ours_params: Vec<Tensor> = params
        .iter()
        .map(|(_, p)| p.detach().copy().set_requires_grad(true))
        .collect();
    let (ours_bias, ours_weight) = (&ours_params[0], &ours_params[1]);
    let x = Tensor::randn([8, 5], (Kind::Float, Device::Cpu));
    let y = Tensor::randn([8, 3], (Kind::Float, Device::Cpu));
    for _ in 0..steps {
        let loss = layer.forward(&x).mse_loss(&y, tch::Reduction::Mean);
        reference.backward_step(&loss);
        let prediction = x.matmul(&ours_weight.tr()) + ours_bias;
        let loss = prediction.mse_loss(&y, tch::Reduction::Mean);
        let grads = Tensor::run_backward(&[loss], &ours_params, false, false);
        ours.step(&ours_params, &grads).unwrap();
    }
    params
        .iter()
        .zip(&ours_params)
        .map(|((_, theirs), ours)| (theirs - ours).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

fn config(text: &str) -> Box<dyn Optimizer> {
    build(&text.parse::<toml::Table>().unwrap())
        .unwrap()
        .optimizer
}

#[test]
fn adam_matches_libtorch() {
    let diff = max_difference(
        config("type = 'adam'\nlr = 0.05\nfused = false").as_mut(),
        nn::Adam::default(),
        25,
    );
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn fused_adam_matches_libtorch() {
    let diff = max_difference(
        config("type = 'adam'\nlr = 0.05").as_mut(),
        nn::Adam::default(),
        25,
    );
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn fused_and_unfused_adamw_with_amsgrad_agree() {
    let theirs = || nn::AdamW {
        wd: 0.05,
        amsgrad: true,
        ..Default::default()
    };
    let mut fused = config("type = 'adamw'\nlr = 0.05\nweight_decay = 0.05\namsgrad = true");
    let mut unfused =
        config("type = 'adamw'\nlr = 0.05\nweight_decay = 0.05\namsgrad = true\nfused = false");
    assert!(max_difference(fused.as_mut(), theirs(), 25) < 1e-5);
    assert!(max_difference(unfused.as_mut(), theirs(), 25) < 1e-5);
}

#[test]
fn adam_with_weight_decay_and_amsgrad_matches_libtorch() {
    let mut ours =
        config("type = 'adam'\nlr = 0.05\nweight_decay = 0.1\namsgrad = true\nfused = false");
    let theirs = nn::Adam {
        wd: 0.1,
        amsgrad: true,
        ..Default::default()
    };
    let diff = max_difference(ours.as_mut(), theirs, 25);
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn adamw_matches_libtorch() {
    let mut ours = config("type = 'adamw'\nlr = 0.05\nweight_decay = 0.05");
    let theirs = nn::AdamW {
        wd: 0.05,
        ..Default::default()
    };
    let diff = max_difference(ours.as_mut(), theirs, 25);
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn sgd_with_nesterov_momentum_matches_libtorch() {
    let mut ours =
        config("type = 'sgd'\nlr = 0.05\nmomentum = 0.9\nnesterov = true\nweight_decay = 0.01");
    let theirs = nn::Sgd {
        momentum: 0.9,
        nesterov: true,
        wd: 0.01,
        ..Default::default()
    };
    let diff = max_difference(ours.as_mut(), theirs, 25);
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn sgd_with_dampening_matches_libtorch() {
    let mut ours = config("type = 'sgd'\nlr = 0.05\nmomentum = 0.8\ndampening = 0.3");
    let theirs = nn::Sgd {
        momentum: 0.8,
        dampening: 0.3,
        ..Default::default()
    };
    let diff = max_difference(ours.as_mut(), theirs, 25);
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn rmsprop_centered_with_momentum_matches_libtorch() {
    let mut ours = config("type = 'rmsprop'\nlr = 0.05\nmomentum = 0.5\ncentered = true");
    let theirs = nn::RmsProp {
        momentum: 0.5,
        centered: true,
        ..Default::default()
    };
    let diff = max_difference(ours.as_mut(), theirs, 25);
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn state_round_trip_continues_identically() {
    let params = vec![Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true)];
    let grads = vec![Tensor::from_slice(&[0.5f32, 0.25])];
    let mut a = config("type = 'adam'\nlr = 0.1");
    for _ in 0..3 {
        a.step(&params, &grads).unwrap();
    }
    let (hyper, tensors) = (a.hyper_state(), a.tensor_state());
    let mut b = config("type = 'adam'\nlr = 0.9");
    b.load_state(&hyper, &tensors, &parameters(&params))
        .unwrap();
    let copy_b = vec![params[0].detach().copy()];
    a.step(&params, &grads).unwrap();
    b.step(&copy_b, &grads).unwrap();
    assert!(params[0].detach().equal(&copy_b[0]));
}

fn parameters(tensors: &[Tensor]) -> Parameters<'_> {
    Parameters {
        model: "net",
        names: &[],
        tensors,
    }
}

#[test]
fn state_that_does_not_fit_the_parameters_is_refused_and_nothing_changes() {
    let params = vec![Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true)];
    let grads = vec![Tensor::from_slice(&[0.5f32, 0.25])];
    for text in [
        "type = 'adam'",
        "type = 'rmsprop'\ncentered = true",
        "type = 'sgd'\nmomentum = 0.9",
    ] {
        let mut a = config(text);
        a.step(&params, &grads).unwrap();
        let (hyper, tensors) = (a.hyper_state(), a.tensor_state());
        // Half of the first state tensor: what made the fused Adam kernel crash the process.
        let copy = || -> Vec<(String, Tensor)> {
            tensors
                .iter()
                .map(|(n, t)| (n.clone(), t.shallow_clone()))
                .collect()
        };
        let mut halved = copy();
        halved[0].1 = halved[0].1.narrow(0, 0, 1);
        let mut b = config(text);
        let err = b
            .load_state(&hyper, &halved, &parameters(&params))
            .unwrap_err();
        assert!(
            err.contains("is Float [1] but parameter 0 of model `net` is Float [2]"),
            "{text}: {err}"
        );
        assert!(b.tensor_state().is_empty(), "{text}: nothing was loaded");
        let mut extra = copy();
        extra.push(("velocity/0".to_owned(), params[0].detach().copy()));
        let err = b
            .load_state(&hyper, &extra, &parameters(&params))
            .unwrap_err();
        assert!(err.starts_with("has `velocity/0`"), "{text}: {err}");
        if tensors.len() > 1 {
            let err = b
                .load_state(&hyper, &tensors[1..], &parameters(&params))
                .unwrap_err();
            assert!(err.starts_with("is missing `"), "{text}: {err}");
        }
        b.load_state(&hyper, &tensors, &parameters(&params))
            .unwrap();
    }
}

#[test]
fn unknown_optimizer_and_field_are_named() {
    let err = build(&"type = 'adamax'".parse().unwrap()).err().unwrap();
    assert!(err.message().contains("unknown optimizer `adamax`"));
    let err = build(&"type = 'sgd'\nmomentun = 0.9".parse().unwrap())
        .err()
        .unwrap();
    assert_eq!(err.field(), "momentun");
}

#[test]
fn undefined_gradients_leave_parameters_alone() {
    let params = vec![Tensor::from_slice(&[1.0f32]).set_requires_grad(true)];
    let mut sgd = config("type = 'sgd'\nlr = 1.0");
    sgd.step(&params, &[Tensor::new()]).unwrap();
    assert_eq!(params[0].double_value(&[0]), 1.0);
}

#[test]
fn a_scheduled_lr_starts_at_its_first_value_and_names_bad_fields() {
    let table = "type = 'sgd'\nlr = { schedule = 'step_decay', init_lr = 0.5, step_size = 2 }";
    let configured = build(&table.parse().unwrap()).unwrap();
    assert_eq!(configured.optimizer.lr(), 0.5);
    let schedule = configured.lr_schedule.unwrap();
    assert!((schedule.lr_at(3) - 0.05).abs() < 1e-12);
    let bad = "type = 'sgd'\nlr = { schedule = 'step_decay', init_lr = 0.5, step_size = 0 }";
    let err = build(&bad.parse().unwrap()).err().unwrap();
    assert_eq!(err.field(), "lr.step_size");
    let bad =
        "type = 'sgd'\nlr = { schedule = 'step_decay', init_lr = 0.5, step_size = 2, gama = 1 }";
    let err = build(&bad.parse().unwrap()).err().unwrap();
    assert_eq!(err.field(), "lr.gama");
}

#[test]
fn clip_fields_that_cannot_be_meant_are_named() {
    let resolve = |clip_norm, norm_type, clip_value| {
        ClipConfig {
            clip_norm,
            norm_type,
            clip_value,
        }
        .resolve()
    };
    assert_eq!(resolve(None, None, None), Ok(None));
    assert_eq!(
        resolve(Some(1.0), Some(f64::INFINITY), None),
        Ok(Some(Clip::Norm {
            max_norm: 1.0,
            norm_type: f64::INFINITY
        }))
    );
    assert_eq!(resolve(None, None, Some(0.5)), Ok(Some(Clip::Value(0.5))));
    for (fields, field) in [
        ((Some(0.0), None, None), "clip_norm"),
        ((Some(f64::INFINITY), None, None), "clip_norm"),
        ((Some(f64::NAN), None, None), "clip_norm"),
        ((None, None, Some(-1.0)), "clip_value"),
        ((Some(1.0), None, Some(1.0)), "clip_value"),
        ((Some(1.0), Some(0.5), None), "norm_type"),
        ((Some(1.0), Some(f64::NAN), None), "norm_type"),
        ((None, Some(2.0), None), "norm_type"),
    ] {
        let err = resolve(fields.0, fields.1, fields.2).unwrap_err();
        assert_eq!(err.0, field, "{fields:?}: {}", err.1);
    }
}

/// A gradient laid out otherwise than its parameter (channels-last, as a convolution on
/// channels-last data returns it through `run_backward`) updates each weight by its own
/// gradient: the fused kernel walks raw memory, so this took another weight's gradient before.
#[test]
fn fused_adam_pairs_each_weight_with_its_own_gradient_whatever_the_gradients_strides() {
    let _lock = crate::shim::global_generator_lock();
    tch::manual_seed(3);
    let start = Tensor::randn([4, 3, 2, 2], (Kind::Float, Device::Cpu));
    let grad = Tensor::randn([4, 3, 2, 2], (Kind::Float, Device::Cpu));
    // The same values, stored channels-last (strides 12, 1, 6, 3).
    let channels_last = grad
        .permute([0, 2, 3, 1])
        .contiguous()
        .permute([0, 3, 1, 2]);
    assert_ne!(channels_last.stride(), grad.stride());
    assert!(channels_last.equal(&grad));
    let updated = |gradient: &Tensor| {
        let param = start.copy();
        let mut adam = config("type = 'adam'\nlr = 0.1");
        adam.step(std::slice::from_ref(&param), std::slice::from_ref(gradient))
            .unwrap();
        param
    };
    assert!(updated(&channels_last).equal(&updated(&grad)));
}
