//! Where the voice models live in the model folder, and loading them with clear errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::pipeline::WakeFactory;
use super::silero::{Silero, SpeechGate};
use super::turn::{SmartTurn, TurnJudge};
use super::wake::{OpenWakeWord, WakeDetector, WakeModels};
use super::{Espeak, LazyWhisper, Piper, Synthesizer, Transcriber, VoiceError, Whisper};
use crate::config::{TtsEngine, VoiceSettings};

/// The speech model's file for a Settings choice: the one `scripts/models` installs now, or
/// the one an earlier version installed where that is all the folder holds.
pub fn speech_model_file(models: &Path, choice: crate::config::SpeechModel) -> PathBuf {
    let file = models.join(choice.file_name());
    match choice.earlier_file_name().map(|name| models.join(name)) {
        Some(earlier) if !file.is_file() && earlier.is_file() => earlier,
        _ => file,
    }
}

/// The speech model that hears `language`: the one the settings choose for English; for any
/// other, Whisper base (multilingual) — tiny.en hears English only.
pub fn speech_model_for(
    choice: crate::config::SpeechModel,
    language: crate::config::Language,
) -> crate::config::SpeechModel {
    if language.resolved() == crate::config::Language::En {
        choice
    } else {
        crate::config::SpeechModel::Base
    }
}

/// The file of the speech model that hears `language`; missing, an error that names the
/// language and the command that installs it.
fn speech_model_path(
    models: &Path,
    voice: &VoiceSettings,
    language: crate::config::Language,
) -> Result<PathBuf, VoiceError> {
    let path = speech_model_file(models, speech_model_for(voice.speech_model, language));
    if !path.is_file() && language.resolved() != crate::config::Language::En {
        return Err(VoiceError::LanguageModelMissing {
            language: language.name(),
            path: path.display().to_string(),
        });
    }
    Ok(path)
}

/// Loads the speech model that hears `language`, set to transcribe in it.
pub fn whisper_for(
    models: &Path,
    voice: &VoiceSettings,
    language: crate::config::Language,
) -> Result<Whisper, VoiceError> {
    let path = speech_model_path(models, voice, language)?;
    Ok(Whisper::load(&path, voice.threads)?
        .hearing(language.whisper_code())
        .writing_traditional(language.resolved() == crate::config::Language::ZhHant))
}

/// [`whisper_for`], loaded the first time the microphone opens.
pub fn lazy_whisper_for(
    models: &Path,
    voice: &VoiceSettings,
    language: crate::config::Language,
) -> Result<LazyWhisper, VoiceError> {
    let path = speech_model_path(models, voice, language)?;
    Ok(LazyWhisper::new(&path, voice.threads)?
        .hearing(language.whisper_code())
        .writing_traditional(language.resolved() == crate::config::Language::ZhHant))
}

/// Loads the speech model.
pub fn load_whisper(
    models: &Path,
    choice: crate::config::SpeechModel,
    threads: usize,
) -> Result<Whisper, VoiceError> {
    Whisper::load(&speech_model_file(models, choice), threads)
}

/// The speech model, loaded the first time the microphone opens.
pub fn lazy_whisper(
    models: &Path,
    choice: crate::config::SpeechModel,
    threads: usize,
) -> Result<LazyWhisper, VoiceError> {
    LazyWhisper::new(&speech_model_file(models, choice), threads)
}

/// Loads ONNX Runtime's library from the model folder (once per process); missing or not a
/// library, a clear error.
pub fn onnx_runtime(models: &Path) -> Result<(), VoiceError> {
    let library = crate::onnx::library_path(models);
    if !library.is_file() {
        return Err(VoiceError::ModelMissing {
            what: "ONNX Runtime",
            path: library.display().to_string(),
        });
    }
    crate::onnx::init(&library).map_err(|reason| VoiceError::ModelBroken {
        what: "ONNX Runtime",
        path: library.display().to_string(),
        reason,
    })?;
    Ok(())
}

/// A factory for the wake word's detector; loads ONNX Runtime first and fails clearly without it.
pub fn wake_factory(models: &Path) -> Result<WakeFactory, VoiceError> {
    onnx_runtime(models)?;
    let files = WakeModels::in_dir(&models.join("openwakeword"));
    for path in [&files.mel, &files.embedding, &files.wake_word] {
        if !path.is_file() {
            return Err(VoiceError::ModelMissing {
                what: "wake word model",
                path: path.display().to_string(),
            });
        }
    }
    Ok(Arc::new(move || {
        OpenWakeWord::load(&files).map(|d| Box::new(d) as Box<dyn WakeDetector>)
    }))
}

/// Piper's voice file in the model folder, as `scripts/models voice` installs it.
pub fn piper_voice_file(models: &Path) -> PathBuf {
    models.join(super::piper::VOICE_FILE)
}

/// The Piper voice the settings choose: `[voice] piper_voice` (a path, or one in the model
/// folder), or the one `scripts/models voice` installs where that is empty.
pub fn chosen_piper_voice(models: &Path, voice: &VoiceSettings) -> PathBuf {
    match voice.piper_voice.trim() {
        "" => piper_voice_file(models),
        path => models.join(path),
    }
}

/// Loads Piper's voice, ONNX Runtime first; a missing or damaged file is a clear error.
pub fn load_piper(models: &Path, words_per_minute: u32) -> Result<Piper, VoiceError> {
    onnx_runtime(models)?;
    Piper::load(&piper_voice_file(models), words_per_minute)
}

/// The voice the settings ask for, and why it is espeak-ng instead where Piper's voice cannot
/// be loaded (that reason is for the log and `jarvis doctor`; the voice loop speaks either way).
pub fn synthesizer(
    models: &Path,
    voice: &VoiceSettings,
) -> (Arc<dyn Synthesizer>, Option<VoiceError>) {
    synthesizer_in(models, voice, crate::config::Language::En)
}

/// The espeak-ng voice that speaks `language`: the settings' own, or the language's where
/// the settings name an English voice for another language.
fn espeak_voice_in(voice: &VoiceSettings, language: crate::config::Language) -> String {
    if language.resolved() == crate::config::Language::En || !voice.tts_voice.starts_with("en") {
        voice.tts_voice.clone()
    } else {
        language.espeak_voice().to_string()
    }
}

/// Whether Piper's chosen voice speaks `language`, read from its `.onnx.json` (no model
/// loaded; the installed voice speaks English even where it is missing); why not where it does
/// not. A chosen voice whose configuration cannot be read is left to loading, which says why.
fn piper_speaks(
    models: &Path,
    voice: &VoiceSettings,
    language: crate::config::Language,
) -> Result<PathBuf, VoiceError> {
    let file = chosen_piper_voice(models, voice);
    let speaks = super::piper::language_of_voice(&file).or_else(|| {
        voice
            .piper_voice
            .trim()
            .is_empty()
            .then(|| "en".to_string())
    });
    match speaks {
        Some(speaks) if speaks != language.whisper_code() => Err(VoiceError::NoVoiceFor {
            language: language.name(),
            speaks: crate::config::Language::of_tag(&speaks)
                .map_or(speaks.clone(), |l| l.name().to_string()),
        }),
        _ => Ok(file),
    }
}

/// The voice that speaks `language`: Piper's chosen voice where the settings ask for Piper and
/// it speaks that language, else espeak-ng's voice of the language (with why, for the log and
/// `jarvis doctor`).
pub fn synthesizer_in(
    models: &Path,
    voice: &VoiceSettings,
    language: crate::config::Language,
) -> (Arc<dyn Synthesizer>, Option<VoiceError>) {
    let espeak_voice = espeak_voice_in(voice, language);
    let espeak = || Arc::new(Espeak::new(&espeak_voice, voice.tts_speed)) as Arc<dyn Synthesizer>;
    if voice.tts == TtsEngine::Espeak {
        return (espeak(), None);
    }
    let loaded = piper_speaks(models, voice, language).and_then(|file| {
        onnx_runtime(models)?;
        Piper::load(&file, voice.tts_speed)
    });
    match loaded {
        Ok(piper) => (Arc::new(piper), None),
        Err(err) => (espeak(), Some(err)),
    }
}

/// Who speaks `language` as the settings stand, for Settings and `jarvis doctor`, from the
/// files alone (no model loaded): "Piper's voice de_DE-thorsten-medium" or "espeak-ng's de
/// voice" (with why, where Piper was asked for).
pub fn speaker_of(
    models: &Path,
    voice: &VoiceSettings,
    language: crate::config::Language,
) -> String {
    let espeak = format!(
        "espeak-ng's {} voice",
        super::tts::espeak_voice_named(&espeak_voice_in(voice, language))
    );
    if voice.tts == TtsEngine::Espeak {
        return espeak;
    }
    let file = chosen_piper_voice(models, voice);
    let name = file
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match piper_speaks(models, voice, language) {
        Ok(_) if !file.is_file() => {
            format!("{espeak} (Piper's voice is not there: {})", file.display())
        }
        Ok(_) if super::piper::language_of_voice(&file).is_none() => format!(
            "{espeak} (Piper's voice {name} has no readable {})",
            super::piper::config_path(&file).display()
        ),
        Ok(_) if !crate::onnx::library_path(models).is_file() => {
            format!("{espeak} (ONNX Runtime is not installed: scripts/models voice)")
        }
        Ok(_) => format!("Piper's voice {name}"),
        Err(VoiceError::NoVoiceFor { speaks, .. }) => {
            format!("{espeak} (Piper's voice {name} speaks {speaks})")
        }
        Err(err) => format!("{espeak} ({err})"),
    }
}

/// Loads the speech detector, ONNX Runtime first.
pub fn load_silero(models: &Path) -> Result<Silero, VoiceError> {
    onnx_runtime(models)?;
    Silero::load(&models.join(super::silero::DETECTOR_FILE))
}

/// `transcriber` behind the speech detector (noise is not transcribed), or alone where the
/// detector cannot be loaded, and why (for the log and `jarvis doctor`; listening works either
/// way).
pub fn speech_gate(
    models: &Path,
    transcriber: Arc<dyn Transcriber>,
) -> (Arc<dyn Transcriber>, Option<VoiceError>) {
    match load_silero(models) {
        Ok(detector) => (Arc::new(SpeechGate::new(transcriber, detector)), None),
        Err(err) => (transcriber, Some(err)),
    }
}

/// Loads the end-of-turn model, ONNX Runtime first.
pub fn load_smart_turn(models: &Path) -> Result<SmartTurn, VoiceError> {
    onnx_runtime(models)?;
    SmartTurn::load(&models.join(super::turn::TURN_FILE))
}

/// The judge of pauses: the end-of-turn model with the words, or the words alone where the
/// model cannot be loaded, and why (for the log and `jarvis doctor`; listening works either
/// way, with a longer quiet before a turn ends).
pub fn turn_judge(models: &Path) -> (TurnJudge, Option<VoiceError>) {
    match load_smart_turn(models) {
        Ok(model) => (TurnJudge::new(Some(Arc::new(model))), None),
        Err(err) => (TurnJudge::default(), Some(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SpeechModel;

    #[test]
    fn the_speech_model_an_earlier_install_left_is_used_until_the_new_one_is_there() {
        let models = tempfile::tempdir().unwrap();
        let new = models.path().join(SpeechModel::TinyEn.file_name());
        let earlier = models.path().join("ggml-tiny.en.bin");
        // Neither there: the new one is asked for (and its absence says how to install it).
        assert_eq!(speech_model_file(models.path(), SpeechModel::TinyEn), new);
        std::fs::write(&earlier, b"f16").unwrap();
        assert_eq!(
            speech_model_file(models.path(), SpeechModel::TinyEn),
            earlier
        );
        std::fs::write(&new, b"q8_0").unwrap();
        assert_eq!(speech_model_file(models.path(), SpeechModel::TinyEn), new);
        assert_eq!(
            speech_model_file(models.path(), SpeechModel::Base),
            models.path().join("ggml-base.bin")
        );
    }
}
