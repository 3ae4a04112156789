//! A one-line account of a graph's plan: how many products, expert products and attentions
//! took each path, and how many other kernels run, for the logs (`RUST_LOG=tessera_backend_cuda
//! =debug`), so a run on a GPU shows which fast paths its graphs took.

use super::{Kernel, NodePlan};
use std::collections::BTreeMap;

/// The path of a node of interest (products, expert products, attention), `None` for the rest.
fn path_of(kernel: Kernel) -> Option<String> {
    Some(match kernel {
        Kernel::MulMat(p) => format!("mul_mat {}", p.name()),
        Kernel::MulMatId(p) => format!("mul_mat_id {}", p.name()),
        Kernel::FlashAttn(p) => {
            format!("attention {}{}", p.name(), if p.splits() > 1 { " split" } else { "" })
        }
        _ => return None,
    })
}

/// `plans` in one line: `N nodes: mul_mat mmvq x84, attention fattn-vec x16, ..., M other`
/// (the paths in name order).
pub fn summary<'a>(plans: impl IntoIterator<Item = &'a NodePlan>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let (mut total, mut other) = (0usize, 0usize);
    for p in plans {
        if p.kernel == Kernel::Nothing {
            continue;
        }
        total += 1;
        match path_of(p.kernel) {
            Some(k) => *counts.entry(k).or_default() += 1,
            None => other += 1,
        }
    }
    let mut parts: Vec<String> = counts.into_iter().map(|(k, n)| format!("{k} x{n}")).collect();
    parts.push(format!("{other} other"));
    format!("{total} kernels' nodes: {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::super::{AttnPath, MatmulPath, MoePath};
    use super::*;

    #[test]
    fn counts_each_path() {
        let p = |kernel| NodePlan { kernel, scratch: 0 };
        let plans = [
            p(Kernel::MulMat(MatmulPath::Mmvq)),
            p(Kernel::MulMat(MatmulPath::Mmvq)),
            p(Kernel::MulMat(MatmulPath::Mmq)),
            p(Kernel::MulMatId(MoePath::Mmq)),
            p(Kernel::FlashAttn(AttnPath::Vec { splits: 4 })),
            p(Kernel::FlashAttn(AttnPath::Mma)),
            p(Kernel::Norm),
            p(Kernel::Nothing),
        ];
        assert_eq!(
            summary(&plans),
            "7 kernels' nodes: attention fattn-mma x1, attention fattn-vec split x1, \
             mul_mat mmq x1, mul_mat mmvq x2, mul_mat_id mmq x1, 1 other"
        );
    }
}
