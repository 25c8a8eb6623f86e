/**
 * The Kafka version every way of getting a broker uses: the jars the local broker is fetched as
 * (packages/testkit/kafka/pom.xml holds the same number, checked by versions.unit.spec.ts), the Docker image,
 * and docker-compose.yml. 4.3.1 is the newest 4.x whose every artifact Maven Central serves (4.4.0 lacks
 * kafka-tools-api) and kafkajs 2.2.4 passes the testkit's checks against it; see README.md.
 */
export const KAFKA_VERSION = '4.3.1';

/** Official Apache image of the same version, for when a Docker engine answers. */
export const KAFKA_IMAGE = `apache/kafka:${KAFKA_VERSION}`;

/** Same major as the PostgreSQL the development machines and CI run, so both ways behave alike. */
export const POSTGRES_IMAGE = 'postgres:15-alpine';
