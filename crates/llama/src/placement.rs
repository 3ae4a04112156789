//! Where weights and each layer's KV cache live: llama.cpp's `-ngl`, `-ts`, `--device` and
//! `-ot`, and picking devices from the registry a program composes (`--device`).
//!
//! llama.cpp's rule (`llama_model::load_tensors`), followed exactly: the input layer (token
//! and position embeddings) stays on the CPU; with `n_gpu_layers = N` over `n_layer` repeating
//! layers, layer `il` goes to a device when `il >= max(n_layer - N, 0)` and fewer than
//! `min(N, n_layer + 1)` layers precede it there, the output layer counting as layer
//! `n_layer` (so `-ngl n_layer` leaves the output head on the CPU and `-ngl n_layer + 1`
//! moves it too). Which device is by cumulative split fractions (`-ts`, equal by default). An
//! override (`-ot REGEX=BUFFER_TYPE`) names the buffer type of every tensor whose name
//! matches, before the layer rule; the first matching override wins.

use crate::{LlamaError, Result};
use std::sync::Arc;
use tessera_backend::{Device, DeviceKind, Registry};

/// A `-ot` rule: tensors whose name matches `pattern` go to the buffer type `buffer_type`
/// (`"CPU"` or a device's name).
#[derive(Debug, Clone)]
pub struct TensorOverride {
    /// Searched in the tensor's name (unanchored, as llama.cpp's `std::regex_search`).
    pub pattern: regex::Regex,
    /// `"CPU"` or a device name (`"SIM0"`, `"CUDA0"`).
    pub buffer_type: String,
}

/// llama.cpp's `LLM_FFN_EXPS_REGEX`: the expert weights of a mixture-of-experts block.
pub const FFN_EXPS_REGEX: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

impl TensorOverride {
    /// llama.cpp's `--cpu-moe`: every expert weight stays on the CPU.
    pub fn cpu_moe() -> Self {
        TensorOverride {
            pattern: regex::Regex::new(FFN_EXPS_REGEX).expect("a valid pattern"),
            buffer_type: "CPU".into(),
        }
    }

    /// llama.cpp's `--n-cpu-moe N`: the expert weights of blocks `0..n` stay on the CPU.
    pub fn n_cpu_moe(n: usize) -> Vec<Self> {
        (0..n)
            .map(|i| TensorOverride {
                pattern: regex::Regex::new(&format!(r"blk\.{i}{FFN_EXPS_REGEX}"))
                    .expect("a valid pattern"),
                buffer_type: "CPU".into(),
            })
            .collect()
    }

    /// Parses llama.cpp's `REGEX=BUFFER_TYPE`.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: String| LlamaError::Setting { flag: "--override-tensor".into(), reason };
        let (re, bt) = spec
            .rsplit_once('=')
            .ok_or_else(|| bad(format!("'{spec}' is not REGEX=BUFFER_TYPE")))?;
        let pattern = regex::Regex::new(re).map_err(|e| bad(format!("bad pattern '{re}': {e}")))?;
        Ok(TensorOverride { pattern, buffer_type: bt.to_string() })
    }
}

/// Which devices hold the model and how (part of [`LoadParams`](crate::LoadParams)).
#[derive(Clone, Default)]
pub struct Offload {
    /// Devices to offload to, in priority order (not the CPU; empty: CPU only).
    pub devices: Vec<Arc<dyn Device>>,
    /// llama.cpp's `-ngl`: how many layers, counted from the output end (the output layer
    /// counts as one), go to the devices.
    pub n_gpu_layers: usize,
    /// llama.cpp's `-ts`: the share of offloaded layers per device (equal when empty).
    pub tensor_split: Vec<f32>,
    /// llama.cpp's `-ot`, in order.
    pub overrides: Vec<TensorOverride>,
}

impl std::fmt::Debug for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offload")
            .field("devices", &self.devices.iter().map(|d| d.name()).collect::<Vec<_>>())
            .field("n_gpu_layers", &self.n_gpu_layers)
            .field("tensor_split", &self.tensor_split)
            .field("overrides", &self.overrides.len())
            .finish()
    }
}

/// The device (index into [`Offload::devices`]) of every repeating layer and of the output
/// layer; `None` is the CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerPlan {
    /// Per repeating layer.
    pub layers: Vec<Option<usize>>,
    /// The output layer (output norm and head).
    pub output: Option<usize>,
}

impl LayerPlan {
    /// llama.cpp's assignment for `n_layer` layers (see the module docs).
    pub fn new(n_layer: usize, offload: &Offload) -> LayerPlan {
        let n_dev = offload.devices.len();
        let ngl = offload.n_gpu_layers;
        let start = n_layer.saturating_sub(ngl);
        let act = if n_dev == 0 { 0 } else { ngl.min(n_layer + 1) };
        // Cumulative split fractions.
        let mut shares: Vec<f32> = (0..n_dev)
            .map(|i| offload.tensor_split.get(i).copied().unwrap_or(0.0).max(0.0))
            .collect();
        if shares.iter().all(|&s| s == 0.0) {
            shares = vec![1.0; n_dev];
        }
        let total: f32 = shares.iter().sum();
        let mut acc = 0.0;
        let splits: Vec<f32> = shares
            .iter()
            .map(|s| {
                acc += s / total;
                acc
            })
            .collect();
        let layer = |il: usize| -> Option<usize> {
            if il < start || il - start >= act {
                return None;
            }
            let f = (il - start) as f32 / act as f32;
            Some(splits.iter().position(|&s| f < s).unwrap_or(n_dev - 1))
        };
        LayerPlan { layers: (0..n_layer).map(layer).collect(), output: layer(n_layer) }
    }

    /// The device of tensor `name` by the layer rule: `blk.N.*` its layer's, `output.*` and
    /// `output_norm.*` the output layer's, anything else (embeddings) the CPU.
    pub fn tensor_device(&self, name: &str) -> Option<usize> {
        if let Some(rest) = name.strip_prefix("blk.") {
            let il: Option<usize> = rest.split('.').next().and_then(|n| n.parse().ok());
            return il.and_then(|il| self.layers.get(il).copied().flatten());
        }
        if name.starts_with("output.") || name.starts_with("output_norm.") {
            return self.output;
        }
        None
    }
}

/// Where tensor `name` goes: the first matching override, else the layer rule. `Ok(None)` is
/// the CPU (the file's mapping).
pub fn tensor_device(name: &str, plan: &LayerPlan, offload: &Offload) -> Result<Option<usize>> {
    for o in &offload.overrides {
        if o.pattern.is_match(name) {
            if o.buffer_type.eq_ignore_ascii_case("CPU") {
                return Ok(None);
            }
            return match offload.devices.iter().position(|d| d.name() == o.buffer_type) {
                Some(i) => Ok(Some(i)),
                None => Err(LlamaError::Setting {
                    flag: "--override-tensor".into(),
                    reason: format!(
                        "buffer type '{}' for {name}: not CPU nor one of the devices in use ({})",
                        o.buffer_type,
                        offload.devices.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
                    ),
                }),
            };
        }
    }
    Ok(plan.tensor_device(name))
}

/// The non-CPU devices of `registry` named in `names` (llama.cpp's `--device A,B`; `"none"`
/// for none), or all of them when `names` is empty.
pub fn select_devices(registry: &Registry, names: &[String]) -> Result<Vec<Arc<dyn Device>>> {
    let accel = || registry.devices().iter().filter(|d| d.kind() != DeviceKind::Cpu);
    if names.is_empty() {
        return Ok(accel().cloned().collect());
    }
    if names.len() == 1 && names[0] == "none" {
        return Ok(Vec::new());
    }
    names
        .iter()
        .map(|n| {
            accel().find(|d| d.name() == n).cloned().ok_or_else(|| {
                let names: Vec<String> = accel().map(|d| d.name().to_string()).collect();
                let available = if names.is_empty() {
                    "none: only the CPU is present (a CUDA device needs a build with the \
                     `cuda` feature and an NVIDIA driver)"
                        .to_string()
                } else {
                    names.join(", ")
                };
                LlamaError::Setting {
                    flag: "--device".into(),
                    reason: format!("no device '{n}' (available: {available})"),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_backend_cpu::SimDevice;

    fn offload(n_dev: usize, ngl: usize, ts: &[f32]) -> Offload {
        Offload {
            devices: (0..n_dev)
                .map(|i| Arc::new(SimDevice::new(i, 1)) as Arc<dyn Device>)
                .collect(),
            n_gpu_layers: ngl,
            tensor_split: ts.to_vec(),
            overrides: vec![],
        }
    }

    #[test]
    fn layers_follow_llama_cpp() {
        let p = LayerPlan::new(4, &offload(1, 2, &[]));
        assert_eq!(p.layers, [None, None, Some(0), Some(0)]);
        assert_eq!(p.output, None);
        let p = LayerPlan::new(4, &offload(1, 4, &[]));
        assert_eq!(p.layers, [Some(0); 4]);
        assert_eq!(p.output, None, "-ngl n_layer keeps the head on the CPU");
        let p = LayerPlan::new(4, &offload(1, 99, &[]));
        assert_eq!(p.output, Some(0));
        let p = LayerPlan::new(4, &offload(0, 99, &[]));
        assert_eq!(p, LayerPlan { layers: vec![None; 4], output: None });
        // Two devices, 3:1 over 5 offloaded "layers" (4 + output).
        let p = LayerPlan::new(4, &offload(2, 99, &[3.0, 1.0]));
        assert_eq!(p.layers, [Some(0), Some(0), Some(0), Some(0)]);
        assert_eq!(p.output, Some(1));
        let p = LayerPlan::new(4, &offload(2, 99, &[]));
        assert_eq!(p.layers, [Some(0), Some(0), Some(0), Some(1)]);
        assert_eq!(p.tensor_device("blk.3.attn_q.weight"), Some(1));
        assert_eq!(p.tensor_device("token_embd.weight"), None);
        assert_eq!(p.tensor_device("output_norm.weight"), Some(1));
    }

    #[test]
    fn overrides_come_first() {
        let mut o = offload(1, 99, &[]);
        o.overrides.push(TensorOverride::parse(r"ffn_(up|down)=CPU").unwrap());
        o.overrides.push(TensorOverride::parse(r"token_embd=SIM0").unwrap());
        let p = LayerPlan::new(2, &o);
        assert_eq!(tensor_device("blk.0.ffn_up.weight", &p, &o).unwrap(), None);
        assert_eq!(tensor_device("blk.0.ffn_gate.weight", &p, &o).unwrap(), Some(0));
        assert_eq!(tensor_device("token_embd.weight", &p, &o).unwrap(), Some(0));
        o.overrides.push(TensorOverride::parse("attn=CUDA7").unwrap());
        let e = tensor_device("blk.1.attn_q.weight", &p, &o).unwrap_err();
        assert!(e.to_string().contains("CUDA7"), "{e}");
        assert!(TensorOverride::parse("no-equals").is_err());
        assert!(TensorOverride::parse("(=CPU").is_err());
    }
}
