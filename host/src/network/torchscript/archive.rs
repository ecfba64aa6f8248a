//! A TorchScript file is a zip archive whose entries carry CRC-32s, which libtorch's reader
//! does not check: a file with flipped bytes in a tensor entry loads, and trains or predicts
//! with garbage weights. Reading every entry once through the `zip` crate verifies them.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// Why a TorchScript archive's bytes cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt {
    /// The archive entry that failed, when one did.
    pub entry: Option<String>,
    /// What is wrong.
    pub why: String,
}

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.entry {
            Some(entry) => write!(
                f,
                "archive entry `{entry}` {}: the file is corrupt (changed or damaged after torch.jit.save wrote it); save the module again",
                self.why
            ),
            None => write!(f, "{}", self.why),
        }
    }
}

/// Verifies the CRC-32 of every entry of the archive at `file`, streaming each one (memory
/// stays at a read buffer whatever the file's size). A file that is not a zip archive at all
/// passes: libtorch's own reader then says what it is not, as before.
pub fn verify(file: &Path) -> Result<(), Corrupt> {
    let opened = File::open(file).map_err(|e| Corrupt {
        entry: None,
        why: format!("cannot read it: {e}"),
    })?;
    let Ok(mut archive) = zip::ZipArchive::new(BufReader::new(opened)) else {
        return Ok(());
    };
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(|e| Corrupt {
            entry: None,
            why: format!("cannot read archive entry {index}: {e}"),
        })?;
        let name = entry.name().to_owned();
        std::io::copy(&mut entry, &mut std::io::sink()).map_err(|e| Corrupt {
            entry: Some(name),
            why: if e.to_string().contains("checksum") {
                "fails its CRC-32 check".to_owned()
            } else {
                format!("cannot be read ({e})")
            },
        })?;
    }
    Ok(())
}
