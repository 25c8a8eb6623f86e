-- The event endpoints' per-(API key, shop) limit, shared by every ingest-api replica: two token buckets in one
-- row, `burst` (INGEST_RATE_LIMIT_PER_SECOND tokens, refilled at that rate) and `steady`
-- (INGEST_RATE_LIMIT_PER_MINUTE tokens, refilled at a sixtieth of it per second). A replica does not come here
-- per request: it leases tokens in chunks (ingest_rate_take) and spends them locally, so the total across
-- replicas exceeds the limit by at most the chunks they hold. The clock is the database's.
CREATE TABLE IF NOT EXISTS ingest_rate_buckets (
  api_key_id    uuid NOT NULL,
  shop_id       uuid NOT NULL,
  burst_tokens  double precision NOT NULL,
  steady_tokens double precision NOT NULL,
  refilled_at   timestamptz NOT NULL,
  PRIMARY KEY (api_key_id, shop_id)
);

-- One atomic lease: refill both buckets for the time since refilled_at (capped at their capacity), add back the
-- p_return tokens a replica did not spend, then take up to p_ask whole tokens from both (as many as the
-- emptier bucket holds). Returns what was granted and what is left in each bucket after it. A new
-- (key, shop) starts full. clock_timestamp(), not now(): a lease that waited on the row lock must not
-- refill from a time before the previous lease's.
CREATE OR REPLACE FUNCTION ingest_rate_take(
  p_key uuid, p_shop uuid, p_ask integer, p_return integer,
  p_burst_cap double precision, p_burst_rate double precision,
  p_steady_cap double precision, p_steady_rate double precision
) RETURNS TABLE (granted integer, burst_left double precision, steady_left double precision)
LANGUAGE plpgsql AS $$
DECLARE
  b ingest_rate_buckets;
  t timestamptz;
  e double precision;
  bt double precision;
  st double precision;
  g integer;
BEGIN
  SELECT * INTO b FROM ingest_rate_buckets r WHERE r.api_key_id = p_key AND r.shop_id = p_shop FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO ingest_rate_buckets VALUES (p_key, p_shop, p_burst_cap, p_steady_cap, clock_timestamp()) ON CONFLICT DO NOTHING;
    SELECT * INTO b FROM ingest_rate_buckets r WHERE r.api_key_id = p_key AND r.shop_id = p_shop FOR UPDATE;
  END IF;
  t := clock_timestamp();
  e := greatest(0, extract(epoch FROM t - b.refilled_at));
  bt := least(p_burst_cap, b.burst_tokens + p_burst_rate * e + p_return);
  st := least(p_steady_cap, b.steady_tokens + p_steady_rate * e + p_return);
  g := greatest(0, least(p_ask::double precision, floor(bt), floor(st)))::integer;
  UPDATE ingest_rate_buckets r SET burst_tokens = bt - g, steady_tokens = st - g, refilled_at = greatest(t, b.refilled_at)
  WHERE r.api_key_id = p_key AND r.shop_id = p_shop;
  RETURN QUERY SELECT g, bt - g, st - g;
END;
$$;
