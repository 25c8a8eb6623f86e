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
