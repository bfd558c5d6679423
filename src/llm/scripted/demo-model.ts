import type { LanguageModel, ModelRequest, StreamPart } from '../model.js'

/**
 * The model a fresh start offers when none is configured: clearly a demo, no keys needed. Within
 * a run it calls `rdm__ping`, then `rdm__draft__compose` (which waits for a human), then answers —
 * or, without the rdm plugin, `list_projects` and an answer.
 */
export class DemoModel implements LanguageModel {
  readonly id = 'scripted-demo'
  readonly provider = 'scripted' as const
  readonly supportsTools = true
  readonly contextWindow = 32_000

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    const messages = request.messages
    const lastUser = messages.map((message) => message.role).lastIndexOf('user')
    const calledSoFar = messages
      .slice(lastUser + 1)
      .flatMap((message) => (message.role === 'assistant' ? (message.toolCalls ?? []).map((call) => call.name) : []))
    const offered = new Set(request.tools.map((tool) => tool.name))
    const plan = offered.has('rdm__ping')
      ? ['rdm__ping', 'rdm__draft__compose']
      : offered.has('list_projects')
        ? ['list_projects']
        : []
    const next = plan.find((name) => offered.has(name) && !calledSoFar.includes(name))
    const userText = lastUser >= 0 ? String((messages[lastUser] as { content: string }).content) : ''
    if (next) {
      yield* words(
        next === 'rdm__ping'
          ? 'Let me check that the service answers. '
          : next === 'list_projects'
            ? 'Let me look at your projects. '
            : 'Now I will write a draft; a person must confirm it. ',
      )
      const args =
        next === 'rdm__ping'
          ? { target: 'demo' }
          : next === 'rdm__draft__compose'
            ? { title: 'Demo draft', body: `Notes on: ${userText.slice(0, 200)}` }
            : {}
      yield {
        type: 'tool-call',
        call: { id: `demo_${next}_${calledSoFar.length}`, name: next, arguments: JSON.stringify(args) },
      }
      yield { type: 'finish', reason: 'tool_calls' }
      return
    }
    yield* words(
      `This is the scripted demo model (configure a real model in plinth.config.json). You said: "${userText.slice(0, 200)}". Done.`,
    )
    yield { type: 'usage', usage: { inputTokens: Math.ceil(JSON.stringify(messages).length / 4), outputTokens: 40 } }
    yield { type: 'finish', reason: 'stop' }
  }
}

function* words(text: string): Generator<StreamPart> {
  for (const piece of text.match(/\S+\s*/g) ?? []) yield { type: 'text-delta', text: piece }
}
