-- The export's incremental order: with updated_at__range, conversations are read in (updated_at, id) order,
-- so a client pulling "changed since" windows walks this index as the default order walks conversations_export.
-- A projection rebuild copies it into the new generation (CREATE TABLE ... LIKE ... INCLUDING ALL).
CREATE INDEX IF NOT EXISTS conversations_export_updated ON conversations (shop_id, updated_at, id);
