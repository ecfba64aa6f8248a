use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{testing, text_tensor};
use image::{GrayImage, RgbImage, RgbaImage};

use super::{direct, ints, op, TempDir};

/// 3 wide, 2 high: red, green, blue / white, black, (10, 20, 30).
const RGB: [u8; 18] = [
    255, 0, 0, 0, 255, 0, 0, 0, 255, //
    255, 255, 255, 0, 0, 0, 10, 20, 30,
];

fn write_rgb(dir: &TempDir, name: &str) -> String {
    let path = dir.path().join(name);
    RgbImage::from_raw(3, 2, RGB.to_vec())
        .unwrap()
        .save(&path)
        .unwrap();
    path.to_string_lossy().into_owned()
}

fn read_one(config: &str, path: &str) -> Tensor {
    op("ReadImage", config, &["x"])
        .forward(&[&text_tensor(path)])
        .unwrap()
        .remove(0)
}

#[test]
fn reads_a_color_png_as_rgb_hwc_uint8() {
    let dir = TempDir::new("color-png");
    let image = read_one("", &write_rgb(&dir, "rgb.png"));
    assert_eq!(image.kind(), Kind::Uint8);
    assert_eq!(image.size(), [2, 3, 3]);
    assert_eq!(ints(&image), RGB.map(i64::from));
}

#[test]
fn reads_a_bmp_exactly() {
    let dir = TempDir::new("bmp");
    let image = read_one("color_flag = \"color\"", &write_rgb(&dir, "rgb.bmp"));
    assert_eq!(image.size(), [2, 3, 3]);
    assert_eq!(ints(&image), RGB.map(i64::from));
}

#[test]
fn reads_a_jpeg_within_compression_error() {
    let dir = TempDir::new("jpeg");
    let path = dir.path().join("flat.jpg");
    RgbImage::from_pixel(8, 8, image::Rgb([200, 100, 50]))
        .save(&path)
        .unwrap();
    let image = read_one("", &path.to_string_lossy());
    assert_eq!(image.size(), [8, 8, 3]);
    for (i, value) in ints(&image).into_iter().enumerate() {
        let want = [200, 100, 50][i % 3];
        assert!(
            (value - want).abs() <= 3,
            "pixel value {value}, want ~{want}"
        );
    }
}

#[test]
fn gray_of_a_color_file_is_opencv_luma() {
    let dir = TempDir::new("gray-of-color");
    let image = read_one("color_flag = \"gray\"", &write_rgb(&dir, "rgb.png"));
    assert_eq!(image.kind(), Kind::Uint8);
    assert_eq!(image.size(), [2, 3, 1]);
    // cv2.cvtColor(..., COLOR_RGB2GRAY): red 76, green 150, blue 29; (10, 20, 30) -> 18.
    assert_eq!(ints(&image), [76, 150, 29, 255, 0, 18]);
}

#[test]
fn gray_file_reads_as_one_channel_or_three_equal_ones() {
    let dir = TempDir::new("gray-file");
    let path = dir.path().join("gray.png");
    GrayImage::from_raw(2, 2, vec![0, 64, 128, 255])
        .unwrap()
        .save(&path)
        .unwrap();
    let path = path.to_string_lossy();
    let gray = read_one("color_flag = \"grey\"", &path);
    assert_eq!(gray.size(), [2, 2, 1]);
    assert_eq!(ints(&gray), [0, 64, 128, 255]);
    let color = read_one("", &path);
    assert_eq!(color.size(), [2, 2, 3]);
    assert_eq!(
        ints(&color),
        [0, 0, 0, 64, 64, 64, 128, 128, 128, 255, 255, 255]
    );
}

#[test]
fn alpha_is_dropped() {
    let dir = TempDir::new("rgba");
    let path = dir.path().join("rgba.png");
    RgbaImage::from_raw(1, 1, vec![1, 2, 3, 4])
        .unwrap()
        .save(&path)
        .unwrap();
    assert_eq!(ints(&read_one("", &path.to_string_lossy())), [1, 2, 3]);
}

#[test]
fn paths_are_relative_to_parent_path_and_format_comes_from_content() {
    let dir = TempDir::new("parent");
    std::fs::create_dir(dir.path().join("images")).unwrap();
    write_rgb(&dir, "images/a.png");
    // A PNG under a misleading name still decodes.
    std::fs::copy(
        dir.path().join("images/a.png"),
        dir.path().join("images/b.dat"),
    )
    .unwrap();
    let config = format!("parent_path = {:?}", dir.path().to_string_lossy());
    let op = op("ReadImage", &config, &["a", "b"]);
    let out = op
        .forward(&[&text_tensor("images/a.png"), &text_tensor("images/b.dat")])
        .unwrap();
    assert_eq!(out.len(), 2);
    for image in &out {
        assert_eq!(ints(image), RGB.map(i64::from));
    }
}

#[test]
fn encoded_bytes_decode_in_memory_as_a_parquet_column_or_webdataset_member_holds_them() {
    let dir = TempDir::new("in-memory");
    let op = op("ReadImage", "", &["x"]);
    for name in ["rgb.png", "rgb.bmp"] {
        let bytes = std::fs::read(write_rgb(&dir, name)).unwrap();
        let image = op
            .forward(&[&Tensor::from_slice(&bytes)])
            .unwrap()
            .remove(0);
        assert_eq!(image.size(), [2, 3, 3], "{name}");
        assert_eq!(ints(&image), RGB.map(i64::from), "{name}");
    }
    // Bytes that are no image (and no path) fail as a decoding, not as a missing file.
    let err = op
        .forward(&[&Tensor::from_slice(&[0x89u8, b'P', b'N', b'G', 0, 1])])
        .unwrap_err();
    assert!(
        err.message
            .contains("input `x`: cannot decode the image bytes"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let dir = TempDir::new("missing");
    let path = dir.path().join("nowhere.png");
    let err = op("ReadImage", "", &["x"])
        .forward(&[&text_tensor(&path.to_string_lossy())])
        .unwrap_err();
    assert!(err.message.contains(&*path.to_string_lossy()), "{err}");
    assert!(err.message.contains("No such file"), "{err}");
}

#[test]
fn a_corrupt_file_is_an_error_naming_it_and_the_reason() {
    let dir = TempDir::new("corrupt");
    let garbage = dir.path().join("garbage.png");
    std::fs::write(&garbage, b"this is not an image").unwrap();
    let truncated = dir.path().join("truncated.png");
    let full = std::fs::read(write_rgb(&dir, "full.png")).unwrap();
    std::fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    let op = op("ReadImage", "", &["x"]);
    for path in [garbage, truncated] {
        let err = op
            .forward(&[&text_tensor(&path.to_string_lossy())])
            .unwrap_err();
        let message = err.message.as_str();
        assert!(message.contains(&*path.to_string_lossy()), "{message}");
        assert!(message.contains("cannot read image"), "{message}");
        // The reason follows the path.
        let reason = message.rsplit("`: ").next().unwrap();
        assert!(!reason.trim().is_empty(), "{message}");
    }
}

#[test]
fn input_must_be_text() {
    let err = op("ReadImage", "", &["path"])
        .forward(&[&Tensor::from_slice(&[1.0f32, 2.0])])
        .unwrap_err();
    assert!(err.message.contains("input `path`"), "{err}");
    assert!(err.message.contains("1-D uint8"), "{err}");
}

#[test]
fn config_and_keys_are_checked() {
    let err =
        testing::numpy_op("ReadImage", "color_flag = \"rainbow\"", &["x"], &["x"]).unwrap_err();
    assert_eq!(err.field.as_str(), "color_flag");
    let err = testing::numpy_op("ReadImage", "colour = \"gray\"", &["x"], &["x"]).unwrap_err();
    assert_eq!(err.field.as_str(), "colour");
    let err = testing::numpy_op("ReadImage", "", &["x", "y"], &["x"]).unwrap_err();
    assert_eq!(err.field.as_str(), "outputs");
    let err = testing::numpy_op("ReadImage", "", &[], &[]).unwrap_err();
    assert_eq!(err.field.as_str(), "inputs");
}

#[test]
fn is_not_batchable() {
    assert!(!direct("ReadImage", "", &["x"]).batchable());
}
