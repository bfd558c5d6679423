/** Command ids: lowercase ASCII snake segments joined by dots, at least two segments (docs/guides/writing-a-plugin.md). */
export const commandIdPattern = /^[a-z][a-z0-9]*(_[a-z0-9]+)*(\.[a-z][a-z0-9]*(_[a-z0-9]+)*)+$/

/** What every model provider accepts as a tool name: a letter, then letters, digits and `_`, 64 at most. */
export const toolNamePattern = /^[a-zA-Z][a-zA-Z0-9_]{0,63}$/

// The projection is part of the plugin surface (plugin authors name tools in scripted tests).
export { projectToolName } from '../extension/index.js'
