-- The Postgres-log bus (embedded mode): topics split in partitions, each an append-only log with dense
-- offsets. An append locks its partition's row and takes offsets from next_offset, so appends to one
-- partition commit in offset order and a reader can never pass over a record that commits later
-- (a bare serial column would allow exactly that).
CREATE TABLE IF NOT EXISTS bus_topics (
  topic       text PRIMARY KEY,
  partitions  integer NOT NULL CHECK (partitions > 0),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS bus_partitions (
  topic        text NOT NULL REFERENCES bus_topics (topic) ON DELETE CASCADE,
  partition    integer NOT NULL,
  -- The offset the next append takes; equals the log end once that append committed.
  next_offset  bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (topic, partition)
);

CREATE TABLE IF NOT EXISTS bus_records (
  topic       text NOT NULL,
  partition   integer NOT NULL,
  "offset"    bigint NOT NULL,
  key         text,
  value       bytea NOT NULL,
  headers     jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (topic, partition, "offset"),
  FOREIGN KEY (topic, partition) REFERENCES bus_partitions (topic, partition) ON DELETE CASCADE
);

-- A consumer group's committed position per partition, and which member holds the partition now:
-- a lease (not a session advisory lock) because the pool's sessions come and go and PGlite has one.
CREATE TABLE IF NOT EXISTS bus_group_offsets (
  group_id     text NOT NULL,
  topic        text NOT NULL,
  partition    integer NOT NULL,
  next_offset  bigint NOT NULL,
  owner        text,
  lease_until  timestamptz,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (group_id, topic, partition),
  FOREIGN KEY (topic, partition) REFERENCES bus_partitions (topic, partition) ON DELETE CASCADE
);
