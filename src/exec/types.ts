/** Resource limits of one execution. */
export interface ExecLimits {
  /** Memory of the whole process tree (cgroup), MiB; no swap. */
  memoryMb: number
  /** Processes and threads of the tree (cgroup pids.max). */
  pids: number
  /** CPU seconds per process (RLIMIT_CPU); the wall-clock timeout is the real bound. */
  cpuSeconds: number
  /** Largest file a process may write (RLIMIT_FSIZE), MiB. */
  fileSizeMb: number
  /** Bytes kept of stdout and of stderr each; the rest is read and dropped (`truncated`). */
  outputBytes: number
}

/** What to run (docs/guides/sandbox.md). argv only: a shell runs only when argv names one. */
export interface ExecSpec {
  argv: string[]
  /** Absolute host path of the working directory (the conversation's work directory). */
  cwd: string
  /** The whole environment of the process (build it with `buildExecEnv`; nothing is inherited). */
  env: Record<string, string>
  stdin?: string
  timeoutMs: number
  limits: ExecLimits
  /** Network access (sandbox only; `direct` cannot take it away). */
  network: boolean
  /** Extra host paths mounted into the sandbox: `ro` read-only (skills, runtimes), `rw` read-write. */
  mounts: { ro: string[]; rw: string[] }
}

export interface ExecResult {
  exitCode: number | null
  signal: string | null
  stdout: string
  stderr: string
  truncated: boolean
  durationMs: number
  timedOut: boolean
}

export interface ExecOptions {
  signal?: AbortSignal
  /** Output as it arrives (decoded UTF-8, in order per stream). */
  onOutput?: (stream: 'stdout' | 'stderr', text: string) => void
}

export interface ExecBackend {
  readonly name: 'direct' | 'sandbox'
  run(spec: ExecSpec, options?: ExecOptions): Promise<ExecResult>
}

export const defaultLimits: ExecLimits = {
  memoryMb: 512,
  pids: 128,
  cpuSeconds: 60,
  fileSizeMb: 64,
  outputBytes: 1024 * 1024,
}
