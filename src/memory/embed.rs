//! Sentence embeddings for recall: all-MiniLM-L6-v2 (384 dimensions, int8 ONNX) through fastembed
//! on ONNX Runtime loaded at run time. A missing model or runtime is an error Jarvis reports and
//! carries on without recall — never a panic.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use thiserror::Error;

/// The embedding's length.
pub const DIMENSIONS: usize = 384;

/// Why embeddings are not available.
#[derive(Debug, Error)]
pub enum EmbedError {
    /// A model file is missing.
    #[error("the sentence embedder is not installed: {0} is missing (run scripts/models memory)")]
    Missing(String),
    /// ONNX Runtime could not be loaded.
    #[error("{0}")]
    Runtime(String),
    /// The model could not be loaded or run.
    #[error("embedding failed: {0}")]
    Failed(String),
}

/// Turns text into unit vectors whose dot product is their similarity.
pub trait Embedder: Send + Sync {
    /// One vector per text (blocking: call it off the async threads).
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// all-MiniLM-L6-v2 from the model folder's `minilm/`.
pub struct MiniLm {
    model: Mutex<TextEmbedding>,
}

const FILES: [&str; 5] = [
    "model.onnx",
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

impl MiniLm {
    /// Loads the model (and ONNX Runtime, checked to exist first).
    pub fn load(models: &Path) -> Result<MiniLm, EmbedError> {
        let dir = models.join("minilm");
        let read = |name: &str| -> Result<Vec<u8>, EmbedError> {
            let path: PathBuf = dir.join(name);
            std::fs::read(&path).map_err(|_| EmbedError::Missing(path.display().to_string()))
        };
        let [onnx, tokenizer, config, special, tokenizer_config] = FILES.map(read);
        let (onnx, tokenizer, config, special, tokenizer_config) =
            (onnx?, tokenizer?, config?, special?, tokenizer_config?);
        let library = crate::onnx::library_path(models);
        if !library.is_file() {
            return Err(EmbedError::Missing(library.display().to_string()));
        }
        crate::onnx::init(&library).map_err(EmbedError::Runtime)?;
        let environment = crate::onnx::environment()
            .ok_or_else(|| EmbedError::Runtime("ONNX Runtime is not loaded".into()))?;
        let files = TokenizerFiles {
            tokenizer_file: tokenizer,
            config_file: config,
            special_tokens_map_file: special,
            tokenizer_config_file: tokenizer_config,
        };
        let model = UserDefinedEmbeddingModel::new(onnx, files).with_pooling(Pooling::Mean);
        let mut options = InitOptionsUserDefined::new();
        options.environment = Some(environment.clone());
        options.intra_threads = Some(1);
        let model = TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(|e| EmbedError::Failed(e.to_string()))?;
        Ok(MiniLm {
            model: Mutex::new(model),
        })
    }
}

/// Scales a vector to length 1 (a zero vector stays zero).
pub fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

/// The cosine similarity of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Embedder for MiniLm {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut model = self.model.lock().unwrap_or_else(|p| p.into_inner());
        let vectors = model
            .embed(texts, None)
            .map_err(|e| EmbedError::Failed(e.to_string()))?;
        Ok(vectors.into_iter().map(normalised).collect())
    }
}

/// all-MiniLM-L6-v2 loaded at its first use, so starting Jarvis costs nothing.
pub struct LazyMiniLm {
    models: PathBuf,
    loaded: std::sync::OnceLock<Result<MiniLm, String>>,
}

impl LazyMiniLm {
    /// From the model folder; `None` when the model is not installed (Jarvis goes on without recall).
    pub fn if_installed(models: &Path) -> Option<LazyMiniLm> {
        FILES
            .iter()
            .all(|f| models.join("minilm").join(f).is_file())
            .then(|| LazyMiniLm {
                models: models.to_path_buf(),
                loaded: std::sync::OnceLock::new(),
            })
    }
}

impl Embedder for LazyMiniLm {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self
            .loaded
            .get_or_init(|| MiniLm::load(&self.models).map_err(|e| e.to_string()))
        {
            Ok(model) => model.embed(texts),
            Err(reason) => Err(EmbedError::Failed(reason.clone())),
        }
    }
}
