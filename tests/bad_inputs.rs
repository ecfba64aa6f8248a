//! The bad-input corpus: every file under `tests/bad-inputs/cases/` is one input a user may
//! get wrong (a manifest, a data file, a checkpoint, a plugin, a flag), run through the real
//! binary with `RUST_BACKTRACE=1`. Each must fail with its documented exit code and one clear
//! line on stderr containing the expected text, with no panic message and no backtrace.
//! Adding a case is adding a file; `tests/bad-inputs/README.md` describes the format.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::util::{digits, ensure_plugins, plugin_dir, root, Run, TempDir};

/// Cases the corpus must hold at least (the issue asks for 100 across the five areas).
const AT_LEAST: usize = 100;

/// What leaking panics and backtraces look like.
const NOISE: [&str; 5] = [
    "panicked at",
    "stack backtrace",
    "RUST_BACKTRACE",
    "Exception raised from",
    "frame #",
];

fn corpus_dir() -> PathBuf {
    root().join("tests/bad-inputs")
}

fn case_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("corpus directory")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            case_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

/// `{data}`, `{plugins}`, `{libtorch}` and `{dir}` (the case's directory) in case text.
fn expand(text: &str, dir: &Path) -> String {
    let data = digits()[0].parent().expect("data dir").to_path_buf();
    text.replace("{data}", &data.to_string_lossy())
        .replace("{plugins}", &plugin_dir().to_string_lossy())
        .replace(
            "{libtorch}",
            &root().join(".libtorch/lib").to_string_lossy(),
        )
        .replace("{dir}", &dir.to_string_lossy())
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|v| v.as_str().expect("a string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Writes one file of a case: `base` (a template in the corpus directory) with `replace`
/// pairs applied and `append` added, `text`, or `copy` of a file (`truncate` to N bytes).
fn write_file(dir: &Path, name: &str, spec: &Table) -> Result<(), String> {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    let mut bytes: Vec<u8> = if let Some(base) = spec.get("base").and_then(Value::as_str) {
        let template = std::fs::read_to_string(corpus_dir().join(format!("{base}.toml")))
            .map_err(|e| format!("template {base}: {e}"))?;
        let mut text = template;
        for pair in spec
            .get("replace")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let pair = strings(Some(pair));
            if !text.contains(&pair[0]) {
                return Err(format!("{name}: `{}` is not in the template", pair[0]));
            }
            text = text.replacen(&pair[0], &pair[1], 1);
        }
        if let Some(extra) = spec.get("append").and_then(Value::as_str) {
            text.push_str(extra);
        }
        expand(&text, dir).into_bytes()
    } else if let Some(text) = spec.get("text").and_then(Value::as_str) {
        expand(text, dir).into_bytes()
    } else if let Some(from) = spec.get("copy").and_then(Value::as_str) {
        let from = PathBuf::from(expand(from, dir));
        std::fs::read(&from).map_err(|e| format!("copy {}: {e}", from.display()))?
    } else {
        return Err(format!("{name}: needs `base`, `text` or `copy`"));
    };
    if let Some(n) = spec.get("truncate").and_then(Value::as_integer) {
        bytes.truncate(n as usize);
    }
    std::fs::write(&path, bytes).map_err(|e| e.to_string())
}

fn write_files(dir: &Path, files: Option<&Value>) -> Result<(), String> {
    for (name, spec) in files.and_then(Value::as_table).into_iter().flatten() {
        let spec = spec.as_table().ok_or(format!("{name}: must be a table"))?;
        write_file(dir, name, spec)?;
    }
    Ok(())
}

fn run_in(dir: &Path, exe: &Path, args: &[String], env: &Table) -> Run {
    ensure_plugins();
    let mut command = std::process::Command::new(exe);
    // The test-fixture plugin for cases run by the build's fe-host; a lone copy finds nothing.
    if exe == Path::new(env!("CARGO_BIN_EXE_fe-host")) {
        command.env("FE_PLUGIN_PATH", crate::util::fixture_plugin());
    } else {
        command.env_remove("FE_PLUGIN_PATH");
    }
    command
        .env("RUST_BACKTRACE", "1")
        .current_dir(dir)
        .args(args);
    for (key, value) in env {
        command.env(key, expand(value.as_str().unwrap_or(""), dir));
    }
    command.output().expect("run fe-host").into()
}

/// Runs one case; `Err` says what did not match.
fn check(case: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(case).map_err(|e| e.to_string())?;
    let spec: Table = text.parse().map_err(|e| format!("case file: {e}"))?;
    let tag = case
        .file_stem()
        .map_or("case".into(), |s| s.to_string_lossy());
    let temp = TempDir::new(&format!("bad-{tag}"));
    let dir = temp.path().to_path_buf();
    write_files(&dir, spec.get("files"))?;
    let env = spec
        .get("env")
        .and_then(Value::as_table)
        .cloned()
        .unwrap_or_default();
    // A case may run fe-host from a copy of the binary in a directory of its own, so that no
    // plugin sits next to the executable.
    let exe = if spec.get("lone_exe").and_then(Value::as_bool) == Some(true) {
        let lone = dir.join("bin/fe-host");
        std::fs::create_dir_all(dir.join("bin")).map_err(|e| e.to_string())?;
        std::fs::copy(env!("CARGO_BIN_EXE_fe-host"), &lone).map_err(|e| e.to_string())?;
        lone
    } else {
        PathBuf::from(env!("CARGO_BIN_EXE_fe-host"))
    };
    // Commands that prepare the case (a run that writes a checkpoint); they must succeed.
    for before in spec
        .get("before")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let args: Vec<String> = strings(Some(before))
            .iter()
            .map(|a| expand(a, &dir))
            .collect();
        let out = run_in(&dir, &exe, &args, &env);
        if out.code != 0 {
            return Err(format!("`before` {args:?} failed:\n{}", out.stderr));
        }
    }
    write_files(&dir, spec.get("then"))?;
    for gone in strings(spec.get("remove")) {
        let path = dir.join(gone);
        let _ = std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir_all(&path));
    }
    let args: Vec<String> = strings(spec.get("args"))
        .iter()
        .map(|a| expand(a, &dir))
        .collect();
    let out = run_in(&dir, &exe, &args, &env);
    let code = spec
        .get("code")
        .and_then(Value::as_integer)
        .ok_or("case needs `code`")?;
    let expected = expand(
        spec.get("stderr")
            .and_then(Value::as_str)
            .ok_or("case needs `stderr`")?,
        &dir,
    );
    let lines = spec.get("lines").and_then(Value::as_integer).unwrap_or(1) as usize;
    let mut wrong = Vec::new();
    if i64::from(out.code) != code {
        wrong.push(format!("exit code {} (expected {code})", out.code));
    }
    if !out.stderr.starts_with("error: ") {
        wrong.push("stderr does not start with `error: `".to_owned());
    }
    if !out.stderr.contains(&expected) {
        wrong.push(format!("stderr lacks `{expected}`"));
    }
    // `lines = 0`: a report of several problems, one a line, however many there are.
    if lines != 0 && out.stderr.trim_end().lines().count() != lines {
        wrong.push(format!("stderr is not {lines} line(s)"));
    }
    if let Some(stdout) = spec.get("stdout").and_then(Value::as_str) {
        if !out.stdout.contains(&expand(stdout, &dir)) {
            wrong.push(format!("stdout lacks `{stdout}`"));
        }
    }
    for noise in NOISE {
        if out.stderr.contains(noise) || out.stdout.contains(noise) {
            wrong.push(format!("`{noise}` leaked"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}\n  stderr: {}  stdout: {}",
            wrong.join("; "),
            out.stderr.trim_end(),
            out.stdout.lines().take(5).collect::<Vec<_>>().join(" | ")
        ))
    }
}

#[test]
fn every_bad_input_is_refused_with_its_code_and_one_clear_line() {
    let mut cases = Vec::new();
    case_files(&corpus_dir().join("cases"), &mut cases);
    assert!(
        cases.len() >= AT_LEAST,
        "the corpus holds {} cases; at least {AT_LEAST} expected",
        cases.len()
    );
    // The data every manifest case reads, made once before the cases run in parallel.
    let _ = digits();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                if let Err(problem) = check(case) {
                    let name = case.strip_prefix(corpus_dir()).unwrap_or(case);
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{}: {problem}", name.display()));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
