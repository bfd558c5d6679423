import { setFlagsFromString } from 'node:v8'

// The embedded database is Postgres built to WebAssembly. V8 compiles its functions with a baseline
// compiler (Liftoff) on first call and recompiles the hot ones with its optimizing compiler (TurboFan).
// The optimizing compiler's work during the start stays resident: an idle embedded server is ≈ 45 MB
// larger with it (docs/reference/benchmarks.md#start-and-cli-latency). The flag is process-wide and must
// be set before the database's module is compiled; V8 cannot turn tier-up back on for a module later.

/** Keeps WebAssembly on the baseline compiler (`pgliteCompiler: "baseline"`); false when not applied. */
export function chooseWasmCompiler(choice: 'baseline' | 'optimizing'): boolean {
  if (choice !== 'baseline') return false
  // The operator's own WebAssembly tiering flags win.
  const own = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].some((flag) => /liftoff|wasm[-_]tier/.test(flag))
  if (own) return false
  setFlagsFromString('--liftoff-only')
  return true
}
