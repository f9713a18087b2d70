//! Silero VAD v6 (ONNX, MIT): how likely each 32 ms of an utterance is to be a human voice.
//!
//! The WebRTC detector cuts the microphone's frames into utterances — it costs microseconds, so it
//! runs on every frame — but it calls a hiss, a thump or a beep "speech" often enough, and whisper
//! writes words for whatever it is given ("You", "Okay.", a whole sentence for a door). So each
//! utterance the cutter lets through is judged again here, before whisper is asked: one with no
//! stretch of voice in it is noise, whatever whisper would have written.

use std::path::Path;
use std::sync::{Arc, Mutex};

use ort::session::Session;
use ort::value::TensorRef;

use super::stt::{Transcriber, Transcript};
use super::{VoiceError, SAMPLE_RATE};

/// The detector's file in the model folder, as `scripts/models voice` installs it.
pub const DETECTOR_FILE: &str = "silero/silero_vad.onnx";

/// Samples the model judges at a time at 16 kHz (32 ms).
const CHUNK: usize = 512;
/// Samples of the previous chunk it is shown before each one.
const CONTEXT: usize = 64;
/// The size of the model's recurrent state.
const STATE: usize = 2 * 128;

/// A chunk at least this likely to be a voice counts as voiced (the reference's threshold).
pub const VOICED: f32 = 0.5;
/// Voiced chunks in a row that make an utterance speech: 5 × 32 ms = 160 ms of voice, less than
/// the shortest "stop", more than a click, a knock or a burst of hiss ever gets.
pub const MIN_RUN: usize = 5;

/// The loaded model. One utterance is judged at a time.
pub struct Silero {
    session: Mutex<Session>,
}

fn broken(path: &Path, reason: impl std::fmt::Display) -> VoiceError {
    VoiceError::ModelBroken {
        what: "speech detector",
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl Silero {
    /// Loads the model (ONNX Runtime must be loaded: [`crate::onnx::init`]) and tries it on a
    /// chunk of silence, so a file of the wrong shape fails here, not on the first utterance.
    pub fn load(path: &Path) -> Result<Silero, VoiceError> {
        let session = super::onnx_session(path, "speech detector", 1)?;
        let silero = Silero {
            session: Mutex::new(session),
        };
        silero
            .probabilities(&[0.0; CHUNK])
            .map_err(|e| broken(path, e))?;
        Ok(silero)
    }

    /// The probability of a voice in each 32 ms of `samples` (16 kHz mono, in [-1, 1]); the last
    /// chunk is padded with silence.
    pub fn probabilities(&self, samples: &[f32]) -> Result<Vec<f32>, VoiceError> {
        let failed = |e: ort::Error| VoiceError::Transcribe(format!("speech detector: {e}"));
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut state = ndarray::Array3::<f32>::zeros((2, 1, 128));
        let mut input = ndarray::Array2::<f32>::zeros((1, CONTEXT + CHUNK));
        let rate = ndarray::arr0(i64::from(SAMPLE_RATE));
        let mut out = Vec::with_capacity(samples.len() / CHUNK + 1);
        for chunk in samples.chunks(CHUNK) {
            {
                let row = input.as_slice_mut().expect("a standard layout");
                row.copy_within(CHUNK.., 0); // the previous chunk's last 64 samples
                row[CONTEXT..CONTEXT + chunk.len()].copy_from_slice(chunk);
                row[CONTEXT + chunk.len()..].fill(0.0);
            }
            let outputs = session
                .run(ort::inputs![
                    "input" => TensorRef::from_array_view(&input).map_err(failed)?,
                    "state" => TensorRef::from_array_view(&state).map_err(failed)?,
                    "sr" => TensorRef::from_array_view(&rate).map_err(failed)?,
                ])
                .map_err(failed)?;
            let (_, probability) = outputs[0].try_extract_tensor::<f32>().map_err(failed)?;
            let (_, next) = outputs[1].try_extract_tensor::<f32>().map_err(failed)?;
            if next.len() != STATE || probability.is_empty() {
                return Err(VoiceError::Transcribe(format!(
                    "speech detector: unexpected outputs ({} state values, {} probabilities)",
                    next.len(),
                    probability.len()
                )));
            }
            state
                .as_slice_mut()
                .expect("a standard layout")
                .copy_from_slice(next);
            out.push(probability[0]);
        }
        Ok(out)
    }
}

/// Whether chunk probabilities hold a voice: [`MIN_RUN`] voiced chunks in a row.
pub fn holds_speech(probabilities: &[f32]) -> bool {
    let mut run = 0;
    for p in probabilities {
        run = if *p >= VOICED { run + 1 } else { 0 };
        if run >= MIN_RUN {
            return true;
        }
    }
    false
}

/// A transcriber that asks the detector first: what holds no voice is not transcribed, and comes
/// back as nothing said (which is noise). A detector that fails on an utterance lets it through
/// to whisper, so a broken detector never loses a question.
pub struct SpeechGate {
    inner: Arc<dyn Transcriber>,
    detector: Silero,
}

impl SpeechGate {
    /// `inner`, asked only for utterances `detector` hears a voice in.
    pub fn new(inner: Arc<dyn Transcriber>, detector: Silero) -> SpeechGate {
        SpeechGate { inner, detector }
    }
}

impl Transcriber for SpeechGate {
    fn transcribe(&self, samples: &[f32]) -> Result<Transcript, VoiceError> {
        match self.detector.probabilities(samples) {
            Ok(p) if !holds_speech(&p) => {
                tracing::debug!(
                    best = p.iter().cloned().fold(0.0_f32, f32::max),
                    "no voice in the utterance: noise"
                );
                return Ok(Transcript::of(String::new(), 1.0));
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "the speech detector failed; whisper judges alone"),
        }
        self.inner.transcribe(samples)
    }

    fn weigh(&self, samples: &[f32], phrases: &[&str]) -> Result<Option<Vec<f32>>, VoiceError> {
        self.inner.weigh(samples, phrases)
    }

    fn prepare(&self) -> Result<(), VoiceError> {
        self.inner.prepare()
    }

    fn release(&self) {
        self.inner.release()
    }
}

#[cfg(test)]
mod tests {
    use super::holds_speech;

    #[test]
    fn a_voice_is_a_run_of_voiced_chunks_not_scattered_ones() {
        assert!(holds_speech(&[0.1, 0.9, 0.8, 0.7, 0.9, 0.6, 0.2]));
        assert!(!holds_speech(&[0.9, 0.1, 0.9, 0.1, 0.9, 0.1, 0.9, 0.9]));
        assert!(!holds_speech(&[0.49; 40]));
        assert!(!holds_speech(&[]));
    }
}
