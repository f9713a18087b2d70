-- Full-text search over every record (for the model's search_records tool), kept in step with
-- the records by triggers; the index holds no copy of the text (external content).
CREATE VIRTUAL TABLE records_search USING fts5 (
    text,
    content = 'records',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
INSERT INTO records_search (records_search) VALUES ('rebuild');
CREATE TRIGGER records_search_insert AFTER INSERT ON records BEGIN
    INSERT INTO records_search (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER records_search_delete AFTER DELETE ON records BEGIN
    INSERT INTO records_search (records_search, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER records_search_update AFTER UPDATE OF text ON records BEGIN
    INSERT INTO records_search (records_search, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO records_search (rowid, text) VALUES (new.id, new.text);
END;
