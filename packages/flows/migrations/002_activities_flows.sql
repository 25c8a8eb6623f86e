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
