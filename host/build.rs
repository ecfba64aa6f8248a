//! Links libtorch the way a GPU machine needs it.
//!
//! Nothing in fe-host calls into libtorch_cuda directly, so with the default `--as-needed` the
//! linker drops it and CUDA silently disappears at run time (libtorch then reports no CUDA
//! device even on a GPU machine). We link it with `--no-as-needed`, and add an absolute rpath
//! to the libtorch we built against so the binary runs without LD_LIBRARY_PATH.
use std::path::Path;

fn main() {
    let Ok(lib_dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=torch-sys did not report its libtorch directory; no rpath added");
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    let cuda = Path::new(&lib_dir).join("libtorch_cuda.so");
    println!("cargo:rerun-if-changed={}", cuda.display());
    println!("cargo::rustc-check-cfg=cfg(fe_links_torch_cuda)");
    if cuda.exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
        println!("cargo:rustc-cfg=fe_links_torch_cuda");
    }
    println!("cargo:rustc-env=FE_LIBTORCH_LIB={lib_dir}");
    compile_shim(Path::new(&lib_dir));
}

/// The small C++ shim for libtorch features tch does not expose (csrc/shim.cpp), compiled
/// against the same headers and ABI flag torch-sys uses.
fn compile_shim(lib_dir: &Path) {
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    println!("cargo:rerun-if-changed=csrc/torchscript.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let include = lib_dir
        .parent()
        .map(|root| root.join("include"))
        .unwrap_or_default();
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={}", abi.trim()))
        .file("csrc/shim.cpp")
        .file("csrc/torchscript.cpp")
        .compile("fe_shim");
    compile_dist(&include, abi.trim());
}

/// The c10d shim (csrc/dist.cpp, csrc/overlap.cpp). ProcessGroupGloo.hpp declares itself only with
/// `USE_C10D_GLOO` and includes gloo's headers, which the wheel does not ship; scripts/env.sh
/// installs Debian's libgloo-dev for them (the implementation itself is inside libtorch_cpu).
fn compile_dist(include: &Path, abi: &str) {
    for file in ["csrc/dist.cpp", "csrc/dist.hpp", "csrc/overlap.cpp"] {
        println!("cargo:rerun-if-changed={file}");
    }
    if !Path::new("/usr/include/gloo/config.h").exists() {
        println!("cargo:warning=gloo headers (/usr/include/gloo) are missing: run scripts/env.sh, which installs libgloo-dev");
    }
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("USE_C10D_GLOO", None)
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .file("csrc/dist.cpp")
        .file("csrc/overlap.cpp")
        .compile("fe_dist");
}
