//! The arena of tensor descriptors (ggml's `no_alloc` context) and the layout ops: leafs, views,
//! reshape, permute, transpose.

use super::desc::{contiguous_strides, Flags, TensorDesc, TensorId, MAX_DIMS, MAX_NAME, MAX_SRC};
use super::op::Op;
use crate::{DType, Result, TensorError};

/// An arena of tensor descriptors. Builder methods check shapes and types and return ids;
/// nothing here holds data.
#[derive(Debug, Clone, Default)]
pub struct Context {
    tensors: Vec<TensorDesc>,
    /// Changes with every change of a descriptor or a new one (fresh in a clone).
    version: crate::Version,
}

pub(crate) fn shape_err(op: &'static str, reason: String) -> TensorError {
    TensorError::Shape { op, reason }
}

/// Pads a shape given as a slice to four dimensions with 1s.
pub(crate) fn ne4(op: &'static str, ne: &[usize]) -> Result<[usize; MAX_DIMS]> {
    if ne.len() > MAX_DIMS {
        return Err(shape_err(op, format!("{} dimensions, at most {MAX_DIMS}", ne.len())));
    }
    let mut out = [1; MAX_DIMS];
    out[..ne.len()].copy_from_slice(ne);
    Ok(out)
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// The context's version: equal versions are the same descriptors (see [`crate::Version`]).
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    /// The descriptor of `id`.
    ///
    /// # Panics
    /// If `id` is not from this context.
    pub fn get(&self, id: TensorId) -> &TensorDesc {
        &self.tensors[id.index()]
    }

    /// Number of tensors in the arena.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// All ids, in creation order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> {
        (0..self.tensors.len() as u32).map(TensorId)
    }

    /// Sets a tensor's name (truncated to 63 bytes at a character boundary, as ggml does).
    pub fn set_name(&mut self, id: TensorId, name: &str) -> TensorId {
        let mut end = name.len().min(MAX_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        self.desc_mut(id).name = name[..end].to_string();
        id
    }

    /// Adds flags to a tensor.
    pub fn set_flags(&mut self, id: TensorId, flags: Flags) -> TensorId {
        let t = self.desc_mut(id);
        t.flags = t.flags.union(flags);
        id
    }

    /// Marks a tensor as a graph input.
    pub fn set_input(&mut self, id: TensorId) -> TensorId {
        self.set_flags(id, Flags::INPUT)
    }

    /// Marks a tensor as a graph output.
    pub fn set_output(&mut self, id: TensorId) -> TensorId {
        self.set_flags(id, Flags::OUTPUT)
    }

    /// The descriptor of `id`, to change: every change goes through here (or `push`), which
    /// moves the context's version.
    fn desc_mut(&mut self, id: TensorId) -> &mut TensorDesc {
        self.version.bump();
        &mut self.tensors[id.index()]
    }

    pub(crate) fn push(&mut self, desc: TensorDesc) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        self.version.bump();
        self.tensors.push(desc);
        id
    }

    /// A new contiguous tensor computed by `op` from `src`.
    pub(crate) fn new_op(
        &mut self,
        op: Op,
        dtype: DType,
        ne: [usize; MAX_DIMS],
        src: &[TensorId],
    ) -> TensorId {
        let mut s = [None; MAX_SRC];
        for (slot, id) in s.iter_mut().zip(src) {
            *slot = Some(*id);
        }
        self.push(TensorDesc {
            dtype,
            ne,
            nb: contiguous_strides(dtype, &ne),
            op,
            src: s,
            view_src: None,
            view_offs: 0,
            flags: Flags::default(),
            name: String::new(),
        })
    }

    /// Sets the optional source slot `slot` of `id`.
    pub(crate) fn set_src(&mut self, id: TensorId, slot: usize, src: Option<TensorId>) {
        self.desc_mut(id).src[slot] = src;
    }

    /// A copy of `a` with `a`'s type, shape and byte strides (`ggml_dup_tensor_layout`), as a
    /// [`Op::Dup`] node reading `a`: what a scheduler creates when a node on one backend reads
    /// `a` from memory that backend cannot reach. Its `n_bytes` equal `a`'s, so the copy is a
    /// plain byte copy of `a`'s span, gaps of a strided view included.
    pub fn dup_layout(&mut self, a: TensorId) -> TensorId {
        let (dtype, ne, nb) = {
            let t = self.get(a);
            (t.dtype, t.ne, t.nb)
        };
        let id = self.new_op(Op::Dup, dtype, ne, &[a]);
        self.desc_mut(id).nb = nb;
        id
    }

    /// Makes source slot `slot` of `id` read `to` instead (a scheduler rewiring a node to the
    /// copy of a source). `to` must have the type, shape and strides of the source it replaces.
    pub fn redirect_src(&mut self, id: TensorId, slot: usize, to: TensorId) -> Result<()> {
        let Some(Some(from)) = self.get(id).src.get(slot).copied() else {
            return Err(shape_err(
                "REDIRECT",
                format!("source slot {slot} of tensor {} is empty", id.index()),
            ));
        };
        let (a, b) = (self.get(from), self.get(to));
        if a.dtype != b.dtype || a.ne != b.ne || a.nb != b.nb {
            return Err(shape_err(
                "REDIRECT",
                format!(
                    "{} {} cannot stand in for {} {}",
                    b.dtype,
                    b.shape_str(),
                    a.dtype,
                    a.shape_str()
                ),
            ));
        }
        self.set_src(id, slot, Some(to));
        Ok(())
    }

    /// A new leaf tensor (weights, inputs, constants) of `dtype` and shape `ne` (1 to 4 dims).
    pub fn new_tensor(&mut self, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        let ne = ne4("NONE", ne)?;
        if ne[0] % dtype.block_size() != 0 {
            return Err(TensorError::NotBlockMultiple {
                dtype,
                n: ne[0] as u64,
                block: dtype.block_size() as u64,
            });
        }
        Ok(self.new_op(Op::None, dtype, ne, &[]))
    }

    /// A view sharing `a`'s storage: `op` with shape `ne`, strides `nb`, at byte `offset`.
    pub(crate) fn new_view(
        &mut self,
        op: Op,
        a: TensorId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
    ) -> TensorId {
        let src = self.get(a);
        let (view_src, base) = match src.view_src {
            Some(v) => (v, src.view_offs),
            None => (a, 0),
        };
        let dtype = src.dtype;
        let name = format!("{} (view)", src.name);
        let id = self.new_op(op, dtype, ne, &[a]);
        let t = self.desc_mut(id);
        t.nb = nb;
        t.view_src = Some(view_src);
        t.view_offs = base + offset;
        self.set_name(id, &name);
        id
    }

    fn check_view_bounds(
        &self,
        op: &'static str,
        a: TensorId,
        ne: &[usize; MAX_DIMS],
        nb: &[usize; MAX_DIMS],
        offset: usize,
    ) -> Result<()> {
        let probe = TensorDesc { ne: *ne, nb: *nb, ..self.get(a).clone() };
        let src = self.get(a);
        let end = offset + probe.n_bytes();
        if end > src.n_bytes() {
            return Err(shape_err(op, format!("view {ne:?} (strides {nb:?}) at offset {offset} ends at byte {end}, past the {} bytes of {}", src.n_bytes(), src.shape_str())));
        }
        if ne[0] % src.dtype.block_size() != 0 {
            return Err(shape_err(
                op,
                format!("row of {} elements is not a whole number of {} blocks", ne[0], src.dtype),
            ));
        }
        Ok(())
    }

    /// A strided view of `a` (`ggml_view_4d`): shape `ne`, strides `nb[1..]` (nb\[0\] is the type
    /// size), starting at byte `offset` of `a`.
    pub fn view(
        &mut self,
        a: TensorId,
        ne: &[usize],
        nb_rest: &[usize],
        offset: usize,
    ) -> Result<TensorId> {
        let ne = ne4("VIEW", ne)?;
        if nb_rest.len() >= MAX_DIMS {
            return Err(shape_err(
                "VIEW",
                format!("{} strides given, at most {}", nb_rest.len(), MAX_DIMS - 1),
            ));
        }
        let dtype = self.get(a).dtype;
        let mut nb = contiguous_strides(dtype, &ne);
        for (i, s) in nb_rest.iter().enumerate() {
            nb[i + 1] = *s;
        }
        // Dims past the given strides follow on contiguously.
        for i in (nb_rest.len() + 1).max(2)..MAX_DIMS {
            nb[i] = nb[i - 1] * ne[i - 1];
        }
        self.check_view_bounds("VIEW", a, &ne, &nb, offset)?;
        Ok(self.new_view(Op::View, a, ne, nb, offset))
    }

    /// The same data with shape `ne` (`ggml_reshape`); `a` must be contiguous and keep its element
    /// count.
    pub fn reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ne = ne4("RESHAPE", ne)?;
        let src = self.get(a);
        if !src.is_contiguous() {
            return Err(shape_err(
                "RESHAPE",
                format!("source {} is not contiguous", src.shape_str()),
            ));
        }
        if ne.iter().product::<usize>() != src.n_elements() {
            return Err(shape_err(
                "RESHAPE",
                format!(
                    "{} has {} elements, {ne:?} has {}",
                    src.shape_str(),
                    src.n_elements(),
                    ne.iter().product::<usize>()
                ),
            ));
        }
        if ne[0] % src.dtype.block_size() != 0 {
            return Err(TensorError::NotBlockMultiple {
                dtype: src.dtype,
                n: ne[0] as u64,
                block: src.dtype.block_size() as u64,
            });
        }
        let nb = contiguous_strides(src.dtype, &ne);
        Ok(self.new_view(Op::Reshape, a, ne, nb, 0))
    }

    /// Axes permuted (`ggml_permute`): source axis `i` becomes axis `axes[i]`.
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        let mut seen = [false; 4];
        for &ax in &axes {
            if ax >= 4 || seen[ax] {
                return Err(shape_err("PERMUTE", format!("{axes:?} is not a permutation of 0..4")));
            }
            seen[ax] = true;
        }
        let src = self.get(a);
        let (mut ne, mut nb) = ([0; 4], [0; 4]);
        for i in 0..4 {
            ne[axes[i]] = src.ne[i];
            nb[axes[i]] = src.nb[i];
        }
        Ok(self.new_view(Op::Permute { axes }, a, ne, nb, 0))
    }

    /// Axes 0 and 1 swapped (`ggml_transpose`).
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let src = self.get(a);
        let (mut ne, mut nb) = (src.ne, src.nb);
        ne.swap(0, 1);
        nb.swap(0, 1);
        Ok(self.new_view(Op::Transpose, a, ne, nb, 0))
    }
}
