import { realpath, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { CliToolSpec, PluginLogger } from '../extension/index.js'
import { inSpan, type Span } from '../telemetry/index.js'
import { appendAuditEntry, countActiveUsers, getProject, getSetting, setSetting, type Store } from '../store/index.js'
import { DirectBackend, SandboxBackend, sandboxWorkdir, type HostSupport, type SandboxIdentity } from './backends.js'
import { buildExecEnv } from './exec-env.js'
import { settleCleanups } from './process-runner.js'
import { detectHostSupport, probeSandbox, type ProbeResult } from './probe.js'
import { defaultLimits, type ExecLimits, type ExecOptions, type ExecResult } from './types.js'
import { defaultDeniedSegments, WorkDirectories } from './workdirs.js'
import { PostgresFileStore } from './file-store.js'
import { SharedWorkDirectories } from './shared-workdirs.js'
import { defaultQuota, WorkQuota, type QuotaSettings } from './work-quota.js'

export type BackendName = 'direct' | 'sandbox'

/** The `exec` section of the configuration. */
export interface ExecSettings {
  /**
   * `auto` (the default): the sandbox where its probe passes, otherwise no execution at all; `direct`
   * and `sandbox` are the operator's explicit choice.
   */
  backend: BackendName | 'auto'
  disableExecTools: boolean
  /** The unprivileged host user sandboxed programs run as when the server runs as root. */
  sandboxUser: string
  /** Where conversation work directories live (default `<dataDir>/work`); the sandbox user must be able to reach it. */
  workRoot?: string
  /** Refuse the sandbox on hosts without usable cgroups (default true). */
  requireCgroups: boolean
  /** A shell command line may contain newlines (default false). */
  allowMultiline: boolean
  timeoutMs: number
  limits: ExecLimits
  /** Network inside the sandbox (default false). */
  network: boolean
  /** Size of the sandbox's private /tmp, MiB. */
  tmpSizeMb: number
  /** Runtime directories projects may mount read-only: name → host path. */
  runtimes: Record<string, string>
  deniedSegments: string[]
  maxCodeBytes: number
  maxUploadBytes: number
  maxDownloadBytes: number
  cliTools: CliToolSpec[]
  /** Disk quotas of work directories (per conversation, per user, per project). */
  quota: QuotaSettings
  /**
   * Where work directories' files are kept for every instance (docs/guides/scaling.md#files): `postgres`
   * (the database, each instance's directory a cache of it), `local` (each instance's own disk only), or
   * `auto` (the default): `postgres` on an external Postgres, `local` on the embedded database.
   */
  fileStore: 'auto' | 'postgres' | 'local'
  /**
   * Users (names or ids) who alone may approve an execution under `direct` — a second person, never the
   * one who asked. Empty (the default): whoever may act on the decision approves it.
   */
  directApprovers: string[]
  /** Executions running at once on this instance, and per user: each may take `limits.memoryMb`. */
  maxConcurrent: number
  maxConcurrentPerUser: number
}

export const defaultExecSettings: ExecSettings = {
  backend: 'auto',
  disableExecTools: false,
  sandboxUser: 'plinth-sandbox',
  requireCgroups: true,
  allowMultiline: false,
  timeoutMs: 30_000,
  limits: defaultLimits,
  network: false,
  tmpSizeMb: 64,
  runtimes: {},
  deniedSegments: defaultDeniedSegments,
  maxCodeBytes: 256 * 1024,
  maxUploadBytes: 20 * 1024 * 1024,
  maxDownloadBytes: 50 * 1024 * 1024,
  cliTools: [],
  quota: defaultQuota,
  fileStore: 'auto',
  directApprovers: [],
  maxConcurrent: 8,
  maxConcurrentPerUser: 3,
}

/** As many executions run as the operator allows (`exec.maxConcurrent`, per user too); this one may not start. */
export class ExecBusyError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ExecBusyError'
  }
}

/** The sandbox was asked for and cannot work here; nothing runs (never a silent fallback to direct). */
export class SandboxUnavailableError extends Error {
  constructor(reason: string) {
    super(`the sandbox is unavailable: ${reason}`)
    this.name = 'SandboxUnavailableError'
  }
}

/** A sandboxed long-lived program ready to spawn (`ExecService.launchSandboxed`). */
export interface SandboxedLaunch {
  argv: string[]
  cwd: string
  env: Record<string, string>
  /** Bytes to write to the program's fds 3, 4, … (bwrap's seccomp filter and arguments). */
  fds: Buffer[]
  /** Kills whatever is left of it (its cgroup) and removes what was made for it. */
  release(): Promise<void>
}

const settingKey = 'execBackend'

/**
 * Chooses the backend for each execution and runs it in the conversation's work directory. The
 * backend starts as configured and can be switched at run time (`setBackend`, stored in the shared
 * settings, so every instance applies it to its next execution). The sandbox probe runs at start
 * and on every switch to `sandbox`; while it fails, sandboxed executions refuse.
 */
export class ExecService {
  readonly settings: ExecSettings
  readonly workdirs: WorkDirectories
  readonly quota: WorkQuota
  readonly #store: Store
  readonly #dataDir: string
  readonly #log: PluginLogger
  readonly #support: HostSupport
  #probe: ProbeResult
  #identity: SandboxIdentity | null
  #backend: BackendName
  #unsubscribe: (() => void) | null = null
  #running = 0
  readonly #runningPerUser = new Map<string, number>()

  private constructor(
    store: Store,
    settings: ExecSettings,
    dataDir: string,
    log: PluginLogger,
    support: HostSupport,
    probe: { result: ProbeResult; identity: SandboxIdentity | null },
  ) {
    this.#store = store
    this.#dataDir = dataDir
    this.settings = settings
    this.#log = log
    this.#support = support
    this.#probe = probe.result
    this.#identity = probe.identity
    // `auto` runs in the sandbox; where the probe failed, executions are off (see `executionAvailable`).
    this.#backend = settings.backend === 'direct' ? 'direct' : 'sandbox'
    const root = settings.workRoot ?? join(dataDir, 'work')
    const shared = settings.fileStore === 'postgres' || (settings.fileStore === 'auto' && store.engine === 'pg')
    this.workdirs = shared
      ? new SharedWorkDirectories(root, new PostgresFileStore(store), log, { deniedSegments: settings.deniedSegments })
      : new WorkDirectories(root, { deniedSegments: settings.deniedSegments })
    this.workdirs.setOwner(probe.identity)
    this.quota = new WorkQuota(store, this.workdirs, settings.quota)
  }

  static async create(options: {
    store: Store
    settings: ExecSettings
    dataDir: string
    log: PluginLogger
  }): Promise<ExecService> {
    const support = await detectHostSupport()
    // Under `direct` the probe only reports whether the sandbox could work (in a temporary directory);
    // choosing the sandbox probes again where the work directories really are.
    const workRoot =
      options.settings.backend !== 'direct' ? (options.settings.workRoot ?? join(options.dataDir, 'work')) : undefined
    const probe = await probeSandbox({
      sandboxUser: options.settings.sandboxUser,
      requireCgroups: options.settings.requireCgroups,
      support,
      ...(workRoot && { workRoot }),
    })
    const service = new ExecService(options.store, options.settings, options.dataDir, options.log, support, probe)
    // Partial uploads a crash left behind: in the background, a start does not wait for the walk.
    void service.workdirs.sweepStaging().then(
      (removed) => removed > 0 && options.log.info('removed partial uploads a stopped server left', { removed }),
      (error: unknown) => options.log.warn('could not look for partial uploads', { err: error }),
    )
    await service.#refresh()
    service.#unsubscribe = options.store.settings.subscribe((key) => {
      if (key === null || key === settingKey) void service.#refresh()
    })
    if (service.#backend === 'sandbox' && !probe.result.ok) {
      if (options.settings.backend === 'auto') {
        options.log.warn(
          'exec tools are off: the sandbox cannot work here, and programs run on the server itself only by the operator’s explicit choice (exec.backend "direct")',
          { reason: probe.result.reason },
        )
      } else
        options.log.error('exec backend is sandbox but the sandbox cannot work here; exec tools will refuse', {
          reason: probe.result.reason,
        })
    }
    return service
  }

  /** Stops listening for setting changes and waits for the last executions' cgroups to be removed. */
  async stop(): Promise<void> {
    this.#unsubscribe?.()
    await settleCleanups()
  }

  get backendName(): BackendName {
    return this.#backend
  }

  get probe(): ProbeResult {
    return this.#probe
  }

  /** Whether programs can run now: under `direct`, or in a sandbox whose probe passed. */
  get executionAvailable(): boolean {
    return this.#backend === 'direct' || this.#probe.ok
  }

  /** Why nothing can run in the sandbox now (the backend is `direct`, or its probe failed), or null. */
  get sandboxUnavailable(): string | null {
    if (this.#backend !== 'sandbox') return 'the exec backend is direct'
    return this.#probe.ok ? null : `the sandbox cannot work here (${this.#probe.reason ?? 'the probe failed'})`
  }

  /**
   * Prepares a long-lived program in the sandbox (a sandboxed MCP server, docs/mcp.md): exec's isolation
   * and limits, without RLIMIT_CPU or a deadline; the conversation's work directory at /work, or a new
   * empty scratch directory (`conversationId` null). `env` is added as given to the exec environment
   * (the operator wrote it). Never falls back to running outside: SandboxUnavailableError instead. The
   * starter spawns `argv` with the filter on fd 3, and calls `release` once the program has exited.
   */
  async launchSandboxed(input: {
    conversationId: string | null
    argv: string[]
    env: Record<string, string>
    network: boolean
    mounts: string[]
  }): Promise<SandboxedLaunch> {
    const unavailable = this.sandboxUnavailable
    if (unavailable) throw new SandboxUnavailableError(unavailable)
    for (const mount of input.mounts) {
      // bwrap would make the mount point inside the conversation's directory.
      const real = await realpath(mount).catch((error: NodeJS.ErrnoException) => {
        throw new Error(
          `mount ${mount} cannot be used (${error.code === 'ENOENT' ? 'no such file or directory' : (error.code ?? error.message)})`,
        )
      })
      if (real === sandboxWorkdir || real.startsWith(`${sandboxWorkdir}/`))
        throw new Error(
          `mount ${mount} is under ${sandboxWorkdir}, the work directory inside the sandbox; move it elsewhere`,
        )
      // Every conversation's directory is owned by the one sandbox user: a mount that holds (or is in)
      // the work root or the data directory would show the server other conversations' files.
      for (const guarded of [this.workdirs.root, this.#dataDir]) {
        const root = await realpath(guarded).catch(() => guarded)
        if (real === root || root.startsWith(`${real}/`) || real === '/' || real.startsWith(`${root}/`)) {
          throw new Error(
            `mount ${mount} overlaps ${root} (the work directories or the data directory), which a sandboxed server must not see`,
          )
        }
      }
    }
    const scratch = input.conversationId === null ? await this.workdirs.scratch() : null
    try {
      if (input.conversationId !== null) await this.workdirs.pull(input.conversationId)
      const cwd = scratch ?? (await this.workdirs.prepareForSandbox(input.conversationId!))
      const backend = new SandboxBackend(this.#support, this.#identity, { tmpSizeMb: this.settings.tmpSizeMb })
      const launch = await backend.launch(
        {
          argv: input.argv,
          cwd,
          limits: this.settings.limits,
          network: input.network,
          mounts: { ro: input.mounts, rw: [] },
        },
        { persistent: true },
      )
      return {
        argv: launch.argv,
        cwd: '/',
        // HOME on the sandbox's own tmpfs, not in /work: what the model writes there (a .pth file, a
        // dotfile) must not be read as the server's configuration (docs/mcp.md, "Sandboxed stdio servers").
        env: { ...buildExecEnv('/tmp'), PYTHONNOUSERSITE: '1', PYTHONSAFEPATH: '1', ...input.env },
        fds: launch.fds,
        release: async () => {
          await launch.cgroup?.killAll(1000)
          await launch.cgroup?.remove()
          if (scratch) await rm(scratch, { recursive: true, force: true })
        },
      }
    } catch (error) {
      if (scratch) await rm(scratch, { recursive: true, force: true })
      throw error
    }
  }

  /**
   * Under `direct`, with several users, every account can run programs as the server's user (a person
   * approves each, but the person is the requester): the warning operators should see, else null.
   */
  async directWarning(): Promise<string | null> {
    if (this.#backend !== 'direct') return null
    const users = await countActiveUsers(this.#store)
    if (users <= 1) return null
    return `exec backend is direct and ${users} users exist: each of them can run programs on this machine as the server's user (a person approves each run, but that person is the one asking); use the sandbox for several users`
  }

  /** Switches the backend for every instance's next execution (the probe first, for sandbox); audited. */
  async setBackend(name: BackendName, by: string): Promise<{ ok: true } | { ok: false; reason: string }> {
    if (name === 'sandbox') {
      const probe = await this.#reprobe()
      if (!probe.ok) return { ok: false, reason: probe.reason ?? 'the sandbox probe failed' }
    }
    const previous = this.#backend
    await this.#store.transaction(async (tx) => {
      await setSetting(tx, settingKey, name)
      await appendAuditEntry(tx, {
        dispatchId: null,
        step: 'settings:update',
        ownerId: null,
        projectId: null,
        conversationId: null,
        commandId: null,
        entrance: null,
        envelope: { setting: settingKey, from: previous, to: name, by },
      })
    })
    this.#backend = name
    this.#log.info('exec backend switched', { from: previous, to: name, by })
    const warning = await this.directWarning()
    if (warning) this.#log.warn(warning)
    return { ok: true }
  }

  /**
   * Runs argv in the conversation's work directory with the current backend. With `ownerId`, the
   * directory's quota is checked first and settled after (docs/security.md, "disk quotas"): an execution
   * that went over loses what it wrote and fails with a QuotaError.
   */
  async run(
    input: {
      conversationId: string
      projectId: string | null
      ownerId?: string
      argv: string[]
      stdin?: string
      timeoutMs?: number
      mounts?: string[]
      env?: Record<string, string>
    },
    options: ExecOptions = {},
  ): Promise<ExecResult> {
    return inSpan(
      'exec',
      { 'plinth.exec.backend': this.#backend, 'plinth.exec.program': input.argv[0] ?? '' },
      async (span) => {
        const release = this.#takeSlot(input.ownerId)
        try {
          if (input.ownerId) await this.quota.ensureRoom(input.conversationId, input.ownerId)
          await this.workdirs.beforeExec(input.conversationId)
          const startedAt = Date.now()
          let result: ExecResult
          try {
            result = await this.#run(input, options)
          } finally {
            try {
              if (input.ownerId) await this.quota.settleAfterExec(input.conversationId, input.ownerId, startedAt)
            } finally {
              // What the program wrote (within quota) is stored for every instance before its result is.
              await this.workdirs.afterExec(input.conversationId, startedAt)
            }
          }
          annotateExecSpan(span, result)
          return result
        } finally {
          release()
        }
      },
    )
  }

  /** One of the instance's execution slots (and of the user's), or ExecBusyError at once. */
  #takeSlot(ownerId: string | undefined): () => void {
    const { maxConcurrent, maxConcurrentPerUser } = this.settings
    if (this.#running >= maxConcurrent)
      throw new ExecBusyError(
        `${maxConcurrent} executions are running on this server, as many as it allows at once: try again when one has ended`,
      )
    const mine = ownerId ? (this.#runningPerUser.get(ownerId) ?? 0) : 0
    if (ownerId && mine >= maxConcurrentPerUser)
      throw new ExecBusyError(
        `you have ${mine} executions running, as many as one user may at once: try again when one has ended`,
      )
    this.#running++
    if (ownerId) this.#runningPerUser.set(ownerId, mine + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      this.#running--
      if (!ownerId) return
      const left = (this.#runningPerUser.get(ownerId) ?? 1) - 1
      if (left > 0) this.#runningPerUser.set(ownerId, left)
      else this.#runningPerUser.delete(ownerId)
    }
  }

  async #run(
    input: {
      conversationId: string
      projectId: string | null
      argv: string[]
      stdin?: string
      timeoutMs?: number
      mounts?: string[]
      env?: Record<string, string>
    },
    options: ExecOptions,
  ): Promise<ExecResult> {
    const name = this.#backend
    const limits = this.settings.limits
    const ro = [...(input.mounts ?? []), ...(await this.#runtimeMounts(input.projectId))]
    if (name === 'sandbox') {
      if (!this.#probe.ok) throw new SandboxUnavailableError(this.#probe.reason ?? 'the probe failed')
      const cwd = await this.workdirs.prepareForSandbox(input.conversationId)
      const backend = new SandboxBackend(this.#support, this.#identity, { tmpSizeMb: this.settings.tmpSizeMb })
      return backend.run(
        {
          argv: input.argv,
          cwd,
          env: buildExecEnv(sandboxWorkdir, input.env),
          ...(input.stdin !== undefined && { stdin: input.stdin }),
          timeoutMs: input.timeoutMs ?? this.settings.timeoutMs,
          limits,
          network: this.settings.network,
          mounts: { ro, rw: [] },
        },
        options,
      )
    }
    const cwd = await this.workdirs.dir(input.conversationId)
    // What a direct program writes belongs to the server's user: handed over before the next sandboxed run.
    await this.workdirs.markForeign(input.conversationId)
    return new DirectBackend(this.#support).run(
      {
        argv: input.argv,
        cwd,
        env: buildExecEnv(cwd, input.env),
        ...(input.stdin !== undefined && { stdin: input.stdin }),
        timeoutMs: input.timeoutMs ?? this.settings.timeoutMs,
        limits,
        network: true,
        mounts: { ro, rw: [] },
      },
      options,
    )
  }

  /** Probes the sandbox where the work directories are (the sandbox user must reach them). */
  async #reprobe(): Promise<ProbeResult> {
    const probe = await probeSandbox({
      sandboxUser: this.settings.sandboxUser,
      requireCgroups: this.settings.requireCgroups,
      support: this.#support,
      workRoot: this.workdirs.root,
    })
    this.#probe = probe.result
    this.#identity = probe.identity
    this.workdirs.setOwner(probe.identity)
    return probe.result
  }

  async #runtimeMounts(projectId: string | null): Promise<string[]> {
    if (!projectId) return []
    const project = await getProject(this.#store, projectId)
    return (project?.runtimes ?? []).flatMap((runtime) =>
      this.settings.runtimes[runtime] ? [this.settings.runtimes[runtime]] : [],
    )
  }

  async #refresh(): Promise<void> {
    const stored = await getSetting(this.#store, settingKey).catch(() => undefined)
    if (stored !== 'direct' && stored !== 'sandbox') return
    const switchedToSandbox = stored === 'sandbox' && this.#backend !== 'sandbox'
    this.#backend = stored
    // Another instance chose the sandbox: check it works here too, where our work directories are.
    if (switchedToSandbox) await this.#reprobe()
  }
}

/** The exec span's outcome: exit code, whether it timed out or was cut off. */
function annotateExecSpan(span: Span, result: ExecResult): void {
  if (!span.isRecording()) return
  span.setAttributes({
    ...(result.exitCode !== null && { 'process.exit.code': result.exitCode }),
    'plinth.exec.timed_out': result.timedOut,
    'plinth.exec.duration_ms': result.durationMs,
  })
}
