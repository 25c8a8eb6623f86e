-- One outbox for every side effect of every projection (Watermill's forwarder): a projection appends the
-- records it emits here inside its own transaction, and a relay publishes them to `topic` in seq order and
-- deletes them once the log acknowledged them. Replaces metric_outbox and flow_trigger_outbox.
CREATE TABLE IF NOT EXISTS outbox (
  seq         bigserial PRIMARY KEY,
  topic       text NOT NULL,
  key         text NOT NULL,
  value       text NOT NULL,
  headers     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS outbox_by_topic ON outbox (topic, seq);

-- Rows a crash left in the old outboxes move over. The deployment's TOPIC_PREFIX is not known here, so
-- they carry their topic's unprefixed name behind '@' (never part of a Kafka topic name); the relay of
-- that topic publishes them with the rest.
DO $$
BEGIN
  IF to_regclass('metric_outbox') IS NOT NULL THEN
    INSERT INTO outbox (topic, key, value, headers, created_at)
    SELECT '@metrics', key, value, headers, created_at FROM metric_outbox ORDER BY seq;
    DROP TABLE metric_outbox;
  END IF;
  IF to_regclass('flow_trigger_outbox') IS NOT NULL THEN
    INSERT INTO outbox (topic, key, value, headers, created_at)
    SELECT '@flow-triggers', key, value, headers, created_at FROM flow_trigger_outbox ORDER BY seq;
    DROP TABLE flow_trigger_outbox;
  END IF;
END $$;

-- Projection rebuilds (`pnpm cli projections rebuild`): one row per rebuild. A running one renews
-- heartbeat_at; another rebuild of the same projection is refused while that is recent.
CREATE TABLE IF NOT EXISTS projection_rebuilds (
  id            uuid PRIMARY KEY,
  projection    text NOT NULL,
  version       integer NOT NULL,
  -- The schema the new generation's tables are built in, then the one the old generation is moved to.
  build_schema  text NOT NULL,
  old_schema    text,
  group_id      text NOT NULL,
  status        text NOT NULL CHECK (status IN ('running', 'switched', 'failed', 'abandoned')),
  applied       bigint NOT NULL DEFAULT 0,
  started_at    timestamptz NOT NULL DEFAULT now(),
  heartbeat_at  timestamptz NOT NULL DEFAULT now(),
  finished_at   timestamptz,
  error         text
);
CREATE INDEX IF NOT EXISTS projection_rebuilds_by_projection ON projection_rebuilds (projection, started_at DESC);
