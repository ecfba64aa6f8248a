//! What a plugin was built against, readable without running any of its code.
//!
//! `export_plugin!` places a [`BuildInfo`] in the plugin under the exported symbol
//! [`BUILD_INFO_SYMBOL`]. The struct is plain bytes (`#[repr(C)]`, no pointers), so the host
//! reads it straight out of the file, before loading the library, and refuses a plugin whose
//! build does not match its own.
//!
//! # Evolution rules
//!
//! * The layout below is frozen as layout version 1: only the bytes after the last field may
//!   grow, and a new layout bumps [`BUILD_INFO_LAYOUT`].
//! * The ABI key is exact: plugin-api `major.minor` (patch releases are compatible), the tch
//!   version, the libtorch version, the CUDA flavour and the C++ ABI flag must all be equal.

use std::fmt;

/// Name of the exported static that holds a plugin's [`BuildInfo`].
pub const BUILD_INFO_SYMBOL: &str = "FE_PLUGIN_BUILD_INFO";
/// First bytes of every [`BuildInfo`].
pub const BUILD_INFO_MAGIC: [u8; 8] = *b"FEPLUGIN";
/// Layout version of [`BuildInfo`].
pub const BUILD_INFO_LAYOUT: u32 = 1;
/// Capacity of every [`FixedStr`], in bytes.
pub const FIXED_STR_CAPACITY: usize = 60;

/// The version of this crate, the ABI everything is checked against.
pub const PLUGIN_API_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The exact `tch` version (pinned with `=` in Cargo.toml; a test keeps the two equal).
pub const TCH_VERSION: &str = "0.24.0";
/// The libtorch version this crate was compiled against, e.g. `2.11.0`.
pub const LIBTORCH_VERSION: &str = env!("FE_LIBTORCH_VERSION");
/// The libtorch build flavour: `cpu`, `cu130`, ...
pub const LIBTORCH_FLAVOUR: &str = env!("FE_LIBTORCH_FLAVOUR");
/// `_GLIBCXX_USE_CXX11_ABI` of the libtorch build (1 or 0).
pub const CXX11_ABI: &str = env!("FE_LIBTORCH_CXX11_ABI");

/// A string in a fixed-size, pointer-free buffer, so that it can be read from a file.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedStr {
    len: u32,
    bytes: [u8; FIXED_STR_CAPACITY],
}

impl FixedStr {
    /// Stores `text`, cut at [`FIXED_STR_CAPACITY`] bytes (on a character boundary).
    pub const fn new(text: &str) -> Self {
        let src = text.as_bytes();
        let mut len = if src.len() < FIXED_STR_CAPACITY {
            src.len()
        } else {
            FIXED_STR_CAPACITY
        };
        // Never split a UTF-8 sequence: back up over continuation bytes.
        while len > 0 && len < src.len() && (src[len] & 0b1100_0000) == 0b1000_0000 {
            len -= 1;
        }
        let mut bytes = [0u8; FIXED_STR_CAPACITY];
        let mut i = 0;
        while i < len {
            bytes[i] = src[i];
            i += 1;
        }
        Self {
            len: len as u32,
            bytes,
        }
    }

    /// The stored text (empty if the bytes are not valid UTF-8).
    pub fn as_str(&self) -> &str {
        let len = (self.len as usize).min(FIXED_STR_CAPACITY);
        std::str::from_utf8(&self.bytes[..len]).unwrap_or("")
    }

    fn from_le_bytes(raw: &[u8]) -> Option<Self> {
        let len = u32::from_le_bytes(raw.get(0..4)?.try_into().ok()?);
        let mut bytes = [0u8; FIXED_STR_CAPACITY];
        bytes.copy_from_slice(raw.get(4..4 + FIXED_STR_CAPACITY)?);
        Some(Self { len, bytes })
    }
}

impl fmt::Debug for FixedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// What a plugin was built against, and which plugin it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// Always [`BUILD_INFO_MAGIC`].
    pub magic: [u8; 8],
    /// Always [`BUILD_INFO_LAYOUT`] for this layout.
    pub layout: u32,
    /// `fe-plugin-api` version, e.g. `0.1.0`.
    pub plugin_api_version: FixedStr,
    /// `tch` version, e.g. `0.24.0`.
    pub tch_version: FixedStr,
    /// libtorch version, e.g. `2.11.0`.
    pub libtorch_version: FixedStr,
    /// libtorch flavour, e.g. `cu130` or `cpu`.
    pub libtorch_flavour: FixedStr,
    /// `_GLIBCXX_USE_CXX11_ABI`, `1` or `0`.
    pub cxx11_abi: FixedStr,
    /// The plugin crate's name.
    pub plugin_name: FixedStr,
    /// The plugin crate's version.
    pub plugin_version: FixedStr,
}

/// Size of a layout-1 [`BuildInfo`] in bytes.
pub const BUILD_INFO_SIZE: usize = std::mem::size_of::<BuildInfo>();

impl BuildInfo {
    /// The build info of code compiled right now against this crate.
    pub const fn current(plugin_name: &str, plugin_version: &str) -> Self {
        Self {
            magic: BUILD_INFO_MAGIC,
            layout: BUILD_INFO_LAYOUT,
            plugin_api_version: FixedStr::new(PLUGIN_API_VERSION),
            tch_version: FixedStr::new(TCH_VERSION),
            libtorch_version: FixedStr::new(LIBTORCH_VERSION),
            libtorch_flavour: FixedStr::new(LIBTORCH_FLAVOUR),
            cxx11_abi: FixedStr::new(CXX11_ABI),
            plugin_name: FixedStr::new(plugin_name),
            plugin_version: FixedStr::new(plugin_version),
        }
    }

    /// Parses the bytes of a [`BuildInfo`] as stored in a plugin file (little-endian).
    /// Returns `None` when the magic or the layout version is not ours.
    pub fn from_le_bytes(raw: &[u8]) -> Option<Self> {
        if raw.get(0..8)? != BUILD_INFO_MAGIC {
            return None;
        }
        let layout = u32::from_le_bytes(raw.get(8..12)?.try_into().ok()?);
        if layout != BUILD_INFO_LAYOUT {
            return None;
        }
        let field = |index: usize| {
            let start = 12 + index * (4 + FIXED_STR_CAPACITY);
            FixedStr::from_le_bytes(raw.get(start..start + 4 + FIXED_STR_CAPACITY)?)
        };
        Some(Self {
            magic: BUILD_INFO_MAGIC,
            layout,
            plugin_api_version: field(0)?,
            tch_version: field(1)?,
            libtorch_version: field(2)?,
            libtorch_flavour: field(3)?,
            cxx11_abi: field(4)?,
            plugin_name: field(5)?,
            plugin_version: field(6)?,
        })
    }

    /// Every way `self` (a plugin) differs from `host`, as `(what, plugin's, host's)`.
    /// Empty when the plugin can be loaded.
    pub fn mismatches(&self, host: &BuildInfo) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        if api_key(self.plugin_api_version.as_str()) != api_key(host.plugin_api_version.as_str()) {
            out.push((
                "fe-plugin-api",
                self.plugin_api_version.as_str().to_owned(),
                host.plugin_api_version.as_str().to_owned(),
            ));
        }
        let exact = [
            ("tch", self.tch_version, host.tch_version),
            ("libtorch", self.libtorch_version, host.libtorch_version),
            (
                "libtorch flavour",
                self.libtorch_flavour,
                host.libtorch_flavour,
            ),
            ("C++11 ABI", self.cxx11_abi, host.cxx11_abi),
        ];
        for (what, plugin, host) in exact {
            if plugin != host {
                out.push((what, plugin.as_str().to_owned(), host.as_str().to_owned()));
            }
        }
        out
    }
}

/// The part of a plugin-api version that must match: `major.minor` (for 0.x, the minor is
/// the breaking component, so this is exact either way).
pub fn api_key(version: &str) -> &str {
    match version.match_indices('.').nth(1) {
        Some((second_dot, _)) => &version[..second_dot],
        None => version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_bytes(info: &BuildInfo) -> Vec<u8> {
        // SAFETY: BuildInfo is repr(C), Copy, and made only of integers and byte arrays.
        unsafe {
            std::slice::from_raw_parts((info as *const BuildInfo).cast::<u8>(), BUILD_INFO_SIZE)
                .to_vec()
        }
    }

    #[test]
    fn round_trips_through_bytes() {
        let info = BuildInfo::current("fe-models", "1.2.3");
        let parsed = BuildInfo::from_le_bytes(&as_bytes(&info));
        assert_eq!(parsed, Some(info));
        assert_eq!(info.plugin_name.as_str(), "fe-models");
    }

    #[test]
    fn rejects_foreign_magic_and_layout() {
        let mut bytes = as_bytes(&BuildInfo::current("p", "1"));
        bytes[0] = b'X';
        assert_eq!(BuildInfo::from_le_bytes(&bytes), None);
        let mut bytes = as_bytes(&BuildInfo::current("p", "1"));
        bytes[8] = 9;
        assert_eq!(BuildInfo::from_le_bytes(&bytes), None);
        assert_eq!(BuildInfo::from_le_bytes(&[0u8; 3]), None);
    }

    #[test]
    fn patch_releases_are_compatible_minor_releases_are_not() {
        let host = BuildInfo::current("h", "1");
        let mut plugin = host;
        plugin.plugin_api_version = FixedStr::new("0.1.7");
        let host_01 = BuildInfo {
            plugin_api_version: FixedStr::new("0.1.0"),
            ..host
        };
        assert!(plugin.mismatches(&host_01).is_empty());
        plugin.plugin_api_version = FixedStr::new("0.2.0");
        let diff = plugin.mismatches(&host_01);
        assert_eq!(
            diff,
            vec![("fe-plugin-api", "0.2.0".into(), "0.1.0".into())]
        );
    }

    #[test]
    fn libtorch_mismatch_is_reported() {
        let host = BuildInfo::current("h", "1");
        let plugin = BuildInfo {
            libtorch_version: FixedStr::new("2.10.0"),
            ..host
        };
        assert_eq!(plugin.mismatches(&host).len(), 1);
        assert_eq!(plugin.mismatches(&host)[0].0, "libtorch");
    }

    #[test]
    fn fixed_str_cuts_on_char_boundary() {
        let long = "é".repeat(40); // 80 bytes
        let fixed = FixedStr::new(&long);
        assert_eq!(fixed.as_str().len(), 60);
        assert!(fixed.as_str().chars().all(|c| c == 'é'));
    }

    #[test]
    fn tch_pin_matches_the_constant() {
        // This crate's own manifest, so the test also runs where the crate is vendored.
        let manifest = include_str!("../Cargo.toml");
        assert!(
            manifest.contains(&format!("tch = \"={TCH_VERSION}\"")),
            "plugin-api's Cargo.toml must pin tch to ={TCH_VERSION}"
        );
    }
}
