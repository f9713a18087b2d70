//! The SQLite store: chats, their records and replies, durable across restarts and crashes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use rusqlite_migration::{Migrations, M};
use serde::{Deserialize, Serialize};
use thiserror::Error;

mod chats;
mod compaction;
mod confirmations;
mod facts;
mod records;
mod replies;
mod search;
mod summaries;
mod tools;

pub use confirmations::{Pending, ToolAsk};
use records::record_from_row;
pub use records::REMEMBERED;
pub use replies::owner;
pub use search::Found;
pub use tools::{NOT_RUN, STOPPED, USED};

/// The migrations, embedded at compile time and applied in order.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_chats_records_replies.sql"),
    include_str!("../../migrations/0002_facts.sql"),
    include_str!("../../migrations/0003_heard_prefix.sql"),
    include_str!("../../migrations/0004_confirmations.sql"),
    include_str!("../../migrations/0005_summaries.sql"),
    include_str!("../../migrations/0006_compaction.sql"),
    include_str!("../../migrations/0007_history_since.sql"),
    include_str!("../../migrations/0008_rolling_summaries_and_provenance.sql"),
    include_str!("../../migrations/0009_records_search.sql"),
    include_str!("../../migrations/0010_confirmation_turn.sql"),
    include_str!("../../migrations/0011_question_mode.sql"),
    include_str!("../../migrations/0012_fact_origin_and_action_records.sql"),
    include_str!("../../migrations/0013_allowed_tools.sql"),
    include_str!("../../migrations/0014_tool_confirmations.sql"),
];

/// How long a running reply's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(15);

/// What went wrong with the store; each message says what to do.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The database was written by a newer Jarvis.
    #[error("the database {path} has schema version {found}, newer than this Jarvis understands (up to {supported}); update Jarvis, or set JARVIS_DATA_DIR to use another data directory")]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// Another process held the database longer than the busy timeout.
    #[error("the database {path} is locked by another process (waited {waited_ms} ms); close the other Jarvis or try again")]
    Locked {
        /// The file.
        path: PathBuf,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The database file could not be made private to the user (or made at all).
    #[error("cannot create the database file {path}: {source}")]
    DataFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory could not be made.
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The migrations failed.
    #[error("cannot bring the database {path} up to date: {message}")]
    Migration {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// No chat with that id.
    #[error("there is no chat {0}")]
    NoSuchChat(ChatId),
    /// No fact with that id.
    #[error("there is no fact {0}")]
    NoSuchFact(i64),
    /// An empty fact.
    #[error("a fact cannot be empty")]
    EmptyFact,
    /// The file is not a database SQLite can read, or it is damaged.
    #[error("the database {path} is damaged ({detail})")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// SQLite's words.
        detail: String,
    },
    /// The reply is no longer this process's to write: another Jarvis took it as abandoned and
    /// ended it (its text as it stood then is kept).
    #[error("reply {0} was ended by another Jarvis; nothing more is written to it")]
    NotOurs(ReplyId),
    /// A live reply of another running Jarvis is writing in this chat.
    #[error("chat {0} is replying in another Jarvis; wait for it to finish")]
    ReplyingElsewhere(ChatId),
    /// The app is shutting down: the call was never made.
    #[error("Jarvis is shutting down; nothing more is written")]
    ShuttingDown,
    /// Any other SQLite error.
    #[error("database error in {path}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// The error.
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// Whether the disk holding the database is full (the cure is to free some space).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::Sqlite { source, .. }
            if source.sqlite_error_code() == Some(ErrorCode::DiskFull))
    }
}

/// A chat's id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ts_rs::TS,
)]
#[serde(transparent)]
pub struct ChatId(pub i64);

/// A reply's id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ts_rs::TS,
)]
#[serde(transparent)]
pub struct ReplyId(pub i64);

/// A record's id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ts_rs::TS,
)]
#[serde(transparent)]
pub struct RecordId(pub i64);

macro_rules! display_id {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    )*};
}
display_id!(ChatId, ReplyId, RecordId);

/// Who said a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user.
    User,
    /// Jarvis.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    fn parse(s: &str) -> Role {
        match s {
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::User,
        }
    }
}

/// Where a reply is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ReplyState {
    /// Another reply holds the backend.
    Waiting,
    /// Being written.
    Running,
    /// Answered.
    Done,
    /// Stopped by the user.
    Stopped,
    /// Failed, with a reason.
    Failed,
    /// The process that wrote it died.
    Interrupted,
}

impl ReplyState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyState::Waiting => "waiting",
            ReplyState::Running => "running",
            ReplyState::Done => "done",
            ReplyState::Stopped => "stopped",
            ReplyState::Failed => "failed",
            ReplyState::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> ReplyState {
        match s {
            "waiting" => ReplyState::Waiting,
            "running" => ReplyState::Running,
            "done" => ReplyState::Done,
            "stopped" => ReplyState::Stopped,
            "failed" => ReplyState::Failed,
            _ => ReplyState::Interrupted,
        }
    }

    /// Whether the reply is still being worked on.
    pub fn is_live(self) -> bool {
        matches!(self, ReplyState::Waiting | ReplyState::Running)
    }

    /// Whether it can be tried again.
    pub fn can_retry(self) -> bool {
        matches!(self, ReplyState::Failed | ReplyState::Interrupted)
    }
}

impl std::fmt::Display for ReplyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A chat, with the state of its latest reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Chat {
    /// Its id.
    pub id: ChatId,
    /// Its title.
    pub title: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the last change.
    pub updated_at: i64,
    /// The latest reply's state, if any.
    pub last_reply: Option<ReplyState>,
    /// Where the user started afresh: the seq of the first record the model sees.
    pub history_since: Option<i64>,
}

/// One stored row of a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[ts(rename = "ChatRecord")]
pub struct Record {
    /// Its id.
    pub id: RecordId,
    /// The chat.
    pub chat: ChatId,
    /// Order within the chat.
    pub seq: i64,
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub text: String,
    /// The reply an assistant or tool record came from.
    pub reply: Option<ReplyId>,
    /// Unix ms.
    pub created_at: i64,
    /// The fact a tool record ("Remembered: …") stored, while it is remembered.
    pub fact: Option<i64>,
}

/// A reply as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Its id.
    pub id: ReplyId,
    /// The chat.
    pub chat: ChatId,
    /// The question's record.
    pub question: RecordId,
    /// Its state.
    pub state: ReplyState,
    /// The text written so far.
    pub text: String,
    /// Why it failed, stopped or was interrupted.
    pub reason: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms.
    pub ended_at: Option<i64>,
    /// When its spoken answer was cut: what of it had been played ("" = nothing).
    pub heard: Option<String>,
}

/// A chat's summary, for recall from other chats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Summary {
    /// The chat.
    pub chat: ChatId,
    /// Its title.
    pub title: String,
    /// The summary.
    pub text: String,
    /// Its embedding (empty when none could be made); not sent to the windows.
    #[serde(skip)]
    pub vector: Vec<f32>,
    /// Unix ms.
    pub updated_at: i64,
    /// The seq of the chat's last record it covers.
    pub upto: i64,
}

/// A fact the user asked Jarvis to remember.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Fact {
    /// Its id.
    pub id: i64,
    /// The fact, as the user would say it.
    pub text: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the last edit.
    pub updated_at: i64,
    /// The chat it was said in, while that chat exists.
    pub chat: Option<ChatId>,
    /// Who stored it, and where.
    pub origin: FactOrigin,
}

/// Where a fact came from: never guessed, so "Added by you" is said only of the user's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum FactOrigin {
    /// Typed by the user in the Memory panel or `jarvis facts add`.
    User,
    /// Stored by the model in a chat (the fact's `chat`; none once that chat is deleted).
    Chat,
    /// Stored by the model in a voice conversation that was not saved.
    Unsaved,
    /// Kept before origins were recorded, by a chat since deleted or by the user.
    Unknown,
}

impl FactOrigin {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            FactOrigin::User => "user",
            FactOrigin::Chat => "chat",
            FactOrigin::Unsaved => "unsaved",
            FactOrigin::Unknown => "unknown",
        }
    }

    pub(super) fn parse(s: &str) -> FactOrigin {
        match s {
            "user" => FactOrigin::User,
            "chat" => FactOrigin::Chat,
            "unsaved" => FactOrigin::Unsaved,
            _ => FactOrigin::Unknown,
        }
    }

    /// Where the fact came from, as the Memory panel and `jarvis facts` say it (`chat`: the
    /// title of its chat, when it still exists).
    pub fn describe(self, chat: Option<&str>) -> String {
        match (self, chat) {
            (FactOrigin::User, _) => "Added by you".into(),
            (FactOrigin::Chat, Some(title)) => format!("From “{title}”"),
            (FactOrigin::Chat, None) => "From a deleted chat".into(),
            (FactOrigin::Unsaved, _) => "From a voice conversation that was not saved".into(),
            (FactOrigin::Unknown, _) => "Source not recorded".into(),
        }
    }
}

/// The current time in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The store: one SQLite connection shared by cheap clones. Calls block; async code runs them
/// on the blocking pool.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
    busy: Duration,
    /// A store in memory (the unsaved voice conversation) keeps only chats; the user's facts and
    /// the summaries of their chats are read from and written to this one.
    user: Option<Box<Store>>,
}

/// Ids of chats, records and replies kept in memory start here, so they never meet the ids of
/// the database's (the service and the windows tell them apart by it).
pub const IN_MEMORY_IDS: i64 = 1 << 50;

impl ChatId {
    /// Whether the chat is kept in memory only (an unsaved voice conversation).
    pub fn in_memory(self) -> bool {
        self.0 >= IN_MEMORY_IDS
    }
}

impl ReplyId {
    /// Whether the reply is kept in memory only.
    pub fn in_memory(self) -> bool {
        self.0 >= IN_MEMORY_IDS
    }
}

/// Makes the database's folders (readable by the user alone: 0700) and the file itself (0600,
/// which SQLite's journal files take after it), so no other user of the machine reads the chats.
/// The data directory itself is made the user's alone again at every start when it is theirs
/// (not a shared folder someone else owns, not their home folder); the folders above it are left
/// as they are.
fn private_file(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let failed = |source| StoreError::DataDir {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(failed)?;
        // The data directory is the user's alone at every start, whatever made it looser.
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(dir).map_err(failed)?;
        if owner.mode() & 0o077 != 0 {
            let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
            let home = std::env::var_os("HOME")
                .and_then(|h| std::fs::canonicalize(h).ok())
                .is_some_and(|h| std::fs::canonicalize(dir).is_ok_and(|d| d == h));
            if home {
                // The user's home as the data directory: its mode is theirs to choose.
                tracing::debug!(dir = %dir.display(), "the data directory is the home folder; its mode is left alone");
            } else if me == Some(owner.uid()) {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(failed)?;
            } else {
                tracing::warn!(dir = %dir.display(), "the data directory belongs to another user, so others may list it; its files stay private");
            }
        }
    }
    let failed = |source| StoreError::DataFile {
        path: path.to_path_buf(),
        source,
    };
    // Never an open-and-close of a database that exists: closing any descriptor of the file
    // drops every SQLite lock this process holds on it (POSIX locks are per process), which
    // another connection here may be relying on. So it is made only when missing, and its mode
    // set through its path.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(failed(err)),
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(failed)
}

impl Store {
    /// Opens (creating if needed) the database at `path`, applies migrations and marks replies
    /// whose process is gone as interrupted.
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<Store, StoreError> {
        private_file(path)?;
        let store = Store {
            conn: Arc::new(Mutex::new(Connection::open(path).map_err(|source| {
                StoreError::Sqlite {
                    path: path.to_path_buf(),
                    source,
                }
            })?)),
            path: Arc::new(path.to_path_buf()),
            busy: busy_timeout,
            user: None,
        };
        store.prepare()?;
        // The write-ahead log and its index hold the same text as the database: the user's
        // alone too (SQLite makes them so; one left looser by anything else is fixed).
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            let side = PathBuf::from(side);
            if side.exists() {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&side, std::fs::Permissions::from_mode(0o600)).map_err(
                    |source| StoreError::DataFile {
                        path: side.clone(),
                        source,
                    },
                )?;
            }
        }
        store.mark_interrupted()?;
        Ok(store)
    }

    /// A store that writes nothing to disk, for a conversation the user chose not to keep: its
    /// chats, records and replies live in memory (ids from [`IN_MEMORY_IDS`]) and are gone with
    /// it; facts and summaries are `user`'s, the database's.
    pub fn in_memory(user: &Store) -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Sqlite {
            path: path.clone(),
            source,
        })?;
        let store = Store {
            conn: Arc::new(Mutex::new(conn)),
            path: Arc::new(path),
            busy: user.busy,
            user: Some(Box::new(user.clone())),
        };
        store.prepare()?;
        // A row of each below the first id: SQLite gives a new row the largest id plus one.
        let base = IN_MEMORY_IDS - 1;
        store
            .lock()
            .execute_batch(&format!(
                "INSERT INTO chats (id, title, created_at, updated_at) VALUES ({base}, '', 0, 0);
                 INSERT INTO records (id, chat_id, seq, role, text, created_at)
                     VALUES ({base}, {base}, 0, 'user', '', 0);
                 INSERT INTO replies (id, chat_id, question_id, state, started_at)
                     VALUES ({base}, {base}, {base}, 'done', 0);"
            ))
            .map_err(|e| store.err(e))?;
        Ok(store)
    }

    /// After a deletion: the write-ahead log, which still holds the deleted text in its frames,
    /// is checkpointed and emptied, so the words are gone from the disk (the database's free
    /// pages are overwritten by `secure_delete`). Best effort: a reader in another process may
    /// hold the log a moment longer; the next deletion or close empties it.
    pub(crate) fn scrub_log(&self) {
        if self.user.is_some() {
            return;
        }
        let done = self
            .lock()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        if let Err(err) = done {
            tracing::debug!(%err, "the write-ahead log could not be emptied after a deletion");
        }
    }

    /// Whether this store keeps its chats in memory only.
    pub fn is_in_memory(&self) -> bool {
        self.user.is_some()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        match source.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StoreError::Locked {
                path: self.path.to_path_buf(),
                waited_ms: self.busy.as_millis() as u64,
            },
            Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => {
                StoreError::Damaged {
                    path: self.path.to_path_buf(),
                    detail: source.to_string(),
                }
            }
            _ => StoreError::Sqlite {
                path: self.path.to_path_buf(),
                source,
            },
        }
    }

    fn prepare(&self) -> Result<(), StoreError> {
        let mut conn = self.lock();
        conn.busy_timeout(self.busy).map_err(|e| self.err(e))?;
        // A deferred transaction that reads and then writes gets SQLITE_BUSY at once, without
        // waiting, when another process writes; taking the write lock up front makes it wait.
        conn.set_transaction_behavior(TransactionBehavior::Immediate);
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| self.err(e))?;
        // journal_mode returns a row, so it is queried rather than updated.
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .map_err(|e| self.err(e))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.err(e))?;
        // What is deleted (a chat, a fact) is overwritten, not left in free pages.
        conn.pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        let supported = MIGRATIONS.len() as i64;
        if found > supported {
            return Err(StoreError::TooNew {
                path: self.path.to_path_buf(),
                found,
                supported,
            });
        }
        let migrations = Migrations::new(MIGRATIONS.iter().map(|sql| M::up(sql)).collect());
        migrations.to_latest(&mut conn).map_err(|err| match err {
            rusqlite_migration::Error::RusqliteError { err, .. } => self.err(err),
            other => StoreError::Migration {
                path: self.path.to_path_buf(),
                message: other.to_string(),
            },
        })
    }

    /// The schema version recorded in the database.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.lock()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// `PRAGMA integrity_check`'s answer ("ok" when sound).
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.lock()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("j.db"), Duration::from_secs(1)).unwrap();
        (dir, store)
    }

    #[test]
    fn records_keep_their_order_and_replies_their_answer() {
        let (_dir, s) = store();
        let chat = s.create_chat("t").unwrap();
        let q = s.append_record(chat.id, Role::User, "hi", None).unwrap();
        let r = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        s.save_progress(r.id, "Hel").unwrap();
        s.finish_reply(r.id, ReplyState::Done, "Hello", None)
            .unwrap();
        let recs = s.records(chat.id).unwrap();
        assert_eq!(
            recs.iter()
                .map(|r| (r.seq, r.role, r.text.as_str()))
                .collect::<Vec<_>>(),
            vec![(1, Role::User, "hi"), (2, Role::Assistant, "Hello")]
        );
        assert_eq!(s.chat(chat.id).unwrap().last_reply, Some(ReplyState::Done));
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
    }

    #[test]
    fn history_leaves_out_answers_that_were_tried_again() {
        let (_dir, s) = store();
        let chat = s.create_chat("t").unwrap();
        let q = s.append_record(chat.id, Role::User, "q1", None).unwrap();
        let r1 = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        s.finish_reply(r1.id, ReplyState::Failed, "partial", Some("x"))
            .unwrap();
        let r2 = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        s.finish_reply(r2.id, ReplyState::Done, "whole answer", None)
            .unwrap();
        let q2 = s.append_record(chat.id, Role::User, "q2", None).unwrap();
        let texts: Vec<_> = s
            .history(q2.id)
            .unwrap()
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(texts, ["q1", "whole answer", "q2"]);
        // Retrying the first question sees nothing after it.
        let texts: Vec<_> = s
            .history(q.id)
            .unwrap()
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(texts, ["q1"]);
    }

    #[test]
    fn a_question_and_its_reply_are_stored_together_and_the_first_names_the_chat() {
        let (_dir, s) = store();
        let chat = s.create_chat("New chat").unwrap();
        let (q, r) = s
            .add_question(
                chat.id,
                "What is the capital of France?",
                Some("Capital of France"),
                ReplyState::Running,
            )
            .unwrap();
        assert_eq!((r.question, r.state), (q.id, ReplyState::Running));
        assert_eq!(s.reply(r.id).unwrap().unwrap().question, q.id);
        assert_eq!(s.chat(chat.id).unwrap().title, "Capital of France");
        s.add_question(
            chat.id,
            "And Germany?",
            Some("Germany"),
            ReplyState::Waiting,
        )
        .unwrap();
        assert_eq!(
            s.chat(chat.id).unwrap().title,
            "Capital of France",
            "only the first names it"
        );
        assert_eq!(s.records(chat.id).unwrap().len(), 2);
        assert_eq!(s.replies(chat.id).unwrap().len(), 2);
    }

    #[test]
    fn facts_are_kept_once_edited_and_really_deleted() {
        let (_dir, s) = store();
        let dog = s.add_fact("My dog is called Bruno", None).unwrap();
        assert_eq!(
            s.add_fact("  my dog is called bruno ", None).unwrap().id,
            dog.id,
            "once"
        );
        s.add_fact("I live in Lyon", None).unwrap();
        assert!(matches!(s.add_fact("  ", None), Err(StoreError::EmptyFact)));
        let edited = s
            .edit_fact(dog.id, "My dog is called Bruno and he is five")
            .unwrap();
        assert_eq!(edited.text, "My dog is called Bruno and he is five");
        s.remove_fact(dog.id).unwrap();
        let left: Vec<_> = s.facts().unwrap().into_iter().map(|f| f.text).collect();
        assert_eq!(left, ["I live in Lyon"]);
        assert!(matches!(
            s.remove_fact(dog.id),
            Err(StoreError::NoSuchFact(_))
        ));
    }

    #[test]
    fn a_reply_of_this_process_is_not_marked_interrupted() {
        let (_dir, s) = store();
        let chat = s.create_chat("t").unwrap();
        let q = s.append_record(chat.id, Role::User, "hi", None).unwrap();
        let r = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        assert_eq!(s.mark_interrupted().unwrap(), 0);
        assert_eq!(s.reply(r.id).unwrap().unwrap().state, ReplyState::Running);
    }
}
