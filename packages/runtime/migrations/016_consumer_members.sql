-- The member id each consumer instance last had in each Kafka consumer group, so that an instance restarted
-- after a kill -9 rejoins as that member (the group still holds it until its session runs out) instead of
-- waiting out the dead member's session as a new one. kafkajs has no static membership (group.instance.id);
-- this is its stand-in. instance_id: KAFKA_GROUP_INSTANCE_ID, else host:port of the process.
CREATE TABLE IF NOT EXISTS consumer_members (
  group_id    text NOT NULL,
  instance_id text NOT NULL,
  member_id   text NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (group_id, instance_id)
);
