// Smoothing of a plotted series, chosen per chart: none, or an exponential moving average with TensorBoard's
// debiasing, so the first points are not pulled toward zero.
export function smooth(values: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values;
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    last = last * weight + (1 - weight) * v;
    n++;
    return last / (1 - weight ** n);
  });
}
