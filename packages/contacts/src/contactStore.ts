import { sql, type SQLQuery } from '@shopstream/db';

/**
 * What other services may ask of ingest-api's contacts table (services/ingest-api/migrations/). Ingest writes it
 * (services/ingest-api/src/resolveContacts.ts); a reader composes these conditions into its own statement, so the table's shape stays
 * ingest's to change.
 */
export const contactStore = {
  /** A boolean SQL condition: the shop has a contact with this id. */
  exists(shopId: string, contactId: string): SQLQuery {
    return sql`EXISTS (SELECT 1 FROM contacts WHERE shop_id = ${shopId} AND id = ${contactId})`;
  },
};
