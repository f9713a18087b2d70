-- Full-text search over every record (for the model's search_records tool), kept in step with
-- the records by triggers. The index holds no copy of the text: its content is read from a view
-- that adds each record's chat as a token ('c' and the chat's id), so a search within one chat
-- is an intersection inside the index, however common its words are elsewhere.
CREATE VIEW records_search_content AS
    SELECT id, text, 'c' || chat_id AS chat FROM records;
CREATE VIRTUAL TABLE records_search USING fts5 (
    text,
    chat,
    content = 'records_search_content',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
INSERT INTO records_search (records_search) VALUES ('rebuild');
CREATE TRIGGER records_search_insert AFTER INSERT ON records BEGIN
    INSERT INTO records_search (rowid, text, chat) VALUES (new.id, new.text, 'c' || new.chat_id);
END;
CREATE TRIGGER records_search_delete AFTER DELETE ON records BEGIN
    INSERT INTO records_search (records_search, rowid, text, chat)
        VALUES ('delete', old.id, old.text, 'c' || old.chat_id);
END;
CREATE TRIGGER records_search_update AFTER UPDATE OF text, chat_id ON records BEGIN
    INSERT INTO records_search (records_search, rowid, text, chat)
        VALUES ('delete', old.id, old.text, 'c' || old.chat_id);
    INSERT INTO records_search (rowid, text, chat) VALUES (new.id, new.text, 'c' || new.chat_id);
END;
