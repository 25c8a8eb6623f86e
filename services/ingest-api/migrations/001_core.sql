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
