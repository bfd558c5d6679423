import type { PluginLogger } from '../extension/index.js'

/** One line a plugin logged. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error'
  message: string
  fields: Record<string, unknown>
}

/** A PluginLogger that keeps every line in `lines`. */
export function memoryLogger(): PluginLogger & { lines: LogLine[] } {
  const lines: LogLine[] = []
  const at = (level: LogLine['level']) => (message: string, fields: Record<string, unknown> = {}) => {
    lines.push({ level, message, fields })
  }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}

