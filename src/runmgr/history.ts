import type { ModelMessage, UserContentPart } from '../llm/index.js'
import { probeImage } from '../media/index.js'
import { latestKept, type TranscriptMessage } from '../store/index.js'

/** A tool result the model reads when a call has none recorded (it was cut off by a crash). */
const missingResult = JSON.stringify({
  error: { code: 'interrupted', message: 'no result was recorded for this call' },
})

/**
 * Turns a stored transcript into model messages. Before every model call the history is checked
 * and repaired: every assistant tool call is followed by exactly one result (a missing one gets an
 * `interrupted` result), and results without a call are dropped, so no provider ever sees an
 * unanswered tool call.
 */
export function buildModelMessages(
  transcript: TranscriptMessage[],
  options: { vision?: boolean } = {},
): ModelMessage[] {
  const vision = options.vision === true
  const results = new Map<string, TranscriptMessage>()
  for (const message of transcript)
    if (message.role === 'tool' && message.toolCallId) results.set(message.toolCallId, message)
  const out: ModelMessage[] = []
  const latestUser = transcript.findLast((message) => message.role === 'user')
  for (const message of transcript) {
    if (message.role === 'tool') continue // placed right after their call; stray ones are dropped
    const callResults =
      message.role === 'assistant' ? (message.toolCalls ?? []).map((call) => results.get(call.callId)) : []
    const kept = built.get(message)
    if (kept && kept.vision === vision && sameRows(kept.results, callResults)) {
      for (const model of kept.messages) out.push(model)
      continue
    }
    const messages = modelMessagesOf(message, callResults, vision || message === latestUser)
    // A message with images is built anew each time: its parts get their bytes in place (`attachImages`).
    if (!messages.some(hasParts)) built.set(message, { vision, results: callResults, messages })
    for (const model of messages) out.push(model)
  }
  return out
}

/**
 * The model messages each stored message became, kept while its row is: a run's window keeps its rows
 * from round to round (and the instance from run to run), so a long conversation's prompt is not built,
 * nor measured (`estimateTokens`), nor serialised by the provider, anew for every call. Stored
 * messages in a window no longer change (docs/guides/agent-runs.md#the-transcript-window); an
 * assistant turn's messages are rebuilt when its calls' results are other rows.
 */
const built = new WeakMap<
  TranscriptMessage,
  { vision: boolean; results: Array<TranscriptMessage | undefined>; messages: ModelMessage[] }
>()

function sameRows(a: Array<TranscriptMessage | undefined>, b: Array<TranscriptMessage | undefined>): boolean {
  return a.length === b.length && a.every((row, index) => row === b[index])
}

function hasParts(message: ModelMessage): boolean {
  return message.role === 'user' && typeof message.content !== 'string'
}

/**
 * One stored message (not a tool result) as model messages: none, one, or a turn with its results.
 * Without `vision`, a user message's images become a note (a text-only model refuses image parts);
 * the run's own input keeps them, for the fallback chain to give to a model that sees them.
 */
function modelMessagesOf(
  message: TranscriptMessage,
  callResults: Array<TranscriptMessage | undefined>,
  vision: boolean,
): ModelMessage[] {
  if (message.role === 'user')
    return [
      {
        role: 'user',
        // Images go as references here; their bytes are loaded just before the call (`attachImages`).
        content: message.parts
          ? message.parts.map((part): UserContentPart => {
              if (part.type === 'text') return { type: 'text', text: part.text }
              if (part.type === 'image')
                return vision
                  ? { type: 'image', mediaType: part.mediaType, path: part.path }
                  : { type: 'text', text: `[image ${part.path}: not shown, this model does not take images]` }
              return {
                type: 'file',
                filename: part.filename,
                mediaType: part.mediaType,
                text: part.text,
                ...(part.path !== undefined && { path: part.path }),
              }
            })
          : (message.content ?? ''),
      },
    ]
  if (message.role === 'system') return [{ role: 'system', content: message.content ?? '' }]
  // A turn cut off by a failure is not shown again; a resumed run asks the model afresh.
  if (message.status === 'streaming' || message.status === 'failed' || message.status === 'interrupted') return []
  const calls = message.toolCalls ?? []
  if (calls.length === 0) return message.content ? [{ role: 'assistant', content: message.content }] : []
  const out: ModelMessage[] = [
    {
      role: 'assistant',
      content: message.content ? message.content : null,
      toolCalls: calls.map((call) => ({ id: call.providerCallId, name: call.name, arguments: call.arguments })),
    },
  ]
  const images: UserContentPart[] = []
  calls.forEach((call, index) => {
    const result = callResults[index]
    out.push({
      role: 'tool',
      toolCallId: call.providerCallId,
      content: result ? (result.content ?? '') : missingResult,
    })
    for (const part of result?.parts ?? [])
      if (part.type === 'image') images.push({ type: 'image', mediaType: part.mediaType, path: part.path })
  })
  // Images the results name (a plot an execution wrote) follow them, for a model that sees images
  // (docs/guides/agent-runs.md#images-in-tool-results); a tool message itself carries text only.
  if (vision && images.length > 0)
    out.push({
      role: 'user',
      content: [{ type: 'text', text: toolImagesIntro }, ...images],
    })
  return out
}

/**
 * Loads the bytes of the images and PDFs the messages refer to (files of the conversation), base64, in
 * place. An image no longer there (deleted since) becomes a text saying so; a PDF goes as its text.
 */
export async function attachImages(messages: ModelMessage[], read: (path: string) => Promise<Buffer>): Promise<void> {
  for (const message of messages) {
    if (message.role !== 'user' || typeof message.content === 'string') continue
    message.content = await Promise.all(
      message.content.map(async (part): Promise<UserContentPart> => {
        if (part.type === 'file') {
          if (part.path === undefined || part.data !== undefined || part.mediaType !== 'application/pdf') return part
          return read(part.path).then(
            (bytes) =>
              bytes.subarray(0, 5).toString('latin1') === '%PDF-' ? { ...part, data: bytes.toString('base64') } : part,
            () => part,
          )
        }
        if (part.type !== 'image' || part.data !== undefined) return part
        try {
          // The file may have been replaced since (tools write the work directory): it must still be
          // the image it was, by its bytes.
          const bytes = await read(part.path)
          if (probeImage(bytes)?.mediaType !== part.mediaType) throw new Error('no longer the image')
          return { ...part, data: bytes.toString('base64') }
        } catch {
          return { type: 'text' as const, text: `[image ${part.path} is no longer available]` }
        }
      }),
    )
  }
}

/** Rough token estimate (4 characters a token of the messages' JSON), enough to keep requests inside the window. */
export function estimateTokens(messages: ModelMessage[]): number {
  // `[`, each message and its comma, `]` less the last comma: the array's JSON length.
  let chars = messages.length === 0 ? 2 : 1
  for (const message of messages) chars += messageChars(message)
  return Math.ceil(chars / 4)
}

/** Each message's JSON length, measured once (a message with parts changes in place: measured each time). */
const jsonLengths = new WeakMap<ModelMessage, number>()

/** One message's share of `estimateTokens` (its JSON plus the separating comma). */
function messageChars(message: ModelMessage): number {
  if (hasParts(message)) return JSON.stringify(message).length + 1
  let length = jsonLengths.get(message)
  if (length === undefined) {
    length = JSON.stringify(message).length
    jsonLengths.set(message, length)
  }
  return length + 1
}

/** The user message `modelMessagesOf` adds after a round whose results name images. */
const toolImagesIntro = 'The images the tool results above refer to:'

export function isToolImages(message: ModelMessage): boolean {
  if (message.role !== 'user' || typeof message.content === 'string') return false
  const [first] = message.content
  return first?.type === 'text' && first.text === toolImagesIntro
}

/**
 * Trims history to `budget` tokens: drops the oldest whole blocks, never separating an assistant
 * tool-call message from its results, always keeping the latest `keepLatest` messages and the user
 * message they answer. Linear: each message is measured once.
 */
export function trimToBudget(messages: ModelMessage[], budget: number, keepLatest = latestKept): ModelMessage[] {
  if (estimateTokens(messages) <= budget) return messages
  const blocks: Array<{ messages: ModelMessage[]; chars: number }> = []
  for (const message of messages) {
    const last = blocks.at(-1)
    // The images of a round's results go with them: a user message, but not a question.
    if ((message.role === 'tool' || isToolImages(message)) && last) {
      last.messages.push(message)
      last.chars += messageChars(message)
    } else blocks.push({ messages: [message], chars: messageChars(message) })
  }
  let chars = blocks.reduce((sum, block) => sum + block.chars, 1)
  let count = messages.length
  let first = 0
  const rest = (): number => count - (blocks[first]?.messages.length ?? 0)
  while (first < blocks.length - 1 && Math.ceil(chars / 4) > budget && rest() >= keepLatest) {
    chars -= blocks[first]!.chars
    count -= blocks[first]!.messages.length
    first++
  }
  // A history must not start with tool results or an assistant turn whose user message was dropped:
  // on to the next turn's question, or, within the latest messages, back to their own turn's question
  // (the rounds between go). Without it the model would no longer see what it is answering.
  while (first < blocks.length - 1 && blocks[first]?.messages[0]?.role !== 'user' && rest() >= keepLatest) {
    count -= blocks[first]!.messages.length
    first++
  }
  const kept = blocks.slice(first).flatMap((block) => block.messages)
  if (kept[0]?.role === 'user') return kept
  const question = blocks.slice(0, first).findLast((block) => block.messages[0]?.role === 'user')
  return question ? [...question.messages, ...kept] : kept
}
