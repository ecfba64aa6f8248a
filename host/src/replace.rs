//! Replacing a file through a temporary beside it and a rename, so a reader (or a crash) sees
//! the old file or the new one, never half of either.

use std::path::Path;

use crate::error::{Error, Result};

/// Puts a new `path` in place: `write` fills `temp` (a sibling of `path`), then a rename moves
/// it over `path`. When either fails, `temp` is removed: a failed write (a full disk, a
/// read-only folder) is not a crash, and this process is alive to clean up what a later run,
/// going to a new version or folder, would never see. A failed rename names `path`.
pub fn through_temp(
    path: &Path,
    temp: &Path,
    write: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let written =
        write(temp).and_then(|()| std::fs::rename(temp, path).map_err(|e| Error::io(path, e)));
    if written.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_or_rename_leaves_no_temporary_and_a_good_one_replaces() {
        let dir = std::env::temp_dir().join(format!("fe-replace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let temp = dir.join("t.tmp");
        let write = |bytes: &'static [u8]| {
            move |temp: &Path| std::fs::write(temp, bytes).map_err(|e| Error::io(temp, e))
        };
        // The rename fails: the target is a non-empty directory.
        let blocked = dir.join("blocked");
        std::fs::create_dir_all(blocked.join("x")).unwrap();
        let error = through_temp(&blocked, &temp, write(b"a")).unwrap_err();
        assert!(error.to_string().contains("blocked"), "{error}");
        assert!(!temp.exists());
        // The write fails after creating the temporary.
        let failing = |temp: &Path| {
            std::fs::write(temp, b"half").unwrap();
            Err(Error::Internal("disk full".into()))
        };
        assert!(through_temp(&dir.join("f"), &temp, failing).is_err());
        assert!(!temp.exists());
        let good = dir.join("good");
        through_temp(&good, &temp, write(b"new")).unwrap();
        assert_eq!(std::fs::read(&good).unwrap(), b"new");
        assert!(!temp.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
