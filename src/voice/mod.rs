//! The voice loop: capture → voice activity → utterance → speech-to-text → heard → service; and
//! reply → sentences → speech → playback, lowered while the user speaks over it.
//!
//! Every piece that touches the outside is a port (DESIGN.md §5) so the whole loop runs headless:
//! [`AudioSource`] (a microphone, a WAV file, a feed a test speaks into), [`AudioSink`] (a speaker,
//! a recorder), [`Transcriber`] (whisper.cpp), [`Synthesizer`] (Piper, espeak-ng), [`WakeDetector`]
//! (openWakeWord). Raw audio is never written to disk: it lives in memory from capture to
//! transcription and from synthesis to playback.

pub mod alike;
pub mod audio;
pub mod device;
pub mod echo;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod heard;
pub mod listen;
pub mod models;
pub mod pipeline;
pub mod piper;
#[cfg(any(test, feature = "test-support"))]
pub mod pulse;
pub mod script;
pub mod silero;
pub mod speak;
pub mod stt;
pub mod tts;
pub mod turn;
pub mod vad;
pub mod wake;

use thiserror::Error;

/// Log directives that keep ordinary events out of the default log: the PulseAudio client's
/// reactor reports every normal disconnect (a device list read, a microphone closed) as an
/// error, and the MCP SDK's HTTP worker each server it cannot reach (Jarvis says why itself).
pub const QUIET_LOGS: &str = "pulseaudio::client::reactor=off,rmcp::transport::worker=off";

pub use audio::{AudioSink, AudioSource, Capture, Clip, Feed, FeedSource, Recorder, WavSource};
pub use heard::{classify, Heard, HeardContext};
pub use listen::{Listener, Utterance, UtteranceReport};
pub use pipeline::{VoiceLoop, VoiceParts};
pub use piper::Piper;
pub use stt::{LazyWhisper, Transcriber, Whisper};
pub use tts::{Espeak, Synthesizer};
pub use turn::{SmartTurn, Turn, TurnJudge};
pub use vad::{Segment, Segmenter, SegmenterSettings};
pub use wake::{OpenWakeWord, WakeDetector};

/// Opens an ONNX model on ONNX Runtime (loaded first: [`crate::onnx::init`]) with `threads`
/// threads: a missing file, the runtime not loaded, and a file it cannot read are each an error
/// that names `what` and the path.
pub(crate) fn onnx_session(
    path: &std::path::Path,
    what: &'static str,
    threads: usize,
) -> Result<ort::session::Session, VoiceError> {
    onnx_session_with(path, what, threads, Arena::Kept)
}

/// Where a model's working memory (the tensors a run makes) lives between runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arena {
    /// ONNX Runtime's own arena, kept at its largest run's size for the session's life: for a
    /// model that runs all the time or must be fast from its first run (Piper's voice: 68 MB
    /// after a sentence, and 15–20 % slower through the heap).
    Kept,
    /// The heap, which [`trim_heap`] hands back to the system once the voice is quiet: for a
    /// model that runs now and then (the end-of-turn model: 18 MB, no slower measured).
    Heap,
}

/// [`onnx_session`] with its working memory where `arena` says.
pub(crate) fn onnx_session_with(
    path: &std::path::Path,
    what: &'static str,
    threads: usize,
    arena: Arena,
) -> Result<ort::session::Session, VoiceError> {
    if !path.is_file() {
        return Err(VoiceError::ModelMissing {
            what,
            path: path.display().to_string(),
        });
    }
    let broken = |e: String| VoiceError::ModelBroken {
        what,
        path: path.display().to_string(),
        reason: e,
    };
    let environment = crate::onnx::environment()
        .ok_or_else(|| broken("ONNX Runtime is not loaded (crate::onnx::init)".into()))?;
    ort::session::Session::builder(environment)
        .map_err(|e| broken(e.to_string()))?
        .with_intra_threads(threads)
        .map_err(|e| broken(e.to_string()))?
        .with_execution_providers([ort::ep::CPU::default()
            .with_arena_allocator(arena == Arena::Kept)
            .build()])
        .map_err(|e| broken(e.to_string()))?
        .commit_from_file(path)
        .map_err(|e| broken(e.to_string()))
}

/// Hands the heap's free pages back to the system. The C allocator keeps what is freed for
/// later: what loading the models read and let go (Piper's voice file, parsed, is 18 MB of it),
/// and what a model's run made on the heap. Called once the models are loaded and when the
/// voice falls quiet; a few milliseconds at most.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own free lists; 0 keeps no padding at the top.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The rate everything listens at: 16 kHz mono.
pub const SAMPLE_RATE: u32 = 16_000;
/// One voice activity frame: 20 ms.
pub const FRAME: usize = 320;
/// Milliseconds per frame.
pub const FRAME_MS: u64 = 20;

/// What can go wrong in the voice loop; each names what to do about it.
#[derive(Debug, Error)]
pub enum VoiceError {
    /// A model file is not where it should be.
    #[error("{what} not installed: {path} is missing (run scripts/models voice)")]
    ModelMissing {
        /// Which model.
        what: &'static str,
        /// Where it was looked for.
        path: String,
    },
    /// The speech model that hears the user's language is not installed.
    #[error("the speech model that hears {language} (Whisper base, multilingual) is not installed: {path} is missing (run scripts/models base)")]
    LanguageModelMissing {
        /// The language.
        language: &'static str,
        /// Where it was looked for.
        path: String,
    },
    /// Piper's chosen voice speaks another language than the settings'.
    #[error(
        "Piper's voice speaks {speaks}, not {language} ([voice] piper_voice takes a Piper voice \
         of the language, its .onnx with the .onnx.json beside it); espeak-ng speaks {language}"
    )]
    NoVoiceFor {
        /// The language.
        language: &'static str,
        /// The language the voice speaks.
        speaks: String,
    },
    /// A model file exists but could not be loaded.
    #[error("{what} could not be loaded from {path}: {reason}")]
    ModelBroken {
        /// Which model.
        what: &'static str,
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A WAV file could not be read.
    #[error("cannot read {path} as a WAV file: {reason}")]
    Wav {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The audio device failed or does not exist.
    #[error("audio device: {0}")]
    Device(String),
    /// Transcription failed.
    #[error("speech-to-text failed: {0}")]
    Transcribe(String),
    /// Speech synthesis failed.
    #[error("text-to-speech failed: {0}")]
    Synthesize(String),
    /// The wake-word models failed while running.
    #[error("wake word detection failed: {0}")]
    Wake(String),
    /// Resampling failed.
    #[error("resampling failed: {0}")]
    Resample(String),
}
