//! Registration: what a plugin provides, collected with `inventory`.

use std::fmt;

use abi_stable::StableAbi;

use crate::config::parse_config;
use crate::context::CreateContext;
use crate::fields::Field;
use crate::kinds::{Dataset, FromConfig, Metric, Model, NumpyOp, Slicer, TensorOp, Trace};
use crate::Result;

/// The kinds of component.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComponentKind {
    /// A [`TensorOp`].
    TensorOp = 0,
    /// A [`NumpyOp`].
    NumpyOp = 1,
    /// A [`Slicer`].
    Slicer = 2,
    /// A [`Trace`] (metrics included).
    Trace = 3,
    /// A [`Model`].
    Model = 4,
    /// A [`Dataset`].
    Dataset = 5,
}

impl ComponentKind {
    /// Lowercase name, as shown by `fe-host plugins list`.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::TensorOp => "tensor-op",
            ComponentKind::NumpyOp => "numpy-op",
            ComponentKind::Slicer => "slicer",
            ComponentKind::Trace => "trace",
            ComponentKind::Model => "model",
            ComponentKind::Dataset => "dataset",
        }
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A trace as the adapter sees it: a plain trace, or a metric that runs as one.
pub enum TraceImpl {
    /// A [`Trace`].
    Trace(Box<dyn Trace>),
    /// A [`Metric`] (accumulate per batch, reduce per epoch).
    Metric(Box<dyn Metric>),
}

type Make<T> = fn(&str, &CreateContext<'_>) -> Result<T>;

/// How to build one component from its TOML text.
#[derive(Clone, Copy)]
pub enum Factory {
    /// Builds a [`TensorOp`].
    TensorOp(Make<Box<dyn TensorOp>>),
    /// Builds a [`NumpyOp`].
    NumpyOp(Make<Box<dyn NumpyOp>>),
    /// Builds a [`Slicer`].
    Slicer(Make<Box<dyn Slicer>>),
    /// Builds a [`Trace`] or a [`Metric`].
    Trace(Make<TraceImpl>),
    /// Builds a [`Model`].
    Model(Make<Box<dyn Model>>),
    /// Builds a [`Dataset`].
    Dataset(Make<Box<dyn Dataset>>),
}

impl Factory {
    /// The kind of component this builds.
    pub fn kind(&self) -> ComponentKind {
        match self {
            Factory::TensorOp(_) => ComponentKind::TensorOp,
            Factory::NumpyOp(_) => ComponentKind::NumpyOp,
            Factory::Slicer(_) => ComponentKind::Slicer,
            Factory::Trace(_) => ComponentKind::Trace,
            Factory::Model(_) => ComponentKind::Model,
            Factory::Dataset(_) => ComponentKind::Dataset,
        }
    }
}

/// One component a plugin provides. Submit one per component:
///
/// ```
/// use fe_plugin_api::{inventory, NoConfig, FromConfig, CreateContext, Registration, Result,
///                     StepContext, TensorOp};
/// use fe_plugin_api::tch::Tensor;
///
/// struct Negate;
/// impl TensorOp for Negate {
///     fn forward(&mut self, inputs: &[&Tensor], _: &StepContext<'_>) -> Result<Vec<Tensor>> {
///         Ok(vec![inputs[0].f_neg()?])
///     }
/// }
/// impl FromConfig for Negate {
///     type Config = NoConfig;
///     fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
///         ctx.expect_arity(Some(1), Some(1))?;
///         Ok(Negate)
///     }
/// }
///
/// inventory::submit! {
///     Registration::tensor_op::<Negate>("Negate", "Flips the sign of its input.")
/// }
///
/// assert!(fe_plugin_api::registrations().any(|r| r.name() == "Negate"));
/// ```
pub struct Registration {
    name: &'static str,
    doc: &'static str,
    default_mode: &'static str,
    factory: Factory,
    metric: bool,
    fields: Option<&'static [Field]>,
}

inventory::collect!(Registration);

impl Registration {
    /// Registers a [`TensorOp`].
    pub const fn tensor_op<T: TensorOp + FromConfig>(
        name: &'static str,
        doc: &'static str,
    ) -> Self {
        Self::new(name, doc, Factory::TensorOp(make_tensor_op::<T>))
    }

    /// Registers a [`NumpyOp`].
    pub const fn numpy_op<T: NumpyOp + FromConfig>(name: &'static str, doc: &'static str) -> Self {
        Self::new(name, doc, Factory::NumpyOp(make_numpy_op::<T>))
    }

    /// Registers a [`Slicer`].
    pub const fn slicer<T: Slicer + FromConfig>(name: &'static str, doc: &'static str) -> Self {
        Self::new(name, doc, Factory::Slicer(make_slicer::<T>))
    }

    /// Registers a [`Trace`].
    pub const fn trace<T: Trace + FromConfig>(name: &'static str, doc: &'static str) -> Self {
        Self::new(name, doc, Factory::Trace(make_trace::<T>))
    }

    /// Registers a [`Metric`]; it runs as a trace.
    pub const fn metric<T: Metric + FromConfig>(name: &'static str, doc: &'static str) -> Self {
        let mut registration = Self::new(name, doc, Factory::Trace(make_metric::<T>));
        registration.metric = true;
        registration
    }

    /// Registers a [`Model`].
    pub const fn model<T: Model + FromConfig>(name: &'static str, doc: &'static str) -> Self {
        Self::new(name, doc, Factory::Model(make_model::<T>))
    }

    /// Registers a [`Dataset`].
    pub const fn dataset<T: Dataset + FromConfig>(name: &'static str, doc: &'static str) -> Self {
        Self::new(name, doc, Factory::Dataset(make_dataset::<T>))
    }

    /// The modes the component runs in when the manifest does not say, in manifest syntax
    /// (`"train"`, `"!infer"`, `"eval,test"`). Losses use `"!infer"`, metrics `"eval,test"`.
    pub const fn default_mode(mut self, modes: &'static str) -> Self {
        self.default_mode = modes;
        self
    }

    const fn new(name: &'static str, doc: &'static str, factory: Factory) -> Self {
        Self {
            name,
            doc,
            default_mode: "",
            factory,
            metric: false,
            fields: None,
        }
    }

    /// Declares the component's configuration fields for `fe-host plugins show`
    /// (an empty list: it takes no configuration). Keep it in step with the `Config` type.
    pub const fn fields(mut self, fields: &'static [Field]) -> Self {
        self.fields = Some(fields);
        self
    }

    /// The declared configuration fields; `None` when the registration declares none.
    pub fn declared_fields(&self) -> Option<&'static [Field]> {
        self.fields
    }

    /// The name manifests use.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// One-line description.
    pub fn doc(&self) -> &'static str {
        self.doc
    }

    /// Default modes in manifest syntax, `""` for all modes.
    pub fn default_modes(&self) -> &'static str {
        self.default_mode
    }

    /// The kind of component.
    pub fn kind(&self) -> ComponentKind {
        self.factory.kind()
    }

    /// `true` for metrics registered with [`Registration::metric`].
    pub fn is_metric(&self) -> bool {
        self.metric
    }

    /// The constructor.
    pub fn factory(&self) -> Factory {
        self.factory
    }
}

/// Every registration linked into this binary (plugin or host).
pub fn registrations() -> impl Iterator<Item = &'static Registration> {
    inventory::iter::<Registration>.into_iter()
}

/// The registration of `kind` called `name`.
pub fn find_registration(kind: ComponentKind, name: &str) -> Option<&'static Registration> {
    registrations().find(|r| r.kind() == kind && r.name() == name)
}

fn configured<T: FromConfig>(toml: &str, ctx: &CreateContext<'_>) -> Result<T> {
    T::from_config(parse_config(toml)?, ctx)
}

fn make_tensor_op<T: TensorOp + FromConfig>(
    toml: &str,
    ctx: &CreateContext<'_>,
) -> Result<Box<dyn TensorOp>> {
    Ok(Box::new(configured::<T>(toml, ctx)?))
}

fn make_numpy_op<T: NumpyOp + FromConfig>(
    toml: &str,
    ctx: &CreateContext<'_>,
) -> Result<Box<dyn NumpyOp>> {
    Ok(Box::new(configured::<T>(toml, ctx)?))
}

fn make_slicer<T: Slicer + FromConfig>(
    toml: &str,
    ctx: &CreateContext<'_>,
) -> Result<Box<dyn Slicer>> {
    Ok(Box::new(configured::<T>(toml, ctx)?))
}

fn make_trace<T: Trace + FromConfig>(toml: &str, ctx: &CreateContext<'_>) -> Result<TraceImpl> {
    Ok(TraceImpl::Trace(Box::new(configured::<T>(toml, ctx)?)))
}

fn make_metric<T: Metric + FromConfig>(toml: &str, ctx: &CreateContext<'_>) -> Result<TraceImpl> {
    Ok(TraceImpl::Metric(Box::new(configured::<T>(toml, ctx)?)))
}

fn make_model<T: Model + FromConfig>(
    toml: &str,
    ctx: &CreateContext<'_>,
) -> Result<Box<dyn Model>> {
    Ok(Box::new(configured::<T>(toml, ctx)?))
}

fn make_dataset<T: Dataset + FromConfig>(
    toml: &str,
    ctx: &CreateContext<'_>,
) -> Result<Box<dyn Dataset>> {
    Ok(Box::new(configured::<T>(toml, ctx)?))
}
