// Deduplicates normalized records and deals them into train / validation / test files.
//
// A record's split is a pure function of (seed, record): its hash is read as a number in [0, 1) and compared
// with the cumulative ratios. So membership does not depend on file order, and a record keeps its split in
// every later version built with the same seed.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { canonicalJson, type DatasetRecord } from './records.js';
import { rewriteSplit, SplitWriter, type SplitInfo } from './split-writer.js';

export const SPLIT_NAMES = ['train', 'validation', 'test'] as const;
export type SplitName = (typeof SPLIT_NAMES)[number];

export { SplitRatiosSchema, type SplitRatios } from '../../contracts/datasets.js';
import type { SplitRatios } from '../../contracts/datasets.js';

export type SplitFiles = Record<SplitName, SplitInfo>;

/** The record's hash as a number in [0, 1), from its first 48 bits. */
export function splitFraction(key: Buffer): number {
  return key.readUIntBE(0, 6) / 2 ** 48;
}

/** Walks the cumulative ratios; a split with ratio 0 never receives a record, even at rounding edges. */
export function assignSplit(fraction: number, ratios: SplitRatios): SplitName {
  let cumulative = 0;
  let last: SplitName = 'train';
  for (const name of SPLIT_NAMES) {
    if (ratios[name] <= 0) continue;
    cumulative += ratios[name];
    last = name;
    if (fraction < cumulative) return name;
  }
  return last;
}

interface Placed {
  key: Buffer; // sha256(`${seed}:` + canonical record)
  line: string; // canonical record
  split: SplitName;
}

export class SplitSink {
  private readonly seen = new Set<string>();
  private lowest: Placed | null = null;
  private highest: Placed | null = null;
  duplicates = 0;
  records = 0;

  private constructor(
    private readonly dir: string,
    private readonly seed: number,
    private readonly ratios: SplitRatios,
    private readonly writers: Record<SplitName, SplitWriter>,
  ) {}

  static async create(dir: string, seed: number, ratios: SplitRatios): Promise<SplitSink> {
    const writers = {} as Record<SplitName, SplitWriter>;
    for (const name of SPLIT_NAMES) writers[name] = await SplitWriter.create(join(dir, `${name}.jsonl`));
    return new SplitSink(dir, seed, ratios, writers);
  }

  /** Queues a record unless an identical one came before it. */
  add(record: DatasetRecord): void {
    const line = canonicalJson(record);
    const key = createHash('sha256').update(`${this.seed}:`).update(line).digest();
    // The seeded hash doubles as the dedup key: equal records share it, distinct ones (practically) never do.
    // 128 bits per record is what exact dedup costs in memory; the records themselves are not kept.
    const dedupKey = key.toString('latin1', 0, 16);
    if (this.seen.has(dedupKey)) {
      this.duplicates += 1;
      return;
    }
    this.seen.add(dedupKey);
    this.records += 1;
    const split = assignSplit(splitFraction(key), this.ratios);
    this.writers[split].add(line);
    this.track({ key, line, split });
  }

  async flushIfFull(): Promise<void> {
    for (const writer of Object.values(this.writers)) if (writer.shouldFlush) await writer.flush();
  }

  async finish(): Promise<SplitFiles> {
    const files = {} as SplitFiles;
    for (const name of SPLIT_NAMES) files[name] = await this.writers[name].close();
    return this.rebalance(files);
  }

  async discard(): Promise<void> {
    for (const writer of Object.values(this.writers)) await writer.discard();
  }

  private track(placed: Placed): void {
    if (this.lowest === null || Buffer.compare(placed.key, this.lowest.key) < 0) this.lowest = placed;
    if (this.highest === null || Buffer.compare(placed.key, this.highest.key) > 0) this.highest = placed;
  }

  /**
   * With two or more records, train and test each get at least one when their ratio is non-zero: test takes
   * the record with the highest hash, train the one with the lowest (the ends of the [0, 1) range they own).
   */
  private async rebalance(files: SplitFiles): Promise<SplitFiles> {
    if (this.records < 2) return files;
    if (this.ratios.test > 0 && files.test.num_records === 0) await this.move(files, this.highest!, 'test');
    if (this.ratios.train > 0 && files.train.num_records === 0) await this.move(files, this.lowest!, 'train');
    return files;
  }

  private async move(files: SplitFiles, record: Placed, to: SplitName): Promise<void> {
    files[record.split] = await rewriteSplit(this.dir, files[record.split], { remove: record.line });
    files[to] = await rewriteSplit(this.dir, files[to], { append: record.line });
    record.split = to;
  }
}
