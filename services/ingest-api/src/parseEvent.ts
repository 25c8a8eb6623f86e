import { normalizePhone } from '@shopstream/contacts';
import { eventInputSchema, fieldErrors, unstorableText, type EventInput } from '@shopstream/contracts';

export type ParsedEvent = { ok: true; event: EventInput } | { ok: false; fields: Record<string, string> };

const PHONE_MESSAGE = 'Not a valid phone number. Give it in international format with the country code, e.g. +14155552671.';

/**
 * Validates one event as the contract says, then normalises its contact phone to E.164. Field paths are
 * relative to the event (`metric.metric_name`, `contact.phone`), in the single and the bulk endpoint alike.
 */
export function parseEvent(input: unknown): ParsedEvent {
  // Text Postgres cannot store would be accepted here and then block the projector's partition: a 400.
  const unstorable = unstorableText(input);
  if (unstorable) return { ok: false, fields: { [unstorable.path]: unstorable.message } };
  const r = eventInputSchema.safeParse(input);
  const rawPhone = (input as { contact?: { phone?: unknown } } | null)?.contact?.phone;
  const phone = typeof rawPhone === 'string' && rawPhone.trim() !== '' ? normalizePhone(rawPhone) : undefined;
  const phoneBad = phone === null;
  if (!r.success) {
    const fields = fieldErrors(r.error);
    // Report a bad phone beside the other problems, so the caller fixes everything in one round.
    if (phoneBad) fields['contact.phone'] ??= PHONE_MESSAGE;
    return { ok: false, fields };
  }
  const event = r.data;
  if (event.contact?.phone === undefined) return { ok: true, event };
  // The schema only trims the phone, and normalizePhone trims too: the raw string's answer is this one's.
  const normalized = phone ?? normalizePhone(event.contact.phone);
  if (normalized === null) return { ok: false, fields: { 'contact.phone': PHONE_MESSAGE } };
  return { ok: true, event: { ...event, contact: { ...event.contact, phone: normalized } } };
}
