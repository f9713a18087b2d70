//! Confirmations: a deletion the model asked the user to confirm, a fact it read of outside
//! that it proposes to remember, or a call to one of the user's tools asked aloud, settled only
//! by a real yes.

use rusqlite::{params, OptionalExtension};

use super::{facts::fact_from_row, now_ms, ChatId, Fact, Store, StoreError};

/// What a confirmation waits for the user's yes to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// Forget this fact.
    Forget(i64),
    /// Remember this.
    Remember(String),
    /// Make this call to a tool of the user's MCP servers (asked aloud: the voice conversation
    /// shows no action card).
    Tool(ToolAsk),
}

/// A call to a tool of one of the user's MCP servers, as the model made it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolAsk {
    /// The name it is offered to the model under (`server__tool`).
    pub name: String,
    /// The server's name in the settings.
    pub server: String,
    /// The program the server runs (its command and arguments, as JSON).
    pub program: String,
    /// The tool's own name.
    pub tool: String,
    /// The arguments of the call.
    pub arguments: serde_json::Value,
}

impl Pending {
    fn from_columns(
        fact: Option<i64>,
        proposed: Option<String>,
        tool_call: Option<String>,
    ) -> Pending {
        match (fact, tool_call) {
            (Some(fact), _) => Pending::Forget(fact),
            (None, Some(call)) => {
                Pending::Tool(serde_json::from_str(&call).unwrap_or_else(|err| {
                    // Only Jarvis writes it; a call it cannot read matches none the model makes.
                    tracing::warn!(%err, "a tool call waiting for consent could not be read");
                    ToolAsk {
                        name: String::new(),
                        server: String::new(),
                        program: String::new(),
                        tool: String::new(),
                        arguments: serde_json::Value::Null,
                    }
                }))
            }
            (None, None) => Pending::Remember(proposed.unwrap_or_default()),
        }
    }
}

impl Store {
    /// Asks the user of `chat` to confirm forgetting `fact` (replacing any question pending there).
    /// Only a user message recorded after this one answers it ([`Store::confirmation_answered`]).
    pub fn set_confirmation(
        &self,
        chat: ChatId,
        fact: i64,
        question: &str,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        self.mirror_fact(&conn, fact).map_err(|e| self.err(e))?;
        drop(conn);
        self.ask(chat, Some(fact), None, None, question)
    }

    /// Asks the user of `chat` whether to remember `fact` (replacing any question pending
    /// there): the model proposed it after reading text from outside, which cannot write a
    /// memory by itself. Only a user message recorded after this one answers it.
    pub fn propose_fact(&self, chat: ChatId, fact: &str, question: &str) -> Result<(), StoreError> {
        self.ask(chat, None, Some(fact), None, question)
    }

    /// Asks the user of `chat` whether to make `call` (replacing any question pending there):
    /// in the voice conversation, which shows no action card, the question is spoken and only a
    /// user message recorded after this one answers it.
    pub fn ask_tool(&self, chat: ChatId, call: &ToolAsk, question: &str) -> Result<(), StoreError> {
        let call = serde_json::to_string(call).unwrap_or_default();
        self.ask(chat, None, None, Some(&call), question)
    }

    /// The one pending question of `chat`: a fact to forget or one proposed to remember.
    fn ask(
        &self,
        chat: ChatId,
        forget: Option<i64>,
        proposed: Option<&str>,
        tool_call: Option<&str>,
        question: &str,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO confirmations
                     (chat_id, fact_id, proposed, tool_call, question, created_at, after_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                         (SELECT COALESCE(MAX(seq), 0) FROM records WHERE chat_id = ?1 AND role = 'user'))
                 ON CONFLICT (chat_id) DO UPDATE
                 SET fact_id = ?2, proposed = ?3, tool_call = ?4, question = ?5, created_at = ?6,
                     after_seq = excluded.after_seq",
                params![chat.0, forget, proposed, tool_call, question, now_ms()],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// When the confirmation pending in `chat` was asked (unix ms), if one is.
    pub fn confirmation_asked_at(&self, chat: ChatId) -> Result<Option<i64>, StoreError> {
        self.lock()
            .query_row(
                "SELECT created_at FROM confirmations WHERE chat_id = ?1",
                [chat.0],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The confirmation pending in `chat`, if any: what it waits to do and the question asked.
    pub fn confirmation(&self, chat: ChatId) -> Result<Option<(Pending, String)>, StoreError> {
        self.lock()
            .query_row(
                "SELECT fact_id, proposed, tool_call, question FROM confirmations WHERE chat_id = ?1",
                [chat.0],
                |row| {
                    Ok((
                        Pending::from_columns(row.get(0)?, row.get(1)?, row.get(2)?),
                        row.get(3)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// What is pending in `chat`, and whether the user has spoken since it was asked (a message
    /// of theirs recorded after it): only then can a yes be theirs. `None` when nothing is
    /// pending. An ask and a "confirm" in the same reply's tool rounds never count, whatever
    /// text between them told the model the user agreed.
    pub fn confirmation_answered(
        &self,
        chat: ChatId,
    ) -> Result<Option<(Pending, bool)>, StoreError> {
        self.lock()
            .query_row(
                "SELECT c.fact_id, c.proposed, c.tool_call,
                        EXISTS (SELECT 1 FROM records r
                                WHERE r.chat_id = c.chat_id AND r.role = 'user' AND r.seq > c.after_seq)
                 FROM confirmations c WHERE c.chat_id = ?1",
                [chat.0],
                |row| {
                    Ok((
                        Pending::from_columns(row.get(0)?, row.get(1)?, row.get(2)?),
                        row.get(3)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Ends the confirmation pending in `chat`; with `confirmed`, forgets its fact (a proposed
    /// fact is stored by its caller, [`crate::memory::run`]). Returns the fact forgotten, if one
    /// was.
    pub fn resolve_confirmation(
        &self,
        chat: ChatId,
        confirmed: bool,
    ) -> Result<Option<Fact>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let pending: Option<i64> = tx
            .query_row(
                "SELECT fact_id FROM confirmations WHERE chat_id = ?1",
                [chat.0],
                |row| row.get::<_, Option<i64>>(0),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .flatten();
        tx.execute("DELETE FROM confirmations WHERE chat_id = ?1", [chat.0])
            .map_err(|e| self.err(e))?;
        let mut forgotten = None;
        if let Some(fact) = pending {
            if confirmed {
                forgotten = tx
                    .query_row(
                        "SELECT id, text, created_at, updated_at, chat_id, origin FROM facts WHERE id = ?1",
                        [fact],
                        fact_from_row,
                    )
                    .optional()
                    .map_err(|e| self.err(e))?;
                tx.execute("DELETE FROM facts WHERE id = ?1", [fact])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        drop(conn);
        if forgotten.is_some() {
            self.scrub_log();
        }
        if let (Some(user), Some(fact), true) = (&self.user, pending, confirmed) {
            // The fact itself is the database's.
            forgotten = user.facts()?.into_iter().find(|f| f.id == fact);
            if forgotten.is_some() {
                user.remove_fact(fact)?;
            }
        }
        Ok(forgotten)
    }
}
