/**
 * Settings that lift Plinth's protective limits for a load test from one loopback client: the
 * defaults (600 requests/min per token, 2,400 per address, 32 streams per token, 256 connections
 * per address, 10 active runs, 16 model calls at once and half of them per user) would answer 429 within a second of
 * load, refuse the fan-out's subscribers, or serialise one user's concurrent runs.
 */
export const unlimitedEnv: Record<string, string> = {
  PLINTH_RATE_LIMIT_MAX: '100000000',
  PLINTH_RATE_LIMIT_ADDRESS_MAX: '100000000',
  PLINTH_SSE_MAX_PER_TOKEN: '100000',
  PLINTH_SSE_MAX_STREAMS: '100000',
  PLINTH_MAX_CONNECTIONS_PER_ADDRESS: '100000',
  PLINTH_MAX_ACTIVE_RUNS_PER_USER: '100000',
  PLINTH_LLM_CONCURRENCY: '1024',
  PLINTH_LLM_CONCURRENCY_PER_USER: '1024',
  // A benchmark measures what the server does under the load it is given: no run refused as overload.
  PLINTH_OVERLOAD_LOOP_DELAY_MS: '0',
  PLINTH_OVERLOAD_DB_WAIT_MS: '0',
  PLINTH_OVERLOAD_ADMIT_MS: '0',
  PLINTH_OVERLOAD_MAX_ACTIVE_RUNS: '0',
  PLINTH_OVERLOAD_ADAPTIVE_CAP_SECONDS: '0',
}
