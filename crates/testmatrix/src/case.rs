//! A test case: a small graph (one op, with views of its inputs where the case asks for them),
//! how its inputs are filled, and how close a backend must come to the reference.
//!
//! Cases are data: each op family is a plain struct of parameters implementing [`CaseSpec`]; the
//! catalog ([`crate::cases::all`]) lists instances. [`prepare`] turns a case into a graph, input
//! bytes and the reference output, once, before any backend runs it.

use crate::compare::Tolerance;
use crate::image::{storage_of, Image};
use crate::init::{fill, Init, Rng};
use crate::reference::eval_graph;
use std::collections::BTreeSet;
use std::fmt::Debug;
use tessera_tensor::graph::{Context, Graph, TensorId};
use tessera_tensor::{DType, TensorError};

/// Builds a case's graph, recording how each leaf is filled.
#[derive(Debug, Default)]
pub struct Builder {
    /// The graph's tensors.
    pub ctx: Context,
    inits: Vec<(TensorId, Init)>,
    /// Nodes expanded first, in order ([`Graph::build_with_pins`]): products of one input
    /// kept together as a model's graph keeps them.
    pub pins: Vec<TensorId>,
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new leaf of `dtype` and shape `ne`, filled as `init` says.
    pub fn leaf(
        &mut self,
        dtype: DType,
        ne: &[usize],
        init: Init,
    ) -> Result<TensorId, TensorError> {
        let id = self.ctx.new_tensor(dtype, ne)?;
        self.ctx.set_input(id);
        let name = format!("in{}", self.inits.len());
        self.ctx.set_name(id, &name);
        self.inits.push((id, init));
        Ok(id)
    }

    /// `a` seen through a view of its first `ne` elements per dimension, keeping its strides
    /// (test-backend-ops' "non-contiguous view" `v` variants).
    pub fn sub_view(&mut self, a: TensorId, ne: [usize; 4]) -> Result<TensorId, TensorError> {
        let nb = self.ctx.get(a).nb;
        self.ctx.view(a, &ne, &nb[1..], 0)
    }
}

/// One family of cases: the parameters of one op's test.
pub trait CaseSpec: Debug + Send + Sync {
    /// ggml's op name, the first column of the table (`"MUL_MAT"`).
    fn op(&self) -> &'static str;
    /// The type column (`"q4_0"`, `"f32->f16"`).
    fn dtype(&self) -> String;
    /// Builds the graph; returns the tensor whose value is compared.
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError>;
    /// How close the backend must come to the reference.
    fn tolerance(&self) -> Tolerance;
}

/// A named case.
#[derive(Debug)]
pub struct Case {
    /// The parameters.
    pub spec: Box<dyn CaseSpec>,
}

impl Case {
    /// Wraps a spec.
    pub fn new(spec: impl CaseSpec + 'static) -> Self {
        Case { spec: Box::new(spec) }
    }

    /// ggml's op name.
    pub fn op(&self) -> &'static str {
        self.spec.op()
    }

    /// The type column.
    pub fn dtype(&self) -> String {
        self.spec.dtype()
    }

    /// The full description (op, then every parameter): unique per case, seeds its data.
    pub fn name(&self) -> String {
        format!("{} {:?}", self.op(), self.spec)
    }
}

/// A case ready to run: graph, input bytes, and the reference result.
#[derive(Debug)]
pub struct Prepared {
    /// The tensors.
    pub ctx: Context,
    /// The graph computing [`Prepared::out`].
    pub graph: Graph,
    /// The tensor compared.
    pub out: TensorId,
    /// Input bytes of every leaf storage root, in id order.
    pub inputs: Vec<(TensorId, Vec<u8>)>,
    /// Storage roots the graph may write (node results, CPY/SET_ROWS destinations).
    pub written: BTreeSet<TensorId>,
    /// The reference value of `out`, logical order.
    pub expected: Vec<f64>,
    /// The threshold.
    pub tolerance: Tolerance,
}

impl Prepared {
    /// Every storage root the graph touches (leafs and node results), in id order.
    pub fn roots(&self) -> BTreeSet<TensorId> {
        let mut roots: BTreeSet<TensorId> = self.inputs.iter().map(|(id, _)| *id).collect();
        roots.extend(self.written.iter().copied());
        roots
    }
}

/// Builds `case`'s graph, fills its inputs (seeded from the case's name) and runs the reference.
pub fn prepare(case: &Case) -> Result<Prepared, TensorError> {
    let mut b = Builder::new();
    let out = case.spec.build(&mut b)?;
    let Builder { mut ctx, inits, pins } = b;
    ctx.set_output(out);
    let graph = Graph::build_with_pins(&ctx, &pins, &[out]);
    let mut rng = Rng::from_name(&case.name());
    let mut img = Image::new();
    let mut inputs = Vec::new();
    for (id, init) in inits {
        let bytes = fill(ctx.get(id), init, &mut rng);
        img.insert(id, bytes.clone());
        inputs.push((id, bytes));
    }
    let written = graph
        .nodes()
        .iter()
        .filter(|&&n| !ctx.get(n).op.is_view())
        .map(|&n| storage_of(&ctx, n).0)
        .collect();
    eval_graph(&ctx, &graph, &mut img);
    let expected = img.read(&ctx, out);
    Ok(Prepared { ctx, graph, out, inputs, written, expected, tolerance: case.spec.tolerance() })
}
