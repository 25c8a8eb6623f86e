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
