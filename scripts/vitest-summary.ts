// Prints vitest's result as the plain "vitest: N passed, N failed" line CI runners read, preceded by each failed
// test (or file) and the first lines of its error, so the end of a long log says what broke.
import { readFileSync } from 'node:fs';

interface Report {
  numPassedTests: number;
  numFailedTests: number;
  testResults?: { name: string; status: string; message?: string; assertionResults?: { status: string; fullName: string; failureMessages?: string[] }[] }[];
}

const report = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Report;
const firstLines = (text: string, n = 6) => text.replace(/\x1b\[[0-9;]*m/g, '').split('\n').slice(0, n).join('\n    ');
for (const file of report.testResults ?? []) {
  const name = file.name.replace(`${process.cwd()}/`, '');
  for (const test of file.assertionResults ?? [])
    if (test.status === 'failed') console.log(`FAILED ${name} > ${test.fullName}\n    ${firstLines(test.failureMessages?.[0] ?? '')}`);
  if (file.status === 'failed' && !(file.assertionResults ?? []).some((t) => t.status === 'failed'))
    console.log(`FAILED ${name}\n    ${firstLines(file.message || 'outside any test (a hook, a timeout or an unhandled error): see the file\'s lines above')}`);
}
// A file that failed outside any test (an import or hook error) counts once; a describe block holding failed tests
// is not a failure of its own.
const fileErrors = (report.testResults ?? []).filter((f) => f.status === 'failed' && !(f.assertionResults ?? []).some((t) => t.status === 'failed')).length;
console.log(`vitest: ${report.numPassedTests} passed, ${report.numFailedTests + fileErrors} failed`);
