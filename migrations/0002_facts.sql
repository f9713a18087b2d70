-- Facts the user asked Jarvis to remember; shown to the model as the profile block.
CREATE TABLE facts (
    id          INTEGER PRIMARY KEY,
    text        TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,   -- unix milliseconds
    updated_at  INTEGER NOT NULL
);
-- One fact once, whatever its case.
CREATE UNIQUE INDEX facts_by_text ON facts (lower(text));
