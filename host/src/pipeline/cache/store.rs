//! One cache file: the samples of a dataset after the cached ops, in dataset index order.
//!
//! Layout: `FECACHE1`, then each sample's tensors (key order of the table, each as kind,
//! rank, dims, bytes), then the table (key names and every sample's offset), then the
//! table's offset and `FECACHE1` again. A fill writes to a temporary sibling and renames it
//! into place only when complete, so a file with the final name is always whole; readers
//! keep only the offsets in memory and read each sample with one positioned read.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use crate::pipeline::Source;

const MAGIC: &[u8; 8] = b"FECACHE1";

const KINDS: [(Kind, u8); 10] = [
    (Kind::Bool, 0),
    (Kind::Uint8, 1),
    (Kind::Int8, 2),
    (Kind::Int16, 3),
    (Kind::Int, 4),
    (Kind::Int64, 5),
    (Kind::Half, 6),
    (Kind::BFloat16, 7),
    (Kind::Float, 8),
    (Kind::Double, 9),
];

/// Writes a cache file sample by sample.
pub struct Writer {
    file: BufWriter<File>,
    temp: PathBuf,
    dest: PathBuf,
    keys: Vec<String>,
    offsets: Vec<u64>,
    at: u64,
    done: bool,
}

impl Writer {
    /// Starts `dest` under a temporary name unique to this process.
    pub fn create(dest: &Path, keys: Vec<String>) -> std::io::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temp = dest.with_extension(format!("tmp-{}-{nanos}", std::process::id()));
        let mut file = BufWriter::new(File::create(&temp)?);
        file.write_all(MAGIC)?;
        Ok(Self {
            file,
            temp,
            dest: dest.to_path_buf(),
            keys,
            offsets: Vec::new(),
            at: MAGIC.len() as u64,
            done: false,
        })
    }

    /// The keys every sample must have, in order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Appends one sample (one tensor per key, in [`Writer::keys`] order).
    pub fn push(&mut self, values: &[&Tensor]) -> Result<(), String> {
        self.offsets.push(self.at);
        for value in values {
            let bytes = encode(value)?;
            self.file
                .write_all(&bytes)
                .map_err(|e| format!("cannot write {}: {e}", self.temp.display()))?;
            self.at += bytes.len() as u64;
        }
        Ok(())
    }

    /// Writes the table, syncs and renames the file into place.
    pub fn finish(mut self) -> Result<(), String> {
        let temp = self.temp.clone();
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", temp.display());
        let mut table = Vec::new();
        table.extend((self.keys.len() as u64).to_le_bytes());
        for key in &self.keys {
            table.extend((key.len() as u64).to_le_bytes());
            table.extend(key.as_bytes());
        }
        table.extend((self.offsets.len() as u64).to_le_bytes());
        for offset in self.offsets.iter().chain([&self.at]) {
            table.extend(offset.to_le_bytes());
        }
        table.extend(self.at.to_le_bytes());
        table.extend(MAGIC);
        self.file.write_all(&table).map_err(fail)?;
        self.file.flush().map_err(fail)?;
        self.file.get_ref().sync_all().map_err(fail)?;
        std::fs::rename(&self.temp, &self.dest).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                self.temp.display(),
                self.dest.display()
            )
        })?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.done {
            // An abandoned fill: nothing may read it, and nothing should keep its space.
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

fn encode(value: &Tensor) -> Result<Vec<u8>, String> {
    let kind = value.kind();
    let code = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, c)| *c)
        .ok_or_else(|| format!("{kind:?} tensors cannot be cached"))?;
    let cpu = value
        .f_to_device(tch::Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .map_err(crate::tch_message)?;
    let dims = cpu.size();
    let numel = cpu.numel();
    let mut out = vec![code, dims.len() as u8];
    for d in &dims {
        out.extend(d.to_le_bytes());
    }
    let start = out.len();
    out.resize(start + numel * kind.elt_size_in_bytes(), 0);
    cpu.f_copy_data_u8(&mut out[start..], numel)
        .map_err(crate::tch_message)?;
    Ok(out)
}

/// A complete cache file, read sample by sample.
pub struct CachedSource {
    file: File,
    path: PathBuf,
    keys: Vec<String>,
    offsets: Vec<u64>,
}

impl CachedSource {
    /// Opens a complete cache file (its table is checked, the samples are read on demand).
    pub fn open(path: &Path) -> Result<Self, String> {
        let bad = |what: &str| format!("{}: not a complete cache file ({what})", path.display());
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let len = file
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        if len < 32 {
            return Err(bad("too short"));
        }
        let mut tail = [0u8; 16];
        file.read_exact_at(&mut tail, len - 16)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if &tail[8..] != MAGIC {
            return Err(bad("no end marker"));
        }
        let table_at = u64::from_le_bytes(tail[..8].try_into().map_err(|_| bad("table"))?);
        if table_at >= len - 16 {
            return Err(bad("table offset"));
        }
        let mut table = vec![0u8; (len - 16 - table_at) as usize];
        file.read_exact_at(&mut table, table_at)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut reader = Cursor(&table);
        let key_count = reader.u64().ok_or_else(|| bad("keys"))?;
        let mut keys = Vec::new();
        for _ in 0..key_count {
            let n = reader.u64().ok_or_else(|| bad("keys"))? as usize;
            let name = reader.take(n).ok_or_else(|| bad("keys"))?;
            keys.push(String::from_utf8(name.to_vec()).map_err(|_| bad("keys"))?);
        }
        let samples = reader.u64().ok_or_else(|| bad("offsets"))?;
        let offsets = (0..=samples)
            .map(|_| reader.u64())
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| bad("offsets"))?;
        if offsets.last() != Some(&table_at) {
            return Err(bad("offsets"));
        }
        Ok(Self {
            file,
            path: path.to_path_buf(),
            keys,
            offsets,
        })
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

impl Source for CachedSource {
    fn len(&self) -> u64 {
        self.offsets.len().saturating_sub(1) as u64
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> Result<Vec<Tensor>, String> {
        let i = index as usize;
        let (start, end) = match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&s), Some(&e)) if s <= e => (s, e),
            _ => return Err(format!("{}: no sample {index}", self.path.display())),
        };
        let mut bytes = vec![0u8; (end - start) as usize];
        self.file
            .read_exact_at(&mut bytes, start)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let bad = || format!("{}: sample {index} is damaged", self.path.display());
        let mut reader = Cursor(&bytes);
        let mut values = Vec::with_capacity(self.keys.len());
        for _ in &self.keys {
            let head = reader.take(2).ok_or_else(bad)?;
            let kind = KINDS
                .iter()
                .find(|(_, c)| *c == head[0])
                .map(|(k, _)| *k)
                .ok_or_else(bad)?;
            let dims = (0..head[1])
                .map(|_| reader.u64().map(|d| d as i64))
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(bad)?;
            let numel: i64 = dims.iter().product();
            let data = reader
                .take(numel.max(0) as usize * kind.elt_size_in_bytes())
                .ok_or_else(bad)?;
            values.push(Tensor::f_from_data_size(data, &dims, kind).map_err(crate::tch_message)?);
        }
        Ok(values)
    }
}
