//! One pass over a shard's tar headers: which samples it holds and where their members are.
//!
//! WebDataset's grouping rule: a member `dir/name.ext1.ext2` belongs to sample `dir/name` as
//! key `ext1.ext2` (the key is everything after the first dot of the file name), and a sample is
//! a run of consecutive members with the same sample name. Members with no dot in their file
//! name, and anything that is not a regular file, are skipped, as WebDataset skips them.

use std::io::Read;

use super::urls::Shard;

/// One member's data inside its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Byte offset of the member's data from the start of the shard.
    pub offset: u64,
    /// Its length in bytes.
    pub size: u64,
}

/// A sample as the scan found it: its name and its members by extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The sample's name (WebDataset's `__key__`).
    pub key: String,
    /// `(extension, member)`, in the order the shard stores them.
    pub members: Vec<(String, Member)>,
}

/// Splits a member path into sample name and extension (`None`: not part of any sample).
pub fn split_name(path: &str) -> Option<(&str, &str)> {
    let file_start = path.rfind('/').map_or(0, |i| i + 1);
    let dot = path[file_start..].find('.')? + file_start;
    (dot > file_start && dot + 1 < path.len()).then(|| (&path[..dot], &path[dot + 1..]))
}

/// Reads every header of `shard`, calling `sample` for each complete sample in order. Errors
/// name the member they happened at (or after).
pub fn scan(
    shard: &Shard,
    mut sample: impl FnMut(Found) -> Result<(), String>,
) -> Result<(), String> {
    if let Shard::File(path) = shard {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
        let length = file
            .metadata()
            .map_err(|e| format!("cannot open: {e}"))?
            .len();
        let mut archive = tar::Archive::new(std::io::BufReader::new(file));
        // Seeking over member data: the scan of a local shard reads only its headers.
        let entries = archive
            .entries_with_seek()
            .map_err(|e| format!("not a tar archive: {e}"))?;
        return scan_entries(entries, Some(length), &mut sample);
    }
    let mut archive = tar::Archive::new(shard.open()?);
    let entries = archive
        .entries()
        .map_err(|e| format!("not a tar archive: {e}"))?;
    scan_entries(entries, None, &mut sample)
}

fn scan_entries<R: Read>(
    entries: tar::Entries<'_, R>,
    length: Option<u64>,
    sample: &mut dyn FnMut(Found) -> Result<(), String>,
) -> Result<(), String> {
    let mut current: Option<Found> = None;
    let mut last_member = String::new();
    let at = |last: &str| {
        if last.is_empty() {
            "at its first member".to_owned()
        } else {
            format!("after member `{last}`")
        }
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("corrupt or truncated {}: {e}", at(&last_member)))?;
        let path = entry
            .path()
            .map_err(|e| format!("bad member name {}: {e}", at(&last_member)))?
            .to_string_lossy()
            .into_owned();
        let member = Member {
            offset: entry.raw_file_position(),
            size: entry.size(),
        };
        if let Some(length) = length {
            if member.offset + member.size > length {
                return Err(format!(
                    "truncated: member `{path}` needs {} bytes but the file ends {} bytes into it",
                    member.size,
                    length.saturating_sub(member.offset)
                ));
            }
        }
        last_member.clone_from(&path);
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Some((key, ext)) = split_name(&path) else {
            continue;
        };
        match &mut current {
            Some(found) if found.key == key => {
                if found.members.iter().any(|(e, _)| e == ext) {
                    return Err(format!(
                        "member `{path}`: sample `{key}` already has a `.{ext}` member"
                    ));
                }
                found.members.push((ext.to_owned(), member));
            }
            _ => {
                if let Some(done) = current.take() {
                    sample(done)?;
                }
                current = Some(Found {
                    key: key.to_owned(),
                    members: vec![(ext.to_owned(), member)],
                });
            }
        }
    }
    if let Some(done) = current.take() {
        sample(done)?;
    }
    Ok(())
}

/// Reads `n` bytes of the stream into a buffer, naming what was being read when it ends early.
pub fn read_exact(reader: &mut dyn Read, n: u64, what: &str) -> Result<Vec<u8>, String> {
    let mut buffer = Vec::with_capacity(n as usize);
    let got = reader
        .take(n)
        .read_to_end(&mut buffer)
        .map_err(|e| format!("{what}: {e}"))?;
    if (got as u64) < n {
        return Err(format!("{what}: truncated ({got} of {n} bytes)"));
    }
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_at_the_first_dot_of_the_file_name() {
        assert_eq!(split_name("a/b.c/x.seg.png"), Some(("a/b.c/x", "seg.png")));
        assert_eq!(split_name("s0001.cls"), Some(("s0001", "cls")));
        assert_eq!(split_name("dir/noext"), None);
        assert_eq!(split_name(".hidden"), None);
        assert_eq!(split_name("x."), None);
    }
}
