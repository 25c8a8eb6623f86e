-- Dead letters sent back to their source topic (`pnpm cli dlq redrive`): one row per dead letter, named by its
-- place in the dead-letter topic, so a second redrive never sends it again. A redrive claims its rows
-- ('sending') before it publishes and marks them 'sent' once the log took the records. A row left 'sending'
-- past the claim timeout is a run that stopped in between, whose records may or may not be in the log: the
-- next run sends them again (at least once; every projection applies a record id once, so a second copy
-- changes nothing). A row 'sending' within the timeout is another run's, which this one leaves alone.
CREATE TABLE IF NOT EXISTS dlq_redrives (
  dlq_topic         text NOT NULL,
  dlq_partition     integer NOT NULL,
  dlq_offset        bigint NOT NULL,
  -- Where the dead letter came from (its headers), and so where it was sent back to.
  source_topic      text NOT NULL,
  source_partition  integer,
  source_offset     bigint,
  reason            text,
  run_id            uuid NOT NULL,
  state             text NOT NULL CHECK (state IN ('sending', 'sent')),
  claimed_at        timestamptz NOT NULL DEFAULT now(),
  sent_at           timestamptz,
  PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset)
);
