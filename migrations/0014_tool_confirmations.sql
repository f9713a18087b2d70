-- A confirmation may also be a call to a tool of the user's MCP servers, asked aloud in the voice
-- conversation (which shows no action card): `tool_call` is what the call would do, as JSON (the
-- name offered, server, program, tool, arguments); only the user's own next message can allow it.
CREATE TABLE confirmations_next (
    chat_id     INTEGER PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    fact_id     INTEGER REFERENCES facts (id) ON DELETE CASCADE,
    proposed    TEXT,
    tool_call   TEXT,
    question    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    after_seq   INTEGER NOT NULL DEFAULT 0,
    CHECK ((fact_id IS NOT NULL) + (proposed IS NOT NULL) + (tool_call IS NOT NULL) = 1)
);
INSERT INTO confirmations_next (chat_id, fact_id, proposed, question, created_at, after_seq)
    SELECT chat_id, fact_id, proposed, question, created_at, after_seq FROM confirmations;
DROP TABLE confirmations;
ALTER TABLE confirmations_next RENAME TO confirmations;
