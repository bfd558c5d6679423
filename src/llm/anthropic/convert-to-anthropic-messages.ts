import { documentText, type ModelMessage, type ModelTool } from '../model.js'
import { asRecord, safeParseJson } from '../openai/safe-json.js'

export type AnthropicContentBlock =
  | { type: 'text'; text: string }
  | { type: 'image'; source: { type: 'base64'; media_type: string; data: string } }
  | { type: 'document'; source: { type: 'base64'; media_type: 'application/pdf'; data: string }; title?: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  | { type: 'tool_result'; tool_use_id: string; content: string }

export interface AnthropicMessage {
  role: 'user' | 'assistant'
  content: AnthropicContentBlock[]
}

export interface AnthropicTool {
  name: string
  description: string
  input_schema: { [keyword: string]: unknown }
}

export interface AnthropicPrompt {
  /** System messages joined by a blank line; undefined when there are none. */
  system: string | undefined
  messages: AnthropicMessage[]
}

/**
 * Canonical messages → Messages API `system` + `messages`:
 * - system messages become the top-level `system` text;
 * - assistant tool calls become `tool_use` blocks whose `input` is the parsed arguments (a JSON string
 *   inside JSON is unwrapped once; anything that is not a JSON object becomes `{}`);
 * - tool results become `tool_result` blocks in a `user` message; consecutive results (and a user text
 *   right after them) share one user message, results first, since roles must alternate;
 * - empty assistant turns are dropped (the API rejects empty content);
 * - without `tools` in the request (`toolBlocks: false`: a call that offers none, as the last one at a
 *   run's cap), calls and results are text: the API refuses `tool_use` and `tool_result` blocks then.
 */
export function convertToAnthropicMessages(
  messages: readonly ModelMessage[],
  options: { pdf?: boolean; toolBlocks?: boolean } = {},
): AnthropicPrompt {
  const toolBlocks = options.toolBlocks !== false
  const system: string[] = []
  const result: AnthropicMessage[] = []
  const append = (role: AnthropicMessage['role'], blocks: AnthropicContentBlock[]): void => {
    if (blocks.length === 0) return
    const last = result[result.length - 1]
    if (last && last.role === role) last.content.push(...blocks)
    else result.push({ role, content: blocks })
  }
  for (const message of messages) {
    switch (message.role) {
      case 'system':
        system.push(message.content)
        break
      case 'user':
        if (typeof message.content !== 'string') {
          append(
            'user',
            message.content.map((part): AnthropicContentBlock => {
              if (part.type === 'text') return { type: 'text', text: part.text }
              if (part.type === 'image')
                return { type: 'image', source: { type: 'base64', media_type: part.mediaType, data: part.data ?? '' } }
              // A PDF as a document block to a model that reads PDFs; every other document as text.
              if (options.pdf && part.data !== undefined && part.mediaType === 'application/pdf')
                return {
                  type: 'document',
                  source: { type: 'base64', media_type: 'application/pdf', data: part.data },
                  title: part.filename,
                }
              return { type: 'text', text: documentText(part) }
            }),
          )
          break
        }
        append('user', message.content ? [{ type: 'text', text: message.content }] : [])
        break
      case 'assistant': {
        const blocks: AnthropicContentBlock[] = []
        if (message.content) blocks.push({ type: 'text', text: message.content })
        for (const call of message.toolCalls ?? [])
          blocks.push(
            toolBlocks
              ? { type: 'tool_use', id: call.id, name: call.name, input: parseToolInput(call.arguments) }
              : { type: 'text', text: `[called ${call.name} (call ${call.id}) with ${call.arguments}]` },
          )
        append('assistant', blocks)
        break
      }
      case 'tool':
        append('user', [
          toolBlocks
            ? { type: 'tool_result', tool_use_id: message.toolCallId, content: message.content }
            : { type: 'text', text: `[result of call ${message.toolCallId}]\n${message.content}` },
        ])
        break
    }
  }
  return { system: system.length > 0 ? system.join('\n\n') : undefined, messages: result }
}

/** Canonical tools → Messages API `tools`. */
export function convertToAnthropicTools(tools: readonly ModelTool[]): AnthropicTool[] {
  return tools.map((tool) => ({ name: tool.name, description: tool.description, input_schema: tool.parameters }))
}

/** Raw argument text → a `tool_use.input` object (`{}` when it is not a JSON object). */
export function parseToolInput(text: string): Record<string, unknown> {
  let parsed = safeParseJson(text)
  // Arguments that are a JSON string holding JSON.
  if (parsed.ok && typeof parsed.value === 'string') parsed = safeParseJson(parsed.value)
  return (parsed.ok ? asRecord(parsed.value) : undefined) ?? {}
}
