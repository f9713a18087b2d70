//! The tools the user always allows, and the action lines of the calls a reply made.

use rusqlite::params;

use super::{now_ms, ChatId, Record, ReplyId, Role, Store, StoreError};

/// How the action line of a tool call that ran begins ("Used files · read_file").
pub const USED: &str = "Used ";
/// How the action line of a call the user (or the server's setting) refused begins.
pub const NOT_RUN: &str = "Not run: ";
/// How the action line of a call that Stop ended while it ran begins.
pub const STOPPED: &str = "Stopped: ";

impl Store {
    /// Remembers that every call to `tool` of the MCP server `server`, running `program` (its
    /// command and arguments, as [`crate::mcp::program_of`] writes them), runs without asking.
    pub fn allow_tool(&self, server: &str, program: &str, tool: &str) -> Result<(), StoreError> {
        if let Some(user) = &self.user {
            return user.allow_tool(server, program, tool);
        }
        self.lock()
            .execute(
                "INSERT INTO allowed_tools (server, program, tool, allowed_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT DO NOTHING",
                params![server, program, tool, now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Asks again before each call to `tool` of `server` (whatever program it ran); whether it
    /// was always allowed.
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

    /// Whether every call to `tool` of `server`, running `program`, runs without asking.
    pub fn tool_allowed(
        &self,
        server: &str,
        program: &str,
        tool: &str,
    ) -> Result<bool, StoreError> {
        if let Some(user) = &self.user {
            return user.tool_allowed(server, program, tool);
        }
        self.lock()
            .query_row(
                "SELECT count(*) FROM allowed_tools
                 WHERE server = ?1 AND program = ?2 AND tool = ?3",
                params![server, program, tool],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// The tools always allowed, as (server, tool), in order (once each, whatever program).
    pub fn allowed_tools(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut tools: Vec<(String, String)> = self
            .allowed_tools_with_programs()?
            .into_iter()
            .map(|(server, _, tool)| (server, tool))
            .collect();
        // (In order of server and tool: the same tool of two programs is side by side.)
        tools.dedup();
        Ok(tools)
    }

    /// The tools always allowed, as (server, program, tool).
    pub fn allowed_tools_with_programs(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        if let Some(user) = &self.user {
            return user.allowed_tools_with_programs();
        }
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT server, program, tool FROM allowed_tools ORDER BY server, tool")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
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
        let (files, other) = (r#"["npx","fs"]"#, r#"["evil"]"#);
        assert!(!store.tool_allowed("files", files, "read_file").unwrap());
        store.allow_tool("files", files, "read_file").unwrap();
        store.allow_tool("files", files, "read_file").unwrap();
        assert!(store.tool_allowed("files", files, "read_file").unwrap());
        assert!(!store.tool_allowed("files", files, "write_file").unwrap());
        assert!(!store.tool_allowed("other", files, "read_file").unwrap());
        // The same name running another program asks again.
        assert!(!store.tool_allowed("files", other, "read_file").unwrap());
        // An unsaved voice conversation's consent is the user's, kept on disk.
        let memory = Store::in_memory(&store).unwrap();
        memory.allow_tool("everything", "[]", "echo").unwrap();
        assert_eq!(
            store.allowed_tools().unwrap(),
            [
                ("everything".to_string(), "echo".to_string()),
                ("files".to_string(), "read_file".to_string())
            ]
        );
        assert!(memory.tool_allowed("files", files, "read_file").unwrap());
        assert!(store.disallow_tool("files", "read_file").unwrap());
        assert!(!store.disallow_tool("files", "read_file").unwrap());
        assert!(!memory.tool_allowed("files", files, "read_file").unwrap());
    }
}
