import autocannon from 'autocannon'

/** What to send. `requests` (autocannon's request sequence) is for scenarios that need several steps per round. */
export interface LoadRequest {
  url: string
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  headers?: Record<string, string>
  body?: string
  requests?: autocannon.Request[]
}

export interface LoadSettings {
  /** Discarded run first, so JIT, pools and caches are warm when we measure. */
  warmupSeconds: number
  durationSeconds: number
  connections: number
  pipelining: number
}

export interface Measurement {
  /** Mean requests per second over the measured run. */
  requestsPerSecond: number
  /** Whole milliseconds: autocannon's histogram truncates. */
  latencyP50Ms: number
  latencyP99Ms: number
  /** Responses outside 2xx: any at all means the bench, not the server, is broken. */
  non2xx: number
  /** Connection errors and timeouts. */
  errors: number
  totalRequests: number
}

/** Settings from the environment: BENCH_DURATION, BENCH_WARMUP (seconds), BENCH_CONNECTIONS, BENCH_PIPELINING. */
export function loadSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): LoadSettings {
  return {
    warmupSeconds: numberSetting(env, 'BENCH_WARMUP', 2, 0),
    durationSeconds: numberSetting(env, 'BENCH_DURATION', 8, 1),
    connections: numberSetting(env, 'BENCH_CONNECTIONS', 10, 1),
    pipelining: numberSetting(env, 'BENCH_PIPELINING', 1, 1),
  }
}

/** Warms up, then measures one request under load. */
export async function measure(request: LoadRequest, settings: LoadSettings): Promise<Measurement> {
  if (settings.warmupSeconds > 0) await fire(request, settings, settings.warmupSeconds)
  const result = await fire(request, settings, settings.durationSeconds)
  return {
    requestsPerSecond: result.requests.mean,
    latencyP50Ms: result.latency.p50,
    latencyP99Ms: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
    totalRequests: result.requests.total,
  }
}

function fire(request: LoadRequest, settings: LoadSettings, seconds: number): Promise<autocannon.Result> {
  return autocannon({
    ...request,
    connections: settings.connections,
    pipelining: settings.pipelining,
    duration: seconds,
  })
}

function numberSetting(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (!Number.isFinite(value) || value < min)
    throw new Error(`${name} must be a number ≥ ${min}, got ${JSON.stringify(raw)}`)
  return value
}
