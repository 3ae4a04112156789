//! llama.cpp's `draft-simple`: a draft model's greedy proposals.

use crate::{Batch, LlamaContext, LlamaError, Result, Vocab};

/// A draft model in its own context, kept in step with the model's sequence.
pub struct DraftModel<'m> {
    ctx: LlamaContext<'m>,
    /// Tokens in the draft's cache, in position order.
    cached: Vec<u32>,
    /// Most tokens proposed at once (llama.cpp's `--spec-draft-n-max`, default 3).
    pub n_max: usize,
    /// Fewer proposals are dropped (`--spec-draft-n-min`, default 0).
    pub n_min: usize,
    /// Proposing stops where the draft's top probability among its 10 best falls below this
    /// (`--spec-draft-p-min`, default 0).
    pub p_min: f32,
}

/// Checks the draft's vocabulary against the model's as llama.cpp does
/// (`common_speculative_are_compatible`): the same type and BOS/EOS use, at most 128 tokens
/// more or fewer, and the same text for every token id from 5 that both have.
pub fn check_vocabs(target: &Vocab, draft: &Vocab) -> Result<()> {
    let bad = |reason: String| LlamaError::Setting { flag: "--spec-draft-model".into(), reason };
    if target.vocab_type() != draft.vocab_type() {
        return Err(bad(format!(
            "the draft's vocabulary is {:?}, the model's {:?}: speculation needs the same",
            draft.vocab_type(),
            target.vocab_type()
        )));
    }
    let ends = |v: &Vocab| {
        (v.add_bos(), v.add_bos().then(|| v.bos()), v.add_eos(), v.add_eos().then(|| v.eos()))
    };
    if ends(target) != ends(draft) {
        return Err(bad("the draft's BOS/EOS tokens differ from the model's".into()));
    }
    let (nt, nd) = (target.n_tokens(), draft.n_tokens());
    if nt.abs_diff(nd) > 128 {
        return Err(bad(format!("the draft has {nd} tokens, the model {nt}: more than 128 apart")));
    }
    for id in 5..nt.min(nd) as u32 {
        if target.token_text(id) != draft.token_text(id) {
            return Err(bad(format!(
                "token {id} is {:?} in the draft, {:?} in the model",
                draft.token_text(id).unwrap_or(""),
                target.token_text(id).unwrap_or("")
            )));
        }
    }
    Ok(())
}

impl<'m> DraftModel<'m> {
    /// A draft over `ctx` (a context of the draft model, its cache empty), proposing at most
    /// `n_max` tokens.
    pub fn new(ctx: LlamaContext<'m>, n_max: usize, n_min: usize, p_min: f32) -> Self {
        DraftModel { ctx, cached: Vec::new(), n_max, n_min, p_min }
    }

    /// Up to `n_max` (and the draft's own `n_max`) greedy proposals after `history` and
    /// `last`: the draft's cache is first brought to `history` (its longest common prefix
    /// kept, the rest evaluated).
    pub fn draft(&mut self, history: &[u32], last: u32, n_max: usize) -> Result<Vec<u32>> {
        let n_max = n_max.min(self.n_max);
        if n_max == 0 {
            return Ok(Vec::new());
        }
        let keep = self.cached.iter().zip(history).take_while(|(a, b)| a == b).count();
        self.ctx.kv_cache_mut().seq_rm(Some(0), keep as i32, -1);
        self.cached.truncate(keep);
        let mut todo: Vec<u32> = history[keep..].to_vec();
        todo.push(last);
        let mut batch = Batch::new();
        for (i, &t) in todo.iter().enumerate() {
            batch.add(t, (keep + i) as i32, 0, i + 1 == todo.len());
        }
        self.ctx.decode(&batch)?;
        self.cached.extend_from_slice(&todo);
        let mut out = Vec::new();
        let mut row = todo.len() - 1;
        loop {
            let logits = self.ctx.logits_ith(row).expect("the batch's last token has logits");
            let (id, p) = top_of_ten(logits);
            if p < self.p_min {
                break;
            }
            out.push(id);
            if out.len() >= n_max {
                break;
            }
            self.ctx.decode(&Batch::from_tokens(&[id], self.cached.len() as i32, 0))?;
            self.cached.push(id);
            row = 0;
        }
        if out.len() < self.n_min {
            out.clear();
        }
        Ok(out)
    }

    /// The draft's context.
    pub fn context(&self) -> &LlamaContext<'m> {
        &self.ctx
    }
}

/// The most likely token and its probability among the 10 most likely (llama.cpp's draft
/// sampler: top-k 10, then the softmax of what is left).
fn top_of_ten(logits: &[f32]) -> (u32, f32) {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = 10.min(idx.len());
    let by = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
    idx.select_nth_unstable_by(k - 1, by);
    idx.truncate(k);
    idx.sort_by(by);
    let max = logits[idx[0] as usize];
    let sum: f32 = idx.iter().map(|&i| (logits[i as usize] - max).exp()).sum();
    (idx[0], 1.0 / sum)
}
