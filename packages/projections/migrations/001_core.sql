-- Where each projection stands in each partition, written in the same transaction as its effects,
-- so a projection is exactly-once even though the log delivers at least once.
CREATE TABLE IF NOT EXISTS projection_offsets (
  group_id    text NOT NULL,
  topic       text NOT NULL,
  partition   integer NOT NULL,
  next_offset bigint NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (group_id, topic, partition)
);
