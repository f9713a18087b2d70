-- A question Jarvis asked and waits for the user to answer in the chat (forgetting a fact): live
-- state shown in the state block until the user's next message resolves it.
CREATE TABLE confirmations (
    chat_id     INTEGER PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    fact_id     INTEGER NOT NULL REFERENCES facts (id) ON DELETE CASCADE,
    question    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);
