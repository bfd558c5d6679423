import type { JsonValue } from '../extension/index.js'
import type { ModelMessage } from '../llm/index.js'
import {
  insertAssistantMessageWrite,
  listToolCalls,
  newId,
  openToolCallStatuses,
  renewLease,
  runEvent,
  getRun,
  latestCompaction,
  transcriptRowsFromJson,
  waitForPerson,
  withModelCall,
  type CarriedResult,
  type CarriedTransition,
  type Compaction,
  type NewEvent,
  type Run,
  type RunFence,
  type RunPatch,
  type TransitionRead,
} from '../store/index.js'
import { annotateSpan } from '../telemetry/index.js'
import { budgetStop } from './budget.js'
import { summaryBlock, type SummaryCall } from './compaction.js'
import { runCalls } from './call-executor.js'
import { attachImages, estimateTokens } from './history.js'
import { abortDriver, type Driver } from './driver.js'
import type { DriverKit } from './driver-kit.js'
import type { KnowledgeContext } from './knowledge-context.js'
import { modelTurn } from './model-turn.js'
import type { PeriodCheck } from './period-budgets.js'
import { TranscriptWindow, transcriptBudget } from './transcript-window.js'
import { buildPrompt, retrieveKnowledge } from './system-prompt.js'
import { repairPrompt } from './structured-output.js'
import { toolTable, type ToolEntry } from './tool-table.js'

/**
 * The agent's ReAct loop for one run this process drives (docs/architecture.md#the-run-loop): open a
 * round, stream the model, dispatch its calls, and go round again until the model answers, a call waits
 * for a human or the client (the lease is given up), or the driver is stopped. Every write is fenced by
 * the lease.
 */
export async function driveRun(kit: DriverKit, driver: Driver): Promise<void> {
  const { store, log } = kit
  const { fence } = driver
  const runId = fence.runId
  const signal = driver.loop.signal
  const heartbeat = setInterval(
    () => {
      renewLease(store, runId, fence.owner, kit.leases.expiry())
        .then((held) => {
          if (!held) abortDriver(driver, 'lease_lost')
        })
        .catch((error: unknown) =>
          log.warn('could not renew a run lease; the next write re-checks it', { runId, err: error }),
        )
    },
    Math.max(500, kit.leases.ms / 3),
  )
  // A finished tool round is announced with the next round's opening transaction.
  let roundDone = false
  // Only a run taken over from a stopped driver can have calls left open from its last round.
  let first = driver.resumed
  let writable = driver.writable
  // The run as this driver last wrote it: its only writer need not read it back (a change made
  // elsewhere — a cancel, a takeover — makes the next fenced write fail).
  let window: TranscriptWindow | undefined
  // The newest compaction's summary, sent before the window (loaded when the window is).
  let summary: string | undefined
  /** The summary call of a compaction at the run's start: counted in the run's usage when the round opens. */
  let summaryCall: SummaryCall | undefined
  let windowFresh = false
  // Read with the run's start (a run started in an idle conversation): the first round need not.
  let prefetched = driver.prefetched
  let known: Run | undefined = driver.initial?.leaseOwner === fence.owner ? driver.initial : undefined
  // The round opened with the last call's answer (in its statement), not yet streamed.
  let carried: { opening: RoundOpening; result: CarriedResult } | undefined
  try {
    for (;;) {
      let run = known ?? (await getRun(store, runId))
      known = undefined
      if (!run || run.status !== 'running' || run.leaseOwner !== fence.owner) return
      annotateSpan({ 'gen_ai.conversation.id': run.conversationId, 'plinth.project.id': run.projectId })
      if (signal.aborted) return await kit.writer.endAborted(run, driver, carried?.opening.messageId ?? null, '')
      const model = kit.models.get(run.model)
      // The operator removed it: the run can be resumed once the model is configured again.
      if (!model)
        return await kit.writer.end(
          runId,
          {
            status: 'failed',
            error: {
              code: 'unknown_model',
              message: `model ${run.model} is no longer configured; configure it again and resume the run`,
            },
            openCalls: 'interrupted',
          },
          { fence },
        )
      // A carried opening already counted the round.
      const atCap = (carried ? run.iteration - 1 : run.iteration) >= run.maxIterations
      writable ??= await kit.bus.mayWrite(run.ownerId, run.projectId)
      // Mounted MCP servers start when first needed; their tools are part of the table.
      await kit.bus.catalog.settled()
      // A model that takes no tools still gets them when a fallback does (the fallback answers then).
      const takesTools = kit.models.chain(model.id).some((candidate) => candidate.supportsTools)
      const tools = atCap || !takesTools ? new Map<string, ToolEntry>() : toolTable(kit.bus, run, writable)
      if (first) {
        first = false
        // Resumed after its driver stopped: calls of the last round not yet answered are dispatched
        // again under their idempotency keys (a finished dispatch answers with its recorded outcome).
        const open = (await listToolCalls(store, runId)).filter((call) => openToolCallStatuses.includes(call.status))
        if (open.length > 0) {
          const redo = open.filter((call) => call.status === 'pending' || call.status === 'running')
          const waiting =
            (await runCalls(kit, run, redo, toolTable(kit.bus, run, writable), driver)).waiting ||
            redo.length < open.length
          if (signal.aborted) return await kit.writer.endAborted(run, driver, null, '')
          if (waiting) return await requireAction(kit, fence)
          roundDone = true
        }
      }
      let opened: { run: Run; reads: { [name: string]: unknown } }
      let opening: RoundOpening
      let transcript: ReturnType<TranscriptWindow['extend']>
      let knowledge: KnowledgeContext | null
      let early: ModelMessage[] | undefined
      if (carried && window) {
        // Opened with the last call's answer: its reads could not see the tool message it wrote.
        ;({ opening } = carried)
        opened = carried.result
        const added = [
          ...transcriptRowsFromJson(opened.reads.added),
          ...transcriptRowsFromJson(carried.result.written),
        ].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        transcript = window.extend(added)
        knowledge = run.knowledge as KnowledgeContext | null
        carried = undefined
      } else {
        carried = undefined
        const iteration = run.iteration + 1
        // Only the tail that can fit the model's window is read (with room to spare for trimming by
        // whole turns), and later rounds read only what the earlier ones added: a long conversation
        // costs no more per round than a short one.
        if (!window) {
          window = new TranscriptWindow(store, run.conversationId, transcriptBudget(model))
          if (prefetched) window.seed(prefetched.transcript)
          windowFresh = true
        }
        // A later round reads what the last one added in the statement that opens it. The first one
        // reads the window itself (or takes the start's): compaction and retrieval look at it first.
        const retrieve = needsRetrieval(run)
        const added = retrieve || windowFresh ? undefined : window.addedRead()
        let read = added ? undefined : prefetched ? window.extend([]) : await window.read()
        if (windowFresh) {
          windowFresh = false
          // At the run's start a long conversation is compacted first; a resumed driver uses what is there.
          // A run started at once read its conversation's newest compaction in the statement that created it.
          const started: { compaction: Compaction | undefined; rows: typeof read; call?: SummaryCall } =
            read && run.iteration === 0
              ? await kit.compactor.atRunStart(run, model, read, signal, prefetched?.compaction)
              : { compaction: await latestCompaction(store, run.conversationId), rows: read }
          summaryCall = started.call
          if (started.compaction) {
            window.dropThrough(started.compaction.throughMessageId)
            summary = summaryBlock(started.compaction)
          }
          read = started.rows
        }
        // Project knowledge is looked up once, at the start, and kept with the run (resume sees the same).
        const injected =
          read && retrieve
            ? await retrieveKnowledge({ store, retriever: kit.retriever, log }, run, read, signal, prefetched)
            : null
        prefetched = undefined
        knowledge = (injected ?? run.knowledge) as KnowledgeContext | null
        // One statement opens the round: the previous round's tool_done, the new phase and the
        // assistant message the model's turn streams into.
        const patch: RunPatch & { iteration: number } = {
          iteration,
          phase: iteration === 1 ? 'thinking' : 'finalizing',
          ...(injected && { knowledge: injected as unknown as JsonValue }),
          ...(summaryCall && { usage: withModelCall(run.usage, summaryCall.usage, summaryCall.model) }),
        }
        summaryCall = undefined
        const events = roundDone ? [runEvent(run, 'run.status', { runId, status: 'running', phase: 'tool_done' })] : []
        if (injected?.memories && injected.memories.length > 0) {
          events.push(
            runEvent(run, 'memory.recalled', {
              runId,
              memories: injected.memories.map((memory) => ({ id: memory.id, scope: memory.scope, key: memory.key })),
            }),
          )
        }
        if (injected?.hits && injected.hits.length > 0) {
          events.push(
            runEvent(run, 'knowledge.injected', {
              runId,
              chunkIds: injected.hits.map((hit) => hit.chunkId),
              items: injected.hits.map((hit) => ({
                itemId: hit.itemId,
                chunkId: hit.chunkId,
                title: hit.title,
                shared: hit.shared,
              })),
            }),
          )
        }
        opening = roundOpening(kit, run, patch, events, added)
        const { transition } = opening
        const writing = kit.writer.transition(fence, patch, transition.writes, transition.events, transition.reads)
        // A transcript known before the opening (a run's first round) is made into the prompt while the
        // statement runs, once it has been sent; a long conversation's prompt then does not hold back the
        // round's events and its model call after the commit.
        if (read) {
          writing.catch(() => undefined) // awaited just below
          await new Promise((resolve) => setImmediate(resolve))
          early = buildPrompt(kit.bus, kit.systemPrompt, run, model, atCap, read, knowledge, summary)
        }
        opened = await writing
        transcript = read ?? window.extend(transcriptRowsFromJson(opened.reads.added))
      }
      const { messageId, periods } = opening
      // The next run of this conversation starts from it (reading only what was written after it).
      kit.windows.put(run.conversationId, transcriptBudget(model), transcript)
      const messages =
        early ?? buildPrompt(kit.bus, kit.systemPrompt, run, model, atCap, transcript, knowledge, summary)
      // The last answer failed the output schema: ask again, with what failed, for the answer alone.
      const spec = run.profile.output
      const repair = spec && run.outputRepair ? spec : undefined
      if (repair) messages.push(repairPrompt(repair, run.outputRepair!.errors))
      run = opened.run
      roundDone = false
      // The run's budget, then its project's and user's for the day and month, before the call that
      // would spend more (docs/guides/operating.md#budgets).
      let estimated: number | undefined
      const promptTokens = (): number => (estimated ??= estimateTokens(messages))
      const pricing = kit.models.priceOf(model.id)
      const overBudget =
        budgetStop(run, promptTokens, pricing) ?? periods.stop(opened.reads.periods, promptTokens, pricing)
      if (overBudget)
        return await kit.writer.end(runId, { status: 'failed', error: overBudget, openCalls: 'interrupted' }, { fence })
      // The images of the messages shown, read now (after the prompt was trimmed to the window).
      const readFile = kit.readFile
      if (readFile) await attachImages(messages, (path) => readFile(run.conversationId, path))
      const turn = await modelTurn(
        kit,
        run,
        model,
        repair ? new Map<string, ToolEntry>() : tools,
        messages,
        messageId,
        driver,
        repair ? { responseFormat: { name: repair.name, schema: repair.schema, strict: repair.strict } } : {},
      )
      if (turn.kind === 'ended') return // completed with its answer, failed, cancelled or suspended
      if (turn.calls.length === 0) {
        // An answer that failed the output schema: the next round asks again.
        known = turn.run
        continue
      }
      if (atCap) {
        // The last, tool-less call still asked for tools: nothing more runs; the calls are answered.
        const message = `the model still called tools after ${run.maxIterations} iterations (maxIterations)`
        await kit.writer.end(
          runId,
          { status: 'failed', error: { code: 'iteration_cap', message }, openCalls: 'error' },
          { fence },
        )
        return
      }
      // The next round opens with the last call's answer, in its statement, when nothing else comes
      // first: no knowledge to look up, no summary to count.
      let next: RoundOpening | undefined
      const open = window && !needsRetrieval(turn.run) && !summaryCall ? window : undefined
      const done = await runCalls(
        kit,
        run,
        turn.calls,
        tools,
        driver,
        turn.known,
        open && (() => (next = nextRound(kit, turn.run, open)).transition),
      )
      if (done.carried && next) carried = { opening: next, result: done.carried }
      if (signal.aborted) return await kit.writer.endAborted(run, driver, carried?.opening.messageId ?? null, '')
      if (done.waiting) {
        await requireAction(kit, fence)
        return
      }
      roundDone = !carried
      known = carried?.result.run ?? turn.run
    }
  } finally {
    clearInterval(heartbeat)
  }
}

/** A round's opening statement, as parts: run on its own or carried by the last call's answer. */
interface RoundOpening {
  /** The assistant message the round's model turn streams into. */
  messageId: string
  /** The project's and user's budgets for the day and month, read in the same statement. */
  periods: PeriodCheck
  transition: CarriedTransition
}

/**
 * Opens a round: `before` (the previous round's tool_done, what was recalled), the new phase and the
 * assistant message, with the window's additions (`added`) and the period budgets read alongside.
 */
function roundOpening(
  kit: DriverKit,
  run: Run,
  patch: RunPatch & { iteration: number },
  before: NewEvent[],
  added: TransitionRead | undefined,
): RoundOpening {
  const runId = run.id
  const messageId = newId()
  const periods = kit.periodBudgets.check({ projectId: run.projectId, userId: run.ownerId })
  // run.status is for a change: a run that was just started (or resumed) already said `running, thinking`.
  const unchanged = before.length === 0 && run.status === 'running' && run.phase === patch.phase
  return {
    messageId,
    periods,
    transition: {
      patch,
      writes: [insertAssistantMessageWrite(run, messageId)],
      events: [
        ...before,
        ...(unchanged ? [] : [runEvent(run, 'run.status', { runId, status: 'running', phase: patch.phase })]),
        runEvent(run, 'round.started', { runId, iteration: patch.iteration }),
        runEvent(run, 'message.created', { messageId, role: 'assistant' }),
      ],
      reads: { ...(added && { added }), periods: periods.read },
    },
  }
}

/** The round after a round of calls, ready to go with the last call's answer. */
function nextRound(kit: DriverKit, run: Run, window: TranscriptWindow): RoundOpening {
  const iteration = run.iteration + 1
  return roundOpening(
    kit,
    run,
    { iteration, phase: iteration === 1 ? 'thinking' : 'finalizing' },
    [runEvent(run, 'run.status', { runId: run.id, status: 'running', phase: 'tool_done' })],
    window.addedRead(),
  )
}

/** The round waits for humans or the client: the lease is given up until every call is answered. */
async function requireAction(kit: DriverKit, fence: RunFence): Promise<void> {
  await kit.writer.fenced(fence, (tx) => waitForPerson(tx, fence.runId))
}

/**
 * Whether the run's knowledge and memories are yet to be looked up (once, at its start): never done,
 * or knowledge was turned off at creation and memories are to be recalled.
 */
function needsRetrieval(run: Run): boolean {
  const context = run.knowledge as KnowledgeContext | null
  if (context === null) return true
  return context.autoInject === false && context.memories === undefined && run.profile.memoryRecall !== false
}
