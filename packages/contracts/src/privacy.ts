import { z } from 'zod';
import { rfc3339 } from './events.js';

const identifierKinds = ['email', 'phone', 'remote_id', 'contact_id'] as const;
export type IdentifierKind = (typeof identifierKinds)[number];

/**
 * `POST /v2026-04/data-privacy/deletion-jobs/`: exactly one identifier of the person to erase. Email and
 * remote_id are normalised as ingest normalises a contact's (trimmed, NFC, email lower-cased); the phone is
 * normalised to E.164 by the route, as ingest does.
 */
export const deletionJobRequestSchema = z
  .strictObject({
    email: z.string().trim().max(254).normalize('NFC').toLowerCase().pipe(z.email()).optional(),
    phone: z.string().trim().min(1).max(64).optional(),
    remote_id: z.string().trim().min(1).max(255).normalize('NFC').optional(),
    contact_id: z.uuid().optional(),
  })
  .refine((b) => identifierKinds.filter((k) => b[k] !== undefined).length === 1, {
    message: `Give exactly one of ${identifierKinds.join(', ')}.`,
  })
  .meta({ id: 'DeletionJobRequest' });
export type DeletionJobRequest = z.infer<typeof deletionJobRequestSchema>;

/** The one identifier of a request, by kind. */
export function identifierOf(b: DeletionJobRequest): { kind: IdentifierKind; value: string } {
  for (const kind of identifierKinds) {
    const value = b[kind];
    if (value !== undefined) return { kind, value };
  }
  throw new Error('a deletion request without an identifier passed its schema');
}

export const deletionJobStatuses = ['queued', 'running', 'completed', 'failed'] as const;
export type DeletionJobStatus = (typeof deletionJobStatuses)[number];

/** The 202 answer of a new deletion job. */
export const deletionJobAcceptedSchema = z.object({ id: z.uuid(), status: z.literal('queued'), requested_at: rfc3339 }).meta({ id: 'DeletionJobAccepted' });
export type DeletionJobAccepted = z.infer<typeof deletionJobAcceptedSchema>;

/** A deletion job as `GET /v2026-04/data-privacy/deletion-jobs/{id}/` shows it. */
export const deletionJobSchema = z
  .object({
    id: z.uuid(),
    status: z.enum(deletionJobStatuses),
    requested_at: rfc3339,
    completed_at: rfc3339.nullable(),
    contacts_erased: z.number().int().min(0).nullable().describe('Contacts the job erased; null until it completes.'),
    error: z.string().nullable().describe('Why the job failed; null otherwise.'),
  })
  .meta({ id: 'DeletionJob' });
export type DeletionJob = z.infer<typeof deletionJobSchema>;

export const deletionJobParamsSchema = z.strictObject({ id: z.uuid() });

/**
 * Value of a record on `erasures` (schema `contact-erased.v1`): one per contact an erasure job erased. `id` is
 * UUIDv5 of the job and the contact, the same when a restarted job announces it again. No identifier of the
 * person: consumers find what they hold by `contact_id`.
 */
export const erasureRecordSchema = z
  .object({
    id: z.uuid(),
    shop_id: z.uuid(),
    contact_id: z.uuid(),
    job_id: z.uuid(),
    erased_at: rfc3339,
  })
  .meta({ id: 'ContactErased' });
export type ErasureRecord = z.infer<typeof erasureRecordSchema>;
