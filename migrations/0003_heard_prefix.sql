-- How much of a spoken answer was played before it was cut (Stop, End, or its window going away):
-- NULL when it was not cut (heard whole, or never spoken); '' when it was cut before any word.
ALTER TABLE replies ADD COLUMN heard TEXT;
