-- Transactional outboxes, one per projection that emits records: rows written in the projection's transaction,
-- published after it commits and deleted once the log acknowledged them. A crash in between leaves the rows for
-- the next drain, so a record is published at least once, with the same value. metric_outbox is the activity
-- projector's (metric events), flow_trigger_outbox the flow matcher's (flow triggers); both have the same shape,
-- and both were replaced by one outbox for every projection (007_projections.sql), which moves their rows over.
DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['metric_outbox', 'flow_trigger_outbox'] LOOP
    EXECUTE format($f$
      CREATE TABLE IF NOT EXISTS %I (
        seq         bigserial PRIMARY KEY,
        shop_id     uuid NOT NULL,
        key         text NOT NULL,
        value       text NOT NULL,
        headers     jsonb NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now()
      )$f$, t);
  END LOOP;
END $$;
