//! `fe-host render` on every example manifest, compared with golden files in
//! `tests/golden/render/`. Set `FE_UPDATE_GOLDEN=1` to rewrite them after an intended change,
//! and review the diff.

use crate::util::{copy_bundled_data, copy_example, fe_host, root, small_digits, Run, TempDir};

/// Small copies of the generated data the zoo examples read, next to the digits.
fn small_zoo_data(dir: &TempDir) {
    for kind in ["cifar", "masks", "tokens", "text"] {
        let out: Run = fe_host()
            .current_dir(dir.path())
            .args(["datagen", kind, "--out", &format!("data/{kind}")])
            .args(["--train", "48", "--eval", "16", "--test", "0"])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 0, "datagen {kind}: {}", out.stderr);
    }
}

/// Renders `examples/<name>.toml` from a copy of the examples next to a small generated
/// `data/digits`, so paths and sample counts are the same on every machine.
fn render_example(dir: &TempDir, name: &str) -> Run {
    copy_example(dir, name);
    fe_host()
        .current_dir(dir.path())
        .args([
            "render",
            &format!("examples/{name}.toml"),
            "--device",
            "cpu",
        ])
        .output()
        .unwrap()
        .into()
}

fn check_golden(name: &str, actual: &str) {
    let golden = root()
        .join("tests/golden/render")
        .join(format!("{name}.txt"));
    if std::env::var_os("FE_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{}: {e} (FE_UPDATE_GOLDEN=1 writes it)", golden.display()));
    assert_text_eq!(actual, expected);
}

#[test]
fn render_output_of_every_example_matches_its_golden_file() {
    let dir = TempDir::new("render");
    small_digits(&dir);
    small_zoo_data(&dir);
    copy_bundled_data(&dir);
    let mut names: Vec<String> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .filter_map(|e| {
            let path = e.ok()?.path();
            if path.extension()? != "toml" {
                return None;
            }
            Some(path.file_stem()?.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    assert!(names.len() >= 2, "{names:?}");
    for name in &names {
        let out = render_example(&dir, name);
        assert_eq!(out.code, 0, "{name}: {}", out.stderr);
        check_golden(name, &out.stdout);
    }
    // A golden file without its example is a leftover.
    for entry in std::fs::read_dir(root().join("tests/golden/render")).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(names.contains(&stem), "{} has no example", path.display());
    }
}
