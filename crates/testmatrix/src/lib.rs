//! # tessera-testmatrix
//!
//! Tessera's test-backend-ops: every op the model graphs use, over the types, shapes, views
//! and parameters that take different paths in a kernel, run on any [`Backend`] and compared with
//! a float64 reference.
//!
//! - **Cases are data** ([`cases`]): one parameter struct per op family ([`case::CaseSpec`]), a
//!   catalog of instances. A case builds a tiny graph with the crate's graph builder.
//! - **The reference is independent** ([`reference`]): plain `f64` code from the op's definition,
//!   inputs dequantized by tessera-tensor's reference dequantizers, results stored in the
//!   destination type with its reference quantizers. It shares nothing with any backend.
//! - **Checks are test-backend-ops'** ([`compare`]): NaN fails, infinities must match in sign,
//!   then NMSE within the op's threshold (1e-7 by default, 5e-4 MUL_MAT and FLASH_ATTN_EXT,
//!   1e-6 SOFT_MAX and float CPY, exact for same-type copies and ARGMAX, one quantization step for
//!   copies into Q4_0/Q4_1/Q5_x/Q8_0/IQ4_NL).
//! - **Guard bytes** ([`runner`]): every tensor sits between guard bytes in one buffer of the
//!   backend's own buffer type; a byte changed outside every tensor is an out-of-bounds write,
//!   a changed input an illegal write. Results start as NaN, so an unwritten element fails.
//! - **And as a model lays them out** ([`Config::allocated`], `--layouts alloc`): the graph
//!   allocator places the tensors, so results share memory and run in place as in a model's
//!   graph (where the CUDA backend's first fused norm read sources its in-place sum had
//!   overwritten). Cases of several nodes keep a model's order ([`Builder::pins`]).
//! - **Backend-generic**: the runner takes a factory that makes a backend per [`Config`] (thread
//!   count x variant, e.g. SIMD level); `supports_op` = false counts as unsupported, not failed.
//!   The `test-matrix` binary (feature `cpu`) wires the CPU backend; a GPU backend plugs in the
//!   same way.
//!
//! Why a reference of its own rather than the CPU backend as test-backend-ops does: the CPU
//! backend is one of the things under test here, and its fast paths (SIMD levels, thread
//! splits) must all agree with something that is not itself.
//!
//! [`Backend`]: tessera_backend::Backend

#![deny(missing_docs)]

pub mod case;
pub mod cases;
pub mod compare;
pub mod image;
pub mod init;
pub mod reference;
pub mod report;
pub mod runner;

pub use case::{prepare, Builder, Case, CaseSpec, Prepared};
pub use compare::{Mismatch, Tolerance};
pub use report::{Counts, Report};
pub use runner::{run_case, run_config, Config, ConfigRun, Factory, Failure, Outcome, PreparedSet};

/// Selects cases by op name or full case name: a case-insensitive regular expression, or, when
/// `pattern` is not a valid one, a case-insensitive substring. `None` keeps everything.
pub fn filter_cases(cases: Vec<Case>, pattern: Option<&str>) -> Vec<Case> {
    let Some(p) = pattern else { return cases };
    let matcher: Box<dyn Fn(&str) -> bool> = match regex::Regex::new(&format!("(?i){p}")) {
        Ok(re) => Box::new(move |s| re.is_match(s)),
        Err(_) => {
            let p = p.to_lowercase();
            Box::new(move |s| s.to_lowercase().contains(&p))
        }
    };
    cases.into_iter().filter(|c| matcher(c.op()) || matcher(&c.name())).collect()
}
