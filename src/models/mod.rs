//! The local models: the catalog of models worth talking to ([`Catalog`]), the downloader
//! ([`pull`]: resumed, checked, put in place atomically), the set installed in the model folder
//! ([`installed`]), and the models of servers the user already runs here ([`running`]: Ollama,
//! LM Studio). `jarvis models …` is its shell.

mod catalog;
mod download;
mod servers;

use std::io::Read;
use std::path::{Path, PathBuf};

#[cfg(feature = "test-support")]
pub use catalog::test_catalog;
pub use catalog::{machine_memory_gb, Catalog, CatalogModel, CATALOG_VAR};
pub use download::{part_path, pull, Progress, PullOptions, Source};
pub use servers::{
    model_servers, offered, running, server_lines, settings_for, split_served, ModelServer,
};

/// What went wrong with a model file.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// The catalog's text is not a catalog.
    #[error("the model catalog is malformed: {0}")]
    Catalog(String),
    /// No catalog model has that name.
    #[error(
        "no model is called `{0}` (`jarvis models list` names them; a URL is pulled as it is)"
    )]
    Unknown(String),
    /// A model file's name that is a path or not a GGUF file.
    #[error("`{0}` is not a model file's name (a name ending in .gguf, no folders)")]
    BadName(String),
    /// The download failed on the way.
    #[error("{url}: {reason}")]
    Http {
        /// Where from.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server refused.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// Where from.
        url: String,
        /// Its status code.
        status: u16,
    },
    /// The disk has no room for it.
    #[error(
        "not enough free space in {dir}: the download needs {needed} more bytes and {free} are free"
    )]
    NoSpace {
        /// The model folder.
        dir: PathBuf,
        /// Bytes still to come.
        needed: u64,
        /// Bytes free.
        free: u64,
    },
    /// What came is not the file expected (size or sha256); it was removed.
    #[error("the download is not the model expected, and was removed: {0}")]
    Mismatch(String),
    /// The pull was refused before anything was written.
    #[error("not downloaded: {0}")]
    Refused(String),
    /// The file is not a GGUF model.
    #[error("{path} is not a GGUF model ({reason})")]
    NotGguf {
        /// The file.
        path: PathBuf,
        /// What its start holds instead.
        reason: String,
    },
    /// The pull was cancelled; what came is kept.
    #[error(
        "the download was stopped; {kept} bytes are kept and the next pull goes on from there"
    )]
    Cancelled {
        /// Bytes kept in the part file.
        kept: u64,
    },
    /// A file could not be read, written or removed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Refuses a model file name that is a path, hidden, or not a `.gguf` file.
pub(crate) fn check_file_name(file: &str) -> Result<(), ModelsError> {
    let plain = !file.is_empty()
        && !file.starts_with('.')
        && !file.contains(['/', '\\', '\0'])
        && file.len() > ".gguf".len()
        && file.to_ascii_lowercase().ends_with(".gguf");
    if plain {
        Ok(())
    } else {
        Err(ModelsError::BadName(file.to_string()))
    }
}

/// A sha256 as the catalog and `--sha256` write it: 64 lowercase hex digits.
pub fn hex_digest(hasher: sha2::Sha256) -> String {
    use sha2::Digest;
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Refuses a sha256 that is not 64 hex digits (a typo found before gigabytes are downloaded).
pub(crate) fn check_sha256(sha: &str) -> Result<(), ModelsError> {
    if sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(ModelsError::Refused(format!(
            "`{sha}` is not a sha256 (64 hex digits)"
        )))
    }
}

/// Checks that `file` starts as a GGUF model does: the magic `GGUF` and a version llama.cpp
/// reads (1–3).
pub(crate) fn check_gguf_header(file: &mut impl Read, path: &Path) -> Result<(), ModelsError> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(source) => {
                return Err(ModelsError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    let not = |reason: String| ModelsError::NotGguf {
        path: path.to_path_buf(),
        reason,
    };
    if got < head.len() {
        return Err(not(format!("it is {got} bytes long")));
    }
    if &head[..4] != b"GGUF" {
        let start = String::from_utf8_lossy(&head[..4])
            .escape_debug()
            .to_string();
        return Err(not(format!("it starts with \"{start}\", not \"GGUF\"")));
    }
    let version = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if !(1..=3).contains(&version) {
        return Err(not(format!("GGUF version {version}")));
    }
    Ok(())
}

/// A model file in the model folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Its name.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// The catalog model it is, where it is one.
    pub catalog: Option<String>,
}

/// The GGUF models in `dir` (not the parts of unfinished downloads), by name; an absent folder
/// holds none.
pub fn installed(dir: &Path, catalog: &Catalog) -> Result<Vec<Installed>, ModelsError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ModelsError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Ok(file) = entry.file_name().into_string() else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || check_file_name(&file).is_err() {
            continue;
        }
        let catalog = catalog.find(&file).map(|m| m.name.clone());
        found.push(Installed {
            file,
            size: meta.len(),
            catalog,
        });
    }
    found.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(found)
}

/// The bytes an unfinished download of `file` left in `dir`, if any.
pub fn partial(dir: &Path, file: &str) -> Option<u64> {
    std::fs::metadata(part_path(dir, file))
        .ok()
        .map(|m| m.len())
}

/// Removes the model `file` from `dir`, and any unfinished download of it; whether anything
/// was there.
pub fn remove(dir: &Path, file: &str) -> Result<bool, ModelsError> {
    check_file_name(file)?;
    let mut removed = false;
    for path in [dir.join(file), part_path(dir, file)] {
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ModelsError::Io { path, source }),
        }
    }
    Ok(removed)
}

/// What `jarvis models pull WHAT` downloads: a catalog model by name (its own sha256), or a URL
/// (checked against `sha256` where given).
pub fn source_for(
    catalog: &Catalog,
    what: &str,
    sha256: Option<String>,
) -> Result<Source, ModelsError> {
    match catalog.find(what) {
        Some(model) => {
            if let Some(given) = sha256 {
                if !model
                    .sha256
                    .as_deref()
                    .is_some_and(|known| known.eq_ignore_ascii_case(&given))
                {
                    return Err(ModelsError::Refused(format!(
                        "`{}` is a catalog model; its sha256 is the catalog's, not {given}",
                        model.name
                    )));
                }
            }
            Ok(Source {
                url: model.url.clone(),
                file: model.file.clone(),
                size: Some(model.size),
                sha256: model.sha256.clone(),
            })
        }
        None if what.contains("://") => Source::from_url(what, sha256),
        None => Err(ModelsError::Unknown(what.to_string())),
    }
}

/// The file a catalog name or a file name stands for.
pub fn file_for(catalog: &Catalog, what: &str) -> Result<String, ModelsError> {
    match catalog.find(what) {
        Some(model) => Ok(model.file.clone()),
        None => {
            check_file_name(what).map_err(|_| ModelsError::Unknown(what.to_string()))?;
            Ok(what.to_string())
        }
    }
}

/// `jarvis models list`: one line per catalog model, then per other model file in `dir` —
/// NAME, SIZE, STATE (`in use`, `installed`, `partial NN%`, `-`) and what it is, tab-separated.
/// `in_use` is the local model's path; `memory_gb` this machine's memory, for the
/// recommendation.
pub fn listing(
    catalog: &Catalog,
    dir: &Path,
    in_use: &Path,
    memory_gb: Option<u64>,
) -> Result<Vec<String>, ModelsError> {
    let installed = installed(dir, catalog)?;
    let recommended = catalog.recommended(memory_gb).map(|m| m.name.as_str());
    let state = |file: &str| {
        if dir.join(file) == in_use {
            "in use".to_string()
        } else if installed.iter().any(|i| i.file == file) {
            "installed".to_string()
        } else {
            "-".to_string()
        }
    };
    let gb = |bytes: u64| {
        if bytes >= 1_000_000_000 {
            format!("{:.1} GB", bytes as f64 / 1e9)
        } else {
            format!("{} MB", bytes.div_ceil(1_000_000))
        }
    };
    let mut lines = Vec::new();
    for model in catalog.models() {
        let mut state = state(&model.file);
        if state == "-" {
            if let Some(part) = partial(dir, &model.file) {
                state = format!("partial {}%", part * 100 / model.size.max(1));
            }
        }
        let mut notes = format!("{} — {}", model.title, model.licence);
        notes.push_str(if model.tools {
            "; remembers with tools"
        } else {
            "; no tools"
        });
        if recommended == Some(model.name.as_str()) {
            notes.push_str("; recommended for this machine");
        }
        lines.push(format!(
            "{}\t{}\t{state}\t{notes}",
            model.name,
            gb(model.size)
        ));
    }
    for other in installed.iter().filter(|i| i.catalog.is_none()) {
        lines.push(format!(
            "{}\t{}\t{}\ta model file of your own",
            other.file,
            gb(other.size),
            state(&other.file)
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gguf_header_is_its_magic_and_a_known_version() {
        let path = Path::new("m.gguf");
        let header = |bytes: &[u8]| check_gguf_header(&mut &bytes[..], path);
        assert!(header(b"GGUF\x03\0\0\0rest").is_ok());
        let html = header(b"<!DOCTYPE html>").unwrap_err().to_string();
        assert!(html.contains("not \"GGUF\""), "{html}");
        assert!(header(b"GGUF\x09\0\0\0").is_err());
        assert!(header(b"GGU").is_err());
    }

    #[test]
    fn a_model_file_name_is_a_plain_gguf_name() {
        assert!(check_file_name("qwen2.5-1.5b-instruct-q4_k_m.gguf").is_ok());
        for bad in [
            "",
            ".gguf",
            "../x.gguf",
            "a/b.gguf",
            ".hidden.gguf",
            "x.bin",
        ] {
            assert!(check_file_name(bad).is_err(), "{bad}");
        }
    }
}
