import { connect } from 'node:net';

/** No broker of KAFKA_BROKERS accepts a connection: the message names them and why, in one line. */
export class KafkaUnreachableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KafkaUnreachableError';
  }
}

/** `host:port`, `[v6]:port`: the parts net.connect takes; Kafka's default port when none is given. */
function hostPort(broker: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(broker) ?? /^([^:]+)(?::(\d+))?$/.exec(broker);
  return { host: m?.[1] ?? broker, port: Number(m?.[2] ?? 9092) };
}

/** Why a TCP connection to the broker cannot be opened within timeoutMs, or null when it can. */
function refusal(broker: string, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = connect(hostPort(broker));
    const done = (why: string | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(why);
    };
    const timer = setTimeout(() => done(`no answer within ${timeoutMs / 1000} s`), timeoutMs);
    socket.once('connect', () => done(null));
    socket.once('error', (e: Error) => done(e.message));
  });
}

/**
 * Fails fast, in one line, when no broker can be reached: the Kafka clients retry for many seconds and log
 * every attempt before they give up, which buries the one fact an operator needs under a screen of JSON.
 * A broker that accepts the connection is left to the client (it may still refuse us later, and says so).
 */
export async function assertKafkaReachable(brokers: string[], timeoutMs: number): Promise<void> {
  const why = await Promise.all(brokers.map((b) => refusal(b, timeoutMs)));
  if (why.some((w) => w === null)) return;
  const each = brokers.map((b, i) => (brokers.length === 1 ? why[i] : `${b} ${why[i]}`)).join(', ');
  throw new KafkaUnreachableError(`Kafka at ${brokers.join(',')} is unreachable: ${each}`);
}
