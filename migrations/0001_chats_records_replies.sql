-- Chats, their records (what was said, in order) and the replies being or having been written.
CREATE TABLE chats (
    id          INTEGER PRIMARY KEY,
    title       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,          -- unix milliseconds
    updated_at  INTEGER NOT NULL
);
CREATE INDEX chats_by_update ON chats (updated_at DESC, id DESC);

CREATE TABLE replies (
    id           INTEGER PRIMARY KEY,
    chat_id      INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    question_id  INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
    state        TEXT    NOT NULL CHECK (state IN ('waiting', 'running', 'done', 'stopped', 'failed', 'interrupted')),
    text         TEXT    NOT NULL DEFAULT '',   -- the text written so far
    reason       TEXT,                          -- why it failed, stopped or was interrupted
    owner        TEXT,                          -- the process that runs it: "pid:token"
    owner_pid    INTEGER,
    lease_until  INTEGER,                       -- unix ms; renewed as progress is written
    started_at   INTEGER NOT NULL,
    ended_at     INTEGER
);
CREATE INDEX replies_by_chat ON replies (chat_id, id);
CREATE INDEX replies_by_question ON replies (question_id, id);
CREATE INDEX replies_live ON replies (state) WHERE state IN ('waiting', 'running');

CREATE TABLE records (
    id          INTEGER PRIMARY KEY,
    chat_id     INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,               -- order within the chat, from 1
    role        TEXT    NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    text        TEXT    NOT NULL,
    reply_id    INTEGER REFERENCES replies (id) ON DELETE SET NULL,  -- the reply an assistant record came from
    created_at  INTEGER NOT NULL,
    UNIQUE (chat_id, seq)
);
