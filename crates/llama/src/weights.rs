//! A model's weights: one leaf per GGUF tensor in a base [`Context`], bound to its memory
//! (the file's mapping, a device buffer, or host memory holding repacked weights), found by
//! name and shape-checked by the architectures, which record what they used so the loader can
//! refuse a file with tensors nobody reads.

use crate::{LlamaError, Result};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tessera_backend::Bindings;
use tessera_gguf::GgufFile;
use tessera_tensor::graph::{Context, TensorId};

/// The file's bytes as a buffer source (the mapping lives as long as any buffer over it).
pub(crate) struct MappedFile(pub(crate) GgufFile);

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// The weights: one leaf per GGUF tensor in a base [`Context`], bound in place.
pub struct Weights {
    /// Descriptors of every weight (later graphs start from a clone of this).
    pub ctx: Context,
    /// Each weight bound to its memory: the file's mapping, a device buffer, or host memory
    /// holding repacked weights rearranged.
    pub bindings: Bindings,
    by_name: HashMap<String, TensorId>,
    /// The weights an architecture asked for ([`Weights::get`], [`Weights::find`]): after
    /// loading, any other tensor of the file is unused, which is an error.
    used: Arc<Mutex<HashSet<TensorId>>>,
    /// A tied output's own copy of token_embd (offloaded, or rearranged as repacked), which
    /// the sizes do not count: it is not in the file.
    duplicate: Option<TensorId>,
    /// The file, for its metadata.
    file: Arc<MappedFile>,
}

impl Weights {
    /// The weights `ctx` describes, bound by `bindings`, found by name through `by_name`;
    /// `duplicate` is a tied output's copy of token_embd (not in `file`).
    pub(crate) fn new(
        ctx: Context,
        bindings: Bindings,
        by_name: HashMap<String, TensorId>,
        duplicate: Option<TensorId>,
        file: Arc<MappedFile>,
    ) -> Self {
        Weights { ctx, bindings, by_name, used: Arc::default(), duplicate, file }
    }

    /// The file's metadata: what an architecture reads beyond [`HParams`](crate::HParams)
    /// (a downstream architecture's own `{arch}.*` keys).
    pub fn metadata(&self) -> &tessera_gguf::Metadata {
        self.file.0.metadata()
    }

    /// The weight called `name`, checked to have shape `ne` (trailing 1s may be omitted).
    pub fn get(&self, name: &str, ne: &[usize]) -> Result<TensorId> {
        self.find(name, ne)?.ok_or_else(|| LlamaError::MissingTensor(name.to_string()))
    }

    /// Like [`Weights::get`] for a weight that may be absent (biases, optional norms).
    pub fn find(&self, name: &str, ne: &[usize]) -> Result<Option<TensorId>> {
        let Some(&id) = self.by_name.get(name) else { return Ok(None) };
        self.used.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        let actual = self.ctx.get(id).ne;
        let mut want = [1usize; 4];
        want[..ne.len()].copy_from_slice(ne);
        if actual != want {
            let trim = |v: [usize; 4]| {
                let n = v.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
                v[..n].to_vec()
            };
            return Err(LlamaError::TensorShape {
                name: name.into(),
                actual: trim(actual),
                expected: trim(want),
            });
        }
        Ok(Some(id))
    }

    /// The weight called `name`, whatever its shape.
    pub fn id(&self, name: &str) -> Option<TensorId> {
        self.by_name.get(name).copied()
    }

    /// Whether a tensor of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Total bytes of all weights in the file.
    pub fn n_bytes(&self) -> usize {
        self.in_file().map(|id| self.ctx.get(id).n_bytes()).sum()
    }

    /// The file's tensors no architecture asked for, in name order.
    pub(crate) fn unused(&self) -> Vec<String> {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = self
            .by_name
            .iter()
            .filter(|(_, id)| Some(**id) != self.duplicate && !used.contains(id))
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names
    }

    /// The weights in the file (not a tied output's copy).
    pub(crate) fn in_file(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.by_name.values().copied().filter(|&id| Some(id) != self.duplicate)
    }
}
