//! The tools the user always allows, and the action lines of the calls a reply made.

use rusqlite::params;

use super::{now_ms, ChatId, Record, ReplyId, Role, Store, StoreError};

/// How the action line of a tool call that ran begins ("Used files · read_file").
pub const USED: &str = "Used ";
/// How the action line of a call the user (or the server's setting) refused begins.
pub const NOT_RUN: &str = "Not run: ";

impl Store {
    /// Remembers that every call to `tool` of the MCP server `server` runs without asking.
    pub fn allow_tool(&self, server: &str, tool: &str) -> Result<(), StoreError> {
        if let Some(user) = &self.user {
            return user.allow_tool(server, tool);
        }
        self.lock()
            .execute(
                "INSERT INTO allowed_tools (server, tool, allowed_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING",
                params![server, tool, now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Asks again before each call to `tool` of `server`; whether it was always allowed.
    pub fn disallow_tool(&self, server: &str, tool: &str) -> Result<bool, StoreError> {
        if let Some(user) = &self.user {
            return user.disallow_tool(server, tool);
        }
        self.lock()
            .execute(
                "DELETE FROM allowed_tools WHERE server = ?1 AND tool = ?2",
                params![server, tool],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// Whether every call to `tool` of `server` runs without asking.
    pub fn tool_allowed(&self, server: &str, tool: &str) -> Result<bool, StoreError> {
        if let Some(user) = &self.user {
            return user.tool_allowed(server, tool);
        }
        self.lock()
            .query_row(
                "SELECT count(*) FROM allowed_tools WHERE server = ?1 AND tool = ?2",
                params![server, tool],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// The tools always allowed, as (server, tool), in order.
    pub fn allowed_tools(&self) -> Result<Vec<(String, String)>, StoreError> {
        if let Some(user) = &self.user {
            return user.allowed_tools();
        }
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT server, tool FROM allowed_tools ORDER BY server, tool")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }

    /// Keeps in `chat` the action line of a tool call its reply `reply` made: `text` is its
    /// first line (what was called, [`USED`] or [`NOT_RUN`]) and the call's arguments and result
    /// below it, which the chat shows folded.
    pub fn note_tool_call(
        &self,
        chat: ChatId,
        reply: ReplyId,
        text: &str,
    ) -> Result<Record, StoreError> {
        self.append_record(chat, Role::Tool, text, Some(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_always_allowed_tool_is_kept_until_it_is_asked_about_again() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open(&dir.path().join("j.db"), std::time::Duration::from_secs(1)).unwrap();
        assert!(!store.tool_allowed("files", "read_file").unwrap());
        store.allow_tool("files", "read_file").unwrap();
        store.allow_tool("files", "read_file").unwrap();
        assert!(store.tool_allowed("files", "read_file").unwrap());
        assert!(!store.tool_allowed("files", "write_file").unwrap());
        assert!(!store.tool_allowed("other", "read_file").unwrap());
        // An unsaved voice conversation's consent is the user's, kept on disk.
        let memory = Store::in_memory(&store).unwrap();
        memory.allow_tool("everything", "echo").unwrap();
        assert_eq!(
            store.allowed_tools().unwrap(),
            [
                ("everything".to_string(), "echo".to_string()),
                ("files".to_string(), "read_file".to_string())
            ]
        );
        assert!(memory.tool_allowed("files", "read_file").unwrap());
        assert!(store.disallow_tool("files", "read_file").unwrap());
        assert!(!store.disallow_tool("files", "read_file").unwrap());
        assert!(!memory.tool_allowed("files", "read_file").unwrap());
    }
}
