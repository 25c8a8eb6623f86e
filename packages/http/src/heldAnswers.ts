import type { ServerResponse } from 'node:http';

/**
 * Answers sent a while after they were decided: the 429s of a producer already over its limit (the shed path).
 * A runaway client has a bounded number of connections and requests in flight, as HTTP clients do; answering it
 * at once lets it send its next request at once, so it costs the server a rejection per request as fast as it
 * can send, on the event loop its neighbours share. Held for half to all of `holdMs`, each of its connections
 * sends at most one request per half `holdMs`: the client is slowed where it runs. A client that honours
 * Retry-After (at least 1 s) waits longer than that anyway and never notices.
 *
 * Each answer's hold is drawn at random in that range: answers held together do not all leave together, so the
 * client's next requests do not come back as one wave. At most `max` answers are held (each holds a socket);
 * past that they are sent at once. An answer whose client went away meanwhile is dropped.
 */
export class HeldAnswers {
  /** Answers waiting out their hold. */
  private held = 0;

  constructor(
    private readonly holdMs: number,
    private readonly max = 10_000,
  ) {}

  /** Runs `send` after the hold, or now when holding is off or `max` answers are held already. */
  hold(res: ServerResponse, send: () => void): void {
    if (this.holdMs <= 0 || this.held >= this.max) return send();
    this.held++;
    setTimeout(
      () => {
        this.held--;
        if (!res.destroyed && !res.writableEnded) send();
      },
      this.holdMs * (0.5 + Math.random() / 2),
    );
  }
}
