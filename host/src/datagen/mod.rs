//! Datasets fe-host can generate itself, so examples and tests need no download.

pub mod cifar;
pub mod digits;
pub mod masks;
pub mod shards;
pub mod splits;
pub mod text;
pub mod tokens;

/// The datasets `fe-host datagen` generates, by the directory name the examples read them
/// from (`data/digits`, ...).
pub const GENERATED: [&str; 5] = ["digits", "cifar", "masks", "tokens", "text"];

/// For a missing data file in a directory named like a generated dataset that holds no
/// complete one (no `MANIFEST`): the command that generates it there.
pub fn missing_hint(path: &std::path::Path) -> Option<String> {
    let dir = crate::run_dir::lexical(path.parent()?);
    let name = dir.file_name()?.to_str()?;
    let generated = GENERATED.contains(&name) && !dir.join("MANIFEST").is_file();
    generated.then(|| {
        format!(
            "generate it: fe-host datagen {name} --out {}",
            dir.display()
        )
    })
}
