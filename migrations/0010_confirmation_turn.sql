-- A confirmation counts only when the user spoke after it was asked: the seq of the last user
-- record when the question was set. (0: asked before this was kept; any later user record answers.)
ALTER TABLE confirmations ADD COLUMN after_seq INTEGER NOT NULL DEFAULT 0;
