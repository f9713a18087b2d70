-- "Start afresh" in a chat: the model sees only the records from this seq on; the earlier ones
-- stay in the chat for the user. NULL: the whole chat.
ALTER TABLE chats ADD COLUMN history_since INTEGER;
