-- Summaries roll: each new one is written from the previous one and the records after `upto`
-- (the seq of the last record it covers), so a long chat is summarised whole. A summary the user
-- deleted stays as a row with no text and no vector, so the next one starts after what it covered.
ALTER TABLE summaries ADD COLUMN upto INTEGER NOT NULL DEFAULT 0;
-- Where a fact came from: the chat it was said in (NULL when written in the Memory panel or the
-- CLI, or when that chat was deleted).
ALTER TABLE facts ADD COLUMN chat_id INTEGER REFERENCES chats (id) ON DELETE SET NULL;
