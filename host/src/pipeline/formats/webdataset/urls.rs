//! Shard addresses: WebDataset's brace expansion, and opening a shard as a byte stream.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

/// Where one shard's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shard {
    /// A local file (relative paths are resolved against the manifest's directory).
    File(PathBuf),
    /// `http://` or `https://`, fetched with one GET per read.
    Http(String),
    /// `pipe:COMMAND`: the command's standard output, run with `sh -c`.
    Pipe(String),
}

impl Shard {
    /// Parses one expanded address.
    pub fn parse(url: &str, dir: &Path) -> Self {
        if let Some(command) = url.strip_prefix("pipe:") {
            Shard::Pipe(command.to_owned())
        } else if url.starts_with("http://") || url.starts_with("https://") {
            Shard::Http(url.to_owned())
        } else {
            let path = url.strip_prefix("file:").unwrap_or(url);
            Shard::File(dir.join(path))
        }
    }

    /// How errors name the shard.
    pub fn name(&self) -> String {
        match self {
            Shard::File(path) => path.display().to_string(),
            Shard::Http(url) => url.clone(),
            Shard::Pipe(command) => format!("pipe:{command}"),
        }
    }

    /// The shard's bytes from the start, as a stream (files too: the index scan reads
    /// every shard the same way).
    pub fn open(&self) -> Result<Box<dyn Read + Send>, String> {
        match self {
            Shard::File(path) => std::fs::File::open(path)
                .map(|f| Box::new(std::io::BufReader::new(f)) as Box<dyn Read + Send>)
                .map_err(|e| format!("cannot open: {e}")),
            Shard::Http(url) => {
                let response = ureq::get(url)
                    .call()
                    .map_err(|e| format!("GET failed: {e}"))?;
                Ok(Box::new(response.into_body().into_reader()))
            }
            Shard::Pipe(command) => {
                let child = Command::new("sh")
                    .arg("-c")
                    .arg(command)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .map_err(|e| format!("cannot run `sh -c {command}`: {e}"))?;
                PipeReader::new(child).map(|r| Box::new(r) as Box<dyn Read + Send>)
            }
        }
    }
}

/// A `pipe:` command's stdout; at its end, a command that failed is an error (a stream that
/// stops early because `aws s3 cp` lost its connection must not look like a short shard).
/// Dropped before the end (the reader moved on), the child is killed and reaped.
struct PipeReader {
    child: Child,
    stdout: ChildStdout,
    finished: bool,
}

impl PipeReader {
    fn new(mut child: Child) -> Result<Self, String> {
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| "the command's stdout is not a pipe".to_owned())?;
        Ok(Self {
            child,
            stdout,
            finished: false,
        })
    }
}

impl Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.stdout.read(buf)?;
        if n == 0 && !buf.is_empty() && !self.finished {
            self.finished = true;
            let status = self.child.wait()?;
            if !status.success() {
                return Err(std::io::Error::other(format!(
                    "the command exited with {status}"
                )));
            }
        }
        Ok(n)
    }
}

impl Drop for PipeReader {
    fn drop(&mut self) {
        if !self.finished {
            // The child is ours; a kill of one that already exited is harmless.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// WebDataset's brace expansion: `a-{000..002}.tar` gives `a-000.tar a-001.tar a-002.tar`
/// (zero padding follows the first bound's width), `{x,y}` gives alternatives, several groups
/// multiply out left to right, and `::` separates independent lists.
pub fn expand(urls: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in urls.split("::").map(str::trim).filter(|p| !p.is_empty()) {
        expand_one(part, &mut out)?;
    }
    Ok(out)
}

fn expand_one(text: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = text.find('{') else {
        if text.contains('}') {
            return Err(format!("`{text}` has a `}}` without a `{{`"));
        }
        out.push(text.to_owned());
        return Ok(());
    };
    let close = text[open..]
        .find('}')
        .map(|i| open + i)
        .ok_or_else(|| format!("`{text}` has a `{{` without a `}}`"))?;
    let (head, body, tail) = (&text[..open], &text[open + 1..close], &text[close + 1..]);
    for choice in alternatives(body)? {
        expand_one(&format!("{head}{choice}{tail}"), out)?;
    }
    Ok(())
}

fn alternatives(body: &str) -> Result<Vec<String>, String> {
    if let Some((low, high)) = body.split_once("..") {
        let bad = || format!("`{{{body}}}` is not a range of two non-negative integers");
        let from: u64 = low.parse().map_err(|_| bad())?;
        let to: u64 = high.parse().map_err(|_| bad())?;
        if to < from {
            return Err(format!(
                "`{{{body}}}` counts down; write the lower bound first"
            ));
        }
        let width = low.len();
        return Ok((from..=to).map(|i| format!("{i:0width$}")).collect());
    }
    Ok(body.split(',').map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_as_webdataset_does() {
        assert_eq!(
            expand("d/s-{000..002}.tar").unwrap(),
            ["d/s-000.tar", "d/s-001.tar", "d/s-002.tar"]
        );
        assert_eq!(
            expand("{a,b}-{8..10}.tar").unwrap(),
            ["a-8.tar", "a-9.tar", "a-10.tar", "b-8.tar", "b-9.tar", "b-10.tar"]
        );
        assert_eq!(
            expand("x.tar :: y-{1..2}.tar").unwrap(),
            ["x.tar", "y-1.tar", "y-2.tar"]
        );
        assert!(expand("s-{3..1}.tar").unwrap_err().contains("counts down"));
        assert!(expand("s-{1..2.tar").unwrap_err().contains("without"));
    }

    #[test]
    fn addresses_name_their_kind() {
        let dir = Path::new("/m");
        assert_eq!(Shard::parse("a.tar", dir), Shard::File("/m/a.tar".into()));
        assert_eq!(
            Shard::parse("/abs/a.tar", dir),
            Shard::File("/abs/a.tar".into())
        );
        assert_eq!(Shard::parse("pipe:cat a", dir), Shard::Pipe("cat a".into()));
        assert_eq!(
            Shard::parse("https://h/a.tar", dir),
            Shard::Http("https://h/a.tar".into())
        );
    }
}
