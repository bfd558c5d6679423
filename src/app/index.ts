/** Composition root: configuration, wiring, process entry. */
export {
  loadConfig,
  configSettings,
  ConfigError,
  type ConfigSetting,
  type EnvKind,
  type PlinthConfig,
  type ModelConfig,
} from './config.js'
export { startServer, type RunningServer } from './start-server.js'
export { configSecrets, createLogger } from './logger.js'
export { version } from './version.js'
export { runCli } from './cli.js'
export { setUpCommandBus, type CommandBusSetup } from './command-bus-setup.js'
export type { LoadedPlugin } from './plugin-loader.js'
export { setUpRuns, providerFactories } from './run-setup.js'
export { createAgentMetrics } from './agent-metrics.js'
