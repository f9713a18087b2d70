//! The engine: one llama.cpp model and context on one thread, answering one job at a time.
//! It keeps the KV cache of the previous prompt, so a follow-up turn only processes what changed.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context as _, Result};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use serde::Serialize;
use serde_json::Value;

use crate::chat::{self, ToolTemplate, Turn};

/// Sampling for one job.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// The seed of the random choice.
    pub seed: u32,
    /// The most tokens to write.
    pub max_tokens: u32,
}

/// What a job streams back.
#[derive(Debug)]
pub enum Out {
    /// A piece of text (whole UTF-8 characters).
    Text(String),
    /// The end.
    Done {
        /// `stop`, `length` or `cancelled`.
        finish: &'static str,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Prompt tokens taken from the cache rather than processed.
        cached_tokens: usize,
        /// Written tokens.
        completion_tokens: usize,
    },
    /// It failed.
    Error(String),
}

/// A request for the engine.
pub struct Job {
    /// The conversation.
    pub turns: Vec<Turn>,
    /// The tools offered (OpenAI function specs); ignored when the model cannot call tools.
    pub tools: Vec<Value>,
    /// How to sample.
    pub sampling: Sampling,
    /// Where the answer goes.
    pub out: tokio::sync::mpsc::Sender<Out>,
    /// Set when the client went away: generation stops before the next token.
    pub cancel: Arc<AtomicBool>,
    /// A housekeeping call: answered in the cache's second sequence, so the conversation in
    /// the first stays for the next reply; its prompt goes in small batches, so that a client
    /// that gives way is let go within one of them.
    pub housekeeping: bool,
    /// A warm-up: the prompt is processed into the cache (trimmed for the answer's room as the
    /// question's will be) and nothing is written.
    pub prefill: bool,
}

/// How a decode that found no free cache cell fails.
const NO_ROOM: &str = "no room left in the context";

/// The cache sequence of replies, which keeps the conversation from one turn to the next.
const REPLIES: usize = 0;
/// The sequence of housekeeping calls, emptied after each.
const HOUSEKEEPING: usize = 1;
/// A housekeeping prompt's batch: small, so that giving way is quick.
const HOUSEKEEPING_BATCH: usize = 32;

/// What `--check` prints about a model file.
#[derive(Debug, Serialize)]
pub struct ModelInfo {
    /// The file.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// `general.architecture`, e.g. llama or qwen2.
    pub architecture: String,
    /// `general.name`.
    pub name: String,
    /// The quantisation, from `general.file_type`.
    pub quantization: String,
    /// The context length it was trained for.
    pub context_length: u32,
    /// Parameters.
    pub parameters: u64,
    /// Whether it carries a chat template.
    pub chat_template: bool,
    /// Whether its template offers tools (Hermes-style `<tool_call>`).
    pub tools: bool,
    /// Whether requests' tools are offered to it, with the `--tools` given.
    pub tools_offered: bool,
}

/// Checks that `path` looks like a whole GGUF file before llama.cpp is given it.
pub fn check_file(path: &Path) -> Result<u64> {
    use std::io::Read;
    let meta = std::fs::metadata(path)
        .with_context(|| format!("the model file {} cannot be read", path.display()))?;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .with_context(|| format!("the model file {} cannot be read", path.display()))?;
    if &magic != b"GGUF" {
        bail!("{} is not a GGUF model file", path.display());
    }
    Ok(meta.len())
}

/// The name llama.cpp gives a `general.file_type` value.
fn file_type_name(code: &str) -> String {
    let name = match code.trim() {
        "0" => "F32",
        "1" => "F16",
        "2" => "Q4_0",
        "3" => "Q4_1",
        "7" => "Q8_0",
        "8" => "Q5_0",
        "9" => "Q5_1",
        "10" => "Q2_K",
        "11" => "Q3_K_S",
        "12" => "Q3_K_M",
        "13" => "Q3_K_L",
        "14" => "Q4_K_S",
        "15" => "Q4_K_M",
        "16" => "Q5_K_S",
        "17" => "Q5_K_M",
        "18" => "Q6_K",
        "32" => "BF16",
        other => return format!("file type {other}"),
    };
    name.to_string()
}

/// Loads the model (after [`check_file`]); llama.cpp's own checks catch a truncated file.
pub fn load(backend: &LlamaBackend, path: &Path) -> Result<LlamaModel> {
    check_file(path)?;
    LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).map_err(|err| {
        anyhow!(
            "the model file {} could not be loaded ({err}); it may be truncated or of an unsupported architecture",
            path.display()
        )
    })
}

/// Describes a loaded model.
pub fn info(model: &LlamaModel, path: &Path, tools_wanted: bool) -> ModelInfo {
    let tools = tool_template(model).is_some();
    let arch = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    ModelInfo {
        path: path.display().to_string(),
        size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        name: model.meta_val_str("general.name").unwrap_or_default(),
        quantization: model
            .meta_val_str("general.file_type")
            .map(|c| file_type_name(&c))
            .unwrap_or_else(|_| "unknown".into()),
        context_length: model.n_ctx_train(),
        parameters: model.n_params(),
        chat_template: model.chat_template(None).is_ok(),
        tools,
        tools_offered: tools && tools_wanted,
        architecture: arch,
    }
}

/// The model's own template, if it offers tools.
fn tool_template(model: &LlamaModel) -> Option<ToolTemplate> {
    let source = model.chat_template(None).ok()?.to_string().ok()?;
    ToolTemplate::new(&source)
}

/// The engine's state between jobs.
pub struct Engine<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    template: LlamaChatTemplate,
    /// The model's own template, rendered by minijinja, when it offers tools.
    tools: Option<ToolTemplate>,
    /// Per sequence, the tokens whose keys and values are in the cache, in order from position 0.
    cached: [Vec<LlamaToken>; 2],
    batch_size: usize,
}

impl<'m> Engine<'m> {
    /// A context of `n_ctx` tokens on `threads` threads; `tools`: whether a request's tools are
    /// offered (when the template can).
    pub fn new(
        backend: &LlamaBackend,
        model: &'m LlamaModel,
        n_ctx: u32,
        threads: i32,
        tools: bool,
    ) -> Result<Engine<'m>> {
        let n_ctx = n_ctx.min(model.n_ctx_train().max(512));
        let batch_size = 512;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(batch_size as u32)
            // Two sequences in one cache of n_ctx cells: the replies' and housekeeping's.
            .with_n_seq_max(2)
            .with_kv_unified(true)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = model
            .new_context(backend, params)
            .map_err(|e| anyhow!("cannot make a context of {n_ctx} tokens: {e}"))?;
        // Both default models use ChatML; a model without a template gets ChatML too.
        let template = model
            .chat_template(None)
            .or_else(|_| LlamaChatTemplate::new("chatml"))
            .map_err(|e| anyhow!("no usable chat template: {e}"))?;
        let tools = if tools { tool_template(model) } else { None };
        Ok(Engine {
            model,
            ctx,
            template,
            tools,
            cached: [Vec::new(), Vec::new()],
            batch_size,
        })
    }

    /// The context size in tokens.
    pub fn n_ctx(&self) -> usize {
        self.ctx.n_ctx() as usize
    }

    /// Whether this model is offered the tools a request carries.
    pub fn offers_tools(&self) -> bool {
        self.tools.is_some()
    }

    fn render(&self, turns: &[Turn], tools: &[Value]) -> Result<Vec<LlamaToken>> {
        if let Some(template) = &self.tools {
            match template.render(turns, tools) {
                Ok(prompt) => {
                    return Ok(self.model.vocab().tokenize(prompt.as_bytes(), true, true))
                }
                Err(err) => {
                    tracing::warn!("the model's own template failed ({err:#}); using llama.cpp's")
                }
            }
        }
        let turns = chat::without_tools(turns);
        let messages = turns
            .iter()
            .map(|t| LlamaChatMessage::new(t.role.clone(), t.content.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow!("a message holds a NUL character: {e}"))?;
        let prompt = self
            .model
            .apply_chat_template(&self.template, &messages, true)
            .map_err(|e| anyhow!("the chat template failed: {e}"))?;
        Ok(self.model.vocab().tokenize(prompt.as_bytes(), true, true))
    }

    /// The prompt's tokens, trimmed to leave room for the answer: the oldest turns go first, then,
    /// if one message alone is too long, its beginning. Never an error for length.
    pub fn prompt_tokens(
        &self,
        turns: &[Turn],
        tools: &[Value],
        max_tokens: u32,
    ) -> Result<Vec<LlamaToken>> {
        let n_ctx = self.n_ctx();
        let room = (max_tokens as usize).clamp(16, n_ctx / 2);
        let budget = n_ctx - room;
        let mut turns = turns.to_vec();
        loop {
            let tokens = self.render(&turns, tools)?;
            if tokens.len() <= budget {
                return Ok(tokens);
            }
            let first_chat = turns.iter().position(|t| t.role != "system");
            let chat_turns = turns.iter().filter(|t| t.role != "system").count();
            match first_chat {
                Some(i) if chat_turns > 1 => {
                    turns.remove(i);
                }
                _ => {
                    // One message too long for the window: keep its end, the freshest words.
                    let Some(last) = turns.last_mut() else {
                        bail!("nothing to answer");
                    };
                    let vocab = self.model.vocab();
                    let own = vocab.tokenize(last.content.as_bytes(), false, false);
                    let over = tokens.len() - budget;
                    if own.len() <= over + 8 {
                        // The system part alone is too long: drop it.
                        if turns.len() > 1 && turns[0].role == "system" {
                            turns.remove(0);
                            continue;
                        }
                        bail!("the context window of {n_ctx} tokens is too small for any answer");
                    }
                    let keep = &own[over + 8..];
                    let mut text = Vec::new();
                    for t in keep {
                        text.extend(vocab.token_to_piece(*t, false, None));
                    }
                    last.content = String::from_utf8_lossy(&text).into_owned();
                }
            }
        }
    }

    /// Answers one job, streaming its text; returns when done, cancelled or failed.
    pub fn run(&mut self, job: Job) {
        let out = job.out.clone();
        if let Err(err) = self.generate(job) {
            let _ = out.blocking_send(Out::Error(format!("{err:#}")));
        }
    }

    fn generate(&mut self, job: Job) -> Result<()> {
        if !job.housekeeping {
            return self.generate_in(&job, REPLIES);
        }
        let answered = self.generate_in(&job, HOUSEKEEPING);
        let answered = match answered {
            // No room beside the conversation: the conversation's cache makes way.
            Err(err) if err.to_string().starts_with(NO_ROOM) => {
                tracing::debug!("no room for housekeeping beside the conversation: {err:#}");
                self.forget(REPLIES)?;
                self.forget(HOUSEKEEPING)?;
                self.generate_in(&job, HOUSEKEEPING)
            }
            other => other,
        };
        self.forget(HOUSEKEEPING)?;
        answered
    }

    /// Empties one sequence of the cache.
    fn forget(&mut self, seq: usize) -> Result<()> {
        self.ctx
            .clear_kv_cache_seq(Some(seq as u32), None, None)
            .map_err(|e| anyhow!("cannot clear the cache: {e}"))?;
        self.cached[seq].clear();
        Ok(())
    }

    fn generate_in(&mut self, job: &Job, seq: usize) -> Result<()> {
        let tokens = self.prompt_tokens(&job.turns, &job.tools, job.sampling.max_tokens)?;
        let n_ctx = self.n_ctx();
        // Reuse the cache for the prefix this prompt shares with the last one.
        let mut common = self.cached[seq]
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count();
        if common == tokens.len() {
            common -= 1; // the last prompt token is decoded again for its logits
        }
        self.ctx
            .clear_kv_cache_seq(Some(seq as u32), Some(common as u32), None)
            .map_err(|e| anyhow!("cannot trim the cache: {e}"))?;
        self.cached[seq].truncate(common);
        let id = seq as i32;

        let mut batch = LlamaBatch::new(self.batch_size, 1);
        let mut pos = common;
        let size = if seq == HOUSEKEEPING {
            HOUSEKEEPING_BATCH
        } else {
            self.batch_size
        };
        for chunk in tokens[common..].chunks(size) {
            if job.cancel.load(Ordering::Relaxed) {
                self.finish(job, "cancelled", tokens.len(), common, 0);
                return Ok(());
            }
            batch.clear();
            for (i, token) in chunk.iter().enumerate() {
                let last = pos + i + 1 == tokens.len();
                batch.add(*token, (pos + i) as i32, &[id], last)?;
            }
            self.ctx.decode(&mut batch).map_err(|e| match e {
                llama_cpp_2::DecodeError::NoKvCacheSlot => anyhow!("{NO_ROOM}"),
                e => anyhow!("the prompt could not be processed: {e}"),
            })?;
            self.cached[seq].extend_from_slice(chunk);
            pos += chunk.len();
        }

        let s = &job.sampling;
        let mut sampler = if s.temperature <= 0.0 {
            LlamaSampler::greedy()
        } else {
            LlamaSampler::chain_simple([
                LlamaSampler::top_p(s.top_p.clamp(0.01, 1.0), 1),
                LlamaSampler::temp(s.temperature),
                LlamaSampler::dist(s.seed),
            ])
        };
        let vocab = self.model.vocab();
        let mut pending: Vec<u8> = Vec::new();
        let mut written = 0usize;
        let finish = loop {
            if job.prefill || written >= s.max_tokens as usize {
                break "length";
            }
            if pos >= n_ctx {
                break "length";
            }
            if job.cancel.load(Ordering::Relaxed) {
                break "cancelled";
            }
            let token = sampler.sample(&self.ctx, batch.n_tokens() - 1);
            sampler.accept(token);
            if vocab.is_eog(token) {
                break "stop";
            }
            written += 1;
            let mut piece = vocab.token_to_piece(token, false, None);
            if piece.is_empty() && self.tools.is_some() {
                // The tool tags are control tokens in some models: they are shown, other
                // control tokens are not.
                let special = vocab.token_to_piece(token, true, None);
                if chat::is_tool_tag(&special) {
                    piece = special;
                }
            }
            pending.extend(piece);
            let text = take_utf8(&mut pending);
            if !text.is_empty() && job.out.blocking_send(Out::Text(text)).is_err() {
                break "cancelled"; // the client went away
            }
            batch.clear();
            batch.add(token, pos as i32, &[id], true)?;
            self.ctx.decode(&mut batch).map_err(|e| match e {
                llama_cpp_2::DecodeError::NoKvCacheSlot => anyhow!("{NO_ROOM}"),
                e => anyhow!("generation failed: {e}"),
            })?;
            self.cached[seq].push(token);
            pos += 1;
        };
        if !pending.is_empty() && finish != "cancelled" {
            let _ = job
                .out
                .blocking_send(Out::Text(String::from_utf8_lossy(&pending).into_owned()));
        }
        self.finish(job, finish, tokens.len(), common, written);
        Ok(())
    }

    fn finish(
        &self,
        job: &Job,
        finish: &'static str,
        prompt: usize,
        cached: usize,
        written: usize,
    ) {
        // Its account of each reply, for whoever reads its log: a reply the client left is
        // `cancelled` after the tokens it had written, not run on to its `length`.
        tracing::debug!(
            finish,
            prompt,
            cached,
            written,
            housekeeping = job.housekeeping,
            prefill = job.prefill,
            "a reply ended"
        );
        let _ = job.out.blocking_send(Out::Done {
            finish,
            prompt_tokens: prompt,
            cached_tokens: cached,
            completion_tokens: written,
        });
    }
}

/// Takes the longest whole-UTF-8 prefix of `bytes`, leaving a split character for later.
fn take_utf8(bytes: &mut Vec<u8>) -> String {
    let valid = match std::str::from_utf8(bytes) {
        Ok(s) => s.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        // Bytes that can never be UTF-8: pass them on replaced rather than stall.
        Err(_) => bytes.len(),
    };
    let rest = bytes.split_off(valid);
    let text = String::from_utf8_lossy(bytes).into_owned();
    *bytes = rest;
    text
}

#[cfg(test)]
mod tests {
    use super::take_utf8;

    #[test]
    fn a_character_split_across_tokens_waits_for_its_end() {
        let mut b = "h\u{e9}".as_bytes()[..2].to_vec(); // "h" and half of "é"
        assert_eq!(take_utf8(&mut b), "h");
        b.extend_from_slice(&"\u{e9}".as_bytes()[1..]);
        assert_eq!(take_utf8(&mut b), "\u{e9}");
        assert!(b.is_empty());
    }
}
