//! When a session cannot open because of its database — damaged, written by a newer Jarvis,
//! locked, or its directory unwritable — what the chat window shows instead of the chats, and the
//! way out it offers: the file moved aside (kept, renamed) so Jarvis starts afresh, or quit.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::SessionError;
use crate::store::StoreError;

/// Why Jarvis cannot open its chats, as the chat window shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct StartupProblem {
    /// What is wrong, in a sentence.
    pub reason: String,
    /// What the user can do about it.
    pub advice: String,
    /// The database file.
    pub database: String,
    /// Whether moving the file aside (keeping it) would let Jarvis start afresh.
    pub can_move_aside: bool,
}

impl StartupProblem {
    /// The problem a failed [`super::Session::open`] stands for, if it is the database's (the
    /// settings' problems never stop a start: their defaults are used).
    pub fn of(err: &SessionError) -> Option<StartupProblem> {
        let SessionError::Database { path, source } = err else {
            return None;
        };
        let exists = path.exists();
        let (advice, can_move_aside) = match source {
            StoreError::Damaged { .. } => (
                "Move it aside to start afresh with no chats (the file is kept, renamed, for a \
                 backup tool or SQLite's .recover), or quit and restore a backup.",
                exists,
            ),
            StoreError::TooNew { .. } => (
                "Update Jarvis to open it. Or move it aside to start afresh with no chats (the \
                 file is kept, renamed, for the newer Jarvis).",
                exists,
            ),
            StoreError::Locked { .. } => (
                "Another program holds the database. Close it (another Jarvis, a backup tool) and \
                 start Jarvis again.",
                false,
            ),
            StoreError::DataDir { .. } | StoreError::DataFile { .. } => (
                "Make the data directory writable for this user, or set JARVIS_DATA_DIR to one \
                 that is, and start Jarvis again.",
                false,
            ),
            _ => (
                "Move it aside to start afresh with no chats (the file is kept, renamed), or quit.",
                exists,
            ),
        };
        Some(StartupProblem {
            reason: source.to_string(),
            advice: advice.into(),
            database: path.display().to_string(),
            can_move_aside,
        })
    }
}

/// Renames the database at `path` (with its `-wal` and `-shm` files) to
/// `<name>.unusable-<seconds since 1970>`, keeping every byte; returns the new path. Nothing is
/// ever deleted: a name already taken gets a counter.
pub fn move_database_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "jarvis.db".into());
    let aside = (0..)
        .map(|n| {
            let suffix = if n == 0 {
                format!("unusable-{stamp}")
            } else {
                format!("unusable-{stamp}-{n}")
            };
            path.with_file_name(format!("{name}.{suffix}"))
        })
        .find(|candidate| !candidate.exists())
        .expect("an unused name");
    // The WAL first: were the main file moved and the WAL left, SQLite would apply a stranger's
    // log to the next database of that name.
    for extra in ["-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{extra}", path.display()));
        if from.exists() {
            std::fs::rename(&from, format!("{}{extra}", aside.display()))?;
        }
    }
    std::fs::rename(path, &aside)?;
    tracing::warn!(from = %path.display(), to = %aside.display(), "moved the database aside");
    Ok(aside)
}
