import { documentText, type ModelMessage, type ModelTool } from '../model.js'

/** A chat-completions message as sent upstream. */
export type OpenAIChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | OpenAIUserPart[] }
  | { role: 'assistant'; content: string | null; tool_calls?: OpenAIToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string }

export type OpenAIUserPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string } }
  | { type: 'file'; file: { filename: string; file_data: string } }

export interface OpenAIToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}

export interface OpenAIChatTool {
  type: 'function'
  function: { name: string; description: string; parameters: { [keyword: string]: unknown } }
}

/**
 * Canonical messages → chat-completions messages. An assistant turn that only calls tools sends
 * `content: null`; tool arguments go back exactly as the model streamed them.
 */
export function convertToOpenAIMessages(
  messages: readonly ModelMessage[],
  options: { pdf?: boolean } = {},
): OpenAIChatMessage[] {
  return messages.map((message) => convertMessage(message, options))
}

/**
 * The messages' JSON array as `JSON.stringify(convertToOpenAIMessages(messages, options))` gives it,
 * as UTF-8 pieces to send one after another: each message's bytes are made once, since a run sends the
 * same messages again with each call, and a long conversation's were most of every request's bytes
 * (encoding them again cost ≈ 0.3 ms per call for 500 messages). A user message with parts changes in
 * place (its images get their bytes just before the call) and is serialised each time.
 */
export function openAIMessagesBytes(messages: readonly ModelMessage[], options: { pdf?: boolean } = {}): Buffer[] {
  const cache = options.pdf === true ? bytesWithPdf : bytesWithoutPdf
  const pieces: Buffer[] = [openBracket]
  for (const [index, message] of messages.entries()) {
    if (index > 0) pieces.push(comma)
    if (message.role === 'user' && typeof message.content !== 'string') {
      pieces.push(Buffer.from(JSON.stringify(convertMessage(message, options))))
      continue
    }
    let bytes = cache.get(message)
    if (bytes === undefined) {
      bytes = Buffer.from(JSON.stringify(convertMessage(message, options)))
      cache.set(message, bytes)
    }
    pieces.push(bytes)
  }
  pieces.push(closeBracket)
  return pieces
}

const openBracket = Buffer.from('[')
const comma = Buffer.from(',')
const closeBracket = Buffer.from(']')
const bytesWithPdf = new WeakMap<ModelMessage, Buffer>()
const bytesWithoutPdf = new WeakMap<ModelMessage, Buffer>()

function convertMessage(message: ModelMessage, options: { pdf?: boolean }): OpenAIChatMessage {
  switch (message.role) {
    case 'system':
      return { role: 'system', content: message.content }
    case 'user':
      if (typeof message.content === 'string') return { role: 'user', content: message.content }
      return {
        role: 'user',
        content: message.content.map((part): OpenAIUserPart => {
          if (part.type === 'text') return { type: 'text', text: part.text }
          if (part.type === 'image')
            return { type: 'image_url', image_url: { url: `data:${part.mediaType};base64,${part.data ?? ''}` } }
          // A PDF natively to a model that reads PDFs (a `file` part); every other document as text.
          if (options.pdf && part.data !== undefined && part.mediaType === 'application/pdf')
            return {
              type: 'file',
              file: { filename: part.filename, file_data: `data:application/pdf;base64,${part.data}` },
            }
          return { type: 'text', text: documentText(part) }
        }),
      }
    case 'assistant': {
      const toolCalls = message.toolCalls ?? []
      if (toolCalls.length === 0) return { role: 'assistant', content: message.content ?? '' }
      return {
        role: 'assistant',
        content: message.content ? message.content : null,
        tool_calls: toolCalls.map((call) => ({
          id: call.id,
          type: 'function',
          function: { name: call.name, arguments: call.arguments },
        })),
      }
    }
    case 'tool':
      return { role: 'tool', tool_call_id: message.toolCallId, content: message.content }
  }
}

/** Canonical tools → chat-completions `tools`. */
export function convertToOpenAITools(tools: readonly ModelTool[]): OpenAIChatTool[] {
  return tools.map((tool) => ({
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  }))
}

const toolJson = new WeakMap<ModelTool, string>()

/**
 * `convertToOpenAITools` as JSON text, each tool's made once: a run's command tools are the same
 * (read-only) objects from round to round (docs/reference/benchmarks.md#the-round-on-postgres).
 */
export function openAIToolsJson(tools: readonly ModelTool[]): string {
  const parts = tools.map((tool) => {
    let json = toolJson.get(tool)
    if (json === undefined) {
      json = JSON.stringify(convertToOpenAITools([tool])[0])
      toolJson.set(tool, json)
    }
    return json
  })
  return `[${parts.join(',')}]`
}
