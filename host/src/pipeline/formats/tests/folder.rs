use std::path::Path;

use tch::Kind;

use super::super::folder::{FolderConfig, FolderSource};
use super::super::Source;
use super::{i64s, open_error, text, write};

fn tree(root: &Path) {
    for file in [
        "imgs/dog/b.png",
        "imgs/dog/a.PNG",
        "imgs/cat/z.png",
        "imgs/cat/notes.txt",
        "imgs/cat/.hidden.png",
        "imgs/.cache/x.png",
        "imgs/animals/bird/c.png",
        "imgs/README.png",
    ] {
        write(root, file, b"");
    }
    std::fs::create_dir_all(root.join("imgs/empty")).unwrap();
}

fn open(config: &str, dir: &Path) -> FolderSource {
    let config: FolderConfig = fe_plugin_api::parse_config(config).unwrap();
    FolderSource::open(&config, dir).unwrap()
}

/// (path relative to `root`, label) of every sample, in order.
fn listing(source: &FolderSource, root: &Path) -> Vec<(String, i64)> {
    (0..source.len())
        .map(|i| {
            let sample = source.get(i).unwrap();
            let path = text(&sample[0]);
            let relative = path
                .strip_prefix(&format!("{}/", root.display()))
                .unwrap_or(&path)
                .to_owned();
            assert_eq!((sample[1].kind(), sample[1].size()), (Kind::Int64, vec![]));
            (relative, i64s(&sample[1])[0])
        })
        .collect()
}

#[test]
fn classes_are_sorted_directories_holding_files() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let source = open("dir = 'imgs'", dir.path());
    assert_eq!(source.keys(), ["x", "y"]);
    assert_eq!(source.classes(), ["animals/bird", "cat", "dog"]);
    assert_eq!(
        listing(&source, dir.path()),
        [
            ("imgs/animals/bird/c.png".to_owned(), 0),
            ("imgs/cat/notes.txt".to_owned(), 1),
            ("imgs/cat/z.png".to_owned(), 1),
            ("imgs/dog/a.PNG".to_owned(), 2),
            ("imgs/dog/b.png".to_owned(), 2),
        ]
    );
}

#[test]
fn extension_filter_ignores_case_and_the_dot() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    for ext in ["png", ".png", ".PNG"] {
        let source = open(
            &format!("dir = 'imgs'\nfile_extension = '{ext}'"),
            dir.path(),
        );
        let files: Vec<String> = listing(&source, dir.path())
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(
            files,
            [
                "imgs/animals/bird/c.png",
                "imgs/cat/z.png",
                "imgs/dog/a.PNG",
                "imgs/dog/b.png"
            ],
            "{ext}"
        );
    }
    let txt = open("dir = 'imgs'\nfile_extension = 'txt'", dir.path());
    // Classes are the directories with matching files, so labels depend on the filter.
    assert_eq!((txt.classes(), txt.len()), (&["cat".to_owned()][..], 1));
}

#[test]
fn keys_and_classes_can_be_given() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let source = open(
        "dir = 'imgs'\nkeys = ['image', 'label']\nclasses = ['dog', 'cat', 'animals/bird', 'fish']\nfile_extension = 'png'",
        dir.path(),
    );
    assert_eq!(source.keys(), ["image", "label"]);
    assert_eq!(source.classes(), ["dog", "cat", "animals/bird", "fish"]);
    assert_eq!(
        listing(&source, dir.path()),
        [
            ("imgs/dog/a.PNG".to_owned(), 0),
            ("imgs/dog/b.png".to_owned(), 0),
            ("imgs/cat/z.png".to_owned(), 1),
            ("imgs/animals/bird/c.png".to_owned(), 2),
        ]
    );
    // cat/z.png and dog/b.png: paths of one length stack.
    let batch = source.get_batch(&[2, 1]).unwrap();
    assert_eq!(
        (batch[0].size(), i64s(&batch[1])),
        (vec![2, 30], vec![1, 0])
    );
    assert_eq!(
        text(&batch[0].get(1)),
        format!("{}/imgs/dog/b.png", dir.path().display())
    );
    assert!(source
        .get_batch(&[0, 3])
        .unwrap_err()
        .starts_with("cannot batch key `image`: text values of different lengths"));
    let same = source.get_batch(&[1, 1]).unwrap();
    assert_eq!(same[0].size()[0], 2);
    assert_eq!(
        source.get(4).unwrap_err(),
        "sample 4 is out of range (the folder has 4 files)"
    );
}

#[test]
fn errors_say_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    tree(dir.path());
    let err = |config: &str| open_error("image_folder", config, dir.path());
    assert_eq!(
        err("dir = 'imgs'\nfile_extension = 'jpg'"),
        format!("{d}/imgs: has no files ending with `.jpg` in any class subdirectory")
    );
    assert_eq!(
        err("dir = 'imgs/empty'"),
        format!("{d}/imgs/empty: has no class subdirectories; expected <dir>/<class>/<file>")
    );
    assert_eq!(
        err("dir = 'imgs/animals'\nfile_extension = '.gif'"),
        format!("{d}/imgs/animals: has no files ending with `.gif` in any class subdirectory")
    );
    assert_eq!(
        err("dir = 'nope'"),
        format!("{d}/nope: cannot read directory: No such file or directory (os error 2)")
    );
    assert_eq!(
        err("dir = 'imgs'\nclasses = ['cat', 'dog']"),
        format!("{d}/imgs: directory `animals/bird` holds files but is not in `classes`")
    );
    assert_eq!(
        err("dir = 'imgs'\nkeys = ['x', 'x']"),
        "keys: expected two different, non-empty keys (path, label), got [\"x\", \"x\"]"
    );
    assert_eq!(
        err("dir = 'imgs'\nkeys = ['x', '']"),
        "keys: expected two different, non-empty keys (path, label), got [\"x\", \"\"]"
    );
    assert!(err("dir = 'imgs'\nkeys = ['x']").starts_with("keys: "));
    assert_eq!(
        err("dir = 'imgs'\nclasses = ['a', 'b', 'a']"),
        "classes: class `a` is listed twice"
    );
    assert_eq!(
        err("dir = 'imgs'\nclasses = []"),
        "classes: expected at least one class"
    );
    assert_eq!(err(""), ": missing field `dir`");
}

#[cfg(unix)]
#[test]
fn links_to_files_count_and_links_to_directories_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a/real.png", b"");
    std::os::unix::fs::symlink(
        dir.path().join("d/a/real.png"),
        dir.path().join("d/a/link.png"),
    )
    .unwrap();
    std::os::unix::fs::symlink(dir.path().join("d"), dir.path().join("d/a/loop")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("d/a/dangling.png"))
        .unwrap();
    let source = open("dir = 'd'", dir.path());
    let files: Vec<String> = listing(&source, dir.path())
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(files, ["d/a/link.png", "d/a/real.png"]);
}

#[test]
fn top_level_folders_without_files_are_named_as_no_class() {
    use super::super::folder::classless;
    let found: std::collections::BTreeMap<String, Vec<String>> = [
        ("cat".to_owned(), vec!["cat/1.png".to_owned()]),
        (
            "dog/puppies".to_owned(),
            vec!["dog/puppies/2.png".to_owned()],
        ),
    ]
    .into();
    let top = ["cat", "dog", "bird", "ant"].map(String::from);
    // `dog` holds files only below it, which makes it no empty folder.
    assert_eq!(classless(&top, &found), ["ant", "bird"]);
    assert!(classless(&top[..2], &found).is_empty());
}
