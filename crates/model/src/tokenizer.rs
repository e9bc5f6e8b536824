//! Text ⇄ token ids, built on the `tokenizers` crate.
//!
//! A [`Tokenizer`] comes from either
//!
//! * GGUF metadata ([`Tokenizer::from_gguf_metadata`], through the small [`GgufMetadata`] trait so
//!   any metadata store can feed it), following llama.cpp's keys:
//!   - `tokenizer.ggml.model = "gpt2"`: byte-level BPE from `tokens` + `merges`, with the split
//!     regex chosen by `tokenizer.ggml.pre` (see [`ByteLevelPre`]);
//!   - `tokenizer.ggml.model = "llama"`: SentencePiece-style BPE: merges ranked by the merged
//!     token's score (llama.cpp's SPM algorithm), `<0xNN>` byte fallback, `▁` for spaces and an
//!     optional space prefix (`add_space_prefix`);
//!   - token types: control (3) and unknown (2) become special tokens, user-defined (4) plain
//!     added tokens; both are matched in the text before pre-tokenization;
//!   - BOS/EOS ids and `add_bos_token`/`add_eos_token` become a post-processor;
//! * a HF `tokenizer.json` (+ optional `tokenizer_config.json`) ([`Tokenizer::from_file`]).
//!
//! [`Tokenizer::eos_ids`] lists every end-of-generation id: EOS, `eot`/`eom` ids and well-known
//! end-of-turn special tokens (`<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, ...).

mod json_check;
mod plain_text;
mod token_env;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::{SpecialToken, TemplateProcessing};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

/// GGUF metadata keys read by [`Tokenizer::from_gguf_metadata`].
pub mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
    pub const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
    pub const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
    pub const UNK_ID: &str = "tokenizer.ggml.unknown_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
}

/// Read access to GGUF metadata, as much as the tokenizer needs. Implemented for the GGUF reader
/// and for in-memory maps in tests. Each getter returns `None` when the key is missing or holds
/// a different type.
pub trait GgufMetadata {
    /// A string value.
    fn get_str(&self, key: &str) -> Option<&str>;
    /// An array of strings.
    fn get_str_array(&self, key: &str) -> Option<Vec<&str>>;
    /// An unsigned integer that fits in `u32`.
    fn get_u32(&self, key: &str) -> Option<u32>;
    /// An array of `i32`.
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>>;
    /// An array of `f32`.
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>>;
    /// A boolean.
    fn get_bool(&self, key: &str) -> Option<bool>;
}

/// Errors building or using a [`Tokenizer`].
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata has no `{0}`")]
    MissingKey(&'static str),
    #[error("unsupported tokenizer model `{0}` (supported: gpt2, llama)")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer `{0}`")]
    UnsupportedPreTokenizer(String),
    #[error("`{key}` has {got} entries but the vocabulary has {expected}")]
    LengthMismatch {
        key: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("merge #{index} `{merge}` is not two space-separated tokens")]
    BadMerge { index: usize, merge: String },
    #[error("`{key}` = {id} is outside the vocabulary of {vocab}")]
    IdOutOfRange {
        key: &'static str,
        id: u32,
        vocab: usize,
    },
    #[error("building the tokenizer failed: {0}")]
    Build(String),
    #[error("reading {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("encoding failed: {0}")]
    Encode(String),
}

impl TokenizerError {
    fn build(e: impl std::fmt::Display) -> Self {
        TokenizerError::Build(e.to_string())
    }
}

type Result<T> = std::result::Result<T, TokenizerError>;

/// llama.cpp token types (`tokenizer.ggml.token_type`).
mod token_type {
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const BYTE: i32 = 6;
}

/// What errors call a tokenizer parsed from memory ([`Tokenizer::from_json_text`]).
const MEMORY_NAME: &str = "<memory>";

/// Special tokens that end a turn or a document in common chat formats.
const END_OF_GENERATION: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "<|return|>",
    "<EOT>",
];

/// Llama 3 (and the tiktoken cl100k family): numbers in runs of up to three digits.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2: like Llama 3 but every digit is its own piece.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The byte-level split families selected by `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteLevelPre {
    /// GPT-2's regex (`default`, `gpt2`, `mpt`, `olmo`, or no key).
    Gpt2,
    /// Every digit isolated, then GPT-2's regex (`smollm`, `starcoder`, `refact`, `codeshell`),
    /// as in SmolLM's and StarCoder's `tokenizer.json` (a `Digits` pre-tokenizer first).
    DigitsThenGpt2,
    /// Llama 3's regex (`llama3`, `llama-v3`, `llama-bpe`), with whole-word vocabulary hits
    /// bypassing merges (`ignore_merges`) as in its `tokenizer.json`.
    Llama3,
    /// Qwen2's regex (`qwen2`, `deepseek-r1-qwen`).
    Qwen2,
}

impl ByteLevelPre {
    /// Maps a `tokenizer.ggml.pre` value (absent = GPT-2).
    pub fn from_name(name: Option<&str>) -> Result<Self> {
        Ok(match name {
            None | Some("default" | "gpt2" | "gpt-2" | "mpt" | "olmo") => ByteLevelPre::Gpt2,
            Some("smollm" | "starcoder" | "refact" | "codeshell") => ByteLevelPre::DigitsThenGpt2,
            Some("llama3" | "llama-v3" | "llama-bpe") => ByteLevelPre::Llama3,
            Some("qwen2" | "deepseek-r1-qwen") => ByteLevelPre::Qwen2,
            Some(other) => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_string())),
        })
    }

    fn pre_tokenizer(self) -> Result<PreTokenizerWrapper> {
        let byte_level = |use_regex| ByteLevel::new(false, true, use_regex).into();
        let split = |re: &str| -> Result<PreTokenizerWrapper> {
            let split = Split::new(
                SplitPattern::Regex(re.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(TokenizerError::build)?;
            Ok(PreSequence::new(vec![split.into(), byte_level(false)]).into())
        };
        match self {
            ByteLevelPre::Gpt2 => Ok(byte_level(true)),
            ByteLevelPre::DigitsThenGpt2 => {
                Ok(PreSequence::new(vec![Digits::new(true).into(), byte_level(true)]).into())
            }
            ByteLevelPre::Llama3 => split(LLAMA3_SPLIT),
            ByteLevelPre::Qwen2 => split(QWEN2_SPLIT),
        }
    }
}

/// A [`Tokenizer`] as plain data, to rebuild it in another process ([`Tokenizer::to_spec`],
/// [`Tokenizer::from_spec`]): the HF `tokenizer.json` text plus the ids and template it does
/// not carry.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenizerSpec {
    /// HF `tokenizer.json` text.
    pub json: String,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Every end-of-generation id.
    pub eog: Vec<u32>,
    /// Jinja chat template source.
    pub chat_template: Option<String>,
}

/// A tokenizer plus the ids and template the serving path needs.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    eog: Vec<u32>,
    chat_template: Option<String>,
    /// `inner` with special-token matching off, built on first use (see [`Tokenizer::encode_as_text`]).
    plain: plain_text::PlainCopy,
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes.
    pub fn from_gguf_metadata(meta: &impl GgufMetadata) -> Result<Self> {
        let model = meta
            .get_str(keys::MODEL)
            .ok_or(TokenizerError::MissingKey(keys::MODEL))?;
        let tokens = meta
            .get_str_array(keys::TOKENS)
            .ok_or(TokenizerError::MissingKey(keys::TOKENS))?;
        let types = match meta.get_i32_array(keys::TOKEN_TYPE) {
            Some(t) if t.len() != tokens.len() => {
                return Err(TokenizerError::LengthMismatch {
                    key: keys::TOKEN_TYPE,
                    expected: tokens.len(),
                    got: t.len(),
                })
            }
            t => t,
        };
        let vocab = tokens.len();
        let id = |key: &'static str| -> Result<Option<u32>> {
            match meta.get_u32(key) {
                Some(id) if id as usize >= vocab => {
                    Err(TokenizerError::IdOutOfRange { key, id, vocab })
                }
                other => Ok(other),
            }
        };
        let (bos, eos, unk) = (id(keys::BOS_ID)?, id(keys::EOS_ID)?, id(keys::UNK_ID)?);
        let mut inner = match model {
            "gpt2" => byte_level_bpe(meta, &tokens)?,
            "llama" => sentencepiece_bpe(meta, &tokens, types.as_deref(), unk)?,
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        if let Some(types) = &types {
            add_typed_tokens(&mut inner, &tokens, types);
        }
        let add_bos = meta.get_bool(keys::ADD_BOS).unwrap_or(model == "llama");
        let add_eos = meta.get_bool(keys::ADD_EOS).unwrap_or(false);
        let piece = |id: Option<u32>| id.map(|i| (i, tokens[i as usize].to_string()));
        let processor = bos_eos_processor(
            piece(bos).filter(|_| add_bos),
            piece(eos).filter(|_| add_eos),
        )?;
        inner.with_post_processor(Some(processor));
        let extra = [id(keys::EOT_ID)?, id(keys::EOM_ID)?];
        let eog = end_of_generation_ids(&inner, eos, &extra);
        Ok(Tokenizer {
            inner,
            bos,
            eos,
            eog,
            chat_template: meta.get_str(keys::CHAT_TEMPLATE).map(str::to_string),
            plain: Default::default(),
        })
    }

    /// Loads a HF `tokenizer.json`, with BOS/EOS and the chat template from an optional
    /// `tokenizer_config.json`. Without the config, EOS is the first well-known end-of-turn token
    /// present and BOS is unknown.
    pub fn from_file(tokenizer_json: &Path, tokenizer_config: Option<&Path>) -> Result<Self> {
        let text = std::fs::read_to_string(tokenizer_json).map_err(|e| TokenizerError::Load {
            path: tokenizer_json.to_path_buf(),
            message: e.to_string(),
        })?;
        let inner = parse_hf_json(&text, tokenizer_json)?;
        let config = match tokenizer_config {
            Some(path) => TokenizerConfig::read(path)?,
            None => TokenizerConfig::default(),
        };
        Ok(Self::with_config(inner, config))
    }

    /// [`Tokenizer::from_file`] over texts already in memory: a HF `tokenizer.json` and an
    /// optional `tokenizer_config.json`. Errors name the file `<memory>`.
    pub fn from_json_text(tokenizer_json: &str, tokenizer_config: Option<&str>) -> Result<Self> {
        let path = Path::new(MEMORY_NAME);
        let inner = parse_hf_json(tokenizer_json, path)?;
        let config = match tokenizer_config {
            Some(text) => TokenizerConfig::parse(text, path)?,
            None => TokenizerConfig::default(),
        };
        Ok(Self::with_config(inner, config))
    }

    /// The tokenizer `inner` with the ids and template of `config`.
    fn with_config(inner: tokenizers::Tokenizer, config: TokenizerConfig) -> Self {
        let lookup = |t: &Option<String>| t.as_deref().and_then(|t| inner.token_to_id(t));
        let bos = lookup(&config.bos_token);
        let eos = lookup(&config.eos_token)
            .or_else(|| END_OF_GENERATION.iter().find_map(|t| special_id(&inner, t)));
        let eog = end_of_generation_ids(&inner, eos, &[]);
        Tokenizer {
            inner,
            bos,
            eos,
            eog,
            chat_template: config.chat_template,
            plain: Default::default(),
        }
    }

    /// Token ids of `text`. Special tokens written in the text are always recognized; with
    /// `add_special`, BOS/EOS are added as the model's configuration says.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, add_special)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`; special tokens are left out when `skip_special`. Ids outside the vocabulary
    /// are skipped. Incomplete UTF-8 (a partial byte sequence) decodes to U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        match self.inner.decode(ids, skip_special) {
            Ok(text) => text,
            Err(e) => {
                // The decoders built here (byte-level, byte fallback, replace, fuse, strip) cannot
                // fail; a tokenizer.json with another decoder might, and then nothing is emitted.
                tracing::warn!(error = %e, "decode failed");
                String::new()
            }
        }
    }

    /// The vocabulary entry of `id` as stored (e.g. `Ġhello`, `▁the`, `<0x0A>`, `<|im_end|>`).
    pub fn token_to_piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary entry, spelled as stored.
    pub fn piece_to_id(&self, piece: &str) -> Option<u32> {
        self.inner.token_to_id(piece)
    }

    /// Beginning-of-sequence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The model's EOS id, if known.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Every id that ends generation (EOS first, then the rest ascending).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eog
    }

    /// BOS as text, for chat templates.
    pub fn bos_token(&self) -> Option<String> {
        self.bos.and_then(|id| self.token_to_piece(id))
    }

    /// EOS as text, for chat templates.
    pub fn eos_token(&self) -> Option<String> {
        self.eos.and_then(|id| self.token_to_piece(id))
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The Jinja chat template source, if the model ships one (or one was set).
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Replaces the chat template: the model family's built-in one where the file has none, or
    /// one the operator gives (`--chat-template`).
    pub fn set_chat_template(&mut self, source: impl Into<String>) {
        self.chat_template = Some(source.into());
    }

    /// This tokenizer as plain data.
    pub fn to_spec(&self) -> Result<TokenizerSpec> {
        Ok(TokenizerSpec {
            json: self.to_json(false)?,
            bos: self.bos,
            eos: self.eos,
            eog: self.eog.clone(),
            chat_template: self.chat_template.clone(),
        })
    }

    /// Rebuilds a tokenizer from [`Tokenizer::to_spec`]'s data; ids outside the vocabulary are
    /// refused.
    pub fn from_spec(spec: &TokenizerSpec) -> Result<Self> {
        let inner = parse_hf_json(&spec.json, Path::new(MEMORY_NAME))?;
        let vocab = inner.get_vocab_size(true);
        let check = |key: &'static str, id: u32| {
            if (id as usize) < vocab {
                Ok(id)
            } else {
                Err(TokenizerError::IdOutOfRange { key, id, vocab })
            }
        };
        let bos = spec.bos.map(|id| check("bos", id)).transpose()?;
        let eos = spec.eos.map(|id| check("eos", id)).transpose()?;
        let eog = spec
            .eog
            .iter()
            .map(|&id| check("eog", id))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tokenizer {
            inner,
            bos,
            eos,
            eog,
            chat_template: spec.chat_template.clone(),
            plain: Default::default(),
        })
    }

    /// The tokenizer as HF `tokenizer.json` text (what `tokenizers` serializes).
    pub fn to_json(&self, pretty: bool) -> Result<String> {
        self.inner.to_string(pretty).map_err(TokenizerError::build)
    }
}

impl kestrel_engine::output::TokenDecoder for Tokenizer {
    /// Decodes with special tokens skipped, as streamed output should be.
    fn decode(&self, ids: &[u32]) -> String {
        Tokenizer::decode(self, ids, true)
    }
    /// Decodes with special tokens written out (`skip_special_tokens: false`).
    fn decode_with_special(&self, ids: &[u32]) -> String {
        Tokenizer::decode(self, ids, false)
    }
}

fn byte_level_bpe(meta: &impl GgufMetadata, tokens: &[&str]) -> Result<tokenizers::Tokenizer> {
    let pre = ByteLevelPre::from_name(meta.get_str(keys::PRE))?;
    let merges = parse_merges(
        &meta
            .get_str_array(keys::MERGES)
            .ok_or(TokenizerError::MissingKey(keys::MERGES))?,
    )?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab_map(tokens), merges)
        .ignore_merges(pre == ByteLevelPre::Llama3)
        .build()
        .map_err(TokenizerError::build)?;
    let mut tk = tokenizers::Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(pre.pre_tokenizer()?));
    tk.with_decoder(Some(DecoderWrapper::from(ByteLevel::default())));
    Ok(tk)
}

fn sentencepiece_bpe(
    meta: &impl GgufMetadata,
    tokens: &[&str],
    types: Option<&[i32]>,
    unk: Option<u32>,
) -> Result<tokenizers::Tokenizer> {
    let merges = match meta.get_str_array(keys::MERGES) {
        Some(m) => parse_merges(&m)?,
        None => {
            let scores = meta
                .get_f32_array(keys::SCORES)
                .ok_or(TokenizerError::MissingKey(keys::SCORES))?;
            if scores.len() != tokens.len() {
                return Err(TokenizerError::LengthMismatch {
                    key: keys::SCORES,
                    expected: tokens.len(),
                    got: scores.len(),
                });
            }
            merges_from_scores(tokens, &scores, types)
        }
    };
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab_map(tokens), merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(tokens[unk as usize].to_string());
    }
    let mut tk = tokenizers::Tokenizer::new(builder.build().map_err(TokenizerError::build)?);
    let space_prefix = meta.get_bool(keys::ADD_SPACE_PREFIX).unwrap_or(true);
    tk.with_normalizer(Some(spm_normalizer(space_prefix)?));
    tk.with_decoder(Some(spm_decoder(space_prefix)?));
    Ok(tk)
}

/// Spaces become `▁`; with `space_prefix`, every text segment (the text between special tokens,
/// as llama.cpp does) gets a leading `▁`.
fn spm_normalizer(space_prefix: bool) -> Result<NormalizerWrapper> {
    let replace = Replace::new(" ", "▁").map_err(TokenizerError::build)?;
    if !space_prefix {
        return Ok(replace.into());
    }
    let prepend = Prepend::new("▁".to_string());
    Ok(tokenizers::normalizers::Sequence::new(vec![prepend.into(), replace.into()]).into())
}

/// `▁` back to spaces, `<0xNN>` runs back to bytes, and the added leading space removed.
fn spm_decoder(space_prefix: bool) -> Result<DecoderWrapper> {
    let replace = Replace::new("▁", " ").map_err(TokenizerError::build)?;
    let mut steps: Vec<DecoderWrapper> = vec![
        replace.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if space_prefix {
        steps.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(steps).into())
}

fn vocab_map(tokens: &[&str]) -> Vocab {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u32))
        .collect()
}

fn parse_merges(merges: &[&str]) -> Result<Vec<(String, String)>> {
    merges
        .iter()
        .enumerate()
        .map(|(index, m)| match m.split_once(' ') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
            _ => Err(TokenizerError::BadMerge {
                index,
                merge: m.to_string(),
            }),
        })
        .collect()
}

/// SentencePiece files carry scores instead of merges. llama.cpp's SPM tokenizer repeatedly
/// joins the adjacent pair whose concatenation is the highest-scoring vocabulary entry; BPE with
/// every `(left, right)` split of each entry ranked by that entry's score does the same.
/// Control, unknown and byte tokens are never merge results.
fn merges_from_scores(
    tokens: &[&str],
    scores: &[f32],
    types: Option<&[i32]>,
) -> Vec<(String, String)> {
    let ids: HashMap<&str, u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (*t, i as u32))
        .collect();
    let mergeable = |i: usize| {
        !types.is_some_and(|t| {
            matches!(
                t[i],
                token_type::CONTROL | token_type::UNKNOWN | token_type::BYTE
            )
        })
    };
    let mut ranked: Vec<(f32, u32, u32, u32)> = Vec::new();
    for (i, token) in tokens.iter().enumerate().filter(|(i, _)| mergeable(*i)) {
        for (cut, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(cut);
            if let (Some(&l), Some(&r)) = (ids.get(left), ids.get(right)) {
                ranked.push((scores[i], i as u32, l, r));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked
        .into_iter()
        .map(|(_, _, l, r)| {
            (
                tokens[l as usize].to_string(),
                tokens[r as usize].to_string(),
            )
        })
        .collect()
}

/// Control and unknown tokens become special added tokens, user-defined ones plain added tokens;
/// both are matched whole in the input. They already have ids in the model vocabulary, so the
/// vocabulary does not grow.
fn add_typed_tokens(tk: &mut tokenizers::Tokenizer, tokens: &[&str], types: &[i32]) {
    let pick = |wanted: &[i32], special: bool| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(types)
            .filter(|(t, ty)| wanted.contains(ty) && !t.is_empty())
            .map(|(t, _)| AddedToken::from(t.to_string(), special).normalized(false))
            .collect()
    };
    tk.add_special_tokens(&pick(&[token_type::CONTROL, token_type::UNKNOWN], true));
    tk.add_tokens(&pick(&[token_type::USER_DEFINED], false));
}

/// A post-processor that adds BOS in front and/or EOS at the end (`add_special = true`).
fn bos_eos_processor(
    bos: Option<(u32, String)>,
    eos: Option<(u32, String)>,
) -> Result<TemplateProcessing> {
    let mut single = Vec::new();
    let mut pair = Vec::new();
    let mut specials = Vec::new();
    if let Some((id, text)) = bos {
        single.push("BOS".to_string());
        pair.push("BOS".to_string());
        specials.push(
            SpecialToken::new("BOS".into(), vec![id], vec![text]).map_err(TokenizerError::build)?,
        );
    }
    single.push("$A".to_string());
    pair.push("$A".to_string());
    if let Some((id, text)) = &eos {
        single.push("EOS".to_string());
        pair.push("EOS".to_string());
        specials.push(
            SpecialToken::new("EOS".into(), vec![*id], vec![text.clone()])
                .map_err(TokenizerError::build)?,
        );
    }
    pair.push("$B:1".to_string());
    if eos.is_some() {
        pair.push("EOS:1".to_string());
    }
    TemplateProcessing::builder()
        .try_single(single)
        .map_err(TokenizerError::build)?
        .try_pair(pair)
        .map_err(TokenizerError::build)?
        .special_tokens(specials)
        .build()
        .map_err(TokenizerError::build)
}

/// The id of `content` if it is a special added token.
fn special_id(tk: &tokenizers::Tokenizer, content: &str) -> Option<u32> {
    tk.get_added_tokens_decoder()
        .into_iter()
        .find(|(_, t)| t.special && t.content == content)
        .map(|(id, _)| id)
}

/// Harmony vocabularies (gpt-oss: both `<|return|>` and `<|call|>` are special tokens): a reply
/// ends at `<|return|>` or `<|call|>`, while `<|end|>` only ends one of its messages, so it is no
/// end of generation there (llama.cpp's rule for these vocabularies).
fn harmony_ends(tk: &tokenizers::Tokenizer, ids: &mut Vec<u32>) {
    let (Some(_), Some(call)) = (special_id(tk, "<|return|>"), special_id(tk, "<|call|>")) else {
        return;
    };
    if let Some(end) = special_id(tk, "<|end|>") {
        ids.retain(|&id| id != end);
    }
    ids.push(call);
}

/// EOS first, then the other end-of-generation ids (explicit ones and well-known special tokens)
/// in ascending order.
fn end_of_generation_ids(
    tk: &tokenizers::Tokenizer,
    eos: Option<u32>,
    extra: &[Option<u32>],
) -> Vec<u32> {
    let mut rest: Vec<u32> = extra.iter().flatten().copied().collect();
    rest.extend(END_OF_GENERATION.iter().filter_map(|t| special_id(tk, t)));
    harmony_ends(tk, &mut rest);
    rest.sort_unstable();
    rest.dedup();
    rest.retain(|id| Some(*id) != eos);
    eos.into_iter().chain(rest).collect()
}

/// A HF `tokenizer.json` text (read from `path`, named in errors). Its JSON syntax is checked
/// first: `tokenizers` 0.21 panics (`expect("Helper")`) on a syntax error inside a `decoder`
/// value instead of returning an error.
fn parse_hf_json(text: &str, path: &Path) -> Result<tokenizers::Tokenizer> {
    let load_err = |message: String| TokenizerError::Load {
        path: path.to_path_buf(),
        message,
    };
    json_check::check_json(text).map_err(load_err)?;
    text.parse()
        .map_err(|e: tokenizers::Error| load_err(e.to_string()))
}

/// The parts of `tokenizer_config.json` we use.
#[derive(Debug, Default)]
struct TokenizerConfig {
    bos_token: Option<String>,
    eos_token: Option<String>,
    chat_template: Option<String>,
}

impl TokenizerConfig {
    fn read(path: &Path) -> Result<Self> {
        let load_err = |message: String| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| load_err(e.to_string()))?;
        Self::parse(&text, path)
    }

    /// The config in `text`, read from `path` (named in errors).
    fn parse(text: &str, path: &Path) -> Result<Self> {
        let load_err = |message: String| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        };
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| load_err(e.to_string()))?;
        Ok(TokenizerConfig {
            bos_token: token_text(&json["bos_token"]),
            eos_token: token_text(&json["eos_token"]),
            chat_template: chat_template_text(&json["chat_template"]),
        })
    }
}

/// A special token given as `"<s>"` or as `{"content": "<s>", ...}`.
fn token_text(v: &serde_json::Value) -> Option<String> {
    v.as_str()
        .or_else(|| v.get("content").and_then(|c| c.as_str()))
        .map(str::to_string)
}

/// A chat template given as a string, or as a list of `{name, template}` (the `default` one, else
/// the first).
fn chat_template_text(v: &serde_json::Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_string());
    }
    let list = v.as_array()?;
    let named = |name: &str| {
        list.iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
    };
    named("default")
        .or_else(|| list.first())
        .and_then(|t| t.get("template"))
        .and_then(|t| t.as_str())
        .map(str::to_string)
}
