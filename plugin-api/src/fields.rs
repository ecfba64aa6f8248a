//! Configuration fields a component declares, so that `fe-host plugins show NAME` can print
//! them (name, type, default, doc) without running the component.
//!
//! Declaring is optional: a registration without [`Registration::fields`](crate::Registration::fields)
//! still works, and `plugins show` then says it has no field declarations (as it does for
//! plugins built before fe-plugin-api 0.1.1).

use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;

use crate::registry::ComponentKind;

/// One configuration field, as a component declares it:
///
/// ```
/// use fe_plugin_api::Field;
///
/// const FIELDS: &[Field] = &[
///     Field::required("factor", "float", "What to multiply by"),
///     Field::optional("clip", "float", "none", "Clamp the result to [-clip, clip]"),
/// ];
/// assert_eq!(FIELDS[1].default, Some("none"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The key in the component's manifest table.
    pub name: &'static str,
    /// The TOML type in words: `float`, `integer`, `string`, `bool`, `[integer]`,
    /// `"a" | "b"`, ...
    pub ty: &'static str,
    /// The value used when the key is absent, as TOML; `None` when the key is required.
    pub default: Option<&'static str>,
    /// One line on what it does.
    pub doc: &'static str,
}

impl Field {
    /// A field the manifest must give.
    pub const fn required(name: &'static str, ty: &'static str, doc: &'static str) -> Self {
        Self {
            name,
            ty,
            default: None,
            doc,
        }
    }

    /// A field with a default (written as TOML, or in words such as `none`).
    pub const fn optional(
        name: &'static str,
        ty: &'static str,
        default: &'static str,
        doc: &'static str,
    ) -> Self {
        Self {
            name,
            ty,
            default: Some(default),
            doc,
        }
    }
}

/// A [`Field`] as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// See [`Field::name`].
    pub name: RString,
    /// See [`Field::ty`].
    pub ty: RString,
    /// See [`Field::default`].
    pub default: ROption<RString>,
    /// See [`Field::doc`].
    pub doc: RString,
}

impl From<&Field> for FieldInfo {
    fn from(field: &Field) -> Self {
        Self {
            name: field.name.into(),
            ty: field.ty.into(),
            default: field.default.map(RString::from).into(),
            doc: field.doc.into(),
        }
    }
}

/// The declared fields of one component; components that declare none are not listed.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct ComponentFields {
    /// The component's kind.
    pub kind: ComponentKind,
    /// The component's name.
    pub name: RString,
    /// Its fields, in declaration order (empty: it takes no configuration).
    pub fields: RVec<FieldInfo>,
}
