// The NVIDIA GPUs of this machine, as the driver lists them: one model name per device, in device-index order.
// Read once by whoever needs it (the local executor's GPU pool, the metrics' available-GPU gauge).
import { execFileSync } from 'node:child_process';

/** Model names of this machine's GPUs; empty without nvidia-smi (a CPU machine). */
export function nvidiaGpuNames(): string[] {
  try {
    const out = execFileSync('nvidia-smi', ['--query-gpu=name', '--format=csv,noheader'], { encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'pipe', 'ignore'] });
    return out.split('\n').map((l) => l.trim()).filter(Boolean);
  } catch {
    return [];
  }
}
