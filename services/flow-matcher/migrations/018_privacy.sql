-- An erasure deletes a contact's triggers (docs/privacy.md).
CREATE INDEX IF NOT EXISTS flow_triggers_contact ON flow_triggers (shop_id, contact_id) WHERE contact_id IS NOT NULL;
