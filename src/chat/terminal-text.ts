// What a terminal would act on rather than print: C0 controls (ESC, CR, BEL, …), DEL, C1 controls
// (0x9b is a one-byte CSI) and the bidirectional marks, overrides and isolates that reorder a line.
/* eslint-disable no-control-regex -- control characters are exactly what is matched */
const controls = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g
const controlsAndLineBreaks = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g
const held = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/
/* eslint-enable no-control-regex */

function escaped(char: string): string {
  if (char === '\r') return '\\r'
  if (char === '\n') return '\\n'
  const code = char.charCodeAt(0)
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`
}

/**
 * Text from the server (the model's answer, tool arguments and results, names, errors) made safe to
 * print: every control character shown escaped (`\x1b`), so nothing it holds can clear the screen,
 * retitle the window or paint one command over another. Tabs are kept, and line breaks unless
 * `oneLine` (a field printed on a line of its own, where a break could fake the next line).
 */
export function shown(text: string, options: { oneLine?: boolean } = {}): string {
  return text.replace(options.oneLine ? controlsAndLineBreaks : controls, escaped)
}

/** Whether `text` holds a character `shown` would escape (line breaks and tabs aside). */
export function holdsControls(text: string): boolean {
  return held.test(text)
}
