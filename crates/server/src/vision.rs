//! Images in prompts (llama-server with `--mmproj`): what the server needs from a vision
//! encoder, and how an image's positions live in a prompt's tokens.
//!
//! The server knows no projector: the binary hands it a [`Vision`] (the `tessera` CLI's is
//! tessera-mtmd's encoder), which decodes an image's bytes, cuts a prompt with `<__media__>`
//! markers into text and image pieces ([`Piece`]), and encodes an image into embeddings on the
//! engine thread, only when the slot does not hold it already.
//!
//! A prompt stays a list of `u32`: an image's positions hold placeholder ids
//! ([`placeholder_ids`]) made from its content hash, above every vocabulary's ids, so that
//! the slots' prefix matching and the host prompt cache compare images as they compare
//! tokens (llama-server keys cached images by their hash too). Consecutive positions hold
//! the hash's low and high 31 bits in turn, so two images' runs differ unless 62 bits of
//! their hashes do. An image is reused whole or not at all ([`Images::floor`]).

use std::any::Any;
use std::sync::Arc;

/// Placeholder ids have this bit set; no vocabulary reaches it.
pub const PLACEHOLDER_BIT: u32 = 1 << 31;

/// Whether `id` stands for an image position, not a token.
pub fn is_placeholder(id: u32) -> bool {
    id & PLACEHOLDER_BIT != 0
}

/// The ids of an image's `n` positions: the content hash's low and high 31 bits in turn.
pub fn placeholder_ids(hash: u64, n: usize) -> impl Iterator<Item = u32> {
    let halves = [(hash & 0x7fff_ffff) as u32, ((hash >> 31) & 0x7fff_ffff) as u32];
    (0..n).map(move |k| PLACEHOLDER_BIT | halves[k % 2])
}

/// An image ready for a prompt: how many positions it takes, its content hash, and the
/// encoder's input (preprocessed pixels, opaque to the server).
#[derive(Clone)]
pub struct PromptImage {
    /// Cells it takes in the context.
    pub n_tokens: usize,
    /// Positions it advances (an M-RoPE grid: its larger side; else `n_tokens`).
    pub n_pos: usize,
    /// Its merged token grid (columns, rows), placed with M-RoPE grid positions (Qwen2.5-VL
    /// in a `qwen2vl` model); `None`: positions in a row.
    pub grid: Option<(usize, usize)>,
    /// A hash of the decoded pixels (and size): equal images share cached cells.
    pub hash: u64,
    /// What [`Vision::encode`] reads (its own type).
    pub data: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for PromptImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptImage")
            .field("n_tokens", &self.n_tokens)
            .field("n_pos", &self.n_pos)
            .field("hash", &format_args!("{:016x}", self.hash))
            .finish()
    }
}

/// A piece of a prompt with images, as the encoder's tokenizer cuts it.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Tokens.
    Text(Vec<u32>),
    /// An image.
    Image(PromptImage),
}

/// An error of the vision side, said to the client as a 400 on the image's field.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionError {
    /// Which image (its index in the request's order), if the error is about one.
    pub image: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// A vision encoder as the server uses it. `load` and `tokenize` run on request threads,
/// `encode` on the engine thread (the implementation serializes what must be).
pub trait Vision: Send + Sync {
    /// The projector's name (`/props`, logs).
    fn name(&self) -> &str;
    /// Width of the embeddings [`encode`](Vision::encode) makes (the model's `n_embd`).
    fn n_embd(&self) -> usize;
    /// Whether an image's positions attend to each other both ways (Gemma 3): the engine
    /// decodes them with causal attention off.
    fn non_causal(&self) -> bool;
    /// The most positions one image takes (a non-causal image is decoded in one ubatch).
    fn max_tokens(&self) -> usize;
    /// Cuts `text` (one `<__media__>` marker per image, in order) into pieces, the images
    /// decoded from their bytes (`images[i]`) and preprocessed; `add_special` frames it with
    /// the vocabulary's BOS/EOS. Errors name the image where one is at fault.
    fn tokenize(
        &self,
        text: &str,
        images: &[&[u8]],
        add_special: bool,
    ) -> Result<Vec<Piece>, VisionError>;
    /// The embeddings of `image` (`n_tokens * n_embd` values, row by row).
    fn encode(&self, image: &PromptImage) -> Result<Vec<f32>, String>;
}

/// A shared [`Vision`] (what the server's configuration holds).
#[derive(Clone)]
pub struct VisionHandle(pub Arc<dyn Vision>);

impl std::fmt::Debug for VisionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vision({})", self.0.name())
    }
}

/// Where a prompt's images are: each one's first position and the image, in position order.
#[derive(Debug, Clone, Default)]
pub struct Images(pub Vec<(usize, PromptImage)>);

impl Images {
    /// The prompt's tokens (placeholders at image positions) and its images, from `pieces`.
    pub fn flatten(pieces: Vec<Piece>) -> (Vec<u32>, Images) {
        let mut tokens = Vec::new();
        let mut images = Vec::new();
        for p in pieces {
            match p {
                Piece::Text(t) => tokens.extend(t),
                Piece::Image(img) => {
                    images.push((tokens.len(), img.clone()));
                    tokens.extend(placeholder_ids(img.hash, img.n_tokens));
                }
            }
        }
        (tokens, Images(images))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `n` cached positions rounded down to an image's start where `n` falls inside one (an
    /// image's cells are computed together: a part of them is no use).
    pub fn floor(&self, n: usize) -> usize {
        self.0
            .iter()
            .find(|(start, img)| *start < n && n < start + img.n_tokens)
            .map_or(n, |(start, _)| *start)
    }

    /// The position of the prompt's `k`-th cell (`k` at an image's start or in text): an
    /// M-RoPE image before it advanced fewer positions than it took cells.
    pub fn pos(&self, k: usize) -> i32 {
        let behind: usize = self
            .0
            .iter()
            .filter(|(start, img)| start + img.n_tokens <= k)
            .map(|(_, img)| img.n_tokens - img.n_pos.min(img.n_tokens))
            .sum();
        (k - behind) as i32
    }

    /// The image starting at position `pos`, if one does.
    pub fn at(&self, pos: usize) -> Option<&PromptImage> {
        self.0.iter().find(|(start, _)| *start == pos).map(|(_, img)| img)
    }

    /// The first image start at or after `pos` (`None`: text to the end).
    pub fn next_start(&self, pos: usize) -> Option<usize> {
        self.0.iter().map(|(start, _)| *start).find(|&s| s >= pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(n: usize, hash: u64) -> PromptImage {
        PromptImage { n_tokens: n, n_pos: n, grid: None, hash, data: Arc::new(()) }
    }

    #[test]
    fn images_become_placeholder_runs() {
        let pieces = vec![
            Piece::Text(vec![1, 2]),
            Piece::Image(img(3, 0x1234_5678_9abc_def0)),
            Piece::Text(vec![5]),
            Piece::Image(img(2, 7)),
            Piece::Text(vec![6]),
        ];
        let (tokens, images) = Images::flatten(pieces);
        assert_eq!(tokens.len(), 9);
        assert_eq!(&tokens[..2], &[1, 2]);
        assert!(tokens[2..5].iter().all(|&t| is_placeholder(t)));
        assert_eq!(tokens[2], tokens[4]);
        assert_ne!(tokens[2], tokens[3], "the runs alternate the hash's halves");
        assert_eq!(tokens[5], 5);
        assert_eq!(images.0.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![2, 6]);
        // A prefix ending inside an image gives the image back whole.
        assert_eq!(images.floor(2), 2);
        assert_eq!(images.floor(4), 2);
        assert_eq!(images.floor(5), 5);
        assert_eq!(images.floor(7), 6);
        assert_eq!(images.floor(9), 9);
        assert_eq!(images.next_start(3), Some(6));
        assert_eq!(images.next_start(8), None);
        assert!(images.at(6).is_some_and(|i| i.n_tokens == 2));
        assert_eq!(images.pos(9), 9, "images in a row take their cells' positions");
        // An M-RoPE grid of 3 × 2 takes 6 cells and 3 positions.
        let grid = PromptImage { n_pos: 3, grid: Some((3, 2)), ..img(6, 9) };
        let (_, images) = Images::flatten(vec![
            Piece::Text(vec![1]),
            Piece::Image(grid),
            Piece::Text(vec![2, 3]),
        ]);
        assert_eq!((images.pos(1), images.pos(7), images.pos(9)), (1, 4, 6));
        // Images whose hashes differ in either half differ at their first two positions.
        let a: Vec<u32> = placeholder_ids(1 << 40, 2).collect();
        let b: Vec<u32> = placeholder_ids(0, 2).collect();
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
    }
}
