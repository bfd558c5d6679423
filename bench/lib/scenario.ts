import { measure, type LoadRequest, type LoadSettings, type Measurement } from './measure.js'

/**
 * One row of the bench: something to start, a request to load it with, and how to tear it down.
 * New benchmarks (command dispatch, agent rounds) add scenarios; the runner and table stay the same.
 */
export interface Scenario {
  /** Row label. */
  name: string
  /** Starts the system under test, or says why it cannot run here (e.g. no Postgres configured). */
  start(): Promise<StartedScenario | { skip: string }>
}

export interface StartedScenario {
  request: LoadRequest
  /**
   * Checks one response before loading, returning a problem or undefined: a bench measuring 401s
   * or empty lists would report nonsense figures.
   */
  check?(response: { status: number; body: string }): string | undefined
  /** Releases everything `start` took (child process, temp dir, database). */
  stop(): Promise<void>
}

export type ScenarioResult = { name: string; skipped: string } | ({ name: string } & Measurement)

/** Runs the scenarios one after another (they would compete for the same cores otherwise). */
export async function runScenarios(
  scenarios: readonly Scenario[],
  settings: LoadSettings,
  onResult: (result: ScenarioResult) => void = () => undefined,
): Promise<ScenarioResult[]> {
  const results: ScenarioResult[] = []
  for (const scenario of scenarios) {
    const started = await scenario.start()
    let result: ScenarioResult
    if ('skip' in started) {
      result = { name: scenario.name, skipped: started.skip }
    } else {
      try {
        await checkOnce(scenario.name, started)
        result = { name: scenario.name, ...(await measure(started.request, settings)) }
      } finally {
        await started.stop()
      }
    }
    results.push(result)
    onResult(result)
  }
  return results
}

async function checkOnce(name: string, started: StartedScenario): Promise<void> {
  const { url, method, headers, body } = started.request
  const response = await fetch(url, { method: method ?? 'GET', headers, body })
  const text = await response.text()
  const problem =
    response.status >= 200 && response.status < 300
      ? started.check?.({ status: response.status, body: text })
      : `status ${response.status}: ${text.slice(0, 200)}`
  if (problem) throw new Error(`${name}: sanity check failed: ${problem}`)
}

/** A fixed-width table of the results; skipped scenarios say why. */
export function formatTable(results: readonly ScenarioResult[]): string {
  const rows = results.map((result) =>
    'skipped' in result
      ? [result.name]
      : [
          result.name,
          result.requestsPerSecond.toFixed(0),
          formatMs(result.latencyP50Ms),
          formatMs(result.latencyP99Ms),
          String(result.non2xx),
          String(result.errors),
        ],
  )
  const header = ['target', 'req/s (mean)', 'p50 ms', 'p99 ms', 'non-2xx', 'errors']
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]?.length ?? 0)))
  const line = (cells: string[]): string =>
    cells
      .map((cell, column) => (column === 0 ? cell.padEnd(widths[0] ?? 0) : cell.padStart(widths[column] ?? 0)))
      .join('  ')
  return [
    line(header),
    line(widths.map((width) => '-'.repeat(width))),
    ...results.map((result, index) =>
      'skipped' in result ? `${line([result.name])}  skipped: ${result.skipped}` : line(rows[index] ?? []),
    ),
  ].join('\n')
}

/** autocannon's latency histogram holds whole milliseconds (truncated), so 0 means under 1 ms. */
function formatMs(ms: number): string {
  return ms < 1 ? '<1' : ms.toFixed(0)
}
