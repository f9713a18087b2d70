//! Speech-to-text: whisper.cpp (through whisper-rs) with a ggml Whisper model (tiny.en by
//! default), one transcription at a time, its audio context sized to the clip.

use std::path::Path;
use std::sync::{Mutex, Once};

use whisper_rs::{
    FullParams, SamplingStrategy, WhisperContext, WhisperContextParameters, WhisperState,
};

use super::{VoiceError, SAMPLE_RATE};

/// What came out of a clip.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// The words, trimmed.
    pub text: String,
    /// Whisper's estimate that there was no speech at all (0–1).
    pub no_speech: f32,
    /// How sure whisper was of the last word it wrote: the least probability among that word's
    /// tokens (1 where it wrote no word, or where the transcriber cannot tell).
    pub last_word_p: f32,
}

impl Transcript {
    /// `text`, with nothing known of how sure the transcriber was.
    pub fn of(text: impl Into<String>, no_speech: f32) -> Transcript {
        Transcript {
            text: text.into(),
            no_speech,
            last_word_p: 1.0,
        }
    }
}

/// The least probability among the tokens of the last word in `tokens` (each token's text and
/// probability, in order; whisper's special tokens already left out): a word begins at a token
/// that opens with a space, and tokens with no letter or digit in them (punctuation) are not
/// part of it. 1 where there is no word.
pub fn last_word_p(tokens: &[(String, f32)]) -> f32 {
    let Some(last) = tokens
        .iter()
        .rposition(|(text, _)| text.chars().any(char::is_alphanumeric))
    else {
        return 1.0;
    };
    let start = tokens[..=last]
        .iter()
        .rposition(|(text, _)| text.starts_with(' '))
        .unwrap_or(0);
    tokens[start..=last]
        .iter()
        .filter(|(text, _)| text.chars().any(char::is_alphanumeric))
        .map(|(_, p)| *p)
        .fold(1.0, f32::min)
}

/// Turns 16 kHz mono speech into text.
pub trait Transcriber: Send + Sync {
    /// Transcribes one utterance (blocking: call it off the async threads).
    fn transcribe(&self, samples: &[f32]) -> Result<Transcript, VoiceError>;

    /// Gets ready (loads a model) before the first utterance; called when the microphone opens,
    /// and again as an utterance whose words will be wanted begins, to make again what
    /// [`Transcriber::release`] let go of.
    fn prepare(&self) -> Result<(), VoiceError> {
        Ok(())
    }

    /// Lets go of the working memory kept between utterances (whisper's state: its caches and
    /// compute buffers), called once the voice has been quiet a while; the next
    /// [`Transcriber::prepare`] or transcription makes it again.
    fn release(&self) {}

    /// How likely the transcriber finds each of `phrases` as the whole of what `samples` says:
    /// the log-probability (nats) of the phrase's tokens, its first word written with a capital
    /// or without, as whisper would write it, and of its end. A phrase that ends in a mark ("Stop.",
    /// "Stop!") is weighed as written, then the end of the text; one that does not ("um"), with
    /// a full stop, an exclamation mark, an ellipsis or nothing after it — what follows the mark
    /// not weighed, so this is at most how likely the phrase is as the whole. `None` where it
    /// cannot tell. (In the language it hears, unprompted: weighed in Chinese, the prompt its
    /// transcriptions are given is left out.)
    fn weigh(&self, _samples: &[f32], _phrases: &[&str]) -> Result<Option<Vec<f32>>, VoiceError> {
        Ok(None)
    }
}

/// Whisper loaded when first needed — the first time the microphone opens — so an app that never
/// listens never holds the model in memory.
pub struct LazyWhisper {
    path: std::path::PathBuf,
    threads: usize,
    language: &'static str,
    traditional: bool,
    loaded: std::sync::OnceLock<Result<Whisper, String>>,
}

impl LazyWhisper {
    /// Whisper from `path`, not loaded yet; a missing file is an error now, not later.
    pub fn new(path: &Path, threads: usize) -> Result<LazyWhisper, VoiceError> {
        if !path.is_file() {
            return Err(VoiceError::ModelMissing {
                what: "speech model",
                path: path.display().to_string(),
            });
        }
        Ok(LazyWhisper {
            path: path.to_path_buf(),
            threads,
            language: "en",
            traditional: false,
            loaded: std::sync::OnceLock::new(),
        })
    }

    /// This Whisper, transcribing in `language` (whisper's code: `en`, `de`, `zh`) where its
    /// model is multilingual.
    pub fn hearing(mut self, language: &'static str) -> LazyWhisper {
        self.language = language;
        self
    }

    /// This Whisper writing Chinese in traditional characters, or not (see
    /// [`Whisper::writing_traditional`]).
    pub fn writing_traditional(mut self, traditional: bool) -> LazyWhisper {
        self.traditional = traditional;
        self
    }

    fn get(&self) -> Result<&Whisper, VoiceError> {
        self.loaded
            .get_or_init(|| {
                Whisper::load(&self.path, self.threads)
                    .map(|w| {
                        w.hearing(self.language)
                            .writing_traditional(self.traditional)
                    })
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|reason| VoiceError::Transcribe(reason.clone()))
    }
}

impl Transcriber for LazyWhisper {
    fn transcribe(&self, samples: &[f32]) -> Result<Transcript, VoiceError> {
        self.get()?.transcribe(samples)
    }

    fn weigh(&self, samples: &[f32], phrases: &[&str]) -> Result<Option<Vec<f32>>, VoiceError> {
        self.get()?.weigh(samples, phrases)
    }

    fn prepare(&self) -> Result<(), VoiceError> {
        self.get()?.prepare()
    }

    fn release(&self) {
        if let Some(Ok(whisper)) = self.loaded.get() {
            whisper.release();
        }
    }
}

/// whisper.cpp with a ggml model: the model, and the state one transcription works in (made
/// when the model loads, let go of while the voice is quiet, made again when wanted).
pub struct Whisper {
    context: WhisperContext,
    state: Mutex<Option<WhisperState>>,
    threads: i32,
    english_only: bool,
    /// The language every utterance is transcribed in, where the model is multilingual.
    language: &'static str,
    /// Whether an unsure decoding is tried again warmer (off only for the benchmark's baseline).
    safeguards: bool,
    /// Whether a decoding is stopped at what a person could have said (off only for the
    /// benchmark's baseline).
    token_cap: bool,
    /// Whether Chinese is kept to the characters it is to be written in: prompted in them, and
    /// what whisper still writes in the others converted (off only for the benchmark's
    /// baseline).
    prompted: bool,
    /// Whether Chinese is written in traditional characters rather than simplified.
    traditional: bool,
    /// Whether what whisper wrote in the other script is converted (off only for the
    /// benchmark's baseline).
    converted: bool,
}

static LOG_HOOKS: Once = Once::new();

/// The encoder's audio context for a clip: whisper's 50 units a second, with a generous margin
/// (a context cut close to the clip makes the decoder repeat itself), at most the model's 30 s.
pub fn audio_ctx_for(samples: usize) -> i32 {
    let secs = samples as f64 / f64::from(SAMPLE_RATE);
    let ctx = (secs * 50.0 * 2.0).ceil() as i32 + 64;
    ctx.clamp(320, 1500)
}

/// Drops a sentence the decoder said again straight after itself ("Thanks, that's all. Thanks,
/// that's all."), which a shortened audio context sometimes makes it do.
pub fn collapse_repeats(text: &str) -> String {
    let mut sentences: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        // A full-width mark ends a sentence with no space after it (Chinese).
        let full_width = matches!(c, '。' | '！' | '？');
        if matches!(c, '.' | '!' | '?') || full_width {
            let end = i + c.len_utf8();
            let next_is_space = text[end..].chars().next().is_none_or(char::is_whitespace);
            if next_is_space || full_width {
                sentences.push(text[start..end].trim());
                start = end;
            }
        }
    }
    if start < text.len() && !text[start..].trim().is_empty() {
        sentences.push(text[start..].trim());
    }
    let mut kept: Vec<&str> = Vec::new();
    for sentence in sentences {
        let same = kept.last().is_some_and(|last| {
            let norm = |s: &str| {
                s.trim_end_matches(['.', '!', '?', '。', '！', '？'])
                    .to_lowercase()
            };
            norm(last) == norm(sentence)
        });
        if !same {
            kept.push(sentence);
        }
    }
    let joined = kept.iter().fold(String::new(), |mut all, sentence| {
        // Chinese sentences follow each other without a space.
        if !all.is_empty() && !all.ends_with(['。', '！', '？']) {
            all.push(' ');
        }
        all.push_str(sentence);
        all
    });
    collapse_loops(&joined)
}

/// The most tokens a decoding of `samples` (16 kHz) may write: 8 a second (a fast talker says
/// about 5) and 40 more, so that a decoding that loops on a short phrase is still long enough
/// (over 32 tokens) for whisper's repetition check to catch; one that reaches the cap all the
/// same is decoded again without it.
fn max_tokens_for(samples: usize) -> i32 {
    40 + (8 * samples / SAMPLE_RATE as usize) as i32
}

/// Collapses a run of words the decoder fell into a loop on — the same one to eight words three
/// times or more in a row ("what is the weather what is the weather what is the weather …",
/// "Hey Hey Hey …") — to the words once; whisper's own remedy (a compression-ratio check with a
/// fallback) needs several decodes, and the loop is always a decoding artefact in a spoken
/// question.
pub fn collapse_loops(text: &str) -> String {
    let units = units(text);
    let normalized: Vec<String> = units
        .iter()
        .map(|(unit, _)| {
            unit.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .collect();
    let mut kept: Vec<(&str, bool)> = Vec::with_capacity(units.len());
    let mut i = 0;
    'units: while i < units.len() {
        for n in 1..=8 {
            let same = |a: usize, b: usize| normalized[a..a + n] == normalized[b..b + n];
            if i + 3 * n <= units.len()
                && same(i, i + n)
                && same(i, i + 2 * n)
                && !normalized[i..i + n].iter().all(|u| numeral(u))
            {
                let mut end = i + 3 * n;
                while end + n <= units.len() && same(i, end) {
                    end += n;
                }
                kept.extend_from_slice(&units[i..i + n]);
                i = end;
                continue 'units;
            }
        }
        kept.push(units[i]);
        i += 1;
    }
    let mut out = String::with_capacity(text.len());
    for (unit, spaced) in kept {
        if spaced && !out.is_empty() {
            out.push(' ');
        }
        out.push_str(unit);
    }
    out
}

/// Whether a unit is a number or a Chinese numeral: its repeats are digits ("一九九九年",
/// "房间号三三三"), never a loop.
fn numeral(unit: &str) -> bool {
    !unit.is_empty()
        && unit
            .chars()
            .all(|c| c.is_numeric() || "〇零一二两三四五六七八九十百千万亿".contains(c))
}

/// Whether `c` is written without spaces around it: a Chinese (or Japanese) character, or the
/// punctuation and full-width forms that go with them.
fn unspaced(c: char) -> bool {
    super::script::is_unspaced(c)
        || super::script::is_cjk_punctuation(c)
        || matches!(c, '\u{FF00}'..='\u{FFEF}')
}

/// The units a loop is counted in, each with whether a space came before it: the words, and in
/// text written without spaces each of its characters ("强强强强" is four; "2000年" is "2000"
/// and "年").
fn units(text: &str) -> Vec<(&str, bool)> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let mut spaced = true;
        let mut start = 0;
        for (i, c) in word.char_indices() {
            if unspaced(c) {
                if start < i {
                    out.push((&word[start..i], spaced));
                    spaced = false;
                }
                out.push((&word[i..i + c.len_utf8()], spaced));
                spaced = false;
                start = i + c.len_utf8();
            }
        }
        if start < word.len() {
            out.push((&word[start..], spaced));
        }
    }
    out
}

impl Whisper {
    /// Loads a ggml model; a missing file says how to install it.
    pub fn load(path: &Path, threads: usize) -> Result<Whisper, VoiceError> {
        LOG_HOOKS.call_once(whisper_rs::install_logging_hooks);
        if !path.is_file() {
            return Err(VoiceError::ModelMissing {
                what: "speech model",
                path: path.display().to_string(),
            });
        }
        let broken = |reason: String| VoiceError::ModelBroken {
            what: "speech model",
            path: path.display().to_string(),
            reason,
        };
        let path_str = path
            .to_str()
            .ok_or_else(|| broken("the path is not UTF-8".into()))?;
        let context =
            WhisperContext::new_with_params(path_str, WhisperContextParameters::default())
                .map_err(|e| broken(e.to_string()))?;
        let state = context.create_state().map_err(|e| broken(e.to_string()))?;
        let english_only = !context.is_multilingual();
        Ok(Whisper {
            context,
            state: Mutex::new(Some(state)),
            threads: threads.clamp(1, 16) as i32,
            english_only,
            language: "en",
            safeguards: true,
            token_cap: true,
            prompted: true,
            traditional: false,
            converted: true,
        })
    }

    /// This Whisper, transcribing in `language` (whisper's code: `en`, `de`, `zh`) — never
    /// guessed per utterance, which flips on short clips. An English-only model hears English.
    pub fn hearing(mut self, language: &'static str) -> Whisper {
        self.language = language;
        self
    }

    /// Whisper as it ran before its safeguards were used: one greedy decoding, never tried
    /// again (the benchmarks' baseline).
    pub fn without_safeguards(mut self) -> Whisper {
        self.safeguards = false;
        self
    }

    /// This Whisper writing Chinese in traditional characters (as Taiwan, Hong Kong and Macau
    /// write it), or in simplified ones: prompted with a sentence in them (whisper writes
    /// either as it guesses, unprompted).
    pub fn writing_traditional(mut self, traditional: bool) -> Whisper {
        self.traditional = traditional;
        self
    }

    /// The sentence Chinese is prompted with, if this Whisper prompts.
    fn prompt(&self) -> Option<&'static str> {
        let chinese = !self.english_only && self.language == "zh";
        match (self.prompted && chinese, self.traditional) {
            (false, _) => None,
            (true, false) => Some(SIMPLIFIED_PROMPT),
            (true, true) => Some(TRADITIONAL_PROMPT),
        }
    }

    /// Whisper hearing Chinese prompted, as written, not converted to one script (the
    /// benchmark's baseline, as before the conversion).
    pub fn without_conversion(mut self) -> Whisper {
        self.converted = false;
        self
    }

    /// Whisper hearing Chinese unprompted, as before the prompt (the benchmark's baseline).
    pub fn without_prompt(mut self) -> Whisper {
        self.prompted = false;
        self
    }

    /// Whisper with every decoding free to run to its own limit (220 tokens), as before the cap
    /// (the benchmark's baseline).
    pub fn without_token_cap(mut self) -> Whisper {
        self.token_cap = false;
        self
    }
}

/// Whisper's bytes as text. A byte sequence that is not UTF-8 — a token that began a
/// character whose end the decoding never wrote ("Wetter" came back "met\u{FFFD}" from a German
/// clip) — is dropped, not shown as "\u{FFFD}".
fn text_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.contains('\u{FFFD}') {
        text.replace('\u{FFFD}', "")
    } else {
        text.into_owned()
    }
}

/// What whisper is told it heard before, in Chinese: "what follows are sentences in Mandarin."
const SIMPLIFIED_PROMPT: &str = "以下是普通话的句子。";
/// The same in traditional characters.
const TRADITIONAL_PROMPT: &str = "以下是普通話的句子。";

/// `text` without the `prompt` whisper was given, where it wrote that back instead of (or before)
/// what it heard — as it does on a clip it cannot follow ("以下是普通话的句子。" for "谁写了红楼
/// 梦？" in `cargo bench --bench language`). Nothing is left where the transcript is most of the
/// prompt alone (six of its nine characters or more, as "普通话的句子"); a few of its words said
/// on their own ("普通话", "句子") are the user's.
fn without_prompt(text: &str, prompt: &str) -> String {
    let sentence = prompt.trim_end_matches('。');
    let words = |t: &str| -> String { t.chars().filter(|c| c.is_alphanumeric()).collect() };
    let all = words(text);
    if all.chars().count() >= 6 && sentence.contains(&all) {
        return String::new();
    }
    match text.find(sentence) {
        Some(at) => {
            let rest = format!("{}{}", &text[..at], &text[at + sentence.len()..]);
            if words(&rest).is_empty() {
                String::new()
            } else {
                rest.trim_start_matches(['。', '，', '.', ',', ' '])
                    .trim()
                    .to_string()
            }
        }
        None => text.to_string(),
    }
}

impl Transcriber for Whisper {
    fn transcribe(&self, samples: &[f32]) -> Result<Transcript, VoiceError> {
        transcribe_with_ctx(self, samples, 0)
    }

    fn weigh(&self, samples: &[f32], phrases: &[&str]) -> Result<Option<Vec<f32>>, VoiceError> {
        self.weighed(samples, phrases).map(Some)
    }

    fn prepare(&self) -> Result<(), VoiceError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.state_in(&mut state).map(|_| ())
    }

    fn release(&self) {
        let released = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some();
        if released {
            tracing::debug!("whisper let go of its state");
        }
    }
}

/// Transcribes with a given audio context (0: sized to the clip) — the benchmark's baseline runs
/// whisper's default full 30 s context (1500).
pub fn transcribe_with_ctx(
    whisper: &Whisper,
    samples: &[f32],
    audio_ctx: i32,
) -> Result<Transcript, VoiceError> {
    whisper.run(samples, audio_ctx)
}

/// The most tokens a phrase is weighed over (see [`Transcriber::weigh`]): a longer one is
/// weighed as impossible.
const WEIGHED_AT_MOST_TOKENS: usize = 48;

/// `samples`, padded with silence to the second and a little whisper wants at least.
fn padded(samples: &[f32]) -> Vec<f32> {
    let mut audio = samples.to_vec();
    let min = SAMPLE_RATE as usize + SAMPLE_RATE as usize / 10;
    if audio.len() < min {
        audio.resize(min, 0.0);
    }
    audio
}

/// The log-softmax of whisper's logits over the text tokens and the end of the text (`eot`):
/// what a decoding without timestamps chooses among.
fn log_softmax_of_text(logits: &[f32], eot: usize) -> Vec<f32> {
    let text = &logits[..=eot.min(logits.len().saturating_sub(1))];
    let max = text.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = text.iter().map(|l| (l - max).exp()).sum();
    let log_sum = max + sum.ln();
    text.iter().map(|l| l - log_sum).collect()
}

/// `log(exp(a) + exp(b))`.
fn log_add(a: f32, b: f32) -> f32 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f32::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

impl Whisper {
    /// See [`Transcriber::weigh`]. The clip is encoded once (a decoding of one token sizes the
    /// audio context as a transcription does), and the phrases are decoded one token at a time
    /// along the tree of their tokens, so phrases that begin alike share their first steps: one
    /// decoder step per distinct prefix, ~2 ms each for tiny.en on two threads.
    fn weighed(&self, samples: &[f32], phrases: &[&str]) -> Result<Vec<f32>, VoiceError> {
        let failed = |e: whisper_rs::WhisperError| VoiceError::Transcribe(e.to_string());
        let audio = padded(samples);
        let eot = self.context.token_eot();
        // (At most a token a byte: whisper-rs reads a longer result wrongly.)
        let tokenize = |text: &str| -> Result<Vec<i32>, VoiceError> {
            self.context.tokenize(text, text.len() + 1).map_err(failed)
        };
        // Each phrase as whisper writes a sentence: a space, its first letter a capital (and,
        // where it tokenizes alike but for its first token, without one).
        let mut written: Vec<(Vec<i32>, Option<i32>, bool)> = Vec::with_capacity(phrases.len());
        for phrase in phrases {
            let phrase = phrase.trim();
            let ended = phrase.ends_with(['.', '!', '?', '…']);
            let mut tokens = tokenize(&format!(" {}", super::heard::capitalised(phrase)))?;
            if tokens.len() > WEIGHED_AT_MOST_TOKENS {
                tokens.clear(); // not weighed: far longer than anything it is asked about
            }
            let lower = tokenize(&format!(" {phrase}"))?;
            let other = (lower.len() == tokens.len()
                && lower.first() != tokens.first()
                && lower[1..] == tokens[1..])
                .then(|| lower[0]);
            written.push((tokens, other, ended));
        }
        let ends: Vec<i32> = [".", "!", "..."]
            .iter()
            .filter_map(|mark| match tokenize(mark) {
                Ok(t) if t.len() == 1 => Some(t[0]),
                _ => None,
            })
            .collect();
        let mut prefix = vec![self.context.token_sot()];
        if !self.english_only {
            if let Some(id) = whisper_rs::get_lang_id(self.language) {
                prefix.push(self.context.token_lang(id));
            }
            prefix.push(self.context.token_transcribe());
        }
        prefix.push(self.context.token_not());

        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = self.state_in(&mut guard)?;
        self.encode_for_weighing(state, &audio)?;

        let threads = self.threads as usize;
        let eot_index = eot as usize;
        // One token at a time: whisper.cpp keeps the logits of a batch's last token in the row of
        // its place in the batch, and hands out the first row.
        for (at, token) in prefix.iter().enumerate() {
            state.decode(&[*token], at, threads).map_err(failed)?;
        }
        // The path decoded so far, and after each of its tokens (and the prefix) the
        // log-probabilities of the next.
        let mut path: Vec<i32> = Vec::new();
        let mut rows: Vec<Vec<f32>> = vec![log_softmax_of_text(
            state.get_logits().map_err(failed)?,
            eot_index,
        )];
        // In the order of their tokens, so that phrases sharing a beginning follow each other.
        let mut order: Vec<usize> = (0..written.len()).collect();
        order.sort_by(|a, b| written[*a].0.cmp(&written[*b].0));
        let mut out = vec![f32::NEG_INFINITY; written.len()];
        for index in order {
            let (tokens, other, ended) = &written[index];
            if tokens.is_empty() {
                continue;
            }
            let shared = path
                .iter()
                .zip(tokens.iter())
                .take_while(|(a, b)| a == b)
                .count();
            path.truncate(shared);
            rows.truncate(shared + 1);
            while path.len() < tokens.len() {
                let next = tokens[path.len()];
                state
                    .decode(&[next], prefix.len() + path.len(), threads)
                    .map_err(failed)?;
                path.push(next);
                rows.push(log_softmax_of_text(
                    state.get_logits().map_err(failed)?,
                    eot_index,
                ));
            }
            let p = |row: &[f32], token: i32| {
                usize::try_from(token)
                    .ok()
                    .and_then(|t| row.get(t).copied())
                    .unwrap_or(f32::NEG_INFINITY)
            };
            let mut log_p = p(&rows[0], tokens[0]);
            if let Some(other) = other {
                log_p = log_add(log_p, p(&rows[0], *other));
            }
            for (i, token) in tokens.iter().enumerate().skip(1) {
                log_p += p(&rows[i], *token);
            }
            let last = &rows[tokens.len()];
            let end = if *ended {
                p(last, eot)
            } else {
                ends.iter()
                    .fold(p(last, eot), |sum, mark| log_add(sum, p(last, *mark)))
            };
            out[index] = log_p + end;
        }
        Ok(out)
    }

    /// Encodes `audio` into `state` (a decoding of one token, which sizes the audio context as a
    /// transcription does), for [`Whisper::weighed`].
    fn encode_for_weighing(
        &self,
        state: &mut WhisperState,
        audio: &[f32],
    ) -> Result<(), VoiceError> {
        let failed = |e: whisper_rs::WhisperError| VoiceError::Transcribe(e.to_string());
        let mut params = FullParams::new(SamplingStrategy::Greedy { best_of: 1 });
        params.set_n_threads(self.threads);
        params.set_audio_ctx(audio_ctx_for(audio.len()));
        params.set_no_context(true);
        params.set_single_segment(true);
        params.set_no_timestamps(true);
        params.set_max_tokens(1);
        params.set_temperature(0.0);
        params.set_temperature_inc(0.0);
        params.set_print_special(false);
        params.set_print_progress(false);
        params.set_print_realtime(false);
        params.set_print_timestamps(false);
        params.set_language(Some(if self.english_only {
            "en"
        } else {
            self.language
        }));
        state.full(params, audio).map_err(failed)?;
        Ok(())
    }

    fn run(&self, samples: &[f32], audio_ctx: i32) -> Result<Transcript, VoiceError> {
        // Whisper wants at least a second; pad short clips with silence.
        let audio = padded(samples);
        let cap = max_tokens_for(audio.len());
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = self.state_in(&mut guard)?;
        let mut decoded = self.decode(state, &audio, audio_ctx, self.token_cap.then_some(cap))?;
        if self.token_cap && decoded.tokens >= cap {
            // The decoding chosen ran to the cap: a loop too varied for the repetition check,
            // which whisper, left to its own limit, fails and tries again warmer. So it is here.
            decoded = self.decode(state, &audio, audio_ctx, None)?;
        }
        tracing::trace!(tokens = decoded.tokens, "transcribed");
        let text = decoded.text.trim();
        // Chinese in the user's characters first, so that a sentence repeated in both scripts,
        // or the prompt written back in the other, is known for what it is.
        let text = match self.prompt() {
            Some(_) if self.converted => super::script::in_script(text, self.traditional),
            _ => text.to_string(),
        };
        let mut text = collapse_repeats(&text);
        if let Some(prompt) = self.prompt() {
            text = without_prompt(&text, prompt);
        }
        Ok(Transcript {
            text,
            no_speech: decoded.no_speech,
            last_word_p: decoded.last_word_p,
        })
    }

    /// The state in `slot`, made again if it was released.
    fn state_in<'a>(
        &self,
        slot: &'a mut Option<WhisperState>,
    ) -> Result<&'a mut WhisperState, VoiceError> {
        if slot.is_none() {
            let started = std::time::Instant::now();
            let state = self
                .context
                .create_state()
                .map_err(|e| VoiceError::Transcribe(format!("whisper's state: {e}")))?;
            tracing::debug!(took = ?started.elapsed(), "whisper made its state again");
            *slot = Some(state);
        }
        Ok(slot.as_mut().expect("made above"))
    }

    /// One run of whisper over `audio` (its decodings capped at `cap` tokens, where given).
    fn decode(
        &self,
        state: &mut WhisperState,
        audio: &[f32],
        audio_ctx: i32,
        cap: Option<i32>,
    ) -> Result<Decoded, VoiceError> {
        // Greedy at temperature 0; where that decoding is unsure, five samples at each higher
        // temperature (best_of applies to those only), as openai-whisper's transcribe does.
        let mut params = FullParams::new(SamplingStrategy::Greedy { best_of: 5 });
        params.set_n_threads(self.threads);
        params.set_audio_ctx(if audio_ctx > 0 {
            audio_ctx
        } else {
            audio_ctx_for(audio.len())
        });
        params.set_no_context(true);
        params.set_single_segment(true);
        params.set_no_timestamps(true);
        params.set_suppress_blank(true);
        params.set_suppress_nst(true);
        params.set_print_special(false);
        params.set_print_progress(false);
        params.set_print_realtime(false);
        params.set_print_timestamps(false);
        // Whisper's own safeguards, with openai-whisper's thresholds: a decoding whose average
        // log-probability is below −1 is tried again 0.2 warmer (up to 1.0), as is one that
        // repeats itself (whisper.cpp's entropy check stands for the compression ratio); and
        // what is probably not speech (no-speech probability above 0.6) and decoded unsure is
        // dropped as silence.
        params.set_temperature(0.0);
        params.set_temperature_inc(if self.safeguards { 0.2 } else { 0.0 });
        // No decoding runs far past what a person could have said in the clip (see
        // `max_tokens_for`): the warm decodings of an unsure clip ran on to whisper's own limit
        // (220 tokens) before they were thrown away — on questions cut mid-word, five times the
        // mean (`cargo bench --bench trust`).
        if let Some(cap) = cap {
            params.set_max_tokens(cap);
        }
        params.set_logprob_thold(-1.0);
        params.set_entropy_thold(2.4);
        params.set_no_speech_thold(0.6);
        params.set_language(Some(if self.english_only {
            "en"
        } else {
            self.language
        }));
        if let Some(prompt) = self.prompt() {
            // Whisper writes Chinese in traditional or simplified characters as it guesses;
            // a prompt in the user's characters (whisper's own convention for them) keeps it
            // to those.
            params.set_initial_prompt(prompt);
        }
        state
            .full(params, audio)
            .map_err(|e| VoiceError::Transcribe(e.to_string()))?;
        // The segments' bytes joined before they are read as text: a character of more than
        // one byte (an umlaut, a Chinese character) may be split between two of them.
        let mut bytes: Vec<u8> = Vec::new();
        let mut no_speech: f32 = 0.0;
        let mut tokens = 0;
        let mut written: Vec<(String, f32)> = Vec::new();
        let eot = self.context.token_eot();
        for segment in state.as_iter() {
            let piece = segment
                .to_bytes()
                .map_err(|e| VoiceError::Transcribe(e.to_string()))?;
            bytes.extend_from_slice(piece);
            no_speech = no_speech.max(segment.no_speech_probability());
            tokens = tokens.max(segment.n_tokens());
            for i in 0..segment.n_tokens() {
                let Some(token) = segment.get_token(i) else {
                    continue;
                };
                if token.token_id() >= eot {
                    continue; // whisper's own marks: the end, timestamps, the task
                }
                let text = token.to_str_lossy().map(|t| t.into_owned());
                written.push((text.unwrap_or_default(), token.token_probability()));
            }
        }
        Ok(Decoded {
            text: text_of(&bytes),
            no_speech,
            tokens,
            // Measured on English only, where a word opens with a space; Chinese has no spaces
            // (the "last word" would be the whole sentence) and neither language was measured.
            last_word_p: if self.english_only || self.language == "en" {
                last_word_p(&written)
            } else {
                1.0
            },
        })
    }
}

/// What one decoding wrote.
struct Decoded {
    text: String,
    no_speech: f32,
    /// The most tokens a segment of it had.
    tokens: i32,
    last_word_p: f32,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_word_is_as_sure_as_its_least_sure_token_punctuation_aside() {
        use super::last_word_p;
        let tokens = |t: &[(&str, f32)]| -> Vec<(String, f32)> {
            t.iter().map(|(s, p)| (s.to_string(), *p)).collect()
        };
        // "Book a table for" heard as "… for it.": the word made up at the cut is the unsure one.
        let made_up = tokens(&[
            (" Book", 0.9),
            (" a", 0.9),
            (" table", 0.8),
            (" for", 0.7),
            (" it", 0.2),
            (".", 0.95),
        ]);
        assert_eq!(last_word_p(&made_up), 0.2);
        // A word of several tokens: its least sure piece; the unsure "?" after it is not a word.
        let pieces = tokens(&[
            (" What", 0.9),
            (" is", 0.9),
            (" Ad", 0.6),
            ("mok", 0.3),
            ("ent", 0.8),
            ("?", 0.1),
        ]);
        assert_eq!(last_word_p(&pieces), 0.3);
        // The first word of a transcript need not open with a space.
        assert_eq!(last_word_p(&tokens(&[("Hello", 0.4), ("!", 0.9)])), 0.4);
        // Nothing but punctuation, or nothing at all: no word to doubt.
        assert_eq!(last_word_p(&tokens(&[(".", 0.2)])), 1.0);
        assert_eq!(last_word_p(&[]), 1.0);
    }

    #[test]
    fn a_loop_or_a_repeated_sentence_in_chinese_is_kept_once() {
        use super::collapse_repeats;
        assert_eq!(collapse_repeats("坚强强强强强强强奥"), "坚强奥");
        assert_eq!(collapse_repeats("好的。好的。"), "好的。");
        assert_eq!(collapse_repeats("停！停！停！"), "停！");
        assert_eq!(
            collapse_repeats("我想，我想，我想，我想听音乐"),
            "我想，我想听音乐"
        );
        // Doubled characters and numbers are words, kept.
        for kept in [
            "谢谢你。",
            "天天都是2000年。",
            "明天见。你好。",
            "看看 iPhone 15 Pro",
            "一九九九年我出生。",
            "房间号三三三。",
            "二〇〇〇年",
            "９９９",
        ] {
            assert_eq!(collapse_repeats(kept), kept);
        }
        assert_eq!(
            collapse_repeats("what is the weather what is the weather what is the weather"),
            "what is the weather"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_dropped_from_the_text() {
        assert_eq!(super::text_of(b"das met\xc3, mogen"), "das met, mogen");
        assert_eq!(super::text_of("Hör auf.".as_bytes()), "Hör auf.");
        assert_eq!(super::text_of(b"\xe5\x81"), "");
    }

    #[test]
    fn the_prompt_written_back_is_not_taken_for_words() {
        let without_prompt = |text| super::without_prompt(text, super::SIMPLIFIED_PROMPT);
        assert_eq!(without_prompt("以下是普通话的句子。"), "");
        assert_eq!(without_prompt("普通话的句子。"), "");
        assert_eq!(without_prompt("《以下是普通话的句子》"), "");
        assert_eq!(
            without_prompt("以下是普通话的句子。现在几点？"),
            "现在几点？"
        );
        assert_eq!(without_prompt("我以下是普通话的句子。"), "我。");
        // The user's own words, and their punctuation, are left as they are.
        for said in [
            "现在几点？",
            "以下是我的问题：现在几点？",
            "是。",
            "普通话。",
            "句子",
            "以下",
            "是普通话吗？",
            "《红楼梦》是谁写的？",
            "“你好”",
            "(音乐)",
        ] {
            assert_eq!(without_prompt(said), said);
        }
    }

    #[test]
    fn the_traditional_prompt_written_back_is_not_taken_for_words_either() {
        let without_prompt = |text| super::without_prompt(text, super::TRADITIONAL_PROMPT);
        assert_eq!(without_prompt("以下是普通話的句子。"), "");
        assert_eq!(without_prompt("普通話的句子。"), "");
        assert_eq!(
            without_prompt("以下是普通話的句子。現在幾點？"),
            "現在幾點？"
        );
        for said in ["現在幾點？", "普通話。", "是普通話嗎？"] {
            assert_eq!(without_prompt(said), said);
        }
    }

    #[test]
    fn a_sentence_said_twice_in_a_row_is_kept_once() {
        use super::collapse_repeats;
        assert_eq!(
            collapse_repeats("Thanks, that's all. Thanks, that's all."),
            "Thanks, that's all."
        );
        assert_eq!(collapse_repeats("Stop! Stop."), "Stop!");
        assert_eq!(collapse_repeats("Yes. No. Yes."), "Yes. No. Yes.");
        assert_eq!(
            collapse_repeats("Version 2.5 is out."),
            "Version 2.5 is out."
        );
    }

    #[test]
    fn a_decoding_loop_is_kept_once_and_ordinary_repetition_is_not_touched() {
        use super::collapse_loops;
        assert_eq!(
            collapse_loops(
                "What is the weather like? What is the weather what is the weather what is the weather what is the"
            ),
            "What is the weather like? What is the weather what is the"
        );
        assert_eq!(collapse_loops(&"Hey ".repeat(100)), "Hey");
        assert_eq!(
            collapse_loops("two-two-two-two-two two-two-two-two-two two-two-two-two-two"),
            "two-two-two-two-two"
        );
        assert_eq!(
            collapse_loops("It is very very good."),
            "It is very very good."
        );
        assert_eq!(collapse_loops("Stop stop stop stop."), "Stop");
        assert_eq!(collapse_loops(""), "");
    }
}
