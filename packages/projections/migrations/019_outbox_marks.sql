-- A live projector's batch appends what it emitted as one *mark* row (outbox.ts, appendMarked): not the records,
-- their refs (value: one per line) and the projection that rebuilds them from its tables (mark), `records` of
-- them. The process that committed the row keeps the records in memory and publishes them from there; the row is
-- what a crash leaves for the next relay. Other rows (every one written before) are one record each: mark NULL,
-- records 1.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS mark text;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS records integer NOT NULL DEFAULT 1;
