//! (in progress)

use super::Kernels;

pub(crate) const KERNELS: &[Kernels] = &[];
