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

-- Contacts of a shop. Each identifier belongs to at most one contact of the shop; the unique
-- indexes are what make concurrent first requests for one identity create exactly one contact.
CREATE TABLE IF NOT EXISTS contacts (
  shop_id     uuid NOT NULL,
  id          uuid NOT NULL,
  email       text,
  phone       text,
  remote_id   text,
  name        text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (shop_id, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS contacts_shop_email ON contacts (shop_id, email) WHERE email IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS contacts_shop_phone ON contacts (shop_id, phone) WHERE phone IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS contacts_shop_remote_id ON contacts (shop_id, remote_id) WHERE remote_id IS NOT NULL;

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
