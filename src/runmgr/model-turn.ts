import type { DispatchRequest, RunEnd } from '../cmdbus/index.js'
import {
  ModelError,
  streamWithFallbacks,
  type LanguageModel,
  type ModelMessage,
  type ModelRequest,
  type ModelToolCall,
  type Usage,
} from '../llm/index.js'
import {
  appendEvents,
  completeAssistantMessage,
  completeAssistantMessageWrite,
  conversationWithProject,
  conversationWithProjectRead,
  endPatch,
  insertModelCall,
  insertModelCallWrite,
  withModelCall,
  type ModelCallUsage,
  insertToolCallsWrite,
  newId,
  runEvent,
  type Run,
  type RunPatch,
  type StoredToolCall,
  type ToolCallRecord,
} from '../store/index.js'
import { failSpan, openSpan, recordModelCall, setContent, SpanKind, type Span } from '../telemetry/index.js'
import { countedUsage } from './call-usage.js'
import { proposeCommandTool } from './client-tools.js'
import { DeltaCoalescer } from './delta-coalescer.js'
import { checkAnswer } from './structured-output.js'
import type { Driver } from './driver.js'
import type { DriverKit } from './driver-kit.js'
import { commandRisk, parseArguments, type ToolEntry } from './tool-table.js'

/** A model answer past one of `kit.answerLimits`: the run fails, nothing of the answer is run. */
function tooLarge(limit: string, setting: string): ModelError {
  return new ModelError('output_too_large', `the model's answer passed ${limit} (${setting}); nothing of it was run`)
}

/** The conversation and project a turn's end read for the call it dispatches next. */
export type KnownScope = NonNullable<DispatchRequest['known']>

/** Streams one model turn into an assistant message. */
export async function modelTurn(
  kit: DriverKit,
  run: Run,
  model: LanguageModel,
  tools: Map<string, ToolEntry>,
  messages: ModelMessage[],
  messageId: string,
  driver: Driver,
  request: Pick<ModelRequest, 'responseFormat'> = {},
): Promise<{ kind: 'ended' } | { kind: 'turn'; calls: ToolCallRecord[]; run: Run; known?: KnownScope }> {
  const { store } = kit
  const { fence } = driver
  const signal = driver.loop.signal
  let text = ''
  // Deltas are fenced too: once the lease has passed, nothing more streams from here.
  const coalescer = new DeltaCoalescer(50, (delta) =>
    store.appendEvents([runEvent(run, 'message.delta', { messageId, text: delta })], fence).then(() => undefined),
  )
  const calls: ModelToolCall[] = []
  // What one answer may hold (docs/guides/agent-runs.md#limits-on-an-answer): past it the call stops.
  const limits = kit.answerLimits
  let outputChars = 0
  // This call's tokens as the provider reports them (counted into the run's usage when it ends).
  let reported: Usage = { inputTokens: 0, outputTokens: 0 }
  let usage = run.usage
  let callUsage: ModelCallUsage | undefined
  const holdsSlot = await kit.modelSlots.acquire(signal, run.ownerId)
  if (!holdsSlot) {
    // Stopped while waiting for a slot: the model was never called.
    await coalescer.close()
    await kit.writer.endAborted(run, driver, messageId, '')
    return { kind: 'ended' }
  }
  const modelStarted = performance.now()
  // The model that answers: the run's, or one of its fallbacks (docs/guides/agent-runs.md#model-fallback).
  let answeredBy = model
  let modelOutcome = 'ok'
  let finish: string | null = null
  const chat = openSpan(
    `chat ${model.id}`,
    {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': model.provider,
      'gen_ai.request.model': model.id,
      'gen_ai.conversation.id': run.conversationId,
      'plinth.run.id': run.id,
      'plinth.run.iteration': run.iteration,
    },
    SpanKind.CLIENT,
  )
  setContent(chat.span, 'gen_ai.input.messages', () => messages)
  try {
    await chat.within(async () => {
      for await (const part of streamWithFallbacks(
        kit.models.chain(model.id),
        {
          messages,
          tools: [...tools.values()].map((entry) => entry.tool),
          params: run.profile.modelParams,
          ...(request.responseFormat && { responseFormat: request.responseFormat }),
          signal,
        },
        {
          retriesOf: (candidate) => kit.models.retriesOf(candidate.id),
          onFallback: ({ from, to, error }) =>
            kit.log.warn(`model ${from.id} failed; ${to.id} takes the call over`, {
              runId: run.id,
              ...(error && { code: error.code, upstreamStatus: error.upstreamStatus }),
            }),
          // The error's message is already scrubbed of the model's key and headers.
          onRetry: ({ model: retried, attempt, delayMs, error }) =>
            kit.log.warn(`model ${retried.id} failed; retry ${attempt} in ${delayMs} ms`, {
              runId: run.id,
              code: error.code,
              upstreamStatus: error.upstreamStatus,
              message: error.message,
            }),
        },
      )) {
        if (part.type === 'model') answeredBy = part.model
        else if (part.type === 'text-delta') {
          outputChars += part.text.length
          if (outputChars > limits.maxOutputChars)
            throw tooLarge(`${limits.maxOutputChars} characters`, 'llmMaxOutputChars')
          text += part.text
          coalescer.push(part.text)
        } else if (part.type === 'tool-call') {
          // Stopped before anything is stored: every call is a row, an event and a message part.
          if (calls.length >= limits.maxToolCalls)
            throw tooLarge(`${limits.maxToolCalls} tool calls`, 'llmMaxToolCalls')
          outputChars += part.call.name.length + part.call.arguments.length
          if (outputChars > limits.maxOutputChars)
            throw tooLarge(`${limits.maxOutputChars} characters`, 'llmMaxOutputChars')
          calls.push(part.call)
        } else if (part.type === 'usage') reported = part.usage
        else if (part.type === 'finish') finish = part.reason
      }
    })
    callUsage = countedUsage(reported, kit.models.priceOf(answeredBy.id))
    usage = withModelCall(run.usage, callUsage, answeredBy.id)
  } catch (error) {
    modelOutcome = error instanceof ModelError ? error.code : 'internal'
    failSpan(chat.span, error, modelOutcome)
    // What the upstream reported before failing is billed; a model without its key was never called.
    if (error instanceof ModelError && error.usage && reported.inputTokens === 0 && reported.outputTokens === 0)
      reported = error.usage
    const called = !(error instanceof ModelError && error.code === 'upstream_auth_missing' && answeredBy === model)
    callUsage = called ? countedUsage(reported, kit.models.priceOf(answeredBy.id)) : undefined
    usage = callUsage ? withModelCall(run.usage, callUsage, answeredBy.id) : run.usage
    const failedCall = callUsage
    await coalescer.close()
    if (signal.aborted || (error instanceof ModelError && error.code === 'cancelled')) {
      await kit.writer.endAborted(run, driver, messageId, text)
      return { kind: 'ended' }
    }
    kit.log.warn(`model ${answeredBy.id} failed; the run fails`, {
      runId: run.id,
      ...(error instanceof ModelError
        ? { code: error.code, upstreamStatus: error.upstreamStatus, message: error.message }
        : { err: error }),
    })
    const failure =
      error instanceof ModelError
        ? {
            code: error.code === 'cancelled' ? 'upstream_error' : error.code,
            message: error.message,
            ...(error.upstreamStatus !== undefined && { upstreamStatus: error.upstreamStatus }),
          }
        : { code: 'internal', message: 'the model call failed' }
    const decisions = await kit.writer.fenced(
      fence,
      async (tx, locked) => {
        await completeAssistantMessage(tx, messageId, text, null, 'failed')
        if (failedCall) await insertModelCall(tx, run, answeredBy.id, failedCall)
        await appendEvents(tx, [
          runEvent(run, 'message.completed', {
            messageId,
            content: text,
            toolCalls: null,
            status: 'failed',
            model: answeredBy.id,
          }),
        ])
        return kit.ledger.end(tx, locked, { status: 'failed', error: failure, openCalls: 'interrupted', usage })
      },
      { audit: true },
    )
    kit.bus.decisionsExpired(decisions)
    return { kind: 'ended' }
  } finally {
    if (holdsSlot) kit.modelSlots.release(run.ownerId)
    const durationMs = performance.now() - modelStarted
    const outcome = signal.aborted ? 'cancelled' : modelOutcome
    kit.observer?.modelCall?.({ model: answeredBy.id, durationMs, outcome, ...(callUsage && { usage: callUsage }) })
    if (answeredBy !== model) chat.span.setAttribute('gen_ai.response.model', answeredBy.id)
    endChatSpan(chat.span, { usage: callUsage, finish, calls: calls.length, text })
    recordModelCall({
      provider: answeredBy.provider,
      model: answeredBy.id,
      durationMs,
      ...(outcome !== 'ok' && { errorType: outcome }),
      ...(callUsage && { inputTokens: callUsage.inputTokens, outputTokens: callUsage.outputTokens }),
    })
  }
  // The text not yet streamed goes out with the turn's end, in its statement.
  const rest = await coalescer.take()
  if (signal.aborted) {
    await kit.writer.endAborted(run, driver, messageId, text)
    return { kind: 'ended' }
  }
  // The turn and its calls are one checkpoint: message, ledger rows and events in one transaction.
  const ledger: ToolCallRecord[] = calls.map((call, seq) => {
    const entry = tools.get(call.name)
    return {
      id: newId(),
      runId: run.id,
      messageId,
      iteration: run.iteration,
      seq,
      providerCallId: call.id || `call_${seq}`,
      name: call.name,
      commandId: entry?.kind === 'command' ? entry.command.spec.id : null,
      kind: entry ? entry.kind : 'unknown',
      args: parseArguments(call.arguments).value,
      rawArgs: call.arguments,
      risk: null,
      status: 'pending',
      output: null,
      modelOutput: null,
      modelTruncated: false,
      dispatchId: null,
      decisionId: null,
      repeatOf: null,
    }
  })
  // The turn is one statement under the fence: the run's new state (with calls, the checkpoint;
  // without, the text is the answer and the run completes — nothing is open, every earlier round was
  // answered), the message, the ledger rows and the events.
  // An answer to a run that asked for structured output ends it only once it validates (structured-output.ts).
  const answer = ledger.length === 0 && run.profile.output ? checkAnswer(run.profile.output, text) : undefined
  const repairs = run.outputRepair?.attempts ?? 0
  const retry = answer?.ok === false && repairs < run.profile.output!.maxRepairs ? answer.errors : undefined
  const completed: RunEnd =
    answer?.ok === false
      ? {
          status: 'failed',
          usage,
          clean: true,
          error: {
            code: 'output_invalid',
            message: `the final answer did not follow the output schema after ${repairs + 1} attempt${repairs === 0 ? '' : 's'}`,
            errors: answer.errors,
          },
        }
      : { status: 'completed', usage, clean: true, ...(answer?.ok && { output: answer.value }) }
  const patch: RunPatch =
    ledger.length > 0
      ? { usage, phase: 'tool_running' }
      : retry
        ? { usage, phase: 'finalizing', outputRepair: { attempts: repairs + 1, errors: retry } }
        : endPatch(completed)
  const stored: StoredToolCall[] = ledger.map((call) => ({
    callId: call.id,
    providerCallId: call.providerCallId,
    name: call.name,
    arguments: call.rawArgs,
  }))
  const writes = [completeAssistantMessageWrite(messageId, text, stored, 'completed')]
  if (callUsage) writes.push(insertModelCallWrite(run, answeredBy.id, callUsage))
  const events = rest ? [runEvent(run, 'message.delta', { messageId, text: rest })] : []
  events.push(
    runEvent(run, 'message.completed', {
      messageId,
      content: text,
      toolCalls: stored.length > 0 ? stored : null,
      status: 'completed',
      model: answeredBy.id,
      // `length`: the answer was cut at the model's output-token limit.
      ...(finish !== null && { finishReason: finish }),
    }),
  )
  if (retry) {
    events.push(runEvent(run, 'output.invalid', { runId: run.id, messageId, attempt: repairs + 1, errors: retry }))
  } else if (ledger.length === 0) {
    events.push(...kit.ledger.ended(run, completed))
  } else {
    for (const call of ledger) {
      const risk =
        call.kind === 'client' && call.name === proposeCommandTool.name
          ? kit.bus.classifyCommandLine(String((call.args as { command?: unknown } | null)?.command ?? ''))
          : null
      call.risk = risk?.risk ?? (await commandRisk(kit.bus, run, tools.get(call.name), call.args))
      // A command's own rules (core.exec's shell line), named as propose_command's are.
      const rules =
        risk?.matchedRules ??
        (call.commandId && call.args !== null && typeof call.args === 'object' && !Array.isArray(call.args)
          ? kit.bus.matchedRules(call.commandId, call.args)
          : [])
      events.push(
        runEvent(run, 'tool_call.created', {
          runId: run.id,
          callId: call.id,
          providerCallId: call.providerCallId,
          name: call.name,
          commandId: call.commandId,
          kind: call.kind === 'unknown' ? 'command' : call.kind,
          args: call.args,
          risk: call.risk,
          ...((risk || rules.length > 0) && { matchedRules: rules }),
        }),
      )
    }
    writes.push(insertToolCallsWrite(ledger))
    // The checkpoint also announces tool_called and moves on to tool_running.
    events.push(runEvent(run, 'run.status', { runId: run.id, status: 'running', phase: 'tool_called' }))
    events.push(runEvent(run, 'run.status', { runId: run.id, status: 'running', phase: 'tool_running' }))
  }
  // The first command call's dispatch checks the conversation and project as this statement reads
  // them, instead of reading them again right after it.
  const dispatches = ledger.some((call) => call.kind === 'command')
  const { run: checkpointed, reads } = await kit.writer.transition(
    fence,
    patch,
    writes,
    events,
    dispatches ? { scope: conversationWithProjectRead(run.conversationId) } : undefined,
  )
  if (ledger.length === 0 && !retry) return { kind: 'ended' }
  const known = dispatches ? conversationWithProject(reads.scope) : undefined
  return { kind: 'turn', calls: ledger, run: checkpointed, ...(known && { known }) }
}

/** The chat span's GenAI attributes (usage, finish reason), and the completion when content is captured. */
function endChatSpan(
  span: Span,
  turn: { usage: ModelCallUsage | undefined; finish: string | null; calls: number; text: string },
): void {
  if (span.isRecording()) {
    if (turn.usage)
      span.setAttributes({
        'gen_ai.usage.input_tokens': turn.usage.inputTokens,
        'gen_ai.usage.output_tokens': turn.usage.outputTokens,
        'gen_ai.usage.cache_read.input_tokens': turn.usage.cachedInputTokens,
        'gen_ai.usage.reasoning.output_tokens': turn.usage.reasoningTokens,
        ...(turn.usage.cost !== null && { 'plinth.usage.cost': turn.usage.cost }),
      })
    const finish = turn.finish ?? (turn.calls > 0 ? 'tool_calls' : 'stop')
    span.setAttribute('gen_ai.response.finish_reasons', [finish])
    setContent(span, 'gen_ai.output.messages', () => turn.text)
  }
  span.end()
}
