// The AG-UI protocol's modules (@ag-ui/core and its zod schemas, the encoder): about 6 MB of heap,
// imported on the first AG-UI request rather than at start (docs/reference/benchmarks.md#start-and-cli-latency).
export { serveAgUiStream } from './ag-ui-stream.js'
export { parseRunAgentInput } from './input.js'
export { planAgUiRun } from './start.js'
