import { pino, type Logger } from 'pino'

/** Paths pino blanks out wherever they appear in a log line: secrets never reach logs. */
export const redactPaths = [
  'req.headers.authorization',
  'req.headers["idempotency-key"]',
  'headers.authorization',
  '*.token',
  '*.apiKey',
  '*.adminToken',
  '*.password',
  'token',
  'adminToken',
]

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino({ level, redact: { paths: redactPaths, censor: '[redacted]' } }, destination ?? process.stdout)
}
