-- The Postgres-log bus's append as one statement: the partitions' rows locked in one fixed order (so two
-- appends never wait on each other in a cycle), next_offset moved past the new records, the records inserted
-- with dense offsets, and the NOTIFY that wakes consumers (sent at commit). One round trip instead of six:
-- an append outside a transaction is a single autocommit statement, which is what the publish path does.
-- Records come as parallel arrays, in order; values as hex (bytea), headers as JSON text.
CREATE OR REPLACE FUNCTION bus_append(p_topic text[], p_partition integer[], p_key text[], p_value text[], p_headers text[])
RETURNS TABLE (topic text, partition integer, first_offset bigint, n bigint)
LANGUAGE plpgsql AS $$
DECLARE
  missing text;
BEGIN
  -- Partitions wanted, locked in (topic, partition) order.
  PERFORM 1 FROM bus_partitions bp
  WHERE (bp.topic, bp.partition) IN (SELECT DISTINCT u.t, u.p FROM unnest(p_topic, p_partition) AS u (t, p))
  ORDER BY bp.topic, bp.partition
  FOR UPDATE;
  SELECT string_agg(DISTINCT u.t, ',') INTO missing
  FROM unnest(p_topic, p_partition) AS u (t, p)
  WHERE NOT EXISTS (SELECT 1 FROM bus_partitions bp WHERE bp.topic = u.t AND bp.partition = u.p);
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION 'unknown topics on the Postgres-log bus' USING ERRCODE = 'P0002', DETAIL = missing;
  END IF;
  RETURN QUERY
  WITH input AS (
    SELECT u.t, u.p, u.k, u.v, u.h, row_number() OVER (PARTITION BY u.t, u.p ORDER BY u.ord) - 1 AS i
    FROM unnest(p_topic, p_partition, p_key, p_value, p_headers) WITH ORDINALITY AS u (t, p, k, v, h, ord)
  ),
  counts AS (SELECT input.t, input.p, count(*) AS n FROM input GROUP BY input.t, input.p),
  moved AS (
    UPDATE bus_partitions bp SET next_offset = bp.next_offset + c.n
    FROM counts c WHERE bp.topic = c.t AND bp.partition = c.p
    RETURNING bp.topic, bp.partition, bp.next_offset - c.n AS first_offset, c.n
  ),
  inserted AS (
    INSERT INTO bus_records (topic, partition, "offset", key, value, headers)
    SELECT m.topic, m.partition, m.first_offset + input.i, input.k, decode(input.v, 'hex'), input.h::jsonb
    FROM input JOIN moved m ON m.topic = input.t AND m.partition = input.p
    RETURNING 1
  )
  SELECT m.topic, m.partition, m.first_offset, m.n FROM moved m;
  PERFORM pg_notify('shopstream_bus', d.t) FROM (SELECT DISTINCT u.t FROM unnest(p_topic) AS u (t)) AS d;
END
$$;
