//! The wake word, "Hey Jarvis", with openWakeWord's three ONNX models run as its reference
//! implementation streams them: 80 ms steps of int16-valued audio → mel frames → a 96-value
//! embedding per step → the wake word's score over the last 16 embeddings (1.28 s).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use ndarray::{Array2, Array4};
use ort::session::Session;
use ort::value::TensorRef;

use super::VoiceError;

/// Samples per step (80 ms).
const STEP: usize = 1280;
/// Extra samples the mel model sees before each step.
const MEL_CONTEXT: usize = 480;
/// Mel frames an embedding looks at.
const MEL_WINDOW: usize = 76;
/// Embeddings the wake word model looks at.
const EMBEDDINGS: usize = 16;

/// Hears the wake word in a stream of 16 kHz samples.
pub trait WakeDetector: Send {
    /// Feeds samples; returns the highest score (0–1) of the steps they completed.
    fn feed(&mut self, samples: &[i16]) -> Result<f32, VoiceError>;
    /// Forgets what it heard (after a detection, so one phrase wakes once).
    fn reset(&mut self);
}

/// The model files, in the model folder's `openwakeword/`.
#[derive(Debug, Clone)]
pub struct WakeModels {
    /// `melspectrogram.onnx`.
    pub mel: PathBuf,
    /// `embedding_model.onnx`.
    pub embedding: PathBuf,
    /// `hey_jarvis_v0.1.onnx`.
    pub wake_word: PathBuf,
}

impl WakeModels {
    /// The files under `dir`.
    pub fn in_dir(dir: &Path) -> WakeModels {
        WakeModels {
            mel: dir.join("melspectrogram.onnx"),
            embedding: dir.join("embedding_model.onnx"),
            wake_word: dir.join("hey_jarvis_v0.1.onnx"),
        }
    }
}

/// openWakeWord on ONNX Runtime.
pub struct OpenWakeWord {
    mel: Session,
    embedding: Session,
    wake_word: Session,
    raw: VecDeque<f32>,
    pending: Vec<f32>,
    mels: VecDeque<[f32; 32]>,
    embeddings: VecDeque<[f32; 96]>,
    warmup: VecDeque<[f32; 96]>,
    steps: usize,
}

fn session(path: &Path, what: &'static str) -> Result<Session, VoiceError> {
    super::onnx_session(path, what, 1)
}

fn run_error(e: impl std::fmt::Display) -> VoiceError {
    VoiceError::Wake(e.to_string())
}

impl OpenWakeWord {
    /// Loads the three models; ONNX Runtime must have been loaded ([`crate::onnx::init`]).
    pub fn load(models: &WakeModels) -> Result<OpenWakeWord, VoiceError> {
        let mut detector = OpenWakeWord {
            mel: session(&models.mel, "wake word model (mel)")?,
            embedding: session(&models.embedding, "wake word model (embedding)")?,
            wake_word: session(&models.wake_word, "wake word model (hey jarvis)")?,
            raw: VecDeque::new(),
            pending: Vec::new(),
            mels: VecDeque::new(),
            embeddings: VecDeque::new(),
            warmup: VecDeque::new(),
            steps: 0,
        };
        // As the reference does: start from the embeddings of a few seconds of quiet noise, so the
        // first real second is judged against a room, not against nothing.
        detector.reset_buffers();
        let mut seed: u32 = 12_345;
        let noise: Vec<i16> = (0..16_000 * 2)
            .map(|_| {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                ((seed >> 16) as i32 % 1000) as i16
            })
            .collect();
        for chunk in noise.chunks(STEP) {
            detector.step(chunk.iter().map(|s| f32::from(*s)).collect(), false)?;
        }
        detector.warmup = detector.embeddings.clone();
        detector.steps = 0;
        Ok(detector)
    }

    fn reset_buffers(&mut self) {
        self.raw.clear();
        self.pending.clear();
        self.mels = std::iter::repeat_n([1.0; 32], MEL_WINDOW).collect();
        self.embeddings.clone_from(&self.warmup);
        self.steps = 0;
    }

    /// One 80 ms step; returns the score when `score` is asked for and enough has been heard.
    fn step(&mut self, chunk: Vec<f32>, score: bool) -> Result<f32, VoiceError> {
        self.raw.extend(chunk);
        while self.raw.len() > STEP + MEL_CONTEXT {
            self.raw.pop_front();
        }
        let input: Vec<f32> = self.raw.iter().copied().collect();
        let audio = Array2::from_shape_vec((1, input.len()), input).map_err(run_error)?;
        let mel = infer(&mut self.mel, &audio)?;
        let frames: Vec<[f32; 32]> = mel
            .chunks_exact(32)
            .map(|row| {
                let mut out = [0.0; 32];
                for (o, x) in out.iter_mut().zip(row) {
                    *o = x / 10.0 + 2.0;
                }
                out
            })
            .collect();
        // The last 8 frames are this step's.
        let new = frames.len().min(8);
        self.mels
            .extend(frames[frames.len() - new..].iter().copied());
        while self.mels.len() > MEL_WINDOW {
            self.mels.pop_front();
        }
        let window: Vec<f32> = self.mels.iter().flatten().copied().collect();
        let mels = Array4::from_shape_vec((1, MEL_WINDOW, 32, 1), window).map_err(run_error)?;
        let embedding = infer(&mut self.embedding, &mels)?;
        let mut e = [0.0; 96];
        e.copy_from_slice(
            embedding
                .get(..96)
                .ok_or_else(|| run_error("a short embedding"))?,
        );
        self.embeddings.push_back(e);
        while self.embeddings.len() > EMBEDDINGS {
            self.embeddings.pop_front();
        }
        self.steps += 1;
        // The reference ignores its first few predictions after a start.
        if !score || self.embeddings.len() < EMBEDDINGS || self.steps < 5 {
            return Ok(0.0);
        }
        let features: Vec<f32> = self.embeddings.iter().flatten().copied().collect();
        let features =
            ndarray::Array3::from_shape_vec((1, EMBEDDINGS, 96), features).map_err(run_error)?;
        let score = infer(&mut self.wake_word, &features)?;
        Ok(score.first().copied().unwrap_or(0.0))
    }
}

/// Runs a one-input model; its first output's values.
fn infer<D: ndarray::Dimension + 'static>(
    session: &mut Session,
    input: &ndarray::Array<f32, D>,
) -> Result<Vec<f32>, VoiceError> {
    let outputs = session
        .run(ort::inputs![
            TensorRef::from_array_view(input).map_err(run_error)?
        ])
        .map_err(run_error)?;
    let (_, values) = outputs[0].try_extract_tensor::<f32>().map_err(run_error)?;
    Ok(values.to_vec())
}

impl WakeDetector for OpenWakeWord {
    fn feed(&mut self, samples: &[i16]) -> Result<f32, VoiceError> {
        // int16 values as f32, not scaled to [-1, 1]: what the models were trained on.
        self.pending.extend(samples.iter().map(|s| f32::from(*s)));
        let mut best: f32 = 0.0;
        while self.pending.len() >= STEP {
            let chunk: Vec<f32> = self.pending.drain(..STEP).collect();
            best = best.max(self.step(chunk, true)?);
        }
        Ok(best)
    }

    fn reset(&mut self) {
        self.reset_buffers();
    }
}
