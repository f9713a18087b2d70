-- Each chat's summary (2-3 sentences, rewritten after every completed reply) and its embedding
-- (384 little-endian f32), found again by similarity from other chats. Deleting a chat deletes it.
CREATE TABLE summaries (
    chat_id     INTEGER PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    text        TEXT    NOT NULL,
    vector      BLOB,
    updated_at  INTEGER NOT NULL
);
