-- Where a fact came from, never guessed: 'user' (typed in the Memory panel or `jarvis facts add`),
-- 'chat' (stored by the model in a chat: chat_id names it, NULL once that chat is deleted),
-- 'unsaved' (stored by the model in a voice conversation that was not saved) or 'unknown' (kept
-- before this was recorded, by a chat since deleted or by the user: nobody can tell now).
ALTER TABLE facts ADD COLUMN origin TEXT NOT NULL DEFAULT 'user'
    CHECK (origin IN ('user', 'chat', 'unsaved', 'unknown'));
UPDATE facts SET origin = CASE WHEN chat_id IS NULL THEN 'unknown' ELSE 'chat' END;
-- A tool record ("Remembered: …") names the fact it stored, so the chat can offer Undo; NULL once
-- that fact is forgotten.
ALTER TABLE records ADD COLUMN fact_id INTEGER REFERENCES facts (id) ON DELETE SET NULL;
-- A confirmation is a forget (fact_id: the fact to forget) or a remember (proposed: the fact to
-- store) that text from outside led the model to, which waits for the user's own yes.
CREATE TABLE confirmations_next (
    chat_id     INTEGER PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    fact_id     INTEGER REFERENCES facts (id) ON DELETE CASCADE,
    proposed    TEXT,
    question    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    after_seq   INTEGER NOT NULL DEFAULT 0,
    CHECK ((fact_id IS NULL) <> (proposed IS NULL))
);
INSERT INTO confirmations_next (chat_id, fact_id, question, created_at, after_seq)
    SELECT chat_id, fact_id, question, created_at, after_seq FROM confirmations;
DROP TABLE confirmations;
ALTER TABLE confirmations_next RENAME TO confirmations;
-- A deleted record's words leave the search index too (not only a 'delete' marker beside them).
INSERT INTO records_search (records_search, rank) VALUES ('secure-delete', 1);
-- A forgotten fact's action line keeps no words of it (the search index follows the text).
CREATE TRIGGER facts_forgotten_lines BEFORE DELETE ON facts BEGIN
    UPDATE records SET text = 'Remembered a fact, since forgotten' WHERE fact_id = old.id;
END;
