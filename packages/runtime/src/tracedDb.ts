import { formatQuery, postgresLocation, type Db, type Queryable, type SQLQuery } from '@shopstream/db';
import { endWithError, getTracer, inSpan, SpanKind, type Attributes } from '@shopstream/telemetry';

/** The statement's operation and its first table, for the span's name (`SELECT activities`). */
function summary(text: string): { operation: string; name: string } {
  const operation = /^\s*(?:WITH\b[\s\S]*?\)\s*)?([A-Za-z]+)/.exec(text)?.[1]?.toUpperCase() ?? 'QUERY';
  const table = /\b(?:FROM|INTO|UPDATE|JOIN)\s+("?[A-Za-z_][\w.]*"?)/i.exec(text)?.[1]?.replaceAll('"', '');
  return { operation, name: table ? `${operation} ${table}` : operation };
}

/**
 * The database with an OpenTelemetry client span per statement (database conventions: `db.system.name`
 * postgresql, `db.namespace`, `db.operation.name`, `db.query.text` with its $n placeholders, never the values),
 * in the active context, so a request's or a batch's queries are its children (none outside one). Runtime wraps its database only
 * when tracing is on. COPY (copyRows) runs on the transaction's own client and is not traced.
 */
export function tracedDb(db: Db, url: string | undefined): Db {
  const common: Attributes = { 'db.system.name': 'postgresql', 'db.system': 'postgresql' };
  if (url) {
    const [hostPort, namespace] = postgresLocation(url).split('/');
    const colon = hostPort.lastIndexOf(':');
    Object.assign(common, { 'db.namespace': namespace, 'server.address': hostPort.slice(0, colon), 'server.port': Number(hostPort.slice(colon + 1)) });
  } else Object.assign(common, { 'db.namespace': db.oneConnection ? 'pglite' : 'embedded' });
  const traced = async (on: Queryable, q: SQLQuery) => {
    // Only inside a request's or a batch's span: a timer's polling (the outbox relay's look, the flow index's
    // reload) would otherwise start a trace of one span every second.
    if (!inSpan()) return on.query(q);
    const { text } = formatQuery(q);
    const { operation, name } = summary(text);
    const span = getTracer().startSpan(name, {
      kind: SpanKind.CLIENT,
      attributes: { ...common, 'db.operation.name': operation, 'db.query.text': text.length > 2_000 ? text.slice(0, 2_000) : text },
    });
    try {
      const rows = await on.query(q);
      span.setAttribute('db.response.returned_rows', rows.length);
      span.end();
      return rows;
    } catch (e) {
      endWithError(span, e);
      throw e;
    }
  };
  /** The transaction with its queries traced; still the driver's object underneath, so copyRows finds its client. */
  const tracedTx = (tx: Queryable): Queryable => {
    const t = Object.create(tx) as Queryable;
    t.query = (q) => traced(tx, q);
    return t;
  };
  const wrapped = Object.create(db) as Db;
  wrapped.query = (q) => traced(db, q);
  wrapped.tx = (fn) => db.tx((tx) => fn(tracedTx(tx)));
  return wrapped;
}
