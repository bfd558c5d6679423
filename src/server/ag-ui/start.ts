import type { RunAgentInput } from '@ag-ui/core'
import type { Conversation, Project, User } from '../../store/index.js'
import { RunRequestError } from '../../runmgr/index.js'
import { HttpProblem } from '../problem.js'
import type { ServerDeps } from '../server-deps.js'
import { AnswerFailed, type AgUiStreamPlan } from './ag-ui-stream.js'
import { readAnswers, type Answers } from './answers.js'
import { AgUiEventMapper } from './event-mapper.js'
import { clientToolsOf, userText } from './input.js'
import type { PlinthRunOptions } from './input-schema.js'
import { waitingWorkOf } from './interrupts.js'

/**
 * What an AG-UI input asks of a conversation: answers to its waiting run (resume entries, or tool
 * messages at the end of the thread) continue that run's stream; otherwise the last message, a user
 * message, starts a new run. The thread's earlier messages are not compared with Plinth's transcript:
 * the stored conversation is the history the model sees (docs/ag-ui.md, "Mismatches").
 */
export async function planAgUiRun(
  deps: ServerDeps,
  user: User,
  target: { conversation: Conversation; project: Project },
  input: RunAgentInput,
  options: PlinthRunOptions = {},
): Promise<AgUiStreamPlan> {
  const last = input.messages.at(-1)
  const resume = input.resume ?? []
  if (resume.length > 0 || last?.role === 'tool') return continueWaitingRun(deps, user, target.conversation, input)
  if (last?.role !== 'user') {
    throw new HttpProblem(
      'no_input',
      'the last message must be a user message (it starts a run), or the input must answer the conversation’s waiting run (resume entries or tool messages)',
    )
  }
  const text = userText(last, input.messages.length - 1)
  const clientTools = clientToolsOf(input.tools ?? [])
  const created = await deps.runs.createRun(
    target.conversation,
    user.id,
    { ...options, input: text, ...(clientTools.length > 0 && { clientTools }) },
    { project: target.project },
  )
  if ('active' in created) {
    const { active } = created
    throw new HttpProblem(
      'run_active',
      `run ${active.id} is ${active.status} in this conversation; answer it (resume), cancel it, or send forwardedProps.plinth.ifActive`,
      {
        activeRunId: active.id,
        activeStatus: active.status,
        awaiting: active.requiredAction,
      },
    )
  }
  const { run } = created
  return {
    runId: run.id,
    afterId: 0,
    mapper: new AgUiEventMapper({
      threadId: input.threadId,
      runId: input.runId,
      plinthRunId: run.id,
      model: run.model,
    }),
  }
}

async function continueWaitingRun(
  deps: ServerDeps,
  user: User,
  conversation: Conversation,
  input: RunAgentInput,
): Promise<AgUiStreamPlan> {
  const waiting = (await deps.runQueries.ofConversation(user, conversation.id, ['requires_action'], { limit: 1 }))
    .items[0]
  if (!waiting)
    throw new HttpProblem(
      'run_not_waiting',
      'no run waits for an answer in this conversation; send a user message to start one',
    )
  const answers = readAnswers(input.messages, input.resume ?? [], waitingWorkOf(waiting.requiredAction))
  if (answers.ids.size === 0) {
    throw new HttpProblem(
      'no_input',
      'the input neither answers the waiting run (resume entries, tool messages for the calls it awaits) nor ends with a user message',
    )
  }
  // Read before answering: everything the answers cause comes after it.
  const afterId = await deps.runQueries.lastEventId()
  const mapper = new AgUiEventMapper({
    threadId: input.threadId,
    runId: input.runId,
    plinthRunId: waiting.id,
    model: waiting.model,
    continuesRound: waiting.iteration,
    answering: answers.ids,
    answeredByClient: answers.byToolMessage,
    usageBefore: waiting.usage,
  })
  return { runId: waiting.id, afterId, mapper, afterOpen: () => applyAnswers(deps, user.id, waiting.id, answers) }
}

/** Client-tool outputs first (they return at once), then each decision in order, as POST /api/decisions does. */
async function applyAnswers(deps: ServerDeps, userId: string, runId: string, answers: Answers): Promise<void> {
  if (answers.toolOutputs.length > 0) {
    await deps.runs.submitToolOutputs(runId, answers.toolOutputs).catch((error: unknown) => {
      throw error instanceof RunRequestError ? new AnswerFailed(error.code, error.message) : error
    })
  }
  for (const decision of answers.decisions) {
    const outcome = await deps.bus.decide(decision.decisionId, userId, decision.answer, decision.note)
    if (!outcome.ok) throw new AnswerFailed(outcome.error.code, outcome.error.message)
  }
}
