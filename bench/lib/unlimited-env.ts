/**
 * Settings that lift Plinth's protective limits for a load test from one loopback client: the
 * defaults (600 requests/min per token, 2,400 per address, 32 streams per token, 256 connections
 * per address) would answer 429 within a second of load or refuse the fan-out's subscribers.
 */
export const unlimitedEnv: Record<string, string> = {
  PLINTH_RATE_LIMIT_MAX: '100000000',
  PLINTH_RATE_LIMIT_ADDRESS_MAX: '100000000',
  PLINTH_SSE_MAX_PER_TOKEN: '100000',
  PLINTH_SSE_MAX_STREAMS: '100000',
  PLINTH_MAX_CONNECTIONS_PER_ADDRESS: '100000',
}
