//! The end of a turn: whether a person who has gone quiet has finished, or is only thinking.
//!
//! A fixed hangover cuts a hesitating person in two ("Book a table for … four people at eight"
//! became a question answered and a second one queued behind it). So a short quiet only *asks*:
//! the listener transcribes what was said so far (the words it needs anyway) and judges it here;
//! "complete" ends the utterance at once, "incomplete" keeps listening up to a longer quiet.
//!
//! Two judges, words first:
//! - the words: a sentence does not end on an article, a preposition, a conjunction, a
//!   possessive or an "um" ([`hangs`]). Whisper writes what it heard, so this holds in any voice;
//!   and a last word whisper was unsure of may be one it made up at the cut ([`UNSURE_LAST_WORD`]);
//! - the voice: Smart Turn v3.2 (ONNX, BSD-2, from `pipecat-ai`), which hears in the last 8 s of
//!   audio whether a person sounds finished. Alone it is fooled by a voice that falls at a
//!   mid-sentence pause (synthesized first halves ending "…set an alarm for" were judged complete
//!   8 times in 10), so it decides only what the words leave open.

use std::path::Path;
use std::sync::{Arc, Mutex};

use ort::session::Session;
use ort::value::TensorRef;
use realfft::{RealFftPlanner, RealToComplex};

use super::{VoiceError, SAMPLE_RATE};

/// The model's file in the model folder, as `scripts/models voice` installs it.
pub const TURN_FILE: &str = "smart-turn/smart-turn-v3.2-cpu.onnx";

/// The model hears the last 8 s.
const WINDOW: usize = 8 * SAMPLE_RATE as usize;
const N_FFT: usize = 400;
const HOP: usize = 160;
const MELS: usize = 80;
/// Frames of features: one per hop over the window.
const FRAMES: usize = WINDOW / HOP;
const BINS: usize = N_FFT / 2 + 1;

/// At least this likely to be finished is "complete" (the model's own threshold).
pub const COMPLETE: f32 = 0.5;

/// A last word whisper gave less probability than this is one it may have made up at the cut:
/// whisper tiny.en ends a half it heard with a word a sentence can end on ("Translate good
/// morning into" as "… Intel.", "Write a short poem about" as "… very remote."), and those
/// words are the ones it is least sure of. Measured on the turn fixtures' halves and whole
/// questions in four voices (`cargo bench --bench turn`, BENCHMARKS.md): 0.25 held 11 of the 36
/// halves whose words did not hang, and 3 of 104 finished questions (misheard ones, mostly).
pub const UNSURE_LAST_WORD: f32 = 0.25;

/// Whether the person has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Finished: answer now.
    Complete,
    /// Only a pause: keep listening.
    Incomplete,
}

/// Whisper's log-mel features of a recording, as the model was trained on them
/// (`transformers.WhisperFeatureExtractor` with 8 s chunks: the waveform normalized to zero mean
/// and unit variance, a centred 400-point periodic-Hann STFT every 10 ms, 80 Slaney mel bands up
/// to 8 kHz, log10, floored 8 below the loudest, scaled by (x + 4) / 4).
///
/// Written here rather than taken from a crate: the model needs this exact recipe (the
/// normalization, the reflect padding, the dropped last frame), and it is fifty lines over
/// `realfft`; the test compares it with the reference extractor's own output.
pub struct Features {
    fft: Arc<dyn RealToComplex<f64>>,
    window: Vec<f64>,
    /// Per mel band: the first FFT bin it covers and its weights from there.
    filters: Vec<(usize, Vec<f64>)>,
}

impl Default for Features {
    fn default() -> Self {
        Features::new()
    }
}

impl Features {
    /// The extractor (its FFT plan and filter bank).
    pub fn new() -> Features {
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(N_FFT);
        let window = (0..N_FFT)
            .map(|n| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos())
            .collect();
        Features {
            fft,
            window,
            filters: mel_filters(),
        }
    }

    /// The features of the last 8 s of `samples` (16 kHz, in [-1, 1]; shorter is padded with
    /// silence before it): 80 × 800 values, band by band.
    pub fn of(&self, samples: &[f32]) -> Vec<f32> {
        let mut x = vec![0.0_f32; WINDOW];
        let kept = &samples[samples.len().saturating_sub(WINDOW)..];
        x[WINDOW - kept.len()..].copy_from_slice(kept);
        let mean = x.iter().map(|s| f64::from(*s)).sum::<f64>() / WINDOW as f64;
        let var = x
            .iter()
            .map(|s| (f64::from(*s) - mean).powi(2))
            .sum::<f64>()
            / WINDOW as f64;
        let scale = 1.0 / (var + 1e-7).sqrt();
        let x: Vec<f64> = x
            .iter()
            .map(|s| f64::from(((f64::from(*s) - mean) * scale) as f32))
            .collect();
        // Centred frames: reflect-padded by half a window at both ends.
        let pad = N_FFT / 2;
        let at = |i: usize| -> f64 {
            if i < pad {
                x[pad - i]
            } else if i < pad + WINDOW {
                x[i - pad]
            } else {
                x[2 * WINDOW + pad - 2 - i]
            }
        };
        let mut frame = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut power = [0.0_f64; BINS];
        let mut out = vec![0.0_f64; MELS * FRAMES];
        // The reference computes one frame more and drops it.
        for f in 0..FRAMES {
            for (n, value) in frame.iter_mut().enumerate() {
                *value = at(f * HOP + n) * self.window[n];
            }
            self.fft
                .process(&mut frame, &mut spectrum)
                .expect("buffers made by the plan");
            for (p, c) in power.iter_mut().zip(&spectrum) {
                *p = c.norm_sqr();
            }
            for (m, (first, weights)) in self.filters.iter().enumerate() {
                let energy: f64 = weights
                    .iter()
                    .zip(&power[*first..])
                    .map(|(w, p)| w * p)
                    .sum();
                out[m * FRAMES + f] = energy.max(1e-10).log10();
            }
        }
        let top = out.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        out.iter()
            .map(|v| ((v.max(top - 8.0) + 4.0) / 4.0) as f32)
            .collect()
    }
}

fn hz_to_mel(hz: f64) -> f64 {
    if hz >= 1000.0 {
        15.0 + (hz / 1000.0).ln() * 27.0 / 6.4_f64.ln()
    } else {
        3.0 * hz / 200.0
    }
}

fn mel_to_hz(mel: f64) -> f64 {
    if mel >= 15.0 {
        1000.0 * (6.4_f64.ln() / 27.0 * (mel - 15.0)).exp()
    } else {
        200.0 * mel / 3.0
    }
}

/// Slaney-normalized triangular filters from 0 to 8 kHz over the FFT's bins.
fn mel_filters() -> Vec<(usize, Vec<f64>)> {
    let (low, high) = (hz_to_mel(0.0), hz_to_mel(f64::from(SAMPLE_RATE) / 2.0));
    let edges: Vec<f64> = (0..MELS + 2)
        .map(|i| mel_to_hz(low + (high - low) * i as f64 / (MELS + 1) as f64))
        .collect();
    let bin_hz = |k: usize| f64::from(SAMPLE_RATE) / 2.0 * k as f64 / (BINS - 1) as f64;
    (0..MELS)
        .map(|m| {
            let (left, centre, right) = (edges[m], edges[m + 1], edges[m + 2]);
            let norm = 2.0 / (right - left);
            let weights: Vec<f64> = (0..BINS)
                .map(|k| {
                    let f = bin_hz(k);
                    let up = (f - left) / (centre - left);
                    let down = (right - f) / (right - centre);
                    up.min(down).max(0.0) * norm
                })
                .collect();
            let first = weights.iter().position(|w| *w > 0.0).unwrap_or(0);
            let last = weights.iter().rposition(|w| *w > 0.0).unwrap_or(first);
            (first, weights[first..=last].to_vec())
        })
        .collect()
}

/// Smart Turn v3.2, loaded. One judgement at a time.
pub struct SmartTurn {
    session: Mutex<Session>,
    features: Features,
}

fn broken(path: &Path, reason: impl std::fmt::Display) -> VoiceError {
    VoiceError::ModelBroken {
        what: "end-of-turn model",
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl SmartTurn {
    /// Loads the model (ONNX Runtime must be loaded: [`crate::onnx::init`]) and tries it on
    /// silence, so a file of the wrong shape fails here, not at the first pause.
    pub fn load(path: &Path) -> Result<SmartTurn, VoiceError> {
        // It runs once per pause, so its working memory goes back to the heap between runs.
        let session = super::onnx_session_with(path, "end-of-turn model", 1, super::Arena::Heap)?;
        let model = SmartTurn {
            session: Mutex::new(session),
            features: Features::new(),
        };
        model
            .probability(&[0.0; SAMPLE_RATE as usize])
            .map_err(|e| broken(path, e))?;
        Ok(model)
    }

    /// How likely the person who said `samples` (16 kHz, in [-1, 1], the utterance so far) is to
    /// have finished.
    pub fn probability(&self, samples: &[f32]) -> Result<f32, VoiceError> {
        let failed = |e: ort::Error| VoiceError::Transcribe(format!("end-of-turn model: {e}"));
        let features =
            ndarray::Array3::from_shape_vec((1, MELS, FRAMES), self.features.of(samples))
                .expect("80 × 800 features");
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let outputs = session
            .run(ort::inputs![
                "input_features" => TensorRef::from_array_view(&features).map_err(failed)?,
            ])
            .map_err(failed)?;
        let (_, probability) = outputs[0].try_extract_tensor::<f32>().map_err(failed)?;
        match probability.first() {
            Some(p) if p.is_finite() => Ok(p.clamp(0.0, 1.0)),
            _ => Err(VoiceError::Transcribe(format!(
                "end-of-turn model: unexpected output ({} values)",
                probability.len()
            ))),
        }
    }
}

/// Words a sentence cannot end on: articles, prepositions that are not also the particles of
/// everyday commands ("turn it on", "log me out"), conjunctions, possessives and fillers. Few on
/// purpose: a word wrongly here costs a finished person a second and a half, a word missing
/// splits a hesitating one in two only when the voice sounds finished too.
const HANGING: &[&str] = &[
    // articles
    "a", "an", "the", "every", // prepositions
    "about", "across", "against", "among", "at", "beneath", "beside", "between", "beyond", "by",
    "during", "except", "for", "from", "in", "into", "near", "of", "onto", "per", "than", "till",
    "to", "toward", "towards", "under", "until", "upon", "via", "with", "within", "without",
    // conjunctions
    "and", "as", "because", "but", "if", "nor", "or", "unless", "whereas", "whether", "while",
    "although", // possessives
    "my", "your", "our", "their", "its", // fillers
    "um", "uh", "uhm", "umm", "er", "erm", "hmm", "mm",
];

/// Whether `text` stops where a sentence cannot end: on a word from [`HANGING`], on a comma, a
/// dash or an ellipsis. A question that ends on its preposition ("What is this for?") hangs too:
/// whisper writes "Who was the president of?" for a person who paused there, and the two cannot
/// be told apart by their words; the finished one waits for the longer quiet.
pub fn hangs(text: &str) -> bool {
    let trimmed = text.trim_end();
    if trimmed.ends_with(',')
        || trimmed.ends_with('-')
        || trimmed.ends_with('—')
        || trimmed.ends_with("...")
        || trimmed.ends_with('…')
    {
        return true;
    }
    trimmed
        .split_whitespace()
        .next_back()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_lowercase()
        })
        .is_some_and(|last| HANGING.contains(&last.as_str()))
}

/// Whether `text` is a stop said alone: it ends the reply at once, however unsure whisper was.
fn is_a_stop(text: &str) -> bool {
    let anywhere = super::heard::HeardContext {
        began_while_speaking: false,
        recent_answers: &[],
        wake_conversation: false,
    };
    super::heard::classify(text, &anywhere) == super::Heard::Stop
}

/// Judges a pause: the words first, then (where they leave it open) the voice.
#[derive(Clone, Default)]
pub struct TurnJudge {
    model: Option<Arc<SmartTurn>>,
}

impl TurnJudge {
    /// A judge that hears the voice through `model`, or the words alone without one.
    pub fn new(model: Option<Arc<SmartTurn>>) -> TurnJudge {
        TurnJudge { model }
    }

    /// Whether the model is there.
    pub fn hears_the_voice(&self) -> bool {
        self.model.is_some()
    }

    /// Whether the person who said `samples` (16 kHz, the utterance so far), transcribed as
    /// `text` with its last word `last_word_p` likely, has finished:
    /// - nothing said: complete (there is nothing to wait for);
    /// - words that hang: incomplete, whatever the voice did;
    /// - a last word whisper was unsure of ([`UNSURE_LAST_WORD`]), a stop aside: incomplete —
    ///   the longer quiet costs a finished person a second, a made-up ending cuts a hesitating
    ///   one in two;
    /// - a question whisper heard whole ("…?"): complete;
    /// - otherwise the model's verdict; with no model, or one that fails, complete (the quiet
    ///   before the question was asked is the hangover it always was).
    pub fn judge(&self, samples: &[i16], text: &str, last_word_p: f32) -> Turn {
        let text = &super::heard::without_labels(text);
        if super::heard::words(text).is_empty() {
            return Turn::Complete;
        }
        if hangs(text) || (last_word_p < UNSURE_LAST_WORD && !is_a_stop(text)) {
            return Turn::Incomplete;
        }
        if text.trim_end().ends_with('?') {
            return Turn::Complete;
        }
        let Some(model) = &self.model else {
            return Turn::Complete;
        };
        match model.probability(&super::audio::to_f32(samples)) {
            Ok(p) => {
                tracing::debug!(probability = p, "the end-of-turn model judged a pause");
                if p >= COMPLETE {
                    Turn::Complete
                } else {
                    Turn::Incomplete
                }
            }
            Err(err) => {
                tracing::warn!(%err, "the end-of-turn model failed; the pause ends the turn");
                Turn::Complete
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_that_could_end_wait_for_the_longer_quiet_when_whisper_was_unsure_of_the_last() {
        let words_only = TurnJudge::default();
        for (text, p, turn) in [
            // A half whisper finished with a word it made up: only its doubt tells.
            ("Write a short poem, very remote.", 0.12, Turn::Incomplete),
            ("Is it going to be new?", 0.2, Turn::Incomplete),
            // The same words heard surely, and a question heard whole, end the turn at once.
            ("Write a short poem, very remote.", 0.9, Turn::Complete),
            ("What is the capital of Australia?", 0.6, Turn::Complete),
            // A stop ends the reply at once, however unsure whisper was of it.
            ("Okay, stop, Jarvis.", 0.1, Turn::Complete),
        ] {
            assert_eq!(words_only.judge(&[], text, p), turn, "{text} ({p})");
        }
        // Nothing said is nothing to wait for, however unsure.
        assert_eq!(words_only.judge(&[], "", 0.0), Turn::Complete);
    }

    #[test]
    fn a_sentence_hangs_on_a_preposition_an_article_or_an_um_not_on_a_noun() {
        for half in [
            "Book a table for",
            "Set an alarm for.",
            "What is the weather like in",
            "Can you remind me to",
            "I want to know about the",
            "Send a message to my",
            "Tell me, um",
            "Play something by,",
            "What's the capital of...",
            // The cost of the rule: a question ending on its preposition waits for the long quiet.
            "What is this for?",
        ] {
            assert!(hangs(half), "{half}");
        }
        for whole in [
            "Book a table for four people at eight.",
            "What time is it?",
            "Stop.",
            "Turn the lights off.",
            "",
        ] {
            assert!(!hangs(whole), "{whole}");
        }
    }

    #[test]
    fn the_features_follow_the_reference_extractor() {
        // Values of the reference extractor (pipecat's `compute_whisper_log_mel_features`, a copy
        // of transformers' WhisperFeatureExtractor with 8 s chunks) on 6 s of silence and then
        // 3 s of ten harmonics of 220 Hz and a chirp (9 s: the first second is not heard), read
        // at a few (band, frame) points.
        let mut samples = vec![0.0_f32; 6 * 16_000];
        samples.extend((0..3 * 16_000).map(|n| {
            let t = f64::from(n) / 16_000.0;
            let tau = 2.0 * std::f64::consts::PI;
            let harmonics: f64 = (1..=10)
                .map(|k| 0.3 / f64::from(k) * (tau * 220.0 * f64::from(k) * t).sin())
                .sum();
            (harmonics + 0.2 * (tau * (100.0 * t + 600.0 * t * t)).sin()) as f32
        }));
        let f = Features::new().of(&samples);
        assert_eq!(f.len(), MELS * FRAMES);
        let at = |band: usize, frame: usize| f[band * FRAMES + frame];
        for (band, frame, want) in REFERENCE {
            let got = at(*band, *frame);
            assert!(
                (got - want).abs() < 2e-4,
                "band {band}, frame {frame}: {got}, the reference {want}"
            );
        }
    }

    /// (band, frame, value) from the reference (see the test above).
    const REFERENCE: &[(usize, usize, f32)] = &[
        (0, 0, -0.219786),
        (5, 100, -0.219786),
        (10, 500, 1.36187),
        (11, 750, 1.54558),
        (12, 760, 1.3977),
        (20, 520, 0.588696),
        (40, 790, 1.15669),
        (79, 799, 0.0335525),
        (60, 710, -0.219786),
        (3, 699, 1.29147),
        (30, 700, 0.923276),
        (11, 799, 1.53877),
        (50, 600, -0.219786),
        (70, 650, -0.219786),
    ];
}
