-- How long the Postgres-log bus keeps each topic's records, as Kafka's retention.ms: -1 keeps them all.
-- Source and dead-letter topics keep everything (projections are rebuilt from them); derived topics are
-- trimmed by the bus's trim job (pglog/trimRecords.ts). Existing topics start at -1: nothing is deleted until
-- the topics are aligned (services do it at start on the Postgres log, `pnpm cli topics ensure` too).
ALTER TABLE bus_topics ADD COLUMN IF NOT EXISTS retention_ms bigint NOT NULL DEFAULT -1 CHECK (retention_ms = -1 OR retention_ms > 0);
