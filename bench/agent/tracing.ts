/**
 * The tracing bench (`BENCH_ONLY=tracing npm run bench`): the agent round with OpenTelemetry off, and
 * on — exporting spans and metrics over OTLP/HTTP (protobuf, the default) to a receiver in this
 * process — beside raw fetch (bench/agent/paired-rounds.ts).
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { ms } from './stats.js'
import { runPairedRoundBench } from './paired-rounds.js'

export async function runTracingBench(adminUrl: string | undefined): Promise<void> {
  let requests = 0
  let bytes = 0
  const receiver = createServer((request, response) => {
    requests++
    request.on('data', (chunk: Buffer) => (bytes += chunk.length))
    request.on('end', () => response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end())
  })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  try {
    await runPairedRoundBench(adminUrl, {
      title: 'tracing bench',
      labels: { off: 'tracing off', on: 'tracing on' },
      onEnv: {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`,
        OTEL_METRIC_EXPORT_INTERVAL: '5000',
      },
      verdict: (added) =>
        `tracing adds ${ms(added.p50Ms)} ms to the round's p50 (target ≤ 1 ms) and ${ms(added.cpuMs)} ms of server CPU; ` +
        `the receiver got ${requests} exports, ${(bytes / 1024).toFixed(0)} KiB`,
    })
  } finally {
    await new Promise<void>((resolve) => receiver.close(() => resolve()))
  }
}
