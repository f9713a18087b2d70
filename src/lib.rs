//! Jarvis's conversation core: the service every shell attaches to, the store, the backends and
//! the request builder. No UI framework lives here.

pub mod config;
pub mod envelope;
pub mod llm;
pub mod memory;
pub mod onnx;
pub mod prompt;
pub mod service;
pub mod store;
pub mod voice;

pub use service::{AskError, Attachment, Event, Service, ServiceError, ServiceOptions};
pub use store::{ChatId, RecordId, ReplyId, ReplyState, Store};
