import { kafkaAdapterSuite } from './kafkaAdapterSuite.js';
import { createKafkaBus } from '@shopstream/bus';

kafkaAdapterSuite('Kafka', createKafkaBus);
