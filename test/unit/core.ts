import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { setUpCommandBus, setUpRuns, type CommandBusSetup } from '../../src/app/index.js'
import { CommandBus, createPluginLogger } from '../../src/cmdbus/index.js'
import {
  ModelError,
  ScriptedModel,
  type LanguageModel,
  type ModelRequest,
  type StreamPart,
} from '../../src/llm/index.js'
import { HashingEmbedder, prepareEmbeddings } from '../../src/rag/index.js'
import type { CreateRunInput, RunManager, RunObserver } from '../../src/runmgr/index.js'
import {
  createConversation,
  createProject,
  createUser,
  getRun,
  listToolCalls,
  readEvents,
  readTranscript,
  type Conversation,
  type Project,
  type Run,
  type RunStatus,
  type Store,
  type User,
} from '../../src/store/index.js'
import { assertLedgerInvariant } from '../helpers/ledger.js'
import { waitFor } from '../helpers/waits.js'

/**
 * Plinth's core without HTTP: the command bus and the run manager wired by the composition root's own
 * functions (`setUpCommandBus`, `setUpRuns`, as test/helpers/test-server.ts does), over a real store.
 * Nothing listens; tests call `RunManager` and `CommandBus` directly (docs/architecture.md).
 */
export interface Core {
  store: Store
  bus: CommandBus
  setup: CommandBusSetup
  runs: RunManager
  owner: User
  project: Project
  /** A new conversation in the owner's project. */
  conversation(): Promise<Conversation>
  /**
   * A second "instance", as another server process on the same database would have: its own CommandBus
   * (over the same catalog: the plugins are loaded once) and its own RunManager (`setUpRuns`, which
   * starts it, running its start-up sweep). Stopped by `close` if the test did not stop it.
   */
  instance(options?: InstanceOptions): Promise<RunManager>
  close(): Promise<void>
}

export interface InstanceOptions {
  maxResumes?: number
  observer?: RunObserver
}

let users = 0
const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' })

export async function startCore(store: Store, models: LanguageModel[]): Promise<Core> {
  const dataDir = await mkdtemp(join(tmpdir(), 'plinth-unit-'))
  const embedder = new HashingEmbedder()
  await prepareEmbeddings(store, embedder)
  const setup = await setUpCommandBus(store, {
    plugins: ['rdm'],
    logger,
    actionTtlMs: 3_600_000,
    allowanceTtlMs: 3_600_000,
    dataDir,
    embedder,
  })
  await setup.ingestor.start()
  const managers: RunManager[] = []
  const busOptions = {
    store,
    catalog: setup.catalog,
    access: setup.access,
    logger: (plugin: string) => createPluginLogger(logger, plugin),
    actionTtlMs: 3_600_000,
    allowanceTtlMs: 3_600_000,
  }
  const manage = async (bus: CommandBus, extra: InstanceOptions = {}): Promise<RunManager> => {
    // A long lease keeps the periodic sweeper (every lease / 2) out of the way: tests that need a
    // sweep call `runs.sweep()` themselves, so which instance takes a run over is never a race.
    const runs = await setUpRuns(store, bus, {
      models,
      logger,
      actionTtlMs: 3_600_000,
      leaseMs: 600_000,
      ...extra,
    })
    managers.push(runs)
    return runs
  }
  const runs = await manage(setup.bus)
  const owner = await newUser(store)
  const project = await store.transaction((tx) => createProject(tx, owner.id, { name: 'unit' }))
  return {
    store,
    bus: setup.bus,
    setup,
    runs,
    owner,
    project,
    conversation: () => store.transaction((tx) => createConversation(tx, { projectId: project.id, ownerId: owner.id })),
    instance: (extra) => manage(new CommandBus(busOptions), extra),
    async close() {
      for (const manager of managers) await manager.stop()
      await setup.ingestor.stop()
      await setup.exec.stop()
      await setup.mcp.stop()
      await rm(dataDir, { recursive: true, force: true })
      // Whatever a test checks, every tool call must end with exactly one terminal result.
      await assertLedgerInvariant(store)
    },
  }
}

export async function newUser(store: Store): Promise<User> {
  const created = await createUser(store, `unit${process.pid}_${users++}_${Date.now()}`)
  if ('error' in created) throw new Error('user name taken')
  return created
}

/** The types of a run's events in log order; `message.delta` left out (how many depends on timing). */
export async function eventTypes(store: Store, runId: string): Promise<string[]> {
  const events = await readEvents(store, { runId }, 0, 10_000)
  return events.map((event) => event.type).filter((type) => type !== 'message.delta')
}

/** How many events the log holds for a run (deltas included): to show that nothing was appended. */
export async function eventCount(store: Store, runId: string): Promise<number> {
  return (await readEvents(store, { runId }, 0, 10_000)).length
}

/** Waits until the run is in one of `statuses` (or matches), read from the store. */
export function untilRun(
  store: Store,
  runId: string,
  until: readonly RunStatus[] | ((run: Run) => boolean),
  timeoutMs = 15_000,
): Promise<Run> {
  const matches = typeof until === 'function' ? until : (run: Run) => until.includes(run.status)
  let last: Run | undefined
  return waitFor(
    async () => {
      last = await getRun(store, runId)
      return last && matches(last) ? last : undefined
    },
    { timeoutMs, what: () => `run ${runId} to reach ${String(until)} (it is ${last?.status ?? 'missing'})` },
  )
}

/** The scripted provider (`script`), with two faults a test can switch on: failing calls, and the last call's signal. */
export class Scripted implements LanguageModel {
  readonly id = 'scripted'
  readonly provider = 'scripted' as const
  readonly supportsTools = true
  readonly contextWindow = 128_000
  readonly script = new ScriptedModel({ id: 'scripted', turns: [] })
  /** The next this many calls fail upstream (not retryable), before anything streams. */
  failures = 0
  /** The signal of the latest call: aborted when its driver stops. */
  signal: AbortSignal | undefined

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    this.signal = request.signal
    if (this.failures > 0) {
      this.failures--
      throw new ModelError('upstream_error', 'upstream answered 502', { upstreamStatus: 502 })
    }
    yield* this.script.stream(request)
  }
}

/** A call of the rdm draft command: high risk and `confirm`, so it always waits for a person. */
export const draftCall = { name: 'rdm__draft__compose', arguments: { title: 'Notes', body: 'text' } }
/** A turn that streams for seconds: the run stays `running` while a test acts on it. */
const slowTurn = { text: Array.from({ length: 200 }, (_, index) => `w${index} `).join(''), chunks: 200, delayMs: 25 }

/** Ways to bring a run into a state through the RunManager, with the `Scripted` model. */
export function runKit(core: () => Core, model: Scripted) {
  const start = async (conversation: Conversation, input: Partial<CreateRunInput> = {}, runs = core().runs) => {
    const result = await runs.createRun(conversation, core().owner.id, { input: 'hello', model: 'scripted', ...input })
    if (!('run' in result)) throw new Error(`another run is active: ${result.active.id}`)
    return result.run
  }
  return {
    /** Creates a run on `runs` (default: the core's RunManager). */
    start,
    /** A run in `requires_action`: the model called the draft command. */
    async waitingOnDraft(conversation?: Conversation): Promise<{ run: Run; decisionId: string }> {
      model.script.setTurns([{ toolCalls: [draftCall] }])
      const run = await start(conversation ?? (await core().conversation()))
      await untilRun(core().store, run.id, ['requires_action'])
      const [call] = await listToolCalls(core().store, run.id)
      return { run, decisionId: call!.decisionId! }
    },
    /** A run streaming its answer slowly, once its first delta is in the log. */
    async streaming(runs = core().runs): Promise<Run> {
      model.script.setTurns([slowTurn])
      const run = await start(await core().conversation(), {}, runs)
      const db = core().store
      await waitFor(async () =>
        (await readEvents(db, { runId: run.id }, 0, 100)).some((e) => e.type === 'message.delta'),
      )
      return run
    },
    /** The statuses of a conversation's assistant messages, oldest first. */
    async turnStatuses(conversationId: string): Promise<string[]> {
      const transcript = await readTranscript(core().store, conversationId)
      return transcript.filter((message) => message.role === 'assistant').map((message) => message.status)
    },
    /** The data of a run's `run.status` events, in order. */
    async statusEvents(runId: string) {
      const events = await readEvents(core().store, { runId }, 0, 10_000)
      return events.filter((event) => event.type === 'run.status').map((event) => event.data)
    },
  }
}
