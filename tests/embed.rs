//! The sentence embedder on the installed model (`scripts/models memory`): related sentences are
//! nearer than unrelated ones, and a missing model or runtime is a clear error.

mod support;

use jarvis::memory::embed::{cosine, EmbedError, Embedder, MiniLm, DIMENSIONS};
use support::*;

#[test]
fn related_sentences_are_nearer_than_unrelated_ones() {
    let model = MiniLm::load(&model_dir()).unwrap_or_else(|e| panic!("{e}"));
    let texts: Vec<String> = [
        "The user asked about their dog Bruno and how to train him to sit.",
        "How do I teach my puppy to sit?",
        "The quarterly tax return is due at the end of the month.",
    ]
    .map(String::from)
    .to_vec();
    let v = model.embed(&texts).unwrap();
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|e| e.len() == DIMENSIONS));
    let norm: f32 = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-3, "unit vectors: {norm}");
    let (near, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!(near > far + 0.2, "dog training {near} vs taxes {far}");
}

#[test]
fn a_missing_model_is_a_clear_error_not_a_panic() {
    let dir = Dir::new();
    match MiniLm::load(dir.path()) {
        Err(EmbedError::Missing(path)) => assert!(path.ends_with("model.onnx"), "{path}"),
        other => panic!("expected a missing model, got {:?}", other.err()),
    }
}

#[test]
fn a_missing_onnx_runtime_is_a_clear_error_not_a_panic() {
    let dir = Dir::new();
    std::os::unix::fs::symlink(model_dir().join("minilm"), dir.path().join("minilm")).unwrap();
    match MiniLm::load(dir.path()) {
        Err(EmbedError::Missing(path)) => assert!(path.contains("onnxruntime"), "{path}"),
        other => panic!("expected a missing runtime, got {:?}", other.err()),
    }
}
