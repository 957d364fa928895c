// What one device-hour costs: the price list of scheduler.gpu_prices_usd, read by estimates before a job starts
// and by the accounting of a finished one, so both price a job the same way.
import type { Config } from '../contracts/config.js';

export interface PricedHardware {
  gpus_per_node: number;
  gpu_type: string | null;
}

/** The device type a job is accounted under: "cpu" for a CPU job, "gpu" for a GPU job of no named type. */
export function accountedGpuType(hw: PricedHardware): string {
  return hw.gpus_per_node > 0 ? (hw.gpu_type ?? 'gpu') : 'cpu';
}

/** USD per device-hour of a job on this hardware: its gpu_type's listed price, else the default. */
export function devicePriceUsd(config: Pick<Config, 'scheduler'>, hw: PricedHardware): number {
  const type = accountedGpuType(hw);
  return config.scheduler.gpu_prices_usd[type] ?? config.scheduler.default_price_usd;
}
