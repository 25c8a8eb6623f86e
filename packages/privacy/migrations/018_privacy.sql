-- Crypto-shredding (docs/privacy.md). One data key per contact, wrapped by the master key whose fingerprint
-- master_id names; an erasure deletes the row, and with it every value sealed under the key on the log.
CREATE TABLE IF NOT EXISTS contact_keys (
  shop_id     uuid NOT NULL,
  contact_id  uuid NOT NULL,
  key_id      uuid NOT NULL UNIQUE,
  master_id   text NOT NULL,
  wrapped     text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (shop_id, contact_id)
);

-- Contacts erased, kept for good: projectors consult it for records no key protects (plaintext records
-- written before event-recorded.v2, conversations from upstream producers), so a rebuild brings nothing back.
-- Also the audit of each contact's erasure: which job, when, which data key was destroyed.
CREATE TABLE IF NOT EXISTS erased_contacts (
  shop_id     uuid NOT NULL,
  contact_id  uuid NOT NULL,
  job_id      uuid NOT NULL,
  key_id      uuid,
  erased_at   timestamptz NOT NULL,
  PRIMARY KEY (shop_id, contact_id)
);
CREATE INDEX IF NOT EXISTS erased_contacts_job ON erased_contacts (job_id);

-- Conversations of erased contacts: their messages carry no contact id, so they are skipped by this.
CREATE TABLE IF NOT EXISTS erased_conversations (
  shop_id          uuid NOT NULL,
  conversation_id  uuid NOT NULL,
  PRIMARY KEY (shop_id, conversation_id)
);

-- Erasure jobs. The identifier is kept sealed under the master key only until the job completes; the audit keeps
-- who asked (api_key_id), when, and a salted hash of the identifier, never the identifier itself.
CREATE TABLE IF NOT EXISTS erasure_jobs (
  shop_id            uuid NOT NULL,
  id                 uuid NOT NULL,
  status             text NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed')),
  requested_at       timestamptz NOT NULL,
  started_at         timestamptz,
  completed_at       timestamptz,
  contacts_erased    integer,
  error              text,
  attempts           integer NOT NULL DEFAULT 0,
  api_key_id         text,
  identifier_kind    text NOT NULL,
  identifier_salt    text NOT NULL,
  identifier_hash    text NOT NULL,
  identifier_master  text,
  identifier_sealed  text,
  PRIMARY KEY (shop_id, id)
);
CREATE INDEX IF NOT EXISTS erasure_jobs_pending ON erasure_jobs (requested_at) WHERE status IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS erasure_jobs_listing ON erasure_jobs (shop_id, requested_at DESC, id DESC);

-- The master key of a distributed deployment that configured none (see keyring.ts): a fallback, with a warning.
CREATE TABLE IF NOT EXISTS privacy_master_keys (
  seq         bigserial PRIMARY KEY,
  key         text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
