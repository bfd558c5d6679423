import type { Registry } from '../../../src/extension/index.js'

/** The metrics `rdm.baseline` knows, with their fixed fake baselines. */
export const BASELINES = {
  latency: { baseline: 120, unit: 'ms (p95)' },
  throughput: { baseline: 850, unit: 'requests/s' },
  errors: { baseline: 0.4, unit: '% of requests' },
} as const

export type Metric = keyof typeof BASELINES

interface BaselineParams {
  metric: Metric
}

/** `rdm.baseline`: the normal value of a service metric, to compare an incident against (read-only). */
export function registerBaseline(registry: Registry): void {
  registry.addCommand<BaselineParams>(
    {
      id: 'rdm.baseline',
      title: 'Metric baseline',
      description: 'Returns the normal (baseline) value and unit of a service metric: latency, throughput or errors.',
      paramsSchema: {
        type: 'object',
        properties: { metric: { type: 'string', enum: Object.keys(BASELINES) } },
        required: ['metric'],
        additionalProperties: false,
      },
      risk: 'low',
      exposeAsTool: {},
      idempotent: true,
    },
    (params) => ({ metric: params.metric, ...BASELINES[params.metric] }),
  )
}
