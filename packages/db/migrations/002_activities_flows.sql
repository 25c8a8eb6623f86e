-- Activities: one row per accepted event, keyed by the activity id the ingest API derived (replays
-- carry the same id, so ON CONFLICT DO NOTHING makes the projection idempotent).
CREATE TABLE IF NOT EXISTS activities (
  shop_id          uuid NOT NULL,
  id               uuid NOT NULL,
  name             text NOT NULL,
  description      text,
  event_time       timestamptz NOT NULL,
  recorded_at      timestamptz NOT NULL,
  -- Every metric field as the event carried it (metric_name, value, additional_properties, ...).
  metric           jsonb NOT NULL,
  contact_id       uuid,
  -- The contact as resolved at ingest, so an Activity reads the same later whatever the contact becomes.
  contact          jsonb,
  remote_id        text,
  remote_platform  text,
  PRIMARY KEY (shop_id, id)
);
-- The workspace listing: a shop's activities without a contact, newest first.
CREATE INDEX IF NOT EXISTS activities_workspace ON activities (shop_id, recorded_at DESC, id DESC) WHERE contact_id IS NULL;

CREATE TABLE IF NOT EXISTS contact_timeline (
  shop_id      uuid NOT NULL,
  contact_id   uuid NOT NULL,
  activity_id  uuid NOT NULL,
  event_time   timestamptz NOT NULL,
  PRIMARY KEY (shop_id, contact_id, activity_id)
);
CREATE INDEX IF NOT EXISTS contact_timeline_order ON contact_timeline (shop_id, contact_id, event_time DESC, activity_id DESC);

-- Transactional outboxes: rows written in the projection's transaction, published after it commits and
-- deleted once the log acknowledged them. A crash in between leaves the rows for the next drain, so a
-- record is published at least once, with the same value.
CREATE TABLE IF NOT EXISTS metric_outbox (
  seq         bigserial PRIMARY KEY,
  shop_id     uuid NOT NULL,
  key         text NOT NULL,
  value       text NOT NULL,
  headers     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS flow_trigger_outbox (
  seq         bigserial PRIMARY KEY,
  shop_id     uuid NOT NULL,
  key         text NOT NULL,
  value       text NOT NULL,
  headers     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- Activity Event flows. A deleted flow keeps its row (deleted_at set) so its triggers stay explained.
CREATE TABLE IF NOT EXISTS flows (
  shop_id             uuid NOT NULL,
  id                  uuid NOT NULL,
  name                text NOT NULL,
  status              text NOT NULL CHECK (status IN ('active', 'paused')),
  metric_name         text NOT NULL,
  property_conditions jsonb NOT NULL DEFAULT '[]',
  contact_conditions  jsonb NOT NULL DEFAULT '[]',
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  deleted_at          timestamptz,
  PRIMARY KEY (shop_id, id)
);
-- The matcher's candidates: a shop's active flows for one metric.
CREATE INDEX IF NOT EXISTS flows_active_metric ON flows (shop_id, metric_name) WHERE status = 'active' AND deleted_at IS NULL;
-- The management listing, newest first.
CREATE INDEX IF NOT EXISTS flows_listing ON flows (shop_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE IF NOT EXISTS flow_triggers (
  shop_id          uuid NOT NULL,
  id               uuid NOT NULL,
  flow_id          uuid NOT NULL,
  metric_event_id  uuid NOT NULL,
  activity_id      uuid NOT NULL,
  contact_id       uuid,
  matched_at       timestamptz NOT NULL,
  PRIMARY KEY (shop_id, id),
  -- A metric event seen twice (at-least-once delivery) triggers a flow once.
  UNIQUE (flow_id, metric_event_id)
);
CREATE INDEX IF NOT EXISTS flow_triggers_listing ON flow_triggers (shop_id, flow_id, matched_at DESC, id DESC);
