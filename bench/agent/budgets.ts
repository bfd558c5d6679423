/**
 * The budget bench (`BENCH_ONLY=budgets npm run bench`): the agent round without budgets, and with a run
 * budget (server defaults: model calls and tokens) and the project's daily and monthly budgets, all far
 * from spent, so every check runs and none stops the run — beside raw fetch
 * (bench/agent/paired-rounds.ts). Usage accounting is on in both: it rides in the turn's own statement.
 */
import { ms } from './stats.js'
import { runPairedRoundBench } from './paired-rounds.js'

export async function runBudgetBench(adminUrl: string | undefined): Promise<void> {
  await runPairedRoundBench(adminUrl, {
    title: 'budget bench',
    labels: { off: 'no budgets', on: 'run + project budgets' },
    onEnv: { PLINTH_RUN_MAX_MODEL_CALLS: '100000', PLINTH_RUN_MAX_TOKENS: '1000000000' },
    prepareOn: async (target, projectId) => {
      const response = await fetch(`${target.url}/api/projects/${projectId}`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${target.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          budget: { daily: { maxTokens: 1_000_000_000 }, monthly: { maxTokens: 1_000_000_000 } },
        }),
      })
      if (response.status !== 200) throw new Error(`setting the project's budget answered ${response.status}`)
    },
    verdict: (added) =>
      `budget checks add ${ms(added.p50Ms)} ms to the round's p50 (target ≤ 0.5 ms) and ${ms(added.cpuMs)} ms of server CPU`,
  })
}
