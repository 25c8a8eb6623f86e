-- API keys: only a SHA-256 of the secret is stored. A key reaches exactly the shops granted to it.
CREATE TABLE IF NOT EXISTS api_keys (
  id           uuid PRIMARY KEY,
  name         text NOT NULL DEFAULT '',
  secret_hash  bytea NOT NULL UNIQUE,
  created_at   timestamptz NOT NULL DEFAULT now(),
  revoked_at   timestamptz
);

CREATE TABLE IF NOT EXISTS api_key_shops (
  api_key_id uuid NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
  shop_id    uuid NOT NULL,
  PRIMARY KEY (api_key_id, shop_id)
);
