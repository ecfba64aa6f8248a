//! `export_plugin!`: the one line that turns a crate into an fe-host plugin.

use crate::adapter;
use crate::build_info::BuildInfo;
use std::sync::OnceLock;

use crate::ffi::{PluginExt, PluginExtRef, PluginMod, PluginModRef};
use crate::PluginDescription;

/// Exports the plugin: its build info (read by the host before loading) and its root module
/// (everything registered with `inventory::submit!` in this crate and its dependencies).
/// Call it exactly once, at the crate root of a `cdylib` crate.
///
/// ```
/// // src/lib.rs of a plugin crate with `crate-type = ["cdylib", "rlib"]`
/// fe_plugin_api::export_plugin!();
/// ```
#[macro_export]
macro_rules! export_plugin {
    () => {
        /// What this plugin was built against; read by fe-host straight from the file.
        #[no_mangle]
        #[used]
        pub static FE_PLUGIN_BUILD_INFO: $crate::BuildInfo =
            $crate::BuildInfo::current(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));

        /// What this plugin provides beyond its root module (fe-plugin-api 0.1.1 and later).
        #[no_mangle]
        #[used]
        pub static FE_PLUGIN_EXT_V1: $crate::ffi::ExtHeader = $crate::__private::EXT_HEADER;

        /// How the host reaches this plugin's components during a run (fe-plugin-api 0.1.2
        /// and later).
        #[no_mangle]
        #[used]
        pub static FE_PLUGIN_HOST_LINK_V1: $crate::host_link::HostLinkHeader =
            $crate::__private::HOST_LINK_HEADER;

        // Names this crate in errors when its components run without the host (its own
        // tests through `fe_plugin_api::testing`), as loading names it in a real run.
        $crate::inventory::submit! {
            $crate::__private::PluginIdentity { name: env!("CARGO_PKG_NAME") }
        }

        /// abi_stable's library header (the name is abi_stable's mangled
        /// `_as.lib_header.root module loader`), pointing at this plugin's root module.
        #[no_mangle]
        #[used]
        #[allow(non_upper_case_globals)]
        pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::__private::LibHeader = {
            extern "C" fn __fe_root_module() -> $crate::__private::RootModuleResult {
                $crate::__private::call_root_module_loader(|| {
                    $crate::__private::root_module(&FE_PLUGIN_BUILD_INFO)
                })
            }
            // SAFETY: `__fe_root_module` returns the prefix of a `PluginModRef`, as required.
            unsafe {
                $crate::__private::LibHeader::from_constructor::<$crate::__private::PluginModRef>(
                    __fe_root_module,
                    $crate::__private::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

/// Implementation details of [`export_plugin!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use abi_stable::library::{
        __call_root_module_loader as call_root_module_loader, CheckTypeLayout, LibHeader,
        RootModuleResult,
    };

    pub use crate::ffi::PluginModRef;

    /// This plugin's extension module and its layout.
    pub const EXT_HEADER: crate::ffi::ExtHeader = crate::ffi::ExtHeader {
        layout: <crate::ffi::PluginExtRef as abi_stable::StableAbi>::LAYOUT,
        module: super::ext_module,
    };

    /// This plugin's host-link module and its layout.
    pub const HOST_LINK_HEADER: crate::host_link::HostLinkHeader =
        crate::host_link::HostLinkHeader {
            layout: <crate::host_link::PluginHostLinkRef as abi_stable::StableAbi>::LAYOUT,
            module: super::host_link_module,
        };

    /// The crate that called `export_plugin!`, for errors outside the host.
    pub struct PluginIdentity {
        /// Its package name.
        pub name: &'static str,
    }

    inventory::collect!(PluginIdentity);

    /// Builds the root module of the plugin whose build info is `info`.
    pub fn root_module(info: &'static crate::BuildInfo) -> PluginModRef {
        super::root_module(info)
    }
}

fn root_module(info: &'static BuildInfo) -> PluginModRef {
    adapter::init_plugin(info);
    use abi_stable::prefix_type::PrefixTypeTrait;
    PluginMod {
        describe,
        create_tensor_op: adapter::create_tensor_op,
        create_numpy_op: adapter::create_numpy_op,
        create_slicer: adapter::create_slicer,
        create_trace: adapter::create_trace,
        create_model: adapter::create_model,
        create_dataset: adapter::create_dataset,
    }
    .leak_into_prefix()
}

extern "C" fn ext_module() -> PluginExtRef {
    static MODULE: OnceLock<PluginExtRef> = OnceLock::new();
    *MODULE.get_or_init(|| {
        use abi_stable::prefix_type::PrefixTypeTrait;
        PluginExt {
            set_run_info: adapter::set_run_info,
            describe_fields: adapter::describe_fields,
        }
        .leak_into_prefix()
    })
}

extern "C" fn host_link_module() -> crate::host_link::PluginHostLinkRef {
    static MODULE: OnceLock<crate::host_link::PluginHostLinkRef> = OnceLock::new();
    *MODULE.get_or_init(|| {
        use abi_stable::prefix_type::PrefixTypeTrait;
        crate::host_link::PluginHostLink {
            set_host: crate::host_link::set_host_ffi,
        }
        .leak_into_prefix()
    })
}

extern "C" fn describe() -> PluginDescription {
    adapter::describe_registrations(adapter::plugin_name(), adapter::plugin_version())
}
