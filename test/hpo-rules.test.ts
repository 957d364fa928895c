// The sweep's early-stopping rules and population-based training's exploit/explore, as pure functions.
import { describe, expect, it } from 'vitest';
import { decideStop, emptyRuleState, exploitExplore, explore, paretoFront, seededRandom, type Curve } from '../workflows/hpo-rules.js';
import { EarlyStoppingSchema, PbtSettingsSchema, type SearchSpace } from '../contracts/hpo.js';

const asha = EarlyStoppingSchema.parse({ rule: 'asha', reduction_factor: 3, grace_steps: 10 });
const medianRule = EarlyStoppingSchema.parse({ rule: 'median', min_completed_trials: 3 });

describe('early stopping', () => {
  it('ASHA keeps only the top third at a rung once three trials reached it', () => {
    const state = emptyRuleState();
    const at10 = (v: number): Curve => [[10, v]];
    expect(decideStop(asha, 10, 'minimize', at10(1.0), state).stop).toBe(false); // first: best so far
    expect(decideStop(asha, 10, 'minimize', at10(2.0), state).stop).toBe(true); // worse than the only other
    expect(decideStop(asha, 10, 'minimize', at10(0.5), state).stop).toBe(false); // the new best
    expect(decideStop(asha, 10, 'minimize', at10(0.9), state).stop).toBe(true); // not in the top 1/3 of four
    expect(state.rungs[0]).toEqual([1.0, 2.0, 0.5, 0.9]);
  });

  it('ASHA decides only when a trial reaches a new rung (10, 30, 90 with eta 3)', () => {
    const state = emptyRuleState();
    const curve: Curve = [[10, 1.0]];
    decideStop(asha, 10, 'minimize', curve, state);
    curve.push([20, 0.9]);
    expect(decideStop(asha, 10, 'minimize', curve, state)).toEqual({ stop: false, reason: '' });
    expect(state.rungs).toHaveLength(1);
    curve.push([30, 0.8]);
    decideStop(asha, 10, 'minimize', curve, state);
    expect(state.rungs[1]).toEqual([0.8]);
  });

  it('the median rule stops a trial whose best is worse than the median of completed trials at that step', () => {
    const state = emptyRuleState();
    state.completed.push([[10, 1.0], [20, 0.8]], [[10, 1.2], [20, 0.9]], [[10, 1.1], [20, 1.0]]);
    expect(decideStop(medianRule, 10, 'minimize', [[10, 1.05]], state).stop).toBe(false);
    expect(decideStop(medianRule, 10, 'minimize', [[10, 1.3], [20, 1.2]], state).stop).toBe(true);
    expect(decideStop(medianRule, 10, 'maximize', [[10, 1.3], [20, 1.2]], state).stop).toBe(false);
  });

  it('the median rule waits for enough completed trials', () => {
    const state = emptyRuleState();
    state.completed.push([[10, 0.1]]);
    expect(decideStop(medianRule, 10, 'minimize', [[10, 9]], state).stop).toBe(false);
  });

  it('patience stops a trial with no improvement of min_delta over the last evals', () => {
    const rule = EarlyStoppingSchema.parse({ patience: 2, min_delta: 0.01 });
    expect(decideStop(rule, 10, 'minimize', [[10, 1], [20, 0.995], [30, 0.996]], emptyRuleState()).stop).toBe(true);
    expect(decideStop(rule, 10, 'minimize', [[10, 1], [20, 0.95], [30, 0.996]], emptyRuleState()).stop).toBe(false);
  });

  it('the Pareto front holds exactly the non-dominated points', () => {
    expect(paretoFront(['minimize', 'minimize'], [[1, 5], [2, 2], [3, 3], [5, 1], [2, 6]])).toEqual([0, 1, 3]);
  });
});

describe('population-based training exploit/explore', () => {
  const pbt = PbtSettingsSchema.parse({ population_size: 4, interval_steps: 10, quantile: 0.25, resample_probability: 0 });
  const space: SearchSpace = { learning_rate: { type: 'log_uniform', min: 1e-5, max: 1 }, width: { type: 'int', min: 8, max: 64, step: 1, log: false } };
  const member = (value: number | null, checkpoint: string | null, lr: number) => ({ value, checkpoint, params: { learning_rate: lr, width: 32 } });

  it('the bottom quantile copies the top member and perturbs its hyperparameters', () => {
    const next = exploitExplore([member(2, 'c0', 0.1), member(1, 'c1', 0.01), member(3, 'c2', 0.5), member(1.5, 'c3', 0.02)], 'minimize', pbt, space, seededRandom(1));
    expect(next[2]!.exploit_from).toBe(1);
    expect([0.008, 0.012]).toContainEqual(Number((next[2]!.params.learning_rate as number).toFixed(6)));
    expect(next.filter((n) => n.exploit_from !== null)).toHaveLength(1);
    expect(next[1]).toEqual({ params: { learning_rate: 0.01, width: 32 }, exploit_from: null });
  });

  it('a member without a checkpoint is never a source, and is itself replaced', () => {
    const next = exploitExplore([member(0.1, null, 0.1), member(1, 'c1', 0.01), member(3, 'c2', 0.5), member(2, 'c3', 0.02)], 'minimize', pbt, space, seededRandom(2));
    expect(next.every((n) => n.exploit_from !== 0)).toBe(true);
    expect(next[0]!.exploit_from).toBe(1);
  });

  it('explore keeps values inside the search space', () => {
    const rand = seededRandom(3);
    for (let i = 0; i < 200; i++) {
      const p = explore({ learning_rate: 0.9, width: 64 }, space, { ...pbt, perturb_factors: [0.8, 1.2], resample_probability: 0.3 }, rand);
      expect(p.learning_rate).toBeLessThanOrEqual(1);
      expect(p.width).toBeLessThanOrEqual(64);
      expect(Number.isInteger(p.width)).toBe(true);
    }
  });
});
