//! Tensor handles that cross the plugin boundary.
//!
//! Host and plugins link the same shared libtorch, so a tensor crosses as a pointer to a
//! libtorch `at::Tensor` (what `tch::Tensor` wraps). Autograd metadata lives inside libtorch,
//! so a loss computed in one plugin backpropagates into a model defined in another.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use tch::Tensor;

/// An owned tensor handle: frees its libtorch tensor when dropped.
///
/// ```
/// use fe_plugin_api::RTensor;
/// let owned = RTensor::new(fe_plugin_api::tch::Tensor::from_slice(&[1.0f32, 2.0]));
/// let back: fe_plugin_api::tch::Tensor = owned.into_tensor();
/// assert_eq!(back.size(), [2]);
/// ```
#[repr(transparent)]
#[derive(StableAbi)]
pub struct RTensor {
    ptr: *mut c_void,
}

// SAFETY: `tch::Tensor` is `Send`; this is the same pointer under another name.
unsafe impl Send for RTensor {}

impl RTensor {
    /// Takes ownership of a tensor.
    pub fn new(mut tensor: Tensor) -> Self {
        let ptr = tensor.as_mut_ptr().cast::<c_void>();
        std::mem::forget(tensor);
        Self { ptr }
    }

    /// Gives the tensor back as a `tch::Tensor`, which now owns it.
    pub fn into_tensor(self) -> Tensor {
        let this = ManuallyDrop::new(self);
        // SAFETY: `ptr` came from `Tensor::as_mut_ptr` of a tensor we own and forgot.
        unsafe { Tensor::from_ptr(this.ptr.cast()) }
    }

    /// Borrows the tensor as a handle that can cross the boundary.
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            ptr: self.ptr,
            _borrow: PhantomData,
        }
    }

    /// Views the tensor as a `tch::Tensor` without taking ownership.
    pub fn view(&self) -> TensorView<'_> {
        self.as_ref().view()
    }
}

impl From<Tensor> for RTensor {
    fn from(tensor: Tensor) -> Self {
        Self::new(tensor)
    }
}

impl Drop for RTensor {
    fn drop(&mut self) {
        // SAFETY: we own the tensor; rebuilding the `tch::Tensor` frees it exactly once.
        drop(unsafe { Tensor::from_ptr(self.ptr.cast()) });
    }
}

impl std::fmt::Debug for RTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_ref().fmt(f)
    }
}

/// A borrowed tensor handle: valid for `'a`, never frees anything.
///
/// ```
/// use fe_plugin_api::TensorRef;
/// let t = fe_plugin_api::tch::Tensor::from_slice(&[3i64]);
/// let handle = TensorRef::from(&t);
/// assert_eq!(handle.view().int64_value(&[0]), 3);
/// ```
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy)]
pub struct TensorRef<'a> {
    ptr: *mut c_void,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: a shared borrow of a `Send` tensor; libtorch tensors are safe to read from other threads.
unsafe impl Send for TensorRef<'_> {}
unsafe impl Sync for TensorRef<'_> {}

impl<'a> TensorRef<'a> {
    /// Views the borrowed tensor as a `tch::Tensor` for the length of the borrow.
    pub fn view(self) -> TensorView<'a> {
        TensorView {
            // SAFETY: the pointer stays valid for 'a; ManuallyDrop keeps us from freeing it.
            tensor: ManuallyDrop::new(unsafe { Tensor::from_ptr(self.ptr.cast()) }),
            _borrow: PhantomData,
        }
    }

    /// Makes an owned handle sharing storage (and autograd history) with this one.
    pub fn to_owned(self) -> RTensor {
        RTensor::new(self.view().shallow_clone())
    }
}

impl<'a> From<&'a Tensor> for TensorRef<'a> {
    fn from(tensor: &'a Tensor) -> Self {
        TensorRef {
            ptr: tensor.as_ptr().cast_mut().cast::<c_void>(),
            _borrow: PhantomData,
        }
    }
}

impl std::fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let view = self.view();
        write!(f, "Tensor{:?}<{:?}>", view.size(), view.kind())
    }
}

/// A `tch::Tensor` that borrows a tensor owned elsewhere; dereferences to `&Tensor`.
pub struct TensorView<'a> {
    tensor: ManuallyDrop<Tensor>,
    _borrow: PhantomData<&'a ()>,
}

impl Deref for TensorView<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}

/// A named tensor, as used for model parameters and component state.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct NamedTensor {
    /// The tensor's name, unique within its list.
    pub name: RString,
    /// The tensor.
    pub tensor: RTensor,
}

impl NamedTensor {
    /// Pairs a name with a tensor.
    pub fn new(name: impl Into<String>, tensor: Tensor) -> Self {
        Self {
            name: RString::from(name.into()),
            tensor: RTensor::new(tensor),
        }
    }
}
