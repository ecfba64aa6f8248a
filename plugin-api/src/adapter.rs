//! Wraps plain Rust components into ABI-stable objects. Every call that crosses the boundary
//! goes through [`guard`]: panics are caught (and a libtorch panic cut to its first line), and
//! errors are stamped with plugin, component and method.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RSlice, RStr, RString, RVec};
use tch::Tensor;

use crate::build_info::BuildInfo;
use crate::context::{CreateContext, StepContext};
use crate::error::{panic_message, Error, PluginError};
use crate::ffi::*;
use crate::fields::{ComponentFields, FieldInfo};
use crate::kinds::{Dataset, Metric, Model, NumpyOp, Slicer, TensorOp};
use crate::registry::{find_registration, registrations, ComponentKind, Factory, TraceImpl};
use crate::run::FfiRunInfoRef;
use crate::state::{ComponentState, State};
use crate::tensor::{NamedTensor, RTensor, TensorRef};
use crate::trace_data::{TraceContext, TraceData, TraceOutput, Value, ValueRef};
use crate::Result;

thread_local! {
    /// Where the last panic on this thread happened, recorded by the plugin's panic hook.
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

static PLUGIN: OnceLock<&'static BuildInfo> = OnceLock::new();

/// The name errors carry for this binary: the plugin crate's name once the host loaded it
/// through `export_plugin!`; in a plugin's own test binary (no host) the crate that calls
/// `export_plugin!`; else `host`.
pub fn plugin_name() -> &'static str {
    if let Some(info) = PLUGIN.get() {
        return info.plugin_name.as_str();
    }
    let mut exporters = inventory::iter::<crate::export::__private::PluginIdentity>.into_iter();
    match (exporters.next(), exporters.next()) {
        (Some(only), None) => only.name,
        _ => "host",
    }
}

/// The plugin crate's version once loaded, else `""`.
pub fn plugin_version() -> &'static str {
    PLUGIN
        .get()
        .map(|info| info.plugin_version.as_str())
        .unwrap_or("")
}

/// Called once when the host loads the plugin: records its name and replaces this binary's
/// panic hook (each cdylib has its own copy of std) with one that prints nothing and keeps
/// the location, so a caught panic never writes a backtrace to the user's terminal.
pub(crate) fn init_plugin(info: &'static BuildInfo) {
    if PLUGIN.set(info).is_ok() {
        install_quiet_panic_hook();
    }
}

/// Replaces the panic hook with one that prints nothing and records where the panic was, for
/// [`guard`] to report. Hosts and test harnesses that turn panics into errors call this too.
pub fn install_quiet_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC_LOCATION.with(|slot| *slot.borrow_mut() = Some(location));
    }));
}

/// Runs `f`, turning an error or a panic into a [`PluginError`] naming the component.
pub fn guard<T>(
    component: &str,
    method: &str,
    f: impl FnOnce() -> Result<T>,
) -> RResult<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => ROk(value),
        Ok(Err(error)) => RErr(error.into_plugin_error(plugin_name(), component, method)),
        Err(payload) => {
            let mut message = panic_message(payload.as_ref());
            let location = PANIC_LOCATION.with(|slot| slot.borrow_mut().take());
            // A libtorch failure's location is inside tch's generated code: noise for users.
            if let Some(location) = location.filter(|l| !l.is_empty() && !l.contains("/tch-")) {
                message = format!("{message} (at {location})");
            }
            RErr(Error::panicked(message).into_plugin_error(plugin_name(), component, method))
        }
    }
}

fn with_tensors<T>(inputs: RSlice<'_, TensorRef<'_>>, f: impl FnOnce(&[&Tensor]) -> T) -> T {
    let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
    let refs: Vec<&Tensor> = views.iter().map(|v| &**v).collect();
    f(&refs)
}

fn owned(outputs: Vec<Tensor>) -> RVec<RTensor> {
    outputs.into_iter().map(RTensor::new).collect()
}

struct TensorOpAdapter {
    name: String,
    inner: Box<dyn TensorOp>,
}

impl FfiTensorOp for TensorOpAdapter {
    fn forward(
        &mut self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "forward", || {
            with_tensors(inputs, |tensors| inner.forward(tensors, ctx)).map(owned)
        })
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        guard(&self.name, "state", || {
            self.inner.state().map(State::into_ffi)
        })
    }

    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "load_state", || {
            inner.load_state(State::from_ffi(state))
        })
    }
}

struct NumpyOpAdapter {
    name: String,
    inner: Box<dyn NumpyOp>,
}

impl FfiNumpyOp for NumpyOpAdapter {
    fn forward(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        guard(&self.name, "forward", || {
            with_tensors(inputs, |tensors| self.inner.forward(tensors, ctx)).map(owned)
        })
    }

    fn forward_batch(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        guard(&self.name, "forward_batch", || {
            with_tensors(inputs, |tensors| self.inner.forward_batch(tensors, ctx)).map(owned)
        })
    }

    fn batchable(&self) -> bool {
        matches!(
            guard(&self.name, "batchable", || Ok(self.inner.batchable())),
            ROk(true)
        )
    }

    fn is_filter(&self) -> bool {
        matches!(
            guard(&self.name, "is_filter", || Ok(self.inner.is_filter())),
            ROk(true)
        )
    }

    fn remove(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<bool, PluginError> {
        guard(&self.name, "remove", || {
            with_tensors(inputs, |tensors| self.inner.remove(tensors, ctx))
        })
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        guard(&self.name, "state", || {
            self.inner.state().map(State::into_ffi)
        })
    }

    fn load_state(&self, state: ComponentState) -> RResult<(), PluginError> {
        guard(&self.name, "load_state", || {
            self.inner.load_state(State::from_ffi(state))
        })
    }
}

struct SlicerAdapter {
    name: String,
    inner: Box<dyn Slicer>,
}

impl FfiSlicer for SlicerAdapter {
    fn slice(
        &mut self,
        key: RStr<'_>,
        batch: TensorRef<'_>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "slice", || {
            inner.slice(key.as_str(), &batch.view()).map(owned)
        })
    }

    fn unslice(
        &mut self,
        key: RStr<'_>,
        slices: RSlice<'_, TensorRef<'_>>,
    ) -> RResult<RTensor, PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "unslice", || {
            with_tensors(slices, |tensors| inner.unslice(key.as_str(), tensors)).map(RTensor::new)
        })
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        guard(&self.name, "state", || {
            self.inner.state().map(State::into_ffi)
        })
    }

    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "load_state", || {
            inner.load_state(State::from_ffi(state))
        })
    }
}

struct TraceAdapter {
    name: String,
    inner: TraceImpl,
}

impl TraceAdapter {
    fn run_hook(
        &mut self,
        hook: TraceHook,
        ctx: &TraceContext<'_>,
        data: &mut TraceData<'_>,
    ) -> Result<()> {
        match &mut self.inner {
            TraceImpl::Trace(trace) => match hook {
                TraceHook::Begin => trace.on_begin(ctx, data),
                TraceHook::EpochBegin => trace.on_epoch_begin(ctx, data),
                TraceHook::BatchBegin => trace.on_batch_begin(ctx, data),
                TraceHook::BatchEnd => trace.on_batch_end(ctx, data),
                TraceHook::EpochEnd => trace.on_epoch_end(ctx, data),
                TraceHook::End => trace.on_end(ctx, data),
            },
            TraceImpl::Metric(metric) => metric_hook(metric.as_mut(), hook, ctx, data),
        }
    }
}

/// A metric as a trace: reset per epoch, accumulate per batch, reduce at epoch end and write
/// one value per output key (the keys come from the host as the trace's outputs).
fn metric_hook(
    metric: &mut dyn Metric,
    hook: TraceHook,
    ctx: &TraceContext<'_>,
    data: &mut TraceData<'_>,
) -> Result<()> {
    match hook {
        TraceHook::EpochBegin => metric.reset(),
        TraceHook::EpochEnd => metric.on_epoch_end(ctx)?,
        TraceHook::BatchEnd => {
            let inputs: Vec<_> = (0..data.keys().count())
                .map(|i| data.tensor(i))
                .collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = inputs.iter().map(|v| &**v).collect();
            metric.accumulate(&refs)?;
        }
        _ => {}
    }
    Ok(())
}

impl FfiTrace for TraceAdapter {
    fn hook(
        &mut self,
        hook: TraceHook,
        ctx: &TraceContext<'_>,
        keys: RSlice<'_, RString>,
        values: RSlice<'_, ValueRef<'_>>,
    ) -> RResult<TraceOutput, PluginError> {
        let name = self.name.clone();
        guard(&name, hook.method(), || {
            let mut data = TraceData::new(keys, values);
            self.run_hook(hook, ctx, &mut data)?;
            Ok(data.into_output())
        })
    }

    fn event(&mut self, event: TrialEvent, dir: RStr<'_>) -> RResult<(), PluginError> {
        let method = match event {
            TrialEvent::CheckpointEnd => "on_checkpoint_end",
            TrialEvent::CheckpointLoad => "on_checkpoint_load",
            TrialEvent::TrialClose => "on_trial_close",
        };
        let TraceImpl::Trace(trace) = &mut self.inner else {
            return ROk(());
        };
        guard(&self.name, method, || match event {
            TrialEvent::CheckpointEnd => trace.on_checkpoint_end(Path::new(dir.as_str())),
            TrialEvent::CheckpointLoad => trace.on_checkpoint_load(Path::new(dir.as_str())),
            TrialEvent::TrialClose => trace.on_trial_close(),
        })
    }

    fn metric_partial(&self) -> RResult<ROption<ComponentState>, PluginError> {
        guard(&self.name, "partial", || match &self.inner {
            TraceImpl::Metric(metric) => Ok(ROption::RSome(metric.partial()?.into_ffi())),
            TraceImpl::Trace(_) => Ok(ROption::RNone),
        })
    }

    fn metric_reduce(&self, partials: RVec<ComponentState>) -> RResult<RVec<Value>, PluginError> {
        guard(&self.name, "reduce", || match &self.inner {
            TraceImpl::Metric(metric) => {
                // A partial carried over by a checkpoint may hold the kept state too; an
                // empty one was never carried before kept states existed, so it is left out.
                let mut bare = Vec::with_capacity(partials.len());
                for partial in partials {
                    let (partial, kept) = crate::metric_state::unwrap(State::from_ffi(partial))?;
                    if !partial.is_empty() || kept.is_empty() {
                        bare.push(partial);
                    }
                }
                Ok(metric.reduce(&bare)?.into_iter().collect())
            }
            TraceImpl::Trace(_) => Err(Error::unsupported("not a metric")),
        })
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        guard(&self.name, "state", || match &self.inner {
            TraceImpl::Trace(trace) => trace.state().map(State::into_ffi),
            TraceImpl::Metric(metric) => {
                crate::metric_state::wrap(metric.partial()?, metric.state()?).map(State::into_ffi)
            }
        })
    }

    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "load_state", || match inner {
            TraceImpl::Trace(trace) => trace.load_state(State::from_ffi(state)),
            // A metric restarts from its reset state: the host keeps the partial state it
            // saved and reduces it together with what the metric accumulates from now on,
            // like the partials of several workers. What the metric keeps across epochs
            // comes back to it.
            TraceImpl::Metric(metric) => {
                metric.reset();
                let (_, kept) = crate::metric_state::unwrap(State::from_ffi(state))?;
                if kept.is_empty() {
                    Ok(())
                } else {
                    metric.load_state(kept)
                }
            }
        })
    }
}

struct ModelAdapter {
    name: String,
    inner: Box<dyn Model>,
}

impl FfiModel for ModelAdapter {
    fn forward(
        &mut self,
        inputs: RSlice<'_, TensorRef<'_>>,
        train: bool,
        layers: RSlice<'_, RStr<'_>>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "forward", || {
            with_tensors(inputs, |tensors| {
                if layers.is_empty() {
                    return inner.forward(tensors, train).map(owned);
                }
                let names: Vec<&str> = layers.iter().map(|l| l.as_str()).collect();
                let (mut outputs, taps) = inner.forward_with_layers(tensors, train, &names)?;
                outputs.extend(taps);
                Ok(owned(outputs))
            })
        })
    }

    fn layers(&self) -> RResult<RVec<RString>, PluginError> {
        guard(&self.name, "layers", || {
            Ok(self.inner.layers().into_iter().map(RString::from).collect())
        })
    }

    fn variables(&self) -> RResult<RVec<NamedTensor>, PluginError> {
        guard(&self.name, "variables", || {
            Ok(self
                .inner
                .variables()
                .into_iter()
                .map(|(name, tensor)| NamedTensor::new(name, tensor))
                .collect())
        })
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        guard(&self.name, "state", || {
            self.inner.state().map(State::into_ffi)
        })
    }

    fn load_state(&mut self, state: ComponentState) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        guard(&self.name, "load_state", || {
            inner.load_state(State::from_ffi(state))
        })
    }
}

struct DatasetAdapter {
    name: String,
    inner: Box<dyn Dataset>,
}

impl FfiDataset for DatasetAdapter {
    fn len(&self) -> u64 {
        match guard(&self.name, "len", || Ok(self.inner.len())) {
            ROk(len) => len,
            RErr(_) => 0,
        }
    }

    fn keys(&self) -> RVec<RString> {
        match guard(&self.name, "keys", || Ok(self.inner.keys())) {
            ROk(keys) => keys.into_iter().map(RString::from).collect(),
            RErr(_) => RVec::new(),
        }
    }

    fn get(&self, index: u64) -> RResult<RVec<RTensor>, PluginError> {
        guard(&self.name, "get", || self.inner.get(index).map(owned))
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        guard(&self.name, "state", || {
            self.inner.state().map(State::into_ffi)
        })
    }

    fn load_state(&self, state: ComponentState) -> RResult<(), PluginError> {
        guard(&self.name, "load_state", || {
            self.inner.load_state(State::from_ffi(state))
        })
    }
}

/// Builds the FFI object for component `name` of `kind` from its registration.
fn create<T>(
    kind: ComponentKind,
    name: RStr<'_>,
    config: RStr<'_>,
    ctx: &CreateContext<'_>,
    wrap: impl FnOnce(String, Factory, &str, &CreateContext<'_>) -> Result<T>,
) -> RResult<T, PluginError> {
    let name = name.as_str().to_owned();
    guard(&name, "create", || {
        let registration = find_registration(kind, &name).ok_or_else(|| {
            Error::unsupported(format!("this plugin provides no {kind} called `{name}`"))
        })?;
        wrap(name.clone(), registration.factory(), config.as_str(), ctx)
    })
}

fn wrong_factory() -> Error {
    Error::unsupported("registration kind does not match its factory")
}

/// Defines the root module's `create_*` function for one kind: find the registration, check
/// its factory is of that kind, build the component and wrap it in its adapter. The six
/// functions differ only in these names, and must stay separate `extern "C"` functions
/// because each is a field of the root module.
macro_rules! creator {
    ($function:ident, $kind:ident, $boxed:ty, $object:ident, $adapter:ident) => {
        pub(crate) extern "C" fn $function(
            name: RStr<'_>,
            config: RStr<'_>,
            ctx: &CreateContext<'_>,
        ) -> RResult<$boxed, PluginError> {
            create(
                ComponentKind::$kind,
                name,
                config,
                ctx,
                |name, factory, config, ctx| {
                    let Factory::$kind(make) = factory else {
                        return Err(wrong_factory());
                    };
                    let inner = make(config, ctx)?;
                    Ok($object::from_value($adapter { name, inner }, TD_Opaque))
                },
            )
        }
    };
}

creator!(
    create_tensor_op,
    TensorOp,
    TensorOpBox,
    FfiTensorOp_TO,
    TensorOpAdapter
);
creator!(
    create_numpy_op,
    NumpyOp,
    NumpyOpBox,
    FfiNumpyOp_TO,
    NumpyOpAdapter
);
creator!(
    create_slicer,
    Slicer,
    SlicerBox,
    FfiSlicer_TO,
    SlicerAdapter
);
creator!(create_trace, Trace, TraceBox, FfiTrace_TO, TraceAdapter);
creator!(create_model, Model, ModelBox, FfiModel_TO, ModelAdapter);
creator!(
    create_dataset,
    Dataset,
    DatasetBox,
    FfiDataset_TO,
    DatasetAdapter
);

/// Records the run for this plugin's components (`PluginExt::set_run_info`).
pub(crate) extern "C" fn set_run_info(info: FfiRunInfoRef) {
    // Nothing here can panic short of an allocation failure, but nothing may unwind into the
    // host either.
    let _ = catch_unwind(AssertUnwindSafe(|| crate::run::set_process(info.into())));
}

/// The declared fields of every registration linked into this binary (extension module
/// `describe_fields`).
pub(crate) extern "C" fn describe_fields() -> RVec<ComponentFields> {
    catch_unwind(declared_fields).unwrap_or_default()
}

/// The declared fields of every registration linked into this binary that declares them.
pub fn declared_fields() -> RVec<ComponentFields> {
    registrations()
        .filter_map(|r| {
            let fields = r.declared_fields()?;
            Some(ComponentFields {
                kind: r.kind(),
                name: r.name().into(),
                fields: fields.iter().map(FieldInfo::from).collect(),
            })
        })
        .collect()
}

/// Describes every registration linked into this binary.
pub fn describe_registrations(name: &str, version: &str) -> PluginDescription {
    let mut components: Vec<ComponentInfo> = registrations()
        .map(|r| ComponentInfo {
            kind: r.kind(),
            name: r.name().into(),
            doc: r.doc().into(),
            default_mode: r.default_modes().into(),
            is_metric: r.is_metric(),
        })
        .collect();
    components.sort_by(|a, b| (a.kind, a.name.as_str()).cmp(&(b.kind, b.name.as_str())));
    PluginDescription {
        name: name.into(),
        version: version.into(),
        components: components.into(),
    }
}
