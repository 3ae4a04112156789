//! Shared helpers: a CPU backend, a simulated device, weights placed in either's memory.

#![allow(dead_code)]

use std::sync::Arc;
use tessera_backend::{Backend, Bindings, BufferType, BufferUsage, HostBufferType};
use tessera_backend_cpu::{CpuBackend, SimDevice};
use tessera_sched::{SchedParams, Scheduler};
use tessera_tensor::graph::{Context, TensorId};

/// Where a weight lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Host,
    Sim,
    /// A second simulated device, `SIM1`.
    Sim1,
}

/// `[SIM0, CPU]` with the given simulated device.
pub fn sim_and_cpu(sim: SimDevice) -> Scheduler {
    let backends: Vec<Box<dyn Backend>> =
        vec![Box::new(sim.backend().unwrap()), Box::new(CpuBackend::new(1))];
    Scheduler::new(backends, SchedParams::default()).unwrap()
}

/// The CPU alone.
pub fn cpu_only() -> Scheduler {
    Scheduler::new(vec![Box::new(CpuBackend::new(1))], SchedParams::default()).unwrap()
}

/// Binds `id` in a buffer of its own in `place`'s memory, marked as weights, filled with
/// `values` (F32).
pub fn bind_weight(ctx: &Context, b: &mut Bindings, id: TensorId, place: Place, values: &[f32]) {
    let buft: Arc<dyn BufferType> = match place {
        Place::Host => Arc::new(HostBufferType),
        Place::Sim => Arc::new(tessera_backend_cpu::sim::SimBufferType::new("SIM0")),
        Place::Sim1 => Arc::new(tessera_backend_cpu::sim::SimBufferType::new("SIM1")),
    };
    let buf = buft.alloc(ctx.get(id).n_bytes()).unwrap();
    buf.set_usage(BufferUsage::Weights);
    b.bind(ctx, id, buf.clone(), 0).unwrap();
    b.set_f32(ctx, id, values).unwrap();
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Bit patterns, for exact comparisons.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
