/** The agent bench's instant OpenAI-compatible upstream, in its own process like a real one. */
import { startFakeOpenAIUpstream } from '../agent/fake-openai-upstream.js'
import { announceReady, fail } from '../lib/child-side.js'

try {
  const upstream = await startFakeOpenAIUpstream()
  announceReady(upstream.url, {}, () => upstream.close())
} catch (error) {
  fail(error)
}
