-- A long chat's older records, summarised once they outgrew the model's context: records before
-- the anchor (by seq) are sent as this summary instead; nothing is deleted from the store.
ALTER TABLE chats ADD COLUMN compacted TEXT;
ALTER TABLE chats ADD COLUMN anchor INTEGER;
