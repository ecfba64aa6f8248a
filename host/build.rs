//! Links libtorch the way a GPU machine needs it.
//!
//! Nothing in fe-host calls into libtorch_cuda directly, so with the default `--as-needed` the
//! linker drops it and CUDA silently disappears at run time (libtorch then reports no CUDA
//! device even on a GPU machine). We link it with `--no-as-needed`, and add an absolute rpath
//! to the libtorch we built against so the binary runs without LD_LIBRARY_PATH. Before it
//! comes the installed layout's `$ORIGIN/../lib/fe-host/torch/lib` (scripts/install.sh copies
//! libtorch there), so an installed fe-host keeps running when the checkout is gone.
use std::path::Path;

fn main() {
    let Ok(lib_dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=torch-sys did not report its libtorch directory; no rpath added");
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../lib/fe-host/torch/lib");
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

/// The small C++ shim for libtorch features tch does not expose (csrc/shim.cpp, csrc/optim.cpp), compiled
/// against the same headers and ABI flag torch-sys uses.
fn compile_shim(lib_dir: &Path) {
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    println!("cargo:rerun-if-changed=csrc/torchscript.cpp");
    println!("cargo:rerun-if-changed=csrc/optim.cpp");
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
        .file("csrc/optim.cpp")
        .compile("fe_shim");
    compile_dist(&include, abi.trim());
    compile_nccl(lib_dir, &include, abi.trim());
}

/// The c10d shim (csrc/dist.cpp, csrc/overlap.cpp, and csrc/logs.cpp's filter of c10's log). ProcessGroupGloo.hpp declares itself only with
/// `USE_C10D_GLOO` and includes gloo's headers, which the wheel does not ship; scripts/env.sh
/// installs Debian's libgloo-dev for them (the implementation itself is inside libtorch_cpu).
fn compile_dist(include: &Path, abi: &str) {
    for file in [
        "csrc/dist.cpp",
        "csrc/dist.hpp",
        "csrc/overlap.cpp",
        "csrc/logs.cpp",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }
    if !Path::new("/usr/include/gloo/config.h").exists() {
        println!("cargo:warning=gloo headers (/usr/include/gloo) are missing: run scripts/env.sh, which installs libgloo-dev");
    }
    c10d_build(include, abi)
        .file("csrc/dist.cpp")
        .file("csrc/overlap.cpp")
        .file("csrc/logs.cpp")
        .compile("fe_dist");
}

/// A C++ build against libtorch's headers with c10d's Gloo declarations (csrc/dist.hpp includes
/// ProcessGroupGloo.hpp, which needs `USE_C10D_GLOO`).
fn c10d_build(include: &Path, abi: &str) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("USE_C10D_GLOO", None)
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"));
    build
}

/// The NCCL group (csrc/nccl.cpp), built with `USE_C10D_NCCL` when libtorch_cuda is there and
/// the headers ProcessGroupNCCL.hpp needs are in the wheel's nvidia packages: CUDA's runtime
/// (its `crt/` and CCCL's `nv/` parts come from nvidia-cuda-crt and nvidia-cuda-cccl, which
/// scripts/env.sh installs) and NCCL's. Without them it compiles to a refusal that says why.
fn compile_nccl(lib_dir: &Path, include: &Path, abi: &str) {
    println!("cargo:rerun-if-changed=csrc/nccl.cpp");
    println!("cargo::rustc-check-cfg=cfg(fe_nccl)");
    let mut build = c10d_build(include, abi);
    build.file("csrc/nccl.cpp");
    match nccl_includes(lib_dir) {
        Ok(dirs) => {
            build.define("USE_C10D_NCCL", None).includes(dirs);
            println!("cargo:rustc-cfg=fe_nccl");
            // c10::cuda::set_device.
            println!("cargo:rustc-link-lib=dylib=c10_cuda");
        }
        Err(missing) => println!("cargo:warning=building without NCCL: {missing}"),
    }
    build.compile("fe_nccl");
}

/// CUDA's and NCCL's include directories in the wheel's site-packages, or what is missing.
fn nccl_includes(lib_dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    if !lib_dir.join("libtorch_cuda.so").exists() {
        return Err("libtorch has no libtorch_cuda.so (a CPU-only build)".into());
    }
    let lib_dir =
        std::fs::canonicalize(lib_dir).map_err(|e| format!("{}: {e}", lib_dir.display()))?;
    let nvidia = lib_dir
        .ancestors()
        .nth(2)
        .map(|site| site.join("nvidia"))
        .ok_or("libtorch is not inside a Python site-packages")?;
    let cuda = std::fs::read_dir(&nvidia)
        .map_err(|e| format!("{}: {e}", nvidia.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("include")))
        .find(|dir| dir.join("cuda_runtime.h").exists())
        .ok_or_else(|| format!("no CUDA runtime headers under {}", nvidia.display()))?;
    let nccl = nvidia.join("nccl/include");
    for needed in [
        cuda.join("crt/host_config.h"),
        cuda.join("nv/target"),
        nccl.join("nccl.h"),
    ] {
        println!("cargo:rerun-if-changed={}", needed.display());
        if !needed.exists() {
            return Err(format!(
                "{} is missing (scripts/env.sh installs it)",
                needed.display()
            ));
        }
    }
    Ok(vec![cuda, nccl])
}
