import { kafkaAdapterSuite } from './conformance/kafkaAdapterSuite.js';
import { createKafkaBus } from './kafka.js';

kafkaAdapterSuite('Kafka', createKafkaBus);
