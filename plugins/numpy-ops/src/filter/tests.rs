use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{ErrorKind, NumpyOp};

use crate::test_util::{build_error, native, op, removes};

fn remove_if(config: &str) -> Box<dyn NumpyOp> {
    native("RemoveIf", config, &["x"], &[]).unwrap()
}

/// `[[1, -2], [3, 0]]`: sum 2, mean 0.5, min -2, max 3, len 2, size 4.
fn grid() -> Tensor {
    Tensor::from_slice(&[1i64, -2, 3, 0]).reshape([2, 2])
}

#[test]
fn remove_if_is_a_filter_that_writes_nothing() {
    let filter = remove_if("compare = 'eq'\nvalue = -1");
    assert!(filter.is_filter());
    assert!(!filter.batchable());
    let through_adapter = op("RemoveIf", "compare = 'eq'\nvalue = -1", &["y"], &[]);
    assert!(through_adapter
        .forward(&[&Tensor::from(1i64)])
        .unwrap()
        .is_empty());
}

#[test]
fn remove_if_on_a_label_needs_no_reduce() {
    // FastEstimator's `RemoveIf(fn=lambda y: y == -1, inputs="y")`.
    let filter = remove_if("compare = 'eq'\nvalue = -1");
    assert!(removes(filter.as_ref(), &[&Tensor::from(-1i64)]));
    assert!(!removes(filter.as_ref(), &[&Tensor::from(3i64)]));
    // A one-element vector counts as a label too.
    assert!(removes(filter.as_ref(), &[&Tensor::from_slice(&[-1i32])]));
    let err = filter
        .remove(&[&grid()], &fe_plugin_api::StepContext::for_tests())
        .unwrap_err();
    assert!(err.message().contains("set `reduce`"), "{err}");
}

#[test]
fn remove_if_reduces_then_compares() {
    let cases = [
        ("reduce = 'sum'\ncompare = 'gt'\nvalue = 1.5", true),
        ("reduce = 'sum'\ncompare = 'gt'\nvalue = 2", false),
        ("reduce = 'mean'\ncompare = 'eq'\nvalue = 0.5", true),
        ("reduce = 'mean'\ncompare = 'ne'\nvalue = 0.5", false),
        ("reduce = 'min'\ncompare = 'lt'\nvalue = -1", true),
        ("reduce = 'min'\ncompare = 'lt'\nvalue = -2", false),
        ("reduce = 'min'\ncompare = 'le'\nvalue = -2", true),
        ("reduce = 'max'\ncompare = 'ge'\nvalue = 3", true),
        ("reduce = 'max'\ncompare = 'gt'\nvalue = 3", false),
        ("reduce = 'len'\ncompare = 'eq'\nvalue = 2", true),
        ("reduce = 'len'\ncompare = 'gt'\nvalue = 2", false),
        ("reduce = 'size'\ncompare = 'eq'\nvalue = 4", true),
        ("reduce = 'size'\ncompare = 'lt'\nvalue = 4", false),
    ];
    for (config, expected) in cases {
        assert_eq!(
            removes(remove_if(config).as_ref(), &[&grid()]),
            expected,
            "{config}"
        );
    }
}

#[test]
fn remove_if_any_and_all_compare_every_element() {
    let cases = [
        ("reduce = 'any'\ncompare = 'lt'\nvalue = 0", true),
        ("reduce = 'any'\ncompare = 'gt'\nvalue = 3", false),
        ("reduce = 'any'\ncompare = 'eq'\nvalue = 0", true),
        ("reduce = 'all'\ncompare = 'ge'\nvalue = 0", false),
        ("reduce = 'all'\ncompare = 'ge'\nvalue = -2", true),
        ("reduce = 'all'\ncompare = 'ne'\nvalue = 5", true),
        // "All elements zero" is not "min == 0 and max == 0" by accident: -2 and 3 are not.
        ("reduce = 'all'\ncompare = 'eq'\nvalue = 0", false),
    ];
    for (config, expected) in cases {
        assert_eq!(
            removes(remove_if(config).as_ref(), &[&grid()]),
            expected,
            "{config}"
        );
    }
    let blank = Tensor::zeros([4, 4], (Kind::Uint8, Device::Cpu));
    assert!(removes(
        remove_if("reduce = 'all'\ncompare = 'eq'\nvalue = 0").as_ref(),
        &[&blank]
    ));
}

#[test]
fn remove_if_finds_nans() {
    let any_nan = remove_if("reduce = 'any'\ncompare = 'isnan'");
    assert!(removes(
        any_nan.as_ref(),
        &[&Tensor::from_slice(&[1.0f32, f32::NAN])]
    ));
    assert!(!removes(
        any_nan.as_ref(),
        &[&Tensor::from_slice(&[1.0f32, 2.0])]
    ));
    let nan_label = remove_if("compare = 'isnan'");
    assert!(removes(nan_label.as_ref(), &[&Tensor::from(f64::NAN)]));
    // NaN compares false with everything but `ne`.
    let nan = Tensor::from_slice(&[f64::NAN]);
    assert!(!removes(
        remove_if("compare = 'eq'\nvalue = nan").as_ref(),
        &[&nan]
    ));
    assert!(removes(
        remove_if("compare = 'ne'\nvalue = 0").as_ref(),
        &[&nan]
    ));
}

#[test]
fn remove_if_on_empty_and_scalar_inputs() {
    let empty = Tensor::zeros([0], (Kind::Float, Device::Cpu));
    let verdict = |config: &str| removes(remove_if(config).as_ref(), &[&empty]);
    assert!(!verdict("reduce = 'any'\ncompare = 'eq'\nvalue = 0"));
    assert!(verdict("reduce = 'all'\ncompare = 'eq'\nvalue = 1"));
    assert!(verdict("reduce = 'sum'\ncompare = 'eq'\nvalue = 0"));
    assert!(verdict("reduce = 'len'\ncompare = 'eq'\nvalue = 0"));
    assert!(!verdict("reduce = 'mean'\ncompare = 'eq'\nvalue = 0"));
    let ctx = fe_plugin_api::StepContext::for_tests();
    for reduce in ["min", "max"] {
        let filter = remove_if(&format!("reduce = '{reduce}'\ncompare = 'eq'\nvalue = 0"));
        let err = filter.remove(&[&empty], &ctx).unwrap_err();
        assert!(
            err.message()
                .contains(&format!("cannot take the {reduce} of an empty input")),
            "{err}"
        );
    }
    let len = remove_if("reduce = 'len'\ncompare = 'eq'\nvalue = 1");
    let err = len.remove(&[&Tensor::from(1.0f32)], &ctx).unwrap_err();
    assert!(err.message().contains("len of a 0-d input"), "{err}");
    assert!(removes(
        remove_if("reduce = 'size'\ncompare = 'eq'\nvalue = 1").as_ref(),
        &[&Tensor::from(1.0f32)]
    ));
}

#[test]
fn remove_if_handles_every_real_dtype() {
    let filter = remove_if("reduce = 'max'\ncompare = 'ge'\nvalue = 100");
    for kind in [
        Kind::Uint8,
        Kind::Int8,
        Kind::Int16,
        Kind::Int,
        Kind::Int64,
        Kind::Half,
        Kind::BFloat16,
        Kind::Float,
        Kind::Double,
    ] {
        let high = Tensor::from_slice(&[3i64, 100]).to_kind(kind);
        let low = Tensor::from_slice(&[3i64, 99]).to_kind(kind);
        assert!(removes(filter.as_ref(), &[&high]), "{kind:?}");
        assert!(!removes(filter.as_ref(), &[&low]), "{kind:?}");
    }
    let flags = remove_if("reduce = 'sum'\ncompare = 'ge'\nvalue = 2");
    assert!(removes(
        flags.as_ref(),
        &[&Tensor::from_slice(&[true, false, true])]
    ));
    assert!(!removes(
        flags.as_ref(),
        &[&Tensor::from_slice(&[true, false, false])]
    ));
    let complex = Tensor::zeros([2], (Kind::ComplexFloat, Device::Cpu));
    let err = flags
        .remove(&[&complex], &fe_plugin_api::StepContext::for_tests())
        .unwrap_err();
    assert!(err.message().contains("ComplexFloat"), "{err}");
}

#[test]
fn remove_if_combines_several_inputs() {
    let (neg, pos) = (Tensor::from(-1i64), Tensor::from(1i64));
    let any = native("RemoveIf", "compare = 'lt'\nvalue = 0", &["a", "b"], &[]).unwrap();
    assert!(removes(any.as_ref(), &[&pos, &neg]));
    assert!(!removes(any.as_ref(), &[&pos, &pos]));
    let all = native(
        "RemoveIf",
        "compare = 'lt'\nvalue = 0\ncombine = 'all'",
        &["a", "b"],
        &[],
    )
    .unwrap();
    assert!(!removes(all.as_ref(), &[&pos, &neg]));
    assert!(removes(all.as_ref(), &[&neg, &neg]));
    // Every input is checked, even when an earlier one already decided.
    let err = any
        .remove(&[&neg, &grid()], &fe_plugin_api::StepContext::for_tests())
        .unwrap_err();
    assert!(err.message().contains("set `reduce`"), "{err}");
}

#[test]
fn remove_if_config_errors_name_the_field() {
    let cases = [
        ("compare = 'eq'", "value"),
        ("compare = 'isnan'\nvalue = 0", "value"),
        ("compare = 'approx'\nvalue = 0", "compare"),
        ("reduce = 'median'\ncompare = 'eq'\nvalue = 0", "reduce"),
        ("compare = 'eq'\nvalue = 0\ncombine = 'xor'", "combine"),
        ("compare = 'eq'\nvalue = '0'", "value"),
        (
            "compare = 'eq'\nvalue = 0\nreplacement = false",
            "replacement",
        ),
    ];
    for (config, field) in cases {
        let err = build_error("RemoveIf", config, &["x"], &[]);
        assert_eq!(err.kind, ErrorKind::Config, "{config}: {err}");
        assert_eq!(err.field.as_str(), field, "{config}: {err}");
    }
    let err = build_error("RemoveIf", "value = 0", &["x"], &[]);
    assert!(err.message.contains("missing field `compare`"), "{err}");
    let config = "compare = 'eq'\nvalue = 0";
    assert_eq!(
        build_error("RemoveIf", config, &["x"], &["y"])
            .field
            .as_str(),
        "outputs"
    );
    assert_eq!(
        build_error("RemoveIf", config, &[], &[]).field.as_str(),
        "inputs"
    );
}
