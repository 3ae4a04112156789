//! The reasoning budget (llama-server's `--reasoning-budget N`, a request's
//! `thinking_budget_tokens`): once a reply has spent N tokens inside `<think>`, the end of
//! thinking is forced (the budget message, if any, then `</think>`), and the reply goes on to
//! its answer. Forced tokens are decoded as if sampled, so the model and the reasoning parser
//! see the same closed block.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The reply has not opened `<think>` (and may still).
    Before,
    /// Thinking, with tokens left.
    Inside,
    /// Closed (by the model or by force), or the reply did not think.
    Done,
}

/// One reply's thinking budget.
#[derive(Debug, Clone)]
pub struct ThinkBudget {
    left: usize,
    state: State,
    /// The reply's recent text, to find the tags across token boundaries.
    tail: String,
    /// The tokens that close thinking.
    end: Vec<u32>,
}

impl ThinkBudget {
    /// A budget of `tokens`; `opened`: the prompt ended inside `<think>`; `end`: the tokens
    /// that close thinking (the budget message and `</think>`).
    pub fn new(tokens: usize, opened: bool, end: Vec<u32>) -> Self {
        let state = if opened { State::Inside } else { State::Before };
        ThinkBudget { left: tokens, state, tail: String::new(), end }
    }

    /// Tokens to force before anything is sampled (a budget of 0 in an opened block).
    pub fn start(&mut self) -> Option<Vec<u32>> {
        self.check_spent()
    }

    fn check_spent(&mut self) -> Option<Vec<u32>> {
        if self.state == State::Inside && self.left == 0 {
            self.state = State::Done;
            return Some(self.end.clone());
        }
        None
    }

    /// After a generated (or forced) token's text: the tokens to force next, once the budget
    /// is spent.
    pub fn on_token(&mut self, piece: &str) -> Option<Vec<u32>> {
        if self.state == State::Done {
            return None;
        }
        self.tail.push_str(piece);
        match self.state {
            State::Before => {
                let t = self.tail.trim_start();
                if t.contains(OPEN) {
                    self.state = State::Inside;
                    self.tail = t[t.find(OPEN).unwrap_or(0) + OPEN.len()..].to_string();
                    return self.check_spent();
                }
                if !t.is_empty() && !OPEN.starts_with(t) {
                    self.state = State::Done;
                }
                None
            }
            State::Inside => {
                if self.tail.contains(CLOSE) {
                    self.state = State::Done;
                    return None;
                }
                self.left = self.left.saturating_sub(1);
                // Keep only what could begin the closing tag.
                let mut cut = self.tail.len().saturating_sub(CLOSE.len());
                while !self.tail.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.tail.drain(..cut);
                self.check_spent()
            }
            State::Done => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_is_forced_after_the_budget() {
        let mut b = ThinkBudget::new(2, false, vec![9]);
        assert_eq!(b.start(), None);
        assert_eq!(b.on_token("<th"), None);
        assert_eq!(b.on_token("ink>"), None);
        assert_eq!(b.on_token(" a"), None);
        assert_eq!(b.on_token(" b"), Some(vec![9]));
        assert_eq!(b.on_token(" c"), None, "forced once");
    }

    #[test]
    fn an_opened_block_with_no_budget_closes_at_once() {
        let mut b = ThinkBudget::new(0, true, vec![9]);
        assert_eq!(b.start(), Some(vec![9]));
        assert_eq!(b.on_token("x"), None);
        let mut b = ThinkBudget::new(0, false, vec![9]);
        assert_eq!(b.start(), None);
        assert_eq!(b.on_token("<think>"), Some(vec![9]));
    }

    #[test]
    fn a_model_that_closes_in_time_or_never_thinks_is_left_alone() {
        let mut b = ThinkBudget::new(3, true, vec![9]);
        assert_eq!(b.on_token(" a"), None);
        assert_eq!(b.on_token("</th"), None);
        assert_eq!(b.on_token("ink>"), None);
        assert_eq!(b.on_token(" answer"), None);
        assert_eq!(b.on_token(" more"), None);
        let mut b = ThinkBudget::new(1, false, vec![9]);
        assert_eq!(b.on_token("Hello"), None);
        assert_eq!(b.on_token("<think>"), None, "the answer started: no thinking to limit");
    }
}
