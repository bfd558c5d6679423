/**
 * The baseline bench (`BENCH_ONLY=baseline BENCH_BASELINE=<checkout> npm run bench`): the agent round
 * through a server of another checkout (say `git worktree add /tmp/base <commit>`, with its
 * `node_modules`) and through this one, beside raw fetch, interleaved round by round
 * (bench/agent/paired-rounds.ts): what a change does to the round, measured in one run. With
 * `BENCH_BASELINE_TARGET=dispatch`, audited dispatch throughput instead (bench/scenarios/dispatch-baseline.ts).
 */
import { existsSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { ms } from './stats.js'
import { runPairedRoundBench } from './paired-rounds.js'
import { runDispatchBaseline } from '../scenarios/dispatch-baseline.js'

/** The baseline checkout from BENCH_BASELINE; throws before anything starts when it cannot run. */
export function baselineRoot(): string {
  const root = process.env.BENCH_BASELINE
  if (!root) throw new Error('BENCH_ONLY=baseline needs BENCH_BASELINE=<a checkout of Plinth to compare with>')
  const absolute = resolve(root)
  for (const needed of ['bench/servers/plinth-agent-server.ts', 'node_modules/tsx']) {
    if (!existsSync(join(absolute, needed))) throw new Error(`BENCH_BASELINE=${root} has no ${needed}`)
  }
  return absolute
}

export async function runBaselineBench(adminUrl: string | undefined, root: string): Promise<void> {
  // BENCH_BASELINE_TARGET=dispatch: audited `rdm.ping` throughput instead of the agent round.
  if (process.env.BENCH_BASELINE_TARGET === 'dispatch') return runDispatchBaseline(adminUrl, root)
  await runPairedRoundBench(adminUrl, {
    title: 'baseline bench',
    labels: { off: `baseline (${root})`, on: 'this checkout' },
    onEnv: {},
    offRoot: root,
    verdict: (added) =>
      `this checkout changes the round's p50 by ${ms(added.p50Ms)} ms and its server CPU by ${ms(added.cpuMs)} ms against the baseline`,
  })
}
