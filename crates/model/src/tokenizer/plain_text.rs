//! Encoding text in which special-token strings are ordinary characters.
//!
//! [`Tokenizer::encode`] turns `<|im_end|>` written in the text into the control token, which is
//! right for a raw prompt but lets a chat message forge template markup. Chat message content is
//! encoded with [`Tokenizer::encode_as_text`] instead: the same tokenizer with special-token
//! matching switched off, so such strings become the model's ordinary BPE pieces.

use std::sync::{Arc, OnceLock};

use super::{Result, Tokenizer, TokenizerError};

/// A lazily built copy of the inner tokenizer that does not match special tokens; shared by the
/// clones of one [`Tokenizer`].
#[derive(Debug, Clone, Default)]
pub(super) struct PlainCopy(Arc<OnceLock<tokenizers::Tokenizer>>);

impl Tokenizer {
    /// Token ids of `text` with every special-token string in it encoded as plain text (no
    /// BOS/EOS added). Non-special added tokens are still matched.
    pub fn encode_as_text(&self, text: &str) -> Result<Vec<u32>> {
        let plain = self.plain.0.get_or_init(|| {
            let mut copy = self.inner.clone();
            copy.set_encode_special_tokens(true);
            copy
        });
        let encoding = plain
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of every special added token (`<|im_start|>`, `<s>`, ...).
    pub fn special_token_texts(&self) -> Vec<String> {
        self.inner
            .get_added_tokens_decoder()
            .into_values()
            .filter(|t| t.special)
            .map(|t| t.content)
            .collect()
    }

    /// Whether `text` contains the text of a special token.
    pub fn contains_special_text(&self, text: &str) -> bool {
        self.special_token_texts()
            .iter()
            .any(|s| !s.is_empty() && text.contains(s.as_str()))
    }
}
