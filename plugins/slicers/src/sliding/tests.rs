//! Tests for the sliding-window slicer.

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{testing, ErrorKind};

/// 1, 2, ..., n as float32 in `shape` (no zeros, so padding and gaps stand out).
fn counting(shape: &[i64]) -> Tensor {
    let n: i64 = shape.iter().product();
    Tensor::arange_start(1, n + 1, (Kind::Float, Device::Cpu)).reshape(shape)
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.flatten(0, -1).to_kind(Kind::Double)).unwrap()
}

fn sliding(config: &str) -> testing::TestSlicer {
    testing::slicer("SlidingSlicer", config, &["x"], &["x"]).unwrap()
}

/// Slices `x`, then unslices the windows unchanged.
fn round_trip(s: &mut testing::TestSlicer, x: &Tensor) -> (Vec<Tensor>, Tensor) {
    let windows = s.slice("x", x).unwrap();
    let refs: Vec<&Tensor> = windows.iter().collect();
    let back = s.unslice("x", &refs).unwrap();
    (windows, back)
}

fn config_error(config: &str) -> String {
    let err = testing::slicer("SlidingSlicer", config, &["x"], &["x"]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config, "{config}: {err}");
    err.field.as_str().to_owned()
}

#[test]
fn drop_discards_the_last_window_and_unslicing_fills_the_gap_with_pad_val() {
    // Length 10, window 4, stride 4: [0, 4), [4, 8); [8, 12) runs past the end.
    let x = counting(&[1, 10]);
    let mut s = sliding("window_size = [-1, 4]\npad_val = -1");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 2);
    assert_eq!(values(&windows[0]), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(values(&windows[1]), [5.0, 6.0, 7.0, 8.0]);
    assert_eq!(back.size(), [1, 10]);
    assert_eq!(
        values(&back),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, -1.0, -1.0]
    );
}

#[test]
fn drop_is_exact_when_the_windows_tile_the_input() {
    let x = counting(&[2, 12]);
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'drop'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert!(windows[2].equal(&x.narrow(1, 8, 4)));
    assert!(back.equal(&x));
}

#[test]
fn partial_keeps_a_short_last_window_and_restores_the_input() {
    let x = counting(&[1, 10]);
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'partial'");
    let (windows, back) = round_trip(&mut s, &x);
    let sizes: Vec<Vec<i64>> = windows.iter().map(Tensor::size).collect();
    assert_eq!(sizes, [vec![1, 4], vec![1, 4], vec![1, 2]]);
    assert_eq!(values(&windows[2]), [9.0, 10.0]);
    assert!(back.equal(&x));
}

#[test]
fn constant_pads_the_last_window_with_pad_val_and_restores_the_input() {
    let x = counting(&[1, 10]);
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'constant'\npad_val = 7");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[2]), [9.0, 10.0, 7.0, 7.0]);
    assert_eq!(back.size(), [1, 10]);
    assert!(back.equal(&x));
    // No overlap, so summing restores it too.
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'constant'\nunslice_mode = 'sum'");
    let (_, back) = round_trip(&mut s, &x);
    assert!(back.equal(&x));
}

#[test]
fn nopad_shifts_the_last_window_back_and_overlaps() {
    // Windows [0, 4), [4, 8) and [6, 10): positions 6 and 7 are covered twice.
    let x = counting(&[1, 10]);
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'nopad'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[2]), [7.0, 8.0, 9.0, 10.0]);
    assert!(back.equal(&x));
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'nopad'\nunslice_mode = 'sum'");
    let (_, back) = round_trip(&mut s, &x);
    assert_eq!(
        values(&back),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 14.0, 16.0, 9.0, 10.0]
    );
}

#[test]
fn nopad_rejects_a_slid_axis_shorter_than_the_window() {
    let x = counting(&[1, 3]);
    let err = sliding("window_size = [-1, 4]\nstrides = [0, 2]\npad_mode = 'nopad'")
        .slice("x", &x)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Failed);
    assert!(err.message.contains("nopad"), "{err}");
}

#[test]
fn mirror_reflects_the_end_of_the_spatial_axes_and_restores_the_input() {
    // Padding 2 by reflection without the edge: ..., x[8], x[9], x[8], x[7].
    let x = counting(&[1, 1, 10]);
    let mut s = sliding("window_size = [-1, -1, 4]\npad_mode = 'mirror'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[2]), [9.0, 10.0, 9.0, 8.0]);
    assert!(back.equal(&x));
}

#[test]
fn mirror_works_on_integers_and_several_axes() {
    // [1, 1, 3, 5] with 2x2 windows: 3 rows pad to 4 (row 1 reflected), 5 columns pad to
    // 6 (column 3 reflected).
    let x = Tensor::arange(15, (Kind::Int64, Device::Cpu)).reshape([1, 1, 3, 5]);
    let mut s = sliding("window_size = [-1, -1, 2, 2]\npad_mode = 'mirror'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 2 * 3);
    assert_eq!(windows[5].kind(), Kind::Int64);
    // Rows 2 and (reflected) 1, columns 4 and (reflected) 3.
    assert_eq!(values(&windows[5]), [14.0, 13.0, 9.0, 8.0]);
    assert_eq!(back.kind(), Kind::Float);
    assert!(back.equal(&x.to_kind(Kind::Float)));
}

#[test]
fn mirror_cuts_windows_short_on_batch_and_channel_axes() {
    // Axes 0 and 1 are never padded: a window running past them is cut short.
    let x = counting(&[3, 1, 8]);
    let mut s = sliding("window_size = [2, -1, 4]\npad_mode = 'mirror'");
    let (windows, back) = round_trip(&mut s, &x);
    let batch_lengths: Vec<i64> = windows.iter().map(|w| w.size()[0]).collect();
    assert_eq!(batch_lengths, [2, 2, 1, 1]);
    assert!(back.equal(&x));
}

#[test]
fn mirror_padding_must_be_shorter_than_the_axis() {
    let x = counting(&[1, 1, 3]);
    let err = sliding("window_size = [-1, -1, 8]\nstrides = [0, 0, 2]\npad_mode = 'mirror'")
        .slice("x", &x)
        .unwrap_err();
    assert!(err.message.contains("mirror-pad"), "{err}");
}

#[test]
fn overlapping_2d_windows_average_back_and_sum_counts_the_overlap() {
    // 5x5 with 3x3 windows every 2: rows/columns [0, 3) and [2, 5); row/column 2 is in both.
    let x = counting(&[2, 1, 5, 5]);
    let config = "window_size = [-1, -1, 3, 3]\nstrides = [0, 0, 2, 2]";
    let mut s = sliding(config);
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 4);
    for window in &windows {
        assert_eq!(window.size(), [2, 1, 3, 3]);
    }
    // Row-major order of positions: (0, 0), (0, 2), (2, 0), (2, 2).
    assert!(windows[1].equal(&x.narrow(2, 0, 3).narrow(3, 2, 3)));
    assert!(windows[2].equal(&x.narrow(2, 2, 3).narrow(3, 0, 3)));
    assert!(back.equal(&x));

    let mut s = sliding(&format!("{config}\nunslice_mode = 'sum'"));
    let (_, summed) = round_trip(&mut s, &x);
    let per_axis = Tensor::from_slice(&[1.0f32, 1.0, 2.0, 1.0, 1.0]);
    let counts = per_axis.unsqueeze(1).matmul(&per_axis.unsqueeze(0));
    assert!(summed.equal(&(&x * counts)));
    assert_eq!(summed.double_value(&[0, 0, 2, 2]), 4.0 * 13.0);
}

#[test]
fn strides_larger_than_the_window_leave_gaps_filled_with_pad_val() {
    let x = counting(&[1, 10]);
    let mut s = sliding("window_size = [-1, 2]\nstrides = [0, 4]\npad_val = -1");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[2]), [9.0, 10.0]);
    assert_eq!(
        values(&back),
        [1.0, 2.0, -1.0, -1.0, 5.0, 6.0, -1.0, -1.0, 9.0, 10.0]
    );
}

#[test]
fn a_single_stride_applies_to_every_slid_axis() {
    // Windows [0, 4), [2, 6), [4, 8).
    let x = counting(&[1, 8]);
    let mut s = sliding("window_size = [-1, 4]\nstrides = 2\nunslice_mode = 'sum'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[1]), [3.0, 4.0, 5.0, 6.0]);
    assert_eq!(values(&back), [1.0, 2.0, 6.0, 8.0, 10.0, 12.0, 7.0, 8.0]);
}

#[test]
fn overlapping_windows_stop_at_the_first_one_reaching_the_end() {
    // Partial, length 8, window 4, stride 2: [0, 4), [2, 6), [4, 8) and no short [6, 8).
    let x = counting(&[1, 8]);
    let mut s = sliding("window_size = [-1, 4]\nstrides = 2\npad_mode = 'partial'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[2]), [5.0, 6.0, 7.0, 8.0]);
    assert!(back.equal(&x));
    // Constant, length 9: [0, 4), [2, 6), [4, 8), [6, 10) padded by one; not [8, 12).
    let x = counting(&[1, 9]);
    let mut s = sliding("window_size = [-1, 4]\nstrides = 2\npad_mode = 'constant'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 4);
    assert_eq!(values(&windows[3]), [7.0, 8.0, 9.0, 0.0]);
    assert!(back.equal(&x));
    // Nopad, length 9, stride 3: [0, 4), [3, 7), then [5, 9) shifted back.
    let mut s = sliding("window_size = [-1, 4]\nstrides = 3\npad_mode = 'nopad'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 3);
    assert_eq!(values(&windows[2]), [6.0, 7.0, 8.0, 9.0]);
    assert!(back.equal(&x));
}

#[test]
fn an_axis_with_a_stride_at_least_its_length_is_not_slid() {
    // FastEstimator: stride >= length takes the whole axis as one window.
    let x = counting(&[1, 6]);
    let mut s = sliding("window_size = [-1, 4]\nstrides = [0, 8]");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 1);
    assert!(windows[0].equal(&x));
    assert!(back.equal(&x));
    // In constant mode the whole axis is padded up to the window.
    let x = counting(&[1, 3]);
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'constant'\npad_val = 9");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows.len(), 1);
    assert_eq!(values(&windows[0]), [1.0, 2.0, 3.0, 9.0]);
    assert!(back.equal(&x));
}

#[test]
fn drop_without_any_full_window_is_an_error() {
    let x = counting(&[1, 3]);
    let err = sliding("window_size = [-1, 4]\nstrides = [0, 2]")
        .slice("x", &x)
        .unwrap_err();
    assert!(err.message.contains("leaves no window"), "{err}");
}

#[test]
fn squeeze_window_feeds_a_volume_to_a_2d_model_and_unslices_other_channel_counts() {
    // FastEstimator's test, smaller: [B, C, H, W, D] with 4x4x1 windows every 2x2x1.
    // H and W: windows at 0, 2, 4 (the one at 4 reaches the end); D: 0 and 1 -> 18.
    let image = counting(&[1, 1, 8, 8, 2]);
    let label = counting(&[1, 6, 8, 8, 2]);
    let config = "window_size = [-1, -1, 4, 4, 1]\nstrides = [0, 0, 2, 2, 1]\n\
                  squeeze_window = true";
    let mut s = testing::slicer("SlidingSlicer", config, &["label", "image"], &["pred"]).unwrap();
    let labels = s.slice("label", &label).unwrap();
    let images = s.slice("image", &image).unwrap();
    assert_eq!(images.len(), 18);
    assert_eq!(labels.len(), 18);
    assert_eq!(images[0].size(), [1, 1, 4, 4]);
    assert_eq!(labels[0].size(), [1, 6, 4, 4]);
    // Window 1 is row 0, column 0, depth 1; window 2 is row 0, column 2, depth 0.
    assert!(images[1].equal(&image.narrow(2, 0, 4).narrow(3, 0, 4).select(4, 1)));
    assert!(images[2].equal(&image.narrow(2, 0, 4).narrow(3, 2, 4).select(4, 0)));
    // The prediction has the label's 6 channels although the image was sliced last.
    let refs: Vec<&Tensor> = labels.iter().collect();
    let pred = s.unslice("pred", &refs).unwrap();
    assert_eq!(pred.size(), [1, 6, 8, 8, 2]);
    assert!(pred.equal(&label));
}

#[test]
fn squeeze_window_needs_unit_windows() {
    // Stride 0 on a window-1 axis of length 3 takes the whole axis, which cannot be squeezed.
    let x = counting(&[3, 4]);
    let err = sliding("window_size = [1, 2]\nstrides = [0, 2]\nsqueeze_window = true")
        .slice("x", &x)
        .unwrap_err();
    assert!(err.message.contains("squeeze_window"), "{err}");
}

#[test]
fn unslice_only_uses_unslice_shape_and_the_minibatches_batch_size() {
    let mut s = testing::slicer(
        "SlidingSlicer",
        "window_size = [-1, 4]\nunslice_shape = [-1, 8]",
        &[],
        &["pred"],
    )
    .unwrap();
    let a = Tensor::ones([3, 4], (Kind::Float, Device::Cpu));
    let b = Tensor::full([3, 4], 2.0, (Kind::Float, Device::Cpu));
    let pred = s.unslice("pred", &[&a, &b]).unwrap();
    assert_eq!(pred.size(), [3, 8]);
    assert_eq!(
        values(&pred.get(2)),
        [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    );

    let field = config_error_keys("window_size = [-1, 4]", &[], &["pred"]);
    assert_eq!(field, "unslice_shape");
}

fn config_error_keys(config: &str, slice: &[&str], unslice: &[&str]) -> String {
    let err = testing::slicer("SlidingSlicer", config, slice, unslice).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config, "{config}: {err}");
    err.field.as_str().to_owned()
}

#[test]
fn sum_keeps_the_kind_and_avg_gives_float() {
    let x = Tensor::arange(10, (Kind::Int64, Device::Cpu)).reshape([1, 10]);
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'partial'\nunslice_mode = 'sum'");
    let (windows, back) = round_trip(&mut s, &x);
    assert_eq!(windows[0].kind(), Kind::Int64);
    assert_eq!(back.kind(), Kind::Int64);
    assert!(back.equal(&x));
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'partial'");
    let (_, back) = round_trip(&mut s, &x);
    assert_eq!(back.kind(), Kind::Float);
    let x = counting(&[1, 8]).to_kind(Kind::Double);
    let (_, back) = round_trip(&mut s, &x);
    assert_eq!(back.kind(), Kind::Double);
    assert!(back.equal(&x));
}

#[test]
fn runtime_errors_are_reported_not_panics() {
    let mut s = sliding("window_size = [-1, 4]\npad_mode = 'partial'");
    let w = Tensor::zeros([1, 4], (Kind::Float, Device::Cpu));
    // Unslicing before anything was sliced.
    let err = s.unslice("x", &[&w]).unwrap_err();
    assert!(err.message.contains("sliced nothing"), "{err}");
    // Rank differs from window_size.
    let err = s.slice("x", &counting(&[2, 2, 2])).unwrap_err();
    assert!(err.message.contains("same rank"), "{err}");
    // Three windows were cut, two come back.
    let windows = s.slice("x", &counting(&[1, 10])).unwrap();
    assert_eq!(windows.len(), 3);
    let err = s.unslice("x", &[&windows[0], &windows[1]]).unwrap_err();
    assert!(err.message.contains("gives 3 windows"), "{err}");
    // A minibatch of the wrong shape.
    let err = s.unslice("x", &[&w, &w, &w]).unwrap_err();
    assert!(err.message.contains("minibatch 2"), "{err}");
    // Wrong rank at unslice, and nothing at all.
    let v = Tensor::zeros([4], (Kind::Float, Device::Cpu));
    let err = s.unslice("x", &[&v, &v, &v]).unwrap_err();
    assert!(err.message.contains("rank"), "{err}");
    let err = s.unslice("x", &[]).unwrap_err();
    assert!(err.message.contains("no minibatches"), "{err}");
}

#[test]
fn config_errors_name_their_field() {
    let cases = [
        ("window_size = []", "window_size"),
        ("window_size = [0, 4]", "window_size[0]"),
        ("window_size = [-1, -2]", "window_size[1]"),
        ("window_size = [-1, 4]\nstrides = [0]", "strides"),
        ("window_size = [-1, 4]\nstrides = [0, -1]", "strides[1]"),
        ("window_size = [-1, 4]\nstrides = [1, 4]", "strides[0]"),
        ("window_size = [-1, 4]\nstrides = -2", "strides"),
        ("window_size = [-1, 4]\nstrides = 'x'", "strides"),
        ("window_size = [-1, 4]\npad_mode = 'reflect'", "pad_mode"),
        ("window_size = [-1, 4]\npad_mode = 'mirror'", "pad_mode"),
        (
            "window_size = [-1, 4]\nunslice_mode = 'mean'",
            "unslice_mode",
        ),
        (
            "window_size = [-1, 4]\nunslice_shape = [8]",
            "unslice_shape",
        ),
        (
            "window_size = [-1, 4]\nunslice_shape = [2, 0]",
            "unslice_shape[1]",
        ),
        (
            "window_size = [4, 4]\nunslice_shape = [-1, 8]",
            "unslice_shape[0]",
        ),
        ("window_size = [-1, 4]\nwindow = [1]", "window"),
        ("window_size = [-1, 4]\npad_val = 'zero'", "pad_val"),
    ];
    for (config, field) in cases {
        assert_eq!(config_error(config), field, "{config}");
    }
    let err = testing::slicer("SlidingSlicer", "", &["x"], &["x"]).unwrap_err();
    assert!(err.message.contains("window_size"), "{err}");
}

#[test]
fn valid_configs_are_accepted() {
    for config in [
        "window_size = [-1, 4]\nstrides = []",
        "window_size = [-1, 4]\nstrides = 0",
        "window_size = [-1, -1, 4]\npad_mode = 'mirror'\nunslice_mode = 'sum'",
        "window_size = [2, 4]\nunslice_shape = [4, 8]\npad_val = 1.5\nsqueeze_window = true",
    ] {
        let result = testing::slicer("SlidingSlicer", config, &["x"], &["x"]);
        assert!(result.is_ok(), "{config}: {:?}", result.err());
    }
}
