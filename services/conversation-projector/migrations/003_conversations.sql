-- The export read model, built by conversation-projector from the `conversations` topic.
CREATE TABLE IF NOT EXISTS conversations (
  shop_id              uuid NOT NULL,
  id                   uuid NOT NULL,
  agent_id             uuid,
  contact_id           uuid,
  user_id              uuid,
  created_at           timestamptz NOT NULL,
  updated_at           timestamptz NOT NULL,
  escalation_time      timestamptz,
  start_time           timestamptz,
  resolved_at          timestamptz,
  -- Follow the newest message (by created_at, then id); last_message_id is null while the value comes
  -- from the conversation record itself rather than from a message the projector has seen.
  last_message_at      timestamptz,
  last_message_content text,
  last_message_id      uuid,
  summary              text,
  title                text,
  flags                jsonb NOT NULL DEFAULT '[]',
  tags                 jsonb NOT NULL DEFAULT '[]',
  intent               jsonb NOT NULL DEFAULT '{}',
  topic                jsonb NOT NULL DEFAULT '{}',
  resolution           text,
  status               text,
  type                 text NOT NULL,
  PRIMARY KEY (shop_id, id)
);
-- The export's order and keyset: every page is a range scan of this index.
CREATE UNIQUE INDEX IF NOT EXISTS conversations_export ON conversations (shop_id, created_at, id);
CREATE INDEX IF NOT EXISTS conversations_contact ON conversations (shop_id, contact_id, created_at, id) WHERE contact_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS conversations_agent ON conversations (shop_id, agent_id, created_at, id) WHERE agent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS conversations_last_message ON conversations (shop_id, last_message_at) WHERE last_message_at IS NOT NULL;

-- Messages may arrive before their conversation: no foreign key, joined by (shop_id, conversation_id).
CREATE TABLE IF NOT EXISTS conversation_messages (
  shop_id         uuid NOT NULL,
  id              uuid NOT NULL,
  conversation_id uuid NOT NULL,
  created_at      timestamptz NOT NULL,
  text            text NOT NULL,
  PRIMARY KEY (shop_id, id)
);
CREATE INDEX IF NOT EXISTS conversation_messages_by_conversation ON conversation_messages (shop_id, conversation_id, created_at, id);
