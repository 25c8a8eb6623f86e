import { kafkaAdapterSuite } from './conformance/kafkaAdapterSuite.js';
import { createPlatformaticKafkaBus } from './kafkaPlatformatic.js';

kafkaAdapterSuite('Kafka (@platformatic/kafka)', createPlatformaticKafkaBus);
