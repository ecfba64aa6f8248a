//! Summary graphs plugin traces add during a run (FastEstimator's `system.add_graph`, through
//! `fe_plugin_api::host_link`). A trace calls back while the host waits on its hook, on the
//! host's thread: the graphs wait here until the hook returns and the estimator files them
//! in its `System`.

use std::cell::RefCell;
use std::sync::OnceLock;

use abi_stable::std_types::{RErr, ROk, RResult, RStr, RString};
use fe_plugin_api::host_link::{FfiHost, FfiHostRef};

use crate::system::Summary;

thread_local! {
    static PENDING: RefCell<Vec<(String, Vec<Summary>)>> = const { RefCell::new(Vec::new()) };
}

/// The functions this host offers plugins, made once per process.
pub fn ffi_host() -> FfiHostRef {
    static HOST: OnceLock<FfiHostRef> = OnceLock::new();
    *HOST.get_or_init(|| {
        use abi_stable::prefix_type::PrefixTypeTrait;
        FfiHost { add_graph }.leak_into_prefix()
    })
}

extern "C" fn add_graph(name: RStr<'_>, graphs: RStr<'_>) -> RResult<(), RString> {
    match serde_json::from_str::<Vec<Summary>>(graphs.as_str()) {
        Ok(graphs) => {
            PENDING.with(|pending| {
                pending
                    .borrow_mut()
                    .push((name.as_str().to_owned(), graphs))
            });
            ROk(())
        }
        Err(e) => RErr(RString::from(format!("not a list of graphs: {e}"))),
    }
}

/// The graphs added on this thread since the last call, in the order they were added.
pub fn take_pending() -> Vec<(String, Vec<Summary>)> {
    PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()))
}
