import { deletionJobAcceptedSchema, deletionJobRequestSchema, deletionJobSchema, identifierOf } from '@shopstream/contracts';
import { ApiError, defineRoute, mountRoutes, uuidPathParam } from '@shopstream/http';
import { normalizePhone } from '@shopstream/contacts';
import { erasureJobs, type Keyring } from '@shopstream/privacy';
import type { QueryContext } from '../index.js';

const PHONE_MESSAGE = 'Not a valid phone number. Give it in international format with the country code, e.g. +14155552671.';

/**
 * Erasure jobs (docs/privacy.md): a request queues a job and answers 202; the erasure worker runs it. `kick`
 * tells this process's worker at once (another replica's finds it within ERASURE_POLL_MS).
 */
export function privacyRoutes(rt: QueryContext, keyring: Keyring, kick: () => void) {
  const tags = ['Data privacy'];
  return mountRoutes([
    defineRoute({
      method: 'post',
      path: '/v2026-04/data-privacy/deletion-jobs/',
      operationId: 'createDeletionJob',
      summary: 'Erase a person: queue a deletion job',
      description:
        'Give exactly one of email, phone, remote_id, contact_id. The job erases every contact of this shop the identifier names: ' +
        "the contact's data key is destroyed (its events on the log can no longer be read), and the contact, its activities, timeline, " +
        'flow triggers, conversations and messages are deleted from every read; downstream consumers are told on the `erasures` topic. ' +
        'A job that matches no contact completes with contacts_erased 0. The job keeps who asked (the API key), when, and a salted hash of the identifier, never the identifier.',
      tags,
      body: { schema: deletionJobRequestSchema, what: 'The deletion request', limit: '16kb', example: { email: 'ada@example.com' } },
      responses: { 202: { description: 'Queued.', schema: deletionJobAcceptedSchema, headers: { Location: "The job's URL: follow it there." } } },
      errors: [400, 401, 403, 413, 415],
      async handler(req, res, { body }) {
        const { kind, value: raw } = identifierOf(body);
        let value = raw;
        if (kind === 'phone') {
          const phone = normalizePhone(raw);
          if (phone === null) throw new ApiError('validation_error', 'The deletion request is not valid.', { phone: PHONE_MESSAGE });
          value = phone;
        } else if (kind === 'contact_id') value = raw.toLowerCase();
        const job = await erasureJobs.create(rt.db, keyring, { shopId: req.shopId, apiKeyId: req.apiKeyId, kind, value });
        kick();
        res.status(202).location(`${req.baseUrl}/data-privacy/deletion-jobs/${job.id}/`).json(job);
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v2026-04/data-privacy/deletion-jobs/{id}/',
      operationId: 'getDeletionJob',
      summary: 'A deletion job and its outcome',
      tags,
      params: { id: uuidPathParam('The id the deletion request answered.') },
      responses: { 200: { description: 'The job.', schema: deletionJobSchema } },
      errors: [400, 401, 403, 404],
      async handler(req, res, { params: { id } }) {
        const job = id === null ? null : await erasureJobs.get(rt.db, req.shopId, id);
        if (!job) throw new ApiError('not_found', 'No such deletion job in this shop.');
        res.json(job);
      },
    }),
  ]);
}
