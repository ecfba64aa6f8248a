//! Stamps the libtorch this crate is compiled against into the crate, so every plugin
//! carries it in its build info (see src/build_info.rs).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let lib_dir = std::env::var("DEP_TCH_LIBTORCH_LIB").unwrap_or_default();
    let (version, flavour) = libtorch_version(Path::new(&lib_dir));
    // torch-sys defaults to the C++11 ABI when LIBTORCH is given; mirror that default.
    let cxx11_abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    println!("cargo:rustc-env=FE_LIBTORCH_VERSION={version}");
    println!("cargo:rustc-env=FE_LIBTORCH_FLAVOUR={flavour}");
    println!("cargo:rustc-env=FE_LIBTORCH_CXX11_ABI={}", cxx11_abi.trim());
    expose_libtorch_to_cargo_runs(Path::new(&lib_dir));
}

/// Cargo puts a build script's link-search paths on the library path of `cargo test` and
/// `cargo run` only when they lie inside the target directory. A link from OUT_DIR to
/// libtorch's lib dir therefore lets doctests (built in /tmp, so $ORIGIN rpaths cannot reach
/// libtorch) and the tests of every crate depending on this one start without LD_LIBRARY_PATH.
fn expose_libtorch_to_cargo_runs(lib_dir: &Path) {
    let Ok(out_dir) = std::env::var("OUT_DIR") else {
        return;
    };
    let link = Path::new(&out_dir).join("libtorch-lib");
    let _ = std::fs::remove_file(&link);
    #[cfg(unix)]
    if lib_dir.is_dir() && std::os::unix::fs::symlink(lib_dir, &link).is_ok() {
        println!("cargo:rustc-link-search=native={}", link.display());
    }
}

/// Reads "2.11.0+cu130" from a Python torch install (`version.py`) or a libtorch zip
/// (`build-version`), returning ("2.11.0", "cu130"). Unknown installs stamp "unknown".
fn libtorch_version(lib_dir: &Path) -> (String, String) {
    let Some(root) = lib_dir.parent() else {
        return ("unknown".into(), "unknown".into());
    };
    let build_version = root.join("build-version");
    let version_py = root.join("version.py");
    println!("cargo:rerun-if-changed={}", build_version.display());
    println!("cargo:rerun-if-changed={}", version_py.display());
    let full = if let Ok(text) = std::fs::read_to_string(&build_version) {
        text.trim().to_owned()
    } else if let Ok(text) = std::fs::read_to_string(&version_py) {
        text.lines()
            .find_map(|line| line.strip_prefix("__version__"))
            .and_then(|rest| rest.split_once('='))
            .map(|(_, value)| value.trim().trim_matches(['\'', '"']).to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    } else {
        "unknown".to_owned()
    };
    match full.split_once('+') {
        Some((version, flavour)) => (version.to_owned(), flavour.to_owned()),
        None => (full, "cpu".to_owned()),
    }
}
