-- Secrets the replicas must share when none is configured (the export cursor's HMAC key).
CREATE TABLE IF NOT EXISTS service_secrets (
  name       text PRIMARY KEY,
  value      text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
