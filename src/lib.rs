#![warn(missing_docs)]
//! Jarvis's conversation core: everything but the windows. The desktop (`src-tauri`) and the
//! `jarvis` CLI (`src/main.rs`) are glue over it; no UI framework lives here.
//!
//! # Layout
//!
//! Read from the top down; each layer uses only those below it (`scripts/architecture` checks
//! that no two modules use each other).
//!
//! - [`session`] — a running Jarvis as a shell holds it: the settings in force, what a saved
//!   Settings form changes (`apply`), the voice supervisor that builds and restarts the voice
//!   loop.
//! - [`voice`] — the voice loop: devices, the voice activity detector, whisper, what was heard,
//!   the wake word, speech and ducking; it talks to the service like any window.
//! - [`service`] — the conversation service, one actor: chats and their replies
//!   (`reply`), the orb's voice conversation and its queue (`voice`), events and attachments
//!   (`events`), tool actions, housekeeping that gives way to replies.
//! - [`memory`] — facts and the tools the model uses on them, summaries of earlier
//!   conversations, their embeddings and recall.
//! - [`prompt`] — the request the model sees: rules and profile in system, history as messages,
//!   one state block on the last user message; `preview` is "What the model sees".
//! - [`llm`] — the `Backend` trait; Anthropic and OpenAI-compatible streaming over SSE, the local
//!   model server, retries and timeouts (`guarded`).
//! - [`store`] — SQLite, one file per table (chats, records, replies and leases, facts,
//!   confirmations, summaries, compaction, search); migrations in `migrations/`.
//! - [`models`] — the local models: the catalog, the downloader, the installed set.
//! - [`config`] — the settings file, the environment, the keyring, and writing the file.
//! - [`envelope`] — what the app wraps around words (the state block, day lines) and how to
//!   take it off again; [`onnx`] — the ONNX Runtime the wake word and embeddings load.
//!
//! The pages' types (`ui/src/types.ts`) are generated from this crate's types
//! (`tests/page_types.rs`).

pub mod config;
pub mod envelope;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod models;
pub mod onnx;
pub mod prompt;
pub mod service;
pub mod session;
pub mod store;
pub mod terminal;
pub mod tools;
pub mod voice;

pub use service::{AskError, Attachment, Consent, Event, Service, ServiceError, ServiceOptions};
pub use store::{ChatId, RecordId, ReplyId, ReplyState, Store};
