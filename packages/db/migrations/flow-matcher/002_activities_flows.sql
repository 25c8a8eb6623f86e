-- The flow matcher's transactional outbox, the same as metric_outbox (activity-projector/002_activities_flows.sql,
-- which says how an outbox works); both replaced by bus/007_projections.sql's outbox.
CREATE TABLE IF NOT EXISTS flow_trigger_outbox (
  seq         bigserial PRIMARY KEY,
  shop_id     uuid NOT NULL,
  key         text NOT NULL,
  value       text NOT NULL,
  headers     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

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
