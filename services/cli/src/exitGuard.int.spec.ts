import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * guardExit in a real Node process: what a CLI whose work can no longer finish does. Without it Node ends such a
 * process with exit 0 (nothing keeps the event loop alive), or 13 under a top-level await, and a driver's error
 * thrown from a socket event prints a stack trace.
 */
const here = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(here, '../../..');

/** `node` running `body` as an ES module after `guardExit('pnpm cli test')`, through tsx as `pnpm cli` does. */
function run(body: string, guarded = true): Promise<{ code: number; stdout: string; stderr: string }> {
  const guard = guarded ? `import { guardExit } from ${JSON.stringify(path.join(here, 'exitGuard.ts'))}; const exit = guardExit('pnpm cli test');` : '';
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--conditions=@shopstream/source', '--import', 'tsx', '--input-type=module', '-e', `${guard}\n${body}`],
      // A deadline for a tsx start on a loaded 2-core machine, not an expectation.
      { cwd: REPO, timeout: 240_000, env: { PATH: process.env.PATH, HOME: process.env.HOME } },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== 'number') reject(err);
        else resolve({ code: err ? Number(err.code) : 0, stdout, stderr });
      },
    );
  });
}

describe('guardExit: no silent exit', () => {
  it('work left waiting on nothing (a promise no one settles, an unref’d timer) ends in one line and exit 1, not 0 or 13', async () => {
    const forever = `await new Promise((resolve) => setTimeout(resolve, 3_600_000).unref());`;
    // What Node does on its own: exit 13 under a top-level await, exit 0 when nothing awaits at the top.
    expect((await run(forever, false)).code).toBe(13);
    expect((await run(`new Promise((resolve) => setTimeout(resolve, 3_600_000).unref()).then(() => console.log('done'));`, false)).code).toBe(0);

    const waiting = 'stopped before finishing: it was waiting for something that can no longer happen (a bug; nothing was done for sure)';
    expect(await run(forever)).toEqual({ code: 1, stdout: '', stderr: `pnpm cli test: ${waiting}\n` });
    expect(await run(`new Promise((resolve) => setTimeout(resolve, 3_600_000).unref()).then(() => exit.done(0));`)).toEqual({
      code: 1,
      stdout: '',
      stderr: `pnpm cli test: ${waiting}\n`,
    });
  }, 600_000);

  it('an error thrown outside the command (a socket event, a timer) is one line and exit 1, not a stack trace', async () => {
    const r = await run(`setTimeout(() => { throw new Error('connect ECONNREFUSED 127.0.0.1:1'); }, 10);`);
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'pnpm cli test: connect ECONNREFUSED 127.0.0.1:1\n' });
    const rejected = await run(`Promise.reject(new Error('broker went away'));`);
    expect(rejected).toEqual({ code: 1, stdout: '', stderr: 'pnpm cli test: broker went away\n' });
  }, 600_000);

  it('a settled command exits with its code once stdout is written', async () => {
    expect(await run(`console.log('result'); exit.done(3);`)).toEqual({ code: 3, stdout: 'result\n', stderr: '' });
  }, 600_000);
});
