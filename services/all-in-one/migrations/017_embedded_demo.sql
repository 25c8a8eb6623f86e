-- The embedded mode's demo shop and key (services/all-in-one/src/demo.ts): made on the first embedded start
-- without BOOTSTRAP_API_KEYS, and kept so that every start can print the key again. Before this migration the
-- demo created the table itself: IF NOT EXISTS keeps such a database as it is.
CREATE TABLE IF NOT EXISTS embedded_demo (
  id      int PRIMARY KEY CHECK (id = 1),
  shop_id uuid NOT NULL,
  secret  text NOT NULL
);
