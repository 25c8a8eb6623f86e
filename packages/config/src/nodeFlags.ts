/**
 * The V8 flags every Shopstream service process runs with, on each of its command lines: the `start` scripts of
 * package.json (root and each service's), the Dockerfile's ENTRYPOINT, and the processes `pnpm bench` and
 * `pnpm faults` start (test/nodeFlags.unit.spec.ts checks they agree). V8 reads them when it makes the heap, so
 * they cannot be set from inside the process (`v8.setFlagsFromString` after start changes nothing).
 *
 * `--max-semi-space-size=32` (MiB): the young generation, where every request's short-lived objects go. Node 20
 * and 22 default to 16 MiB, Node 24's V8 to 32 MiB already (the image's Node: the flag changes nothing there). A
 * 100-event bulk request allocates megabytes (its body, the parsed events, their records and sealed parts); at the
 * 16 MiB default the scavenger ran so often that it took 13-15 % of ingest's CPU under bulk load. Twice the space
 * halves the scavenges: about 15 % less CPU per bulk event (bench/README.md, "The young generation"). It costs at
 * most 32 MiB more resident memory per thread that allocates that fast: V8 grows the space only when the
 * allocation rate asks for it.
 */
export const serviceNodeFlags = ['--max-semi-space-size=32'] as const;
