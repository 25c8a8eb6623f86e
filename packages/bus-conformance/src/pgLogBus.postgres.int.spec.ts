import { createTestDatabase, testInfra } from '@shopstream/testkit';
import { pgLogOnServerConformance } from './pgLogOnServer.js';

pgLogOnServerConformance('Postgres log on a PostgreSQL server', () => createTestDatabase(testInfra().databaseUrl));
