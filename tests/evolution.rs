//! The evolution rules of `plugin-api/README.md` ("Compatibility and evolution"), checked
//! against abi_stable's real layout check rather than read from its source.
//!
//! Each case is a copy of fe-plugin-api under its real package name and version (so only the
//! layout can differ) with one kind of change applied, a plugin built against that copy, and a
//! probe host built against it that loads a plugin the way fe-host's loader does
//! (`host/src/plugins/load.rs`: the root module through abi_stable, then the layout of each
//! extension module it finds). Both directions are run: a plugin built against today's API in
//! the changed host (the probe), and the changed API's plugin in today's host (fe-host).
//!
//! The five kinds of change made the documented way (a new module under a new symbol) load
//! both ways; the same kinds made by growing an existing type lock older plugins out of newer
//! hosts, which is why the rules forbid them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::out_of_tree::{api_copy_patched, external_plugin};
use crate::util::{build_out_of_tree, lenet_manifest, root, run, TempDir};

/// Loads the plugin named by its argument as fe-host does and prints what it found, one line
/// per check; exits 1 when the root module is refused. `// NEW` is where a case adds its own.
const PROBE_HOST: &str = r#"use fe_plugin_api::abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use fe_plugin_api::abi_stable::library::{lib_header_from_path, RawLibrary};
use fe_plugin_api::abi_stable::std_types::{RSlice, RString};
use fe_plugin_api::abi_stable::StableAbi;
use fe_plugin_api::ffi::{ExtHeader, PluginExtRef, PluginModRef, PLUGIN_EXT_SYMBOL};
use fe_plugin_api::host_link::{HostLinkHeader, PluginHostLinkRef, PLUGIN_HOST_LINK_SYMBOL};
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, StepContext, TensorRef};

fn first_line(error: impl std::fmt::Display) -> String {
    let text = error.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let head = lines.next().unwrap_or_default().to_owned();
    let errors: Vec<&str> = lines.filter(|l| l.starts_with("Error:")).collect();
    format!("{head} {}", errors.join(" "))
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: probe-host PLUGIN");
    let module = match lib_header_from_path(path.as_ref())
        .and_then(|header| header.init_root_module::<PluginModRef>())
    {
        Ok(module) => module,
        Err(error) => {
            println!("root module: refused: {}", first_line(error));
            std::process::exit(1);
        }
    };
    println!("root module: loaded");
    let library = RawLibrary::load_at(path.as_ref()).expect("library");
    // SAFETY: the symbols are exported by export_plugin! with these types.
    match unsafe { library.get::<&'static ExtHeader>(PLUGIN_EXT_SYMBOL) } {
        Err(_) => println!("ext v1: absent"),
        Ok(header) => match check_layout_compatibility(<PluginExtRef as StableAbi>::LAYOUT, header.layout) {
            Ok(()) => println!("ext v1: loaded"),
            Err(e) => println!("ext v1: refused: {}", first_line(e)),
        },
    }
    match unsafe { library.get::<&'static HostLinkHeader>(PLUGIN_HOST_LINK_SYMBOL) } {
        Err(_) => println!("host link: absent"),
        Ok(header) => match check_layout_compatibility(<PluginHostLinkRef as StableAbi>::LAYOUT, header.layout) {
            Ok(()) => println!("host link: loaded"),
            Err(e) => println!("host link: refused: {}", first_line(e)),
        },
    }
    // NEW
    for component in module.describe()().components.iter() {
        if component.kind.as_str() != "tensor-op" {
            continue;
        }
        let config = if component.name.as_str() == "Scale" { "factor = 2.0" } else { "" };
        let keys = [RString::from("x")];
        let ctx = CreateContext {
            inputs: RSlice::from_slice(&keys),
            outputs: RSlice::from_slice(&keys),
            ..CreateContext::detached("probe-host")
        };
        let mut op = module.create_tensor_op()(component.name.as_str().into(), config.into(), &ctx).unwrap();
        let x = Tensor::from_slice(&[1.5f32]);
        let inputs = [TensorRef::from(&x)];
        let out = op.forward(RSlice::from_slice(&inputs), &StepContext::for_tests()).unwrap();
        println!("{}(1.5) = {}", component.name, out[0].view().double_value(&[0]));
    }
}
"#;

/// What the additions case's probe host does with the new module: a plugin without it
/// predates it and gets the defaults; one with it is checked, then every addition is used.
const PROBE_HOST_ADDITIONS: &str = r#"
    use fe_plugin_api::abi_stable::prefix_type::PrefixTypeTrait;
    use fe_plugin_api::ext_v2::{ExtV2Header, FfiHostV2, PluginExtV2Ref, PLUGIN_EXT_V2_SYMBOL};
    extern "C" fn log_line(line: fe_plugin_api::abi_stable::std_types::RStr<'_>) {
        println!("host service log_line: {line}");
    }
    match unsafe { library.get::<&'static ExtV2Header>(PLUGIN_EXT_V2_SYMBOL) } {
        Err(_) => println!("ext v2: absent, defaults: no summaries, no licence, no widgets, mode Train"),
        Ok(header) => match check_layout_compatibility(<PluginExtV2Ref as StableAbi>::LAYOUT, header.layout) {
            Err(e) => println!("ext v2: refused: {}", first_line(e)),
            Ok(()) => {
                let ext = (header.module)();
                println!("ext v2: loaded");
                println!("new method: {}", ext.tensor_op_summary()("Identity".into()));
                println!("new field: licence {}", ext.licence()());
                ext.set_host_v2()(FfiHostV2 { log_line }.leak_into_prefix());
                for name in ext.widgets()().iter() {
                    let mut widget = ext.create_widget()(name.as_rstr()).unwrap();
                    println!("new kind: widget {name} spun 3 turns: {}", widget.spin(3));
                }
                println!("new variant: mode {:?}", ext.preferred_mode()());
            }
        },
    }
"#;

/// fe-plugin-api 0.1.next's additions, the way the rules make them: one new module, exported
/// under a new symbol, holding a new trait method (a function taking the component's name), a
/// new field, a new host service, a new component kind and a new enum with the extra variant.
const EXT_V2: &str = r#"//! (evolution test) additions made the way the evolution rules say.
#![allow(non_local_definitions)]
use abi_stable::std_types::{RBox, RResult, RStr, RString, RVec};
use abi_stable::type_layout::TypeLayout;
use abi_stable::{sabi_trait, StableAbi};

/// Where a plugin exports its [`ExtV2Header`].
pub const PLUGIN_EXT_V2_SYMBOL: &[u8] = b"FE_PLUGIN_EXT_V2\0";

/// `Mode` with a new variant, as a new enum.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub enum ModeV2 {
    /// As Mode::Train.
    Train,
    /// As Mode::Eval.
    Eval,
    /// As Mode::Test.
    Test,
    /// As Mode::Infer.
    Infer,
    /// The new one.
    Calibrate,
}

/// A new host service, in a new type.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = FfiHostV2Ref)))]
#[sabi(missing_field(option))]
pub struct FfiHostV2 {
    /// Writes a line to the run's log.
    #[sabi(last_prefix_field)]
    pub log_line: extern "C" fn(RStr<'_>),
}

/// A new component kind.
#[sabi_trait]
pub trait FfiWidget: Send {
    /// Turns `turns` times; returns the total so far.
    #[sabi(last_prefix_field)]
    fn spin(&mut self, turns: u32) -> u32;
}

/// A boxed widget.
pub type WidgetBox = FfiWidget_TO<'static, RBox<()>>;

/// The new module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginExtV2Ref)))]
#[sabi(missing_field(option))]
pub struct PluginExtV2 {
    /// A new method of tensor ops: the component's name in, its summary out.
    pub tensor_op_summary: extern "C" fn(RStr<'_>) -> RString,
    /// A new field of the plugin's description.
    pub licence: extern "C" fn() -> RString,
    /// Hands the plugin the new host service.
    pub set_host_v2: extern "C" fn(FfiHostV2Ref),
    /// The plugin's components of the new kind.
    pub widgets: extern "C" fn() -> RVec<RString>,
    /// Creates one.
    pub create_widget: extern "C" fn(RStr<'_>) -> RResult<WidgetBox, RString>,
    /// The new enum.
    #[sabi(last_prefix_field)]
    pub preferred_mode: extern "C" fn() -> ModeV2,
}

/// What a plugin exports under [`PLUGIN_EXT_V2_SYMBOL`]. Frozen: two pointers.
#[repr(C)]
pub struct ExtV2Header {
    /// abi_stable's layout of the plugin's `PluginExtV2Ref`.
    pub layout: &'static TypeLayout,
    /// Returns the plugin's module.
    pub module: extern "C" fn() -> PluginExtV2Ref,
}
"#;

/// The additions case's plugin exports the new module beside `export_plugin!`'s.
const PLUGIN_ADDITIONS: &str = r#"
use fe_plugin_api::abi_stable::prefix_type::PrefixTypeTrait;
use fe_plugin_api::abi_stable::sabi_trait::TD_Opaque;
use fe_plugin_api::abi_stable::std_types::{RResult, RStr, RString, RVec};
use fe_plugin_api::abi_stable::StableAbi;
use fe_plugin_api::ext_v2::*;

struct Spinner(u32);
impl FfiWidget for Spinner {
    fn spin(&mut self, turns: u32) -> u32 {
        self.0 += turns;
        self.0
    }
}
extern "C" fn tensor_op_summary(name: RStr<'_>) -> RString {
    format!("{name} passes its inputs through").into()
}
extern "C" fn licence() -> RString {
    "MIT".into()
}
extern "C" fn set_host_v2(host: FfiHostV2Ref) {
    host.log_line()("hello from the plugin".into());
}
extern "C" fn widgets() -> RVec<RString> {
    vec![RString::from("Spinner")].into()
}
extern "C" fn create_widget(_: RStr<'_>) -> RResult<WidgetBox, RString> {
    RResult::ROk(FfiWidget_TO::from_value(Spinner(0), TD_Opaque))
}
extern "C" fn preferred_mode() -> ModeV2 {
    ModeV2::Calibrate
}
extern "C" fn ext_v2() -> PluginExtV2Ref {
    PluginExtV2 { tensor_op_summary, licence, set_host_v2, widgets, create_widget, preferred_mode }
        .leak_into_prefix()
}
#[no_mangle]
pub static FE_PLUGIN_EXT_V2: ExtV2Header =
    ExtV2Header { layout: <PluginExtV2Ref as StableAbi>::LAYOUT, module: ext_v2 };
"#;

/// `(file, from, to)` replacements applied to a copy of fe-plugin-api's sources.
type Patch = (&'static str, &'static str, &'static str);

/// One kind of change: what it does to the API, and what its plugin adds to the Identity op.
struct Change {
    tag: &'static str,
    patches: &'static [Patch],
    new_files: &'static [(&'static str, &'static str)],
    host_adds: &'static str,
    plugin_adds: &'static str,
}

const ADDITIONS: Change = Change {
    tag: "additions",
    patches: &[(
        "lib.rs",
        "\npub mod ffi;\n",
        "\npub mod ffi;\n/// (evolution test) the additions.\npub mod ext_v2;\n",
    )],
    new_files: &[("src/ext_v2.rs", EXT_V2)],
    host_adds: PROBE_HOST_ADDITIONS,
    plugin_adds: PLUGIN_ADDITIONS,
};

/// A defaulted method appended to a component's `#[sabi_trait]` (its vtable is a prefix type).
const TRAIT_METHOD: Change = Change {
    tag: "grown-trait",
    patches: &[(
        "ffi.rs",
        "    #[sabi(last_prefix_field)]\n    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError>;\n}\n\n/// A [`NumpyOp`]",
        "    #[sabi(last_prefix_field)]\n    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError>;\n    /// (evolution test) a new method with a default body.\n    fn summary(&self) -> RString {\n        RString::new()\n    }\n}\n\n/// A [`NumpyOp`]",
    )],
    new_files: &[],
    host_adds: "",
    plugin_adds: "",
};

/// A new service appended to `FfiHost`.
const HOST_SERVICE: Change = Change {
    tag: "grown-host",
    patches: &[(
        "host_link.rs",
        "    pub add_graph: extern \"C\" fn(RStr<'_>, RStr<'_>) -> RResult<(), RString>,\n}",
        "    pub add_graph: extern \"C\" fn(RStr<'_>, RStr<'_>) -> RResult<(), RString>,\n    /// (evolution test) a new service.\n    pub log_line: extern \"C\" fn(RStr<'_>),\n}",
    )],
    new_files: &[],
    host_adds: "",
    plugin_adds: "",
};

/// A new variant of an exhaustive enum reached from the root module.
const ENUM_VARIANT: Change = Change {
    tag: "grown-enum",
    patches: &[(
        "error.rs",
        "    Unsupported = 3,\n}",
        "    Unsupported = 3,\n    /// (evolution test) a new variant.\n    Extra = 4,\n}",
    )],
    new_files: &[],
    host_adds: "",
    plugin_adds: "",
};

/// Builds `change`'s API copy, its plugin and its probe host; returns (plugin, probe host).
fn built(change: &Change) -> (PathBuf, PathBuf) {
    let api = format!("{}-api", change.tag);
    let plugin = format!("{}-plugin", change.tag);
    let host = format!("{}-host", change.tag);
    let mut api_files = api_copy_patched(
        "fe-plugin-api",
        fe_plugin_api::build_info::PLUGIN_API_VERSION,
        change.patches,
    );
    api_files.extend(change.new_files.iter().map(|(f, t)| (*f, t.to_string())));
    let depends = format!("[dependencies]\nfe-plugin-api = {{ path = \"../{api}\" }}\n");
    let plugin_cargo = format!(
        "[package]\nname = \"{plugin}\"\nversion = \"0.9.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n{depends}"
    );
    let plugin_lib = format!("{}{}", crate::out_of_tree::IDENTITY_LIB, change.plugin_adds);
    let host_cargo = format!(
        "[package]\nname = \"{host}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n{depends}"
    );
    let dir = build_out_of_tree(
        &format!("evolution-{}", change.tag),
        &[
            (api.as_str(), api_files),
            (
                plugin.as_str(),
                vec![("Cargo.toml", plugin_cargo), ("src/lib.rs", plugin_lib)],
            ),
            (
                host.as_str(),
                vec![
                    ("Cargo.toml", host_cargo),
                    (
                        "src/main.rs",
                        PROBE_HOST.replace("    // NEW\n", change.host_adds),
                    ),
                ],
            ),
        ],
    );
    (
        dir.join(format!("lib{}.so", plugin.replace('-', "_"))),
        dir.join(host),
    )
}

fn built_once(change: &'static Change) -> &'static (PathBuf, PathBuf) {
    static BUILT: [OnceLock<(PathBuf, PathBuf)>; 4] = [const { OnceLock::new() }; 4];
    let slot = [
        ADDITIONS.tag,
        TRAIT_METHOD.tag,
        HOST_SERVICE.tag,
        ENUM_VARIANT.tag,
    ]
    .iter()
    .position(|t| *t == change.tag)
    .expect("a known change");
    BUILT[slot].get_or_init(|| built(change))
}

/// What the probe host (a host with `change`'s API) prints for today's plugin.
fn old_plugin_in_new_host(change: &'static Change) -> (bool, String) {
    let (_, host) = built_once(change);
    let out = Command::new(host)
        .arg(external_plugin())
        .env("LD_LIBRARY_PATH", root().join(".libtorch/lib"))
        .output()
        .expect("probe host");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.success(),
        text + &String::from_utf8_lossy(&out.stderr),
    )
}

/// fe-host's `plugins list` for `change`'s plugin, alone in a directory: (exit code, stderr).
fn new_plugin_in_old_host(change: &'static Change) -> (i32, String, TempDir) {
    let (plugin, _) = built_once(change);
    let dir = TempDir::new(&format!("evolution-{}", change.tag));
    std::fs::copy(plugin, dir.path().join(plugin.file_name().expect("name"))).expect("copy");
    let out = run(&[
        "plugins",
        "list",
        "--plugin-dir",
        &dir.path().to_string_lossy(),
    ]);
    (out.code, out.stdout + &out.stderr, dir)
}

#[test]
fn additions_made_the_documented_way_load_in_both_directions_and_are_used_only_when_present() {
    // Today's plugin in the newer host: everything loads, the new module is absent, and the
    // host falls back to its defaults.
    let (ok, out) = old_plugin_in_new_host(&ADDITIONS);
    assert!(ok, "{out}");
    for line in [
        "root module: loaded",
        "ext v1: loaded",
        "host link: loaded",
        "ext v2: absent, defaults",
        "Scale(1.5) = 3",
    ] {
        assert_contains!(out, line);
    }
    // The newer plugin in the newer host: each of the five additions works.
    let (plugin, host) = built_once(&ADDITIONS);
    let out = Command::new(host)
        .arg(plugin)
        .env("LD_LIBRARY_PATH", root().join(".libtorch/lib"))
        .output()
        .expect("probe host");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in [
        "ext v2: loaded",
        "new method: Identity passes its inputs through",
        "new field: licence MIT",
        "host service log_line: hello from the plugin",
        "new kind: widget Spinner spun 3 turns: 3",
        "new variant: mode Calibrate",
        "Identity(1.5) = 1.5",
    ] {
        assert_contains!(out, line);
    }
    // The newer plugin in today's fe-host: listed, and its op runs in a training run (the
    // host never looks for the new symbol).
    let (code, out, dir) = new_plugin_in_old_host(&ADDITIONS);
    assert_eq!(code, 0, "{out}");
    assert_contains!(out, "additions-plugin 0.9.0");
    let extra = format!("\n[plugins]\npaths = [\"{}\"]\n", dir.path().display());
    let text = lenet_manifest(1, &extra)
        .replace("[run]\n", "[run]\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1\n")
        .replace(
            "[[network.ops]]\nop = \"CrossEntropy\"",
            "[[network.ops]]\nop = \"Identity\"\ninputs = \"y_pred\"\noutputs = \"y_pred\"\n\n[[network.ops]]\nop = \"CrossEntropy\"",
        );
    let manifest = dir.write("m.toml", &text);
    let out = run(&["run", &manifest.to_string_lossy()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_contains!(out.stdout, "fe-host finish: step: 2;");
}

#[test]
fn a_defaulted_trait_method_appended_to_a_component_locks_older_plugins_out() {
    let (ok, out) = old_plugin_in_new_host(&TRAIT_METHOD);
    assert!(
        !ok,
        "today's plugin loaded into a host whose TensorOp grew:\n{out}"
    );
    assert_contains!(
        out,
        "root module: refused: Compared <this>: Error:too many fields"
    );
    // The other way is accepted: a plugin may have more than the host.
    let (code, out, _dir) = new_plugin_in_old_host(&TRAIT_METHOD);
    assert_eq!(code, 0, "{out}");
    assert_contains!(out, "grown-trait-plugin 0.9.0");
}

#[test]
fn a_service_appended_to_ffi_host_locks_older_plugins_out() {
    let (ok, out) = old_plugin_in_new_host(&HOST_SERVICE);
    // The root module does not reach FfiHost: the host link's own check refuses it.
    assert!(ok, "{out}");
    assert_contains!(out, "root module: loaded");
    assert_contains!(
        out,
        "host link: refused: Compared <this>: Error:too many fields"
    );
    let (code, out, _dir) = new_plugin_in_old_host(&HOST_SERVICE);
    assert_eq!(code, 0, "{out}");
    assert_contains!(out, "grown-host-plugin 0.9.0");
}

#[test]
fn a_variant_added_to_an_exhaustive_enum_is_refused_both_ways() {
    let (ok, out) = old_plugin_in_new_host(&ENUM_VARIANT);
    assert!(!ok, "{out}");
    assert_contains!(
        out,
        "root module: refused: Compared <this>: Error:too many variants"
    );
    let (code, out, _dir) = new_plugin_in_old_host(&ENUM_VARIANT);
    assert_eq!(code, 3, "{out}");
    assert_contains!(out, "ABI layout mismatch");
}
