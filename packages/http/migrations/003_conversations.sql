-- Request counters shared by every query-api replica: one row per (bucket, key, shop), a window that
-- starts at the first request after the previous one ended.
CREATE TABLE IF NOT EXISTS rate_limits (
  bucket       text NOT NULL,
  api_key_id   uuid NOT NULL,
  shop_id      uuid NOT NULL,
  window_start timestamptz NOT NULL,
  count        integer NOT NULL,
  PRIMARY KEY (bucket, api_key_id, shop_id)
);
