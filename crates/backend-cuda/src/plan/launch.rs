//! Which launches of a list start early (programmatic dependent launch, the `pdl` path): on
//! sm_90 and newer, a kernel queued right after another kernel is launched with the
//! programmatic-serialization attribute, so its blocks are scheduled while the previous grid
//! finishes; each kernel waits for its predecessor in `pdl_start()` (prelude.cuh) before it
//! touches anything but its weights, and the matrix-vector kernels prefetch their weight rows
//! into L2 before that wait. A fixed cost of every launch of a decode step (the drain of one
//! grid, the ramp of the next: about 160 launches a token on a 1B model) overlaps the previous
//! kernel instead of following it.
//!
//! The first launch of a list, and one after a cuBLAS call, starts as usual: what precedes it
//! on the stream (input copies, a library's kernels) made no promise to wait.

use super::{Capability, FastPath, Paths};

/// The first architecture with programmatic dependent launch (Hopper).
pub const PDL_MIN_ARCH: u32 = 90;

/// Whether the `pdl` path runs on this device with these paths.
pub fn pdl(cap: Capability, paths: Paths) -> bool {
    cap.arch >= PDL_MIN_ARCH && paths.allows(FastPath::Pdl)
}

/// For each launch of a list (`true` where it is one of our kernels, `false` for a cuBLAS
/// call), whether it is launched early: only a kernel right after a kernel, and only where
/// [`pdl`] holds (`on`).
pub fn early_launches(on: bool, kernels: &[bool]) -> Vec<bool> {
    (0..kernels.len()).map(|i| on && i > 0 && kernels[i] && kernels[i - 1]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SM90: Capability = Capability { arch: 90, cublas: true };
    const SM89: Capability = Capability { arch: 89, cublas: true };

    #[test]
    fn pdl_needs_hopper_and_the_path() {
        assert!(pdl(SM90, Paths::all()));
        assert!(pdl(Capability { arch: 100, cublas: false }, Paths::all()));
        assert!(!pdl(SM89, Paths::all()), "no griddepcontrol before sm_90");
        assert!(!pdl(SM90, Paths::parse("-pdl").unwrap()));
        assert!(!pdl(SM90, Paths::generic()));
    }

    #[test]
    fn only_a_kernel_after_a_kernel_starts_early() {
        let list = [true, true, false, true, true, true];
        assert_eq!(early_launches(true, &list), [false, true, false, false, true, true]);
        assert_eq!(early_launches(false, &list), [false; 6]);
        assert!(early_launches(true, &[]).is_empty());
        assert_eq!(early_launches(true, &[true]), [false]);
    }
}
