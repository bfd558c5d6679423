/**
 * Anthropic `stop_reason` → the finish reasons the rest of Plinth reads (the chat-completions vocabulary
 * the scripted model also uses): `end_turn`/`stop_sequence` → `stop`, `tool_use` → `tool_calls`,
 * `max_tokens` → `length`; anything else passes through unchanged.
 */
export function mapAnthropicStopReason(reason: string | null): string | null {
  switch (reason) {
    case 'end_turn':
    case 'stop_sequence':
      return 'stop'
    case 'tool_use':
      return 'tool_calls'
    case 'max_tokens':
      return 'length'
    default:
      return reason
  }
}
