-- Every state of every flow the matcher reads (status, metric, conditions), with the time it took effect.
-- The flow matcher evaluates a metric event against the version in effect when the event was recorded, so
-- the live matcher and a rebuild of flow_triggers (`pnpm cli projections rebuild flow-matcher`) decide
-- alike, whatever happened to the flow since. Written by a trigger, so every path that writes `flows`
-- (query-api, the CLI, SQL by hand) leaves its version.
CREATE TABLE IF NOT EXISTS flow_versions (
  seq                 bigserial PRIMARY KEY,
  shop_id             uuid NOT NULL,
  flow_id             uuid NOT NULL,
  valid_from          timestamptz NOT NULL,
  status              text NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
  metric_name         text NOT NULL,
  property_conditions jsonb NOT NULL,
  contact_conditions  jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS flow_versions_by_flow ON flow_versions (shop_id, flow_id, valid_from);

CREATE OR REPLACE FUNCTION flows_record_version() RETURNS trigger AS $$
BEGIN
  -- A rename or a touch of updated_at changes nothing the matcher reads: no version.
  IF TG_OP = 'UPDATE'
     AND NEW.status = OLD.status AND NEW.metric_name = OLD.metric_name
     AND NEW.property_conditions = OLD.property_conditions AND NEW.contact_conditions = OLD.contact_conditions
     AND NEW.deleted_at IS NOT DISTINCT FROM OLD.deleted_at THEN
    RETURN NEW;
  END IF;
  INSERT INTO flow_versions (shop_id, flow_id, valid_from, status, metric_name, property_conditions, contact_conditions)
  VALUES (
    NEW.shop_id, NEW.id,
    CASE WHEN TG_OP = 'INSERT' THEN NEW.created_at ELSE now() END,
    CASE WHEN NEW.deleted_at IS NOT NULL THEN 'deleted' ELSE NEW.status END,
    NEW.metric_name, NEW.property_conditions, NEW.contact_conditions);
  RETURN NEW;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS flows_versions ON flows;
CREATE TRIGGER flows_versions AFTER INSERT OR UPDATE ON flows FOR EACH ROW EXECUTE FUNCTION flows_record_version();

-- Flows that exist already: their history before this migration is unknown, so one version from their
-- creation in their current state (and their deletion, for deleted ones).
INSERT INTO flow_versions (shop_id, flow_id, valid_from, status, metric_name, property_conditions, contact_conditions)
SELECT shop_id, id, created_at, status, metric_name, property_conditions, contact_conditions FROM flows
WHERE NOT EXISTS (SELECT 1 FROM flow_versions v WHERE v.shop_id = flows.shop_id AND v.flow_id = flows.id);
INSERT INTO flow_versions (shop_id, flow_id, valid_from, status, metric_name, property_conditions, contact_conditions)
SELECT shop_id, id, deleted_at, 'deleted', metric_name, property_conditions, contact_conditions FROM flows
WHERE deleted_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM flow_versions v WHERE v.shop_id = flows.shop_id AND v.flow_id = flows.id AND v.status = 'deleted');
