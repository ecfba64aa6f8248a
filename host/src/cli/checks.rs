//! Refusals and failures the command line itself owns: flags and settings checked before
//! anything is built, clap's usage errors as one line, and what a failed write to stdout means.

use crate::error::{Error, Result};
use crate::manifest::{KeyPath, Manifest};

/// clap's multi-line usage error as one line: its first line, its tips, and where to read more.
pub fn one_line_usage_error(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("error: invalid command line");
    let first = if first.starts_with("error:") {
        first.to_owned()
    } else {
        format!("error: {first}")
    };
    let tips: Vec<&str> = lines
        .clone()
        .filter_map(|l| l.strip_prefix("tip:").map(str::trim))
        .collect();
    let usage = lines.find_map(|l| l.strip_prefix("Usage:").map(str::trim));
    let mut out = first;
    for tip in tips {
        out.push_str(&format!("; {tip}"));
    }
    if let Some(usage) = usage {
        out.push_str(&format!(" (usage: {usage}; see --help)"));
    }
    out
}

/// What a panic of `println!` means: `None` when `panic_message` is not a failed write to
/// stdout, `Some(None)` when the reader closed the pipe (a normal end: `fe-host ... | head`), and
/// `Some(Some(error))` for any other write failure (a full disk, say).
pub fn stdout_failure(panic_message: &str) -> Option<Option<Error>> {
    let reason = panic_message.strip_prefix("failed printing to stdout: ")?;
    if reason.starts_with("Broken pipe") {
        return Some(None);
    }
    Some(Some(Error::Run(format!(
        "cannot write to standard output: {reason}"
    ))))
}

/// What `run` refuses before building anything: `--threads 0`, a `log_dir` or checkpoint
/// `dir` that is a file (`log_dir_from_flag`: it came from `--log-dir`), a manifest without
/// any dataset.
pub(super) fn check_before_building(
    manifest: &Manifest,
    threads: Option<u32>,
    log_dir_from_flag: bool,
) -> Result<()> {
    if threads == Some(0) {
        return Err(Error::Usage(
            "--threads must be at least 1 (leave it out for one thread per core)".into(),
        ));
    }
    check_log_dir(manifest, log_dir_from_flag)?;
    if let Some(dir) = manifest.checkpoint.as_ref().map(|c| &c.dir) {
        if dir.exists() && !dir.is_dir() {
            return Err(manifest.error_at(
                &KeyPath::root("checkpoint").key("dir"),
                format!(
                    "{} is an existing file, not a directory; name a directory for the checkpoints",
                    dir.display()
                ),
            ));
        }
    }
    if manifest.pipeline.data.is_empty() {
        return Err(manifest.error_at(
            &KeyPath::root("pipeline"),
            "no dataset to run on: add [pipeline.data.train] (and eval or test) with a `type`",
        ));
    }
    Ok(())
}

/// A `log_dir` that names an existing file is refused before anything is built, naming the
/// setting it came from.
fn check_log_dir(manifest: &Manifest, from_flag: bool) -> Result<()> {
    let Some(dir) = &manifest.run.log_dir else {
        return Ok(());
    };
    if !dir.exists() || dir.is_dir() {
        return Ok(());
    }
    let message = format!(
        "{} is an existing file, not a directory; name a directory for the run's logs",
        dir.display()
    );
    if from_flag {
        return Err(Error::Usage(format!("--log-dir: {message}")));
    }
    let path = KeyPath::root("run").key("log_dir");
    Err(manifest.error_at(&path, message))
}

/// A directory flag (`--save-weights DIR`) whose target is written after training: refused
/// now when it names an existing file.
pub(super) fn check_output_dir(flag: &str, dir: &std::path::Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Usage(format!(
            "{flag} {}: is an existing file, not a directory; name a directory",
            dir.display()
        )));
    }
    Ok(())
}

/// A file flag (`--summary FILE`, `--out FILE`) whose target is written at the end: refused
/// now when it names a directory or its directory does not exist.
pub(crate) fn check_output_file(flag: &str, file: &std::path::Path) -> Result<()> {
    if file.is_dir() {
        return Err(Error::Usage(format!(
            "{flag} {}: is a directory; name a file",
            file.display()
        )));
    }
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent.filter(|p| !p.is_dir()) {
        return Err(Error::Usage(format!(
            "{flag} {}: the directory {} does not exist",
            file.display(),
            parent.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_targets_that_cannot_be_written_are_refused_naming_the_flag() {
        let here = std::env::temp_dir().join(format!("fe-out-checks-{}", std::process::id()));
        std::fs::create_dir_all(&here).unwrap();
        let file = here.join("taken");
        std::fs::write(&file, b"x").unwrap();
        let message = |r: Result<()>| match r {
            Err(Error::Usage(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(message(check_output_dir("--save-weights", &file)).contains("an existing file"));
        assert!(check_output_dir("--save-weights", &here.join("new")).is_ok());
        assert!(message(check_output_file("--summary", &here)).contains("is a directory"));
        let missing = message(check_output_file("--summary", &here.join("no/s.json")));
        assert!(missing.contains("does not exist"), "{missing}");
        assert!(check_output_file("--summary", &here.join("s.json")).is_ok());
        assert!(check_output_file("--summary", std::path::Path::new("s.json")).is_ok());
        std::fs::remove_dir_all(&here).unwrap();
    }

    #[test]
    fn usage_errors_become_one_line_with_their_tip() {
        let rendered = "error: unexpected argument '--epoch' found\n\n  tip: a similar argument exists: '--epochs'\n\nUsage: fe-host run <MANIFEST>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_usage_error(rendered),
            "error: unexpected argument '--epoch' found; a similar argument exists: '--epochs' (usage: fe-host run <MANIFEST>; see --help)"
        );
    }

    #[test]
    fn a_broken_pipe_is_a_normal_end_and_other_write_failures_are_errors() {
        assert!(matches!(
            stdout_failure("failed printing to stdout: Broken pipe (os error 32)"),
            Some(None)
        ));
        let full =
            stdout_failure("failed printing to stdout: No space left on device (os error 28)");
        assert!(matches!(full, Some(Some(Error::Run(_)))));
        assert!(stdout_failure("index out of bounds").is_none());
    }
}
