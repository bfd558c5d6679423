/** `plinth chat`: a terminal client over the HTTP + SSE API, through plinth/client alone. */
export { ChatSession, type ChatOptions } from './chat-session.js'
export { runLocalCommand, type LocalResult } from './local-command.js'
