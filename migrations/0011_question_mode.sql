-- How a user's question was asked (push_to_talk, hands_free, wake; NULL: typed), so that Try
-- again asks it the same way.
ALTER TABLE records ADD COLUMN mode TEXT;
