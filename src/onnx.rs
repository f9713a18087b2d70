//! ONNX Runtime, loaded at run time from the shared library the model set-up step installs (the
//! wake word now; embeddings later). One environment per process; a missing library is a clear
//! error, never a panic, and everything else keeps working.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

static RUNTIME: OnceLock<ort::environment::Environment> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// The library's file name as the set-up step installs it.
pub const LIBRARY: &str = "libonnxruntime.so";

/// Where the library is looked for: `ORT_DYLIB_PATH`, else the model folder's `onnxruntime/`.
pub fn library_path(models: &Path) -> PathBuf {
    match std::env::var_os("ORT_DYLIB_PATH") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => models.join("onnxruntime").join(LIBRARY),
    }
}

/// The environment, once [`init`] succeeded.
pub fn environment() -> Option<&'static ort::environment::Environment> {
    RUNTIME.get()
}

/// Loads ONNX Runtime from `library` once; later calls return at once.
pub fn init(library: &Path) -> Result<(), String> {
    if RUNTIME.get().is_some() {
        return Ok(());
    }
    let _one_at_a_time = LOADING.lock().unwrap_or_else(|p| p.into_inner());
    if RUNTIME.get().is_some() {
        return Ok(());
    }
    // ort panics on a library it cannot open in some paths: check it is there first.
    if !library.is_file() {
        return Err(format!(
            "ONNX Runtime not installed: {} is missing (run scripts/models voice)",
            library.display()
        ));
    }
    let environment = ort::init_from(library)
        .map_err(|e| {
            format!(
                "ONNX Runtime at {} cannot be loaded: {e}",
                library.display()
            )
        })?
        .with_name("jarvis")
        .build()
        .map_err(|e| format!("ONNX Runtime could not start: {e}"))?;
    let _ = RUNTIME.set(environment);
    Ok(())
}
