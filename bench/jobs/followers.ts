// The client side of bench/jobs/run.ts's follower test, in a process of its own so that the API process's CPU and
// memory are the API's: --n GET /v1/jobs/{id}/logs streams held open until the job ends. Prints one JSON line:
// followers connected and ended, lines and bytes received, and the seconds from the first to the last byte.
//
//   npx tsx bench/jobs/followers.ts --url URL --token T --job ID --n 500
import { createApiClient } from '../../cli/api-client.js';
import { followJobLog } from '../../cli/job-logs.js';

const arg = (flag: string): string => process.argv[process.argv.indexOf(flag) + 1]!;
const n = Number(arg('--n'));
const api = createApiClient(arg('--url'), arg('--token'));
let lines = 0;
let bytes = 0;
let first: number | null = null;
let last = 0;
const outcomes = await Promise.all(
  Array.from({ length: n }, () =>
    followJobLog(api, arg('--job'), {
      follow: true,
      write: (text) => {
        first ??= Date.now();
        last = Date.now();
        bytes += Buffer.byteLength(text);
        for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) lines++;
      },
    }).then((o) => o?.status ?? 'none', (err: Error) => `error: ${err.message}`),
  ),
);
process.stdout.write(JSON.stringify({ followers: n, ended: outcomes.filter((o) => o === 'succeeded').length, outcomes: [...new Set(outcomes)], lines, bytes, seconds: first === null ? 0 : (last - first) / 1000 }) + '\n');
