// How a job reads and writes without a disk shared with the worker: the object store is its only channel.
//
// A job is addressed by its deterministic name. Its files live under one prefix of the object store, the job
// URI (`{jobs root}/{job name}`, see jobUri in lib/job-files.ts):
//
//   {job}/envelope.json    the JobEnvelope below: the trainer/tool spec plus where its inputs and outputs live
//   {job}/progress.json    the trainer's progress, copied up while it runs (train jobs)
//   {job}/failure.json     the trainer's failure record (out of memory, diverged, preempted); cleared at start
//   {job}/result.json      the job's result, written last, with local output paths rewritten to object URIs
//   {job}/job.log          the job's combined stdout/stderr, copied up every few seconds and at exit
//   {job}/placement.json   where it runs (JobPlacement below): written by the worker once the executor reports it
//                          running, again when it changes; GET /v1/jobs/{id} reads the latest attempt's
//   {job}/devices.json     the GPUs the runner of node 0 found at start (JobDevices below); node R > 0 writes
//                          devices-R.json. On Kubernetes the worker fills the placement's gpu_ids from them
//   {job}/outputs/{field}/ each output directory or file of the spec (see `outputs`)
//
// Checkpoints live apart from the job, per run, as spec 000 says: `{checkpoints}/{step}/` with the manifest
// (SHA-256 of every file) uploaded last, so a prefix without manifest.json is not a checkpoint; `best/` holds the
// best one. A job that starts again (a new pod, a restarted process) downloads the newest complete one and resumes.
//
// The runner inside the job (`python -m hanzo_ml job --envelope URI`, trainer/hanzo_ml/jobio/) materialises the
// inputs (a file:// input is used in place, an s3:// one downloaded to local scratch), points the output fields at
// local scratch, runs the trainer or the Candle tool, uploads as above, and exits with the tool's exit code.
import { z } from 'zod';

const objectUri = z.string().regex(/^(file|s3):\/\/.+/, 'expected a file:// or s3:// URI');

export const JobInputSchema = z.strictObject({
  uri: objectUri,
  kind: z.enum(['file', 'dir']).describe('a single object, or every object under the prefix'),
});

export const JobEnvelopeSchema = z.strictObject({
  job_name: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/).max(63).describe('deterministic, a DNS label: the Kubernetes Job is named after it'),
  job_uri: objectUri.describe('the prefix every file of this job lives under'),
  tool: z
    .enum(['trainer', 'candle', 'command'])
    .describe('trainer: python -m hanzo_ml <spec.kind>; candle: the hanzo-ml-candle binary; command: a submitted command job, args as its argv and spec.env added to its environment'),
  spec: z.record(z.string(), z.unknown()).describe('the trainer job spec (contracts/trainer-job.ts) or the Candle arguments; input and output fields are filled by the runner'),
  inputs: z
    .record(z.string(), JobInputSchema)
    .default({})
    .describe('spec field -> object it is read from; the runner sets the field to a local path. A dotted field names a place inside the spec: sources.0.path is spec.sources[0].path'),
  outputs: z
    .record(z.string(), z.enum(['file', 'dir']))
    .default({})
    .describe('spec field -> kind; the runner sets the field to a local scratch path and uploads it to {job_uri}/outputs/{field}'),
  checkpoints: z
    .strictObject({
      field: z.string().describe('the spec field holding the local checkpoint directory'),
      uri: objectUri.describe('checkpoints/{org}/{run_id}: each complete checkpoint goes to {uri}/{step}/, the best to {uri}/best/'),
    })
    .nullable()
    .default(null),
  /** candle: the subcommand and its arguments ({field} placeholders are replaced by the spec field's local path); command: the argv */
  args: z.array(z.string()).default([]),
  result_field: z
    .string()
    .nullable()
    .default(null)
    .describe("the output field (kind 'file') holding the job's result document: eval output_path, merge reference_path; null: a train job's result.json (candle: its stdout report)"),
  processes: z.number().int().positive().default(1).describe('> 1: the trainer runs under torchrun, this many processes per node'),
  num_nodes: z.number().int().positive().default(1).describe('> 1: one pod per node; torchrun rendezvous from HANZO_ML_NODE_RANK (else JOB_COMPLETION_INDEX), HANZO_ML_MASTER_ADDR and HANZO_ML_MASTER_PORT'),
});
export type JobEnvelope = z.infer<typeof JobEnvelopeSchema>;
export type JobEnvelopeInput = z.input<typeof JobEnvelopeSchema>;

/**
 * Where an attempt runs, as its executor reports it: Kubernetes pod names and their nodes, or the local process
 * group's job name and this machine's hostname; gpu_ids are the local CUDA device indices, or on Kubernetes the GPU
 * UUIDs the job's runners found (devices.json), `<node>:<uuid>` when it runs on several nodes.
 */
export const JobPlacementSchema = z.object({
  pods: z.array(z.string()).describe('the Kubernetes pods running it, or the local job (its process group) by name'),
  nodes: z.array(z.string()).describe('the nodes of those pods, or the local machine\'s hostname'),
  gpu_ids: z
    .array(z.string())
    .describe('CUDA device indices the job was given (local executor), or the GPU UUIDs its runners found (Kubernetes, `<node>:<uuid>` on several nodes); [] on CPU or before they are known'),
});
export type JobPlacement = z.infer<typeof JobPlacementSchema>;

/** devices.json: what one node's runner found at start: its node and the GPUs visible in its container. */
export const JobDevicesSchema = z.object({
  node: z.string().describe('the Kubernetes node (HANZO_ML_NODE_NAME), else the hostname'),
  gpu_ids: z.array(z.string()).describe('the GPU UUIDs nvidia-smi lists, else NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES; [] on CPU'),
});
export type JobDevices = z.infer<typeof JobDevicesSchema>;

/** The devices file of node `rank`: node 0's is devices.json, as its log is job.log. */
export function devicesFile(rank: number): string {
  return rank === 0 ? JOB_FILES.devices : `devices-${rank}.json`;
}

/** The names of the files under a job URI. */
export const JOB_FILES = {
  envelope: 'envelope.json',
  progress: 'progress.json',
  failure: 'failure.json',
  result: 'result.json',
  log: 'job.log',
  recoveries: 'recoveries.json',
  preemptions: 'preemptions.json',
  placement: 'placement.json',
  devices: 'devices.json',
} as const;
