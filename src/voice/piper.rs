//! Piper: a neural voice (VITS, ONNX) on the ONNX Runtime the wake word loads. Its phonemes come
//! from espeak-ng run as a program (`--ipa`), never linked; each phoneme is a code point looked up
//! in the voice's `.onnx.json` map, as Piper itself does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::session::Session;
use ort::value::TensorRef;
use serde::Deserialize;

use super::tts::Synthesizer;
use super::{Clip, VoiceError};

/// The default voice's file in the model folder, as `scripts/models voice` installs it.
pub const VOICE_FILE: &str = "piper/en_US-joe-medium.onnx";

/// The words per minute Piper's own speed (length scale 1) stands for: the speed setting is
/// read against it, so 175 (the default) is the voice as trained.
const NATURAL_WPM: f32 = 175.0;

const WHAT: &str = "Piper voice";

/// A voice's `.onnx.json`, the parts the synthesis needs.
#[derive(Debug, Deserialize)]
struct VoiceConfig {
    audio: AudioConfig,
    espeak: EspeakConfig,
    #[serde(default)]
    inference: InferenceConfig,
    phoneme_id_map: HashMap<String, Vec<i64>>,
}

#[derive(Debug, Deserialize)]
struct AudioConfig {
    sample_rate: u32,
}

#[derive(Debug, Deserialize)]
struct EspeakConfig {
    voice: String,
}

/// The voice's language (`"family": "de"`, `"code": "de_DE"`).
#[derive(Debug, Deserialize)]
struct LanguageConfig {
    #[serde(default)]
    family: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(default)]
struct InferenceConfig {
    noise_scale: f32,
    length_scale: f32,
    noise_w: f32,
}

impl Default for InferenceConfig {
    fn default() -> Self {
        InferenceConfig {
            noise_scale: 0.667,
            length_scale: 1.0,
            noise_w: 0.8,
        }
    }
}

/// A loaded Piper voice.
pub struct Piper {
    session: Mutex<Session>,
    ids: HashMap<char, Vec<i64>>,
    pad: Vec<i64>,
    bos: Vec<i64>,
    eos: Vec<i64>,
    rate: u32,
    espeak_voice: String,
    program: String,
    scales: [f32; 3],
}

impl std::fmt::Debug for Piper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Piper")
            .field("rate", &self.rate)
            .field("espeak_voice", &self.espeak_voice)
            .finish_non_exhaustive()
    }
}

/// A voice's language as whisper names it: its configuration's language family, else the
/// part of its code or of its espeak-ng voice before the region (`de_DE`, `en-us`); Mandarin
/// (`cmn`) is `zh`. (A Cantonese voice, `yue`, is not taken for Mandarin.)
fn language_of(language: Option<&LanguageConfig>, espeak_voice: &str) -> String {
    let named = language
        .and_then(|l| {
            [&l.family, &l.code]
                .into_iter()
                .flatten()
                .find(|n| !n.trim().is_empty())
                .cloned()
        })
        .unwrap_or_else(|| espeak_voice.to_string())
        .trim()
        .to_lowercase();
    let family = named
        .split(['_', '-', '+'])
        .next()
        .unwrap_or_default()
        .to_string();
    match family.as_str() {
        "cmn" => "zh".to_string(),
        _ => family,
    }
}

/// The language a voice speaks, read from its `.onnx.json` alone; `None` where that cannot be
/// read (loading the voice then says why).
pub fn language_of_voice(model: &Path) -> Option<String> {
    #[derive(Deserialize)]
    struct Head {
        espeak: EspeakConfig,
        #[serde(default)]
        language: Option<LanguageConfig>,
    }
    let text = std::fs::read_to_string(config_path(model)).ok()?;
    let head: Head = serde_json::from_str(&text).ok()?;
    Some(language_of(head.language.as_ref(), &head.espeak.voice))
}

/// The voice's configuration file: `voice.onnx` → `voice.onnx.json`.
pub fn config_path(model: &Path) -> PathBuf {
    let mut name = model.as_os_str().to_owned();
    name.push(".json");
    PathBuf::from(name)
}

impl Piper {
    /// Loads a voice (`model` and its `.onnx.json` beside it) at a speed in words per minute;
    /// ONNX Runtime must have been loaded ([`crate::onnx::init`]).
    pub fn load(model: &Path, words_per_minute: u32) -> Result<Piper, VoiceError> {
        let config_file = config_path(model);
        for path in [model, config_file.as_path()] {
            if !path.is_file() {
                return Err(VoiceError::ModelMissing {
                    what: WHAT,
                    path: path.display().to_string(),
                });
            }
        }
        let broken = |path: &Path, reason: String| VoiceError::ModelBroken {
            what: WHAT,
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(&config_file)
            .map_err(|e| broken(&config_file, e.to_string()))?;
        let config: VoiceConfig = serde_json::from_str(&text).map_err(|e| {
            broken(
                &config_file,
                format!("not a Piper voice configuration: {e}"),
            )
        })?;
        let mut ids = HashMap::new();
        for (phoneme, id) in &config.phoneme_id_map {
            let mut chars = phoneme.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                ids.insert(c, id.clone());
            }
        }
        let special = |c: char| {
            ids.get(&c).cloned().ok_or_else(|| {
                broken(
                    &config_file,
                    format!("its phoneme map has no {c:?} (pad, start and end are needed)"),
                )
            })
        };
        let (pad, bos, eos) = (special('_')?, special('^')?, special('$')?);
        if config.audio.sample_rate == 0 {
            return Err(broken(&config_file, "its sample rate is 0".into()));
        }
        let session = super::onnx_session(model, WHAT, threads())?;
        let names: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
        for needed in ["input", "input_lengths", "scales"] {
            if !names.contains(&needed) {
                return Err(broken(
                    model,
                    format!("not a Piper voice: it has no input {needed:?} (inputs {names:?})"),
                ));
            }
        }
        let speed = NATURAL_WPM / words_per_minute.clamp(80, 450) as f32;
        let inference = &config.inference;
        Ok(Piper {
            session: Mutex::new(session),
            ids,
            pad,
            bos,
            eos,
            rate: config.audio.sample_rate,
            espeak_voice: super::tts::espeak_voice_named(&config.espeak.voice),
            program: "espeak-ng".into(),
            scales: [
                inference.noise_scale,
                inference.length_scale * speed,
                inference.noise_w,
            ],
        })
    }

    /// The same voice without its random variation (noise scales 0): a text always makes the
    /// same samples. For fixtures that must be the same from one run to the next.
    pub fn steady(mut self) -> Piper {
        self.scales[0] = 0.0;
        self.scales[2] = 0.0;
        self
    }

    /// The voice's sample rate.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// The phonemes of `text`: espeak-ng's IPA, clause by clause, each clause ended by its
    /// punctuation as Piper's own phonemizer ends it (the voice pauses and rises on it).
    pub fn phonemes(&self, text: &str) -> Result<String, VoiceError> {
        let clauses = clauses(text);
        if clauses.is_empty() {
            return Ok(String::new());
        }
        let lines = self.espeak_ipa(&clauses)?;
        let mut out = String::new();
        if lines.len() == clauses.len() {
            for (line, (_, end)) in lines.iter().zip(&clauses) {
                push_clause(&mut out, line, *end);
            }
        } else {
            // espeak cut the text elsewhere than at its punctuation (an abbreviation, a
            // number): the words as it read them, ended as the text ends.
            let end = clauses.last().map(|(_, e)| *e).unwrap_or('.');
            push_clause(&mut out, &lines.join(" "), end);
        }
        Ok(out.trim_end().to_string())
    }

    fn espeak_ipa(&self, clauses: &[(String, char)]) -> Result<Vec<String>, VoiceError> {
        let text: Vec<String> = clauses
            .iter()
            .map(|(words, end)| format!("{words}{end}"))
            .collect();
        let ipa = super::tts::run_espeak(
            &self.program,
            &["-q", "--ipa", "-v", &self.espeak_voice],
            &text.join(" "),
            " for Piper's phonemes",
        )?;
        Ok(String::from_utf8_lossy(&ipa)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    }

    /// The model's input: start, each phoneme followed by the pad, end (Piper's layout).
    /// Phonemes the voice does not know are left out.
    pub fn ids(&self, phonemes: &str) -> Vec<i64> {
        let mut ids = self.bos.clone();
        ids.extend(&self.pad);
        for c in phonemes.chars() {
            if let Some(id) = self.ids.get(&c) {
                ids.extend(id);
                ids.extend(&self.pad);
            }
        }
        ids.extend(&self.eos);
        ids
    }
}

/// Ends a clause's phonemes with its punctuation, as Piper does: `,` `;` `:` pause within the
/// sentence, `.` `?` `!` end it; a space follows. espeak-ng's language switches ("(fr)") are
/// not phonemes and are left out.
fn push_clause(out: &mut String, phonemes: &str, end: char) {
    let mut in_switch = false;
    for c in phonemes.trim().chars() {
        match c {
            '(' => in_switch = true,
            ')' if in_switch => in_switch = false,
            _ if in_switch => {}
            _ => out.push(c),
        }
    }
    out.push(end);
    // (Piper speaks each sentence on its own; here a space parts them.)
    out.push(' ');
}

/// The text cut at its punctuation, each clause with the mark that ends it (`.` where none).
fn clauses(text: &str) -> Vec<(String, char)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let next_is_gap = chars
            .get(i + 1)
            .is_none_or(|n| n.is_whitespace() || matches!(n, ',' | ';' | ':' | '.' | '!' | '?'));
        let mark = match c {
            ',' | ';' | ':' | '.' | '!' | '?' if next_is_gap => Some(c),
            '…' => Some('.'),
            _ => None,
        };
        match mark {
            Some(mark) => {
                if current.trim().chars().any(char::is_alphanumeric) {
                    out.push((current.trim().to_string(), mark));
                } else if let Some(last) = out.last_mut() {
                    // "?!" or ", ,": the last mark counts.
                    last.1 = mark;
                }
                current.clear();
            }
            None => current.push(c),
        }
    }
    if current.trim().chars().any(char::is_alphanumeric) {
        out.push((current.trim().to_string(), '.'));
    }
    out
}

/// Threads for one synthesis: two at most, so the listener keeps a core.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get().clamp(1, 2))
        .unwrap_or(1)
}

impl Piper {
    /// One run of the voice over phoneme `ids`: its samples as the model makes them. With
    /// `shrink`, ONNX Runtime's arena gives back what it holds beyond this run when it ends.
    fn speak(&self, ids: Vec<i64>, shrink: bool) -> Result<Vec<f32>, VoiceError> {
        let failed = |e: ort::Error| VoiceError::Synthesize(format!("Piper: {e}"));
        let length = ids.len();
        let input = ndarray::Array2::from_shape_vec((1, length), ids)
            .map_err(|e| VoiceError::Synthesize(e.to_string()))?;
        let lengths = ndarray::Array1::from_vec(vec![length as i64]);
        let scales = ndarray::Array1::from_vec(self.scales.to_vec());
        let inputs = ort::inputs![
            "input" => TensorRef::from_array_view(&input).map_err(failed)?,
            "input_lengths" => TensorRef::from_array_view(&lengths).map_err(failed)?,
            "scales" => TensorRef::from_array_view(&scales).map_err(failed)?,
        ];
        let shrinking = if shrink {
            let mut options = ort::session::RunOptions::new().map_err(failed)?;
            options
                .set("memory.enable_memory_arena_shrinkage", "cpu:0")
                .map_err(failed)?;
            Some(options)
        } else {
            None
        };
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let outputs = match &shrinking {
            Some(options) => session.run_with_options(inputs, options),
            None => session.run(inputs),
        }
        .map_err(failed)?;
        let (_, audio) = outputs[0].try_extract_tensor::<f32>().map_err(failed)?;
        Ok(audio.to_vec())
    }
}

impl Synthesizer for Piper {
    /// ONNX Runtime's arena keeps the largest sentence's tensors (~68 MB) for the next one; a
    /// run of one sound that shrinks the arena when it ends hands them back. The next answer's
    /// first sentence makes them again.
    fn release(&self) {
        if let Err(err) = self.speak(self.ids("a"), true) {
            tracing::debug!(%err, "Piper's working memory was not released");
        }
    }

    fn synthesize(&self, text: &str) -> Result<Clip, VoiceError> {
        let phonemes = self.phonemes(text)?;
        let ids = self.ids(&phonemes);
        if ids.len() <= self.bos.len() + self.pad.len() + self.eos.len() {
            return Ok(Clip {
                samples: Vec::new(),
                rate: self.rate,
            });
        }
        let mut samples = self.speak(ids, false)?;
        // VITS's output can overshoot [-1, 1] a little; Piper scales a peak above 1 down.
        let peak = samples.iter().fold(0.0_f32, |m, s| m.max(s.abs()));
        if peak > 1.0 {
            samples.iter_mut().for_each(|s| *s /= peak);
        }
        Ok(Clip {
            samples,
            rate: self.rate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_its_punctuation_and_each_clause_keeps_its_mark() {
        assert_eq!(
            clauses("Well, it is 3.5 km away. Shall we go?!"),
            vec![
                ("Well".to_string(), ','),
                ("it is 3.5 km away".to_string(), '.'),
                ("Shall we go".to_string(), '!'),
            ]
        );
        assert_eq!(
            clauses("no mark at the end"),
            vec![("no mark at the end".to_string(), '.')]
        );
        assert!(clauses(" … ").is_empty());
    }

    #[test]
    fn clauses_end_as_pipers_own_phonemizer_ends_them() {
        let mut out = String::new();
        push_clause(&mut out, " wˈɛl", ',');
        push_clause(&mut out, "ɪts ʃˈɑːtoʊ (fr)ʃato(en) hˈɪɹ", '.');
        push_clause(&mut out, "ʃˌæl wiː ɡˈoʊ", '?');
        assert_eq!(out, "wˈɛl, ɪts ʃˈɑːtoʊ ʃato hˈɪɹ. ʃˌæl wiː ɡˈoʊ? ");
    }

    #[test]
    fn a_voice_whose_configuration_does_not_parse_is_named_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("voice.onnx");
        std::fs::write(&model, b"not onnx").unwrap();
        let err = Piper::load(&model, 175).unwrap_err().to_string();
        assert!(err.contains("voice.onnx.json"), "{err}");
        std::fs::write(config_path(&model), b"{ not json").unwrap();
        let err = Piper::load(&model, 175).unwrap_err().to_string();
        assert!(
            err.contains("voice.onnx.json") && err.contains("not a Piper voice configuration"),
            "{err}"
        );
        std::fs::write(
            config_path(&model),
            br#"{"audio":{"sample_rate":22050},"espeak":{"voice":"en-us"},"phoneme_id_map":{"a":[5]}}"#,
        )
        .unwrap();
        let err = Piper::load(&model, 175).unwrap_err().to_string();
        assert!(err.contains("phoneme map has no '_'"), "{err}");
    }
}
