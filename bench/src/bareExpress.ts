/**
 * The single-request baseline: a bare express 5 app in its own process that parses the JSON body and answers
 * 202 with a small JSON document, on the same path. What HTTP and JSON cost on this machine, with no
 * validation, no database and no log: the ceiling a request path is compared with.
 */
import express from 'express';
import { randomUUID } from 'node:crypto';
import { failChild } from './children.js';

const app = express();
app.use(express.json({ limit: '1mb' }));
app.post('/v2026-04/events/', (req, res) => {
  res.status(202).json({ activity_id: randomUUID(), contact: null, received: typeof req.body === 'object' });
});
app.post('/v2026-04/events/bulk/', (req, res) => {
  const items = Array.isArray(req.body?.events) ? req.body.events : [];
  res.status(200).json({ results: items.map(() => ({ status: 'accepted', event: { activity_id: randomUUID() } })) });
});
const server = app.listen(0, '127.0.0.1', () => {
  process.send!({ type: 'ready', port: (server.address() as { port: number }).port });
});
process.on('message', (m: any) => {
  if (m?.type === 'stop') server.close(() => process.exit(0));
});
process.on('disconnect', () => process.exit(0));
server.on('error', failChild);
