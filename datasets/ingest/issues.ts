// Problems found in an uploaded dataset file, each pointing at the line and field the user has to fix.

export interface DatasetIssue {
  file: string; // display name of the uploaded file
  line: number; // 1-based physical line; 0 when the issue concerns the whole file
  field: string | null; // e.g. "messages[2].role" or a CSV column; null when no single field is at fault
  message: string; // what was expected and what was found
}

/** `demo.jsonl:17: field "messages[2].role": expected one of system, user, assistant, got "bot"` */
export function formatIssue(issue: DatasetIssue): string {
  const where = issue.line > 0 ? `${issue.file}:${issue.line}` : issue.file;
  const field = issue.field === null ? '' : `field "${issue.field}": `;
  return `${where}: ${field}${issue.message}`;
}

/** Thrown when a file cannot become a dataset version; `issues` holds every problem collected. */
export class DatasetValidationError extends Error {
  readonly issues: DatasetIssue[];

  constructor(issues: DatasetIssue[], stoppedEarly = false) {
    const lines = issues.map(formatIssue);
    if (stoppedEarly) lines.push(`stopped after ${issues.length} issues; fix these and upload the file again`);
    super(lines.join('\n'));
    this.name = 'DatasetValidationError';
    this.issues = issues;
  }
}

/** Thrown when the output directory of a version already exists: versions are immutable. */
export class DatasetVersionExistsError extends Error {
  constructor(readonly outDir: string) {
    super(`dataset version directory already exists: ${outDir} (versions are immutable; create a new version)`);
    this.name = 'DatasetVersionExistsError';
  }
}

/** Collects issues for one file, up to a limit; `stopped` tells the reader to give up. */
export class IssueLog {
  readonly issues: DatasetIssue[] = [];
  private halted = false;

  constructor(
    readonly file: string,
    private readonly maxIssues: number,
  ) {}

  add(line: number, field: string | null, message: string): void {
    if (this.stopped) return;
    this.issues.push({ file: this.file, line, field, message });
  }

  /** Records an issue after which the rest of the file cannot be interpreted. */
  fatal(line: number, field: string | null, message: string): void {
    this.add(line, field, message);
    this.halt();
  }

  /** Stops reading: what follows cannot be interpreted (a broken CSV header, an unreadable CSV line). */
  halt(): void {
    this.halted = true;
  }

  get count(): number {
    return this.issues.length;
  }

  get stopped(): boolean {
    return this.halted || this.issues.length >= this.maxIssues;
  }

  toError(): DatasetValidationError {
    return new DatasetValidationError(this.issues, this.issues.length >= this.maxIssues);
  }
}
