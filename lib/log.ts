// A small structured logger: JSON lines or text on stderr, level from configuration.
export type Level = 'debug' | 'info' | 'warn' | 'error';
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export function createLogger(opts: { level: Level; format: 'json' | 'text' }, base: Record<string, unknown> = {}): Logger {
  const write = (level: Level, msg: string, fields: Record<string, unknown> = {}): void => {
    if (ORDER[level] < ORDER[opts.level]) return;
    const all = { ...base, ...fields };
    if (opts.format === 'json') {
      process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...all }) + '\n');
      return;
    }
    const extra = Object.entries(all)
      .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
      .join(' ');
    process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${level.padEnd(5)} ${msg}${extra ? ' ' + extra : ''}\n`);
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger(opts, { ...base, ...fields }),
  };
}
