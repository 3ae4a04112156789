//! Projector types: what `clip.projector_type` (or `clip.vision.projector_type`) names, as
//! llama.cpp's `PROJECTOR_TYPE_NAMES` spells them, and which of them Tessera runs.

use std::fmt;

/// The vision projectors Tessera implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Projector {
    /// Gemma 3 (4B and up): SigLIP, 2-D average pooling, RMS norm and the soft-token
    /// projection; images resized with padding to a fixed square.
    Gemma3,
    /// Idefics3 (SmolVLM): SigLIP, the pixel shuffle (patches merged `n_merge²` into one) and
    /// a linear projection; images cut into square tiles plus an overview.
    Idefics3,
    /// Qwen2.5-VL: a ViT of the image's own size (two patch convolutions, RMS norms, 2-D
    /// RoPE, window attention, SwiGLU), the 2 × 2 patch merger; M-RoPE positions in the
    /// language model.
    Qwen25Vl,
}

impl Projector {
    /// llama.cpp's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Projector::Gemma3 => "gemma3",
            Projector::Idefics3 => "idefics3",
            Projector::Qwen25Vl => "qwen2.5vl_merger",
        }
    }

    /// The type a file names: `Ok` where Tessera implements it, else the reason to give the
    /// user (a type llama.cpp has that Tessera lacks, an audio projector, or an unknown name).
    pub fn from_name(name: &str) -> Result<Projector, String> {
        match name {
            "gemma3" => Ok(Projector::Gemma3),
            "idefics3" => Ok(Projector::Idefics3),
            "qwen2.5vl_merger" => Ok(Projector::Qwen25Vl),
            _ if AUDIO.contains(&name) => Err(format!(
                "projector type '{name}' is an audio encoder; Tessera reads images only"
            )),
            _ if PLANNED.contains(&name) || LLAMA_CPP_VISION.contains(&name) => Err(format!(
                "projector type '{name}' is not implemented in Tessera (supported: {})",
                SUPPORTED.join(", ")
            )),
            _ => Err(format!(
                "unknown projector type '{name}' (not one of llama.cpp's; supported: {})",
                SUPPORTED.join(", ")
            )),
        }
    }
}

impl fmt::Display for Projector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The names Tessera runs.
pub const SUPPORTED: &[&str] = &["gemma3", "idefics3", "qwen2.5vl_merger"];

/// Next in line (Qwen2-VL's and Qwen3-VL's mergers).
const PLANNED: &[&str] = &["qwen2vl_merger", "qwen3vl_merger"];

/// The other vision projector types of llama.cpp b11312.
const LLAMA_CPP_VISION: &[&str] = &[
    "mlp",
    "ldp",
    "ldpv2",
    "resampler",
    "adapter",
    "ling3vl",
    "step3vl",
    "gemma3nv",
    "gemma4v",
    "gemma4uv",
    "phi4",
    "pixtral",
    "internvl",
    "llama4",
    "lfm2",
    "kimivl",
    "paddleocr",
    "lightonocr",
    "cogvlm",
    "janus_pro",
    "dots_ocr",
    "dots3note_v",
    "deepseekocr",
    "deepseekocr2",
    "deepseek4v",
    "glm4v",
    "glm5v",
    "youtuvl",
    "yasa2",
    "kimik25",
    "nemotron_v2_vl",
    "exaone4_5",
    "hunyuanvl",
    "minicpmv4_6",
    "mimovl",
    "minimax_m3",
    "granite4_vision",
    "muse-glimmer",
];

/// llama.cpp b11312's audio projector types.
const AUDIO: &[&str] = &[
    "ultravox",
    "qwen2a",
    "qwen3a",
    "glma",
    "qwen2.5o",
    "voxtral",
    "meralion",
    "musicflamingo",
    "gemma3na",
    "gemma4a",
    "gemma4ua",
    "dots3note_a",
    "lfm2a",
    "granite_speech",
    "mimo_audio",
    "parakeet",
    "qwen3tts_spkenc",
    "qwen3tts_gen",
    "pockettts_spkenc",
    "pockettts_gen",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_refused_by_name() {
        assert_eq!(Projector::from_name("gemma3"), Ok(Projector::Gemma3));
        assert_eq!(Projector::Gemma3.to_string(), "gemma3");
        let e = Projector::from_name("pixtral").unwrap_err();
        assert!(e.contains("'pixtral' is not implemented") && e.contains("gemma3"), "{e}");
        assert_eq!(Projector::from_name("idefics3"), Ok(Projector::Idefics3));
        assert_eq!(Projector::from_name("qwen2.5vl_merger"), Ok(Projector::Qwen25Vl));
        let e = Projector::from_name("qwen3vl_merger").unwrap_err();
        assert!(e.contains("'qwen3vl_merger' is not implemented"), "{e}");
        let e = Projector::from_name("ultravox").unwrap_err();
        assert!(e.contains("audio"), "{e}");
        let e = Projector::from_name("frobnicator").unwrap_err();
        assert!(e.contains("unknown projector type 'frobnicator'"), "{e}");
    }
}
