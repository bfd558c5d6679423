/** `plinth chat`: a terminal client over the HTTP + SSE API (depends on nothing internal). */
export { ChatSession, type ChatOptions } from './chat-session.js'
export { runLocalCommand, type LocalResult } from './local-command.js'
