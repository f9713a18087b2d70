//! Where the voice models live in the model folder, and loading them with clear errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::pipeline::WakeFactory;
use super::wake::{OpenWakeWord, WakeDetector, WakeModels};
use super::{LazyWhisper, VoiceError, Whisper};

/// The speech model's file for a Settings choice.
pub fn speech_model_file(models: &Path, choice: crate::config::SpeechModel) -> PathBuf {
    models.join(choice.file_name())
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

/// A factory for the wake word's detector; loads ONNX Runtime first and fails clearly without it.
pub fn wake_factory(models: &Path) -> Result<WakeFactory, VoiceError> {
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
