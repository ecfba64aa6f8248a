//! Keys are interned once at build time; at run time a batch is a vector of optional tensors indexed by
//! [`KeyId`], so the per-step path never hashes a string.

use std::collections::HashMap;

use tch::Tensor;

/// An interned key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub u32);

impl KeyId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// Every key the run uses.
#[derive(Debug, Default, Clone)]
pub struct Keys {
    names: Vec<String>,
    ids: HashMap<String, KeyId>,
}

impl Keys {
    /// The id of `name`, adding it if new.
    pub fn intern(&mut self, name: &str) -> KeyId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = KeyId(self.names.len() as u32);
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    /// Interns every name of a list.
    pub fn intern_all(&mut self, names: &[String]) -> Vec<KeyId> {
        names.iter().map(|n| self.intern(n)).collect()
    }

    /// The id of `name`, if known.
    pub fn get(&self, name: &str) -> Option<KeyId> {
        self.ids.get(name).copied()
    }

    /// The name of `id`.
    pub fn name(&self, id: KeyId) -> &str {
        self.names
            .get(id.index())
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// Names of a list of ids, for messages.
    pub fn names(&self, ids: impl IntoIterator<Item = KeyId>) -> Vec<&str> {
        ids.into_iter().map(|id| self.name(id)).collect()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// `true` when no key is known.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A batch of named tensors (dimension 0 is the batch), or a sample before collation.
#[derive(Debug, Default)]
pub struct Batch {
    slots: Vec<Option<Tensor>>,
    /// Samples in the batch.
    pub size: i64,
}

impl Batch {
    /// An empty batch with room for `keys` keys.
    pub fn with_keys(keys: usize) -> Self {
        Self {
            slots: (0..keys).map(|_| None).collect(),
            size: 0,
        }
    }

    /// The tensor under `key`.
    pub fn get(&self, key: KeyId) -> Option<&Tensor> {
        self.slots.get(key.index()).and_then(Option::as_ref)
    }

    /// Stores `tensor` under `key`.
    pub fn set(&mut self, key: KeyId, tensor: Tensor) {
        let index = key.index();
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, || None);
        }
        self.slots[index] = Some(tensor);
    }

    /// Removes and returns the tensor under `key`.
    pub fn take(&mut self, key: KeyId) -> Option<Tensor> {
        self.slots.get_mut(key.index()).and_then(Option::take)
    }

    /// The keys that hold a tensor.
    pub fn present(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.is_some())
            .map(|(i, _)| KeyId(i as u32))
    }

    /// A batch holding the same tensors (sharing their storage), for a step to run again.
    pub fn shallow_clone(&self) -> Self {
        Self {
            slots: self
                .slots
                .iter()
                .map(|slot| slot.as_ref().map(Tensor::shallow_clone))
                .collect(),
            size: self.size,
        }
    }

    /// Empties every slot, keeping the allocation.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|slot| *slot = None);
        self.size = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_batches_index_by_id() {
        let mut keys = Keys::default();
        let x = keys.intern("x");
        let y = keys.intern("y");
        assert_eq!(keys.intern("x"), x);
        assert_eq!(keys.name(y), "y");
        let mut batch = Batch::with_keys(1);
        batch.set(y, Tensor::from(1i64));
        assert!(batch.get(x).is_none());
        assert_eq!(batch.present().collect::<Vec<_>>(), [y]);
        assert!(batch.take(y).is_some());
        assert!(batch.get(y).is_none());
    }
}
