import type { LogMethod, PluginLogger } from '../extension/index.js'

/** One line a plugin logged. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error'
  message: string
  fields: Record<string, unknown>
}

/** A PluginLogger that keeps every line in `lines`. */
export function memoryLogger(): PluginLogger & { lines: LogLine[] } {
  const lines: LogLine[] = []
  // Either argument order, as the server's logger takes it.
  const at =
    (level: LogLine['level']): LogMethod =>
    (first: string | Record<string, unknown>, second?: string | Record<string, unknown>) => {
      const [fields, message] = typeof first === 'string' ? [second, first] : [first, second]
      lines.push({
        level,
        message: typeof message === 'string' ? message : '',
        fields: typeof fields === 'object' && fields !== null ? fields : {},
      })
    }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}
