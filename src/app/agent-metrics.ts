import { Counter, Histogram, type Registry } from 'prom-client'
import type { CommandBus } from '../cmdbus/index.js'
import type { RunObserver } from '../runmgr/index.js'

/** Run, tool, decision and model-latency metrics on the server's registry (/metrics, docs/reference/configuration.md). */
export function createAgentMetrics(registry: Registry, bus: CommandBus): RunObserver {
  const llm = new Histogram({
    name: 'plinth_llm_call_duration_seconds',
    help: 'Model call latency (whole streamed turn) by model and outcome',
    labelNames: ['model', 'outcome'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  })
  const tools = new Counter({
    name: 'plinth_tool_calls_total',
    help: 'Tool calls by terminal status',
    labelNames: ['status'] as const,
    registers: [registry],
  })
  const runs = new Counter({
    name: 'plinth_runs_total',
    help: 'Finished runs by status',
    labelNames: ['status'] as const,
    registers: [registry],
  })
  const runDuration = new Histogram({
    name: 'plinth_run_duration_seconds',
    help: 'Run duration from start to its terminal state',
    labelNames: ['status'] as const,
    buckets: [0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [registry],
  })
  const tokens = new Counter({
    name: 'plinth_llm_tokens_total',
    help: 'Model tokens by model and kind (input includes cached_input; output includes reasoning)',
    labelNames: ['model', 'kind'] as const,
    registers: [registry],
  })
  const cost = new Counter({
    name: 'plinth_llm_cost_total',
    help: 'Model cost by model, in the configured currency (priced models only)',
    labelNames: ['model'] as const,
    registers: [registry],
  })
  const decisions = new Counter({
    name: 'plinth_decisions_total',
    help: 'Resolved decisions by outcome',
    labelNames: ['outcome'] as const,
    registers: [registry],
  })
  bus.onDecisionResolved((decision) => decisions.inc({ outcome: decision.status }))
  return {
    modelCall: ({ model, durationMs, outcome, usage }) => {
      llm.observe({ model, outcome }, durationMs / 1000)
      if (!usage) return
      tokens.inc({ model, kind: 'input' }, usage.inputTokens)
      tokens.inc({ model, kind: 'output' }, usage.outputTokens)
      tokens.inc({ model, kind: 'cached_input' }, usage.cachedInputTokens)
      tokens.inc({ model, kind: 'reasoning' }, usage.reasoningTokens)
      if (usage.cost !== null) cost.inc({ model }, usage.cost)
    },
    toolCall: ({ status }) => tools.inc({ status }),
    runEnded: ({ status, durationMs }) => {
      runs.inc({ status })
      if (durationMs !== null) runDuration.observe({ status }, durationMs / 1000)
    },
  }
}
