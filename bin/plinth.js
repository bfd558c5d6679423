#!/usr/bin/env node
// Entry point of the `plinth` CLI. Runs the compiled build when present (npm start builds it);
// otherwise runs the TypeScript sources through tsx so a fresh checkout works without a build step.
import { existsSync } from 'node:fs'
import { fileURLToPath, pathToFileURL } from 'node:url'

const built = fileURLToPath(new URL('../dist/src/app/main.js', import.meta.url))
if (existsSync(built) && process.env.PLINTH_FROM_SOURCE !== '1') {
  await import(pathToFileURL(built).href)
} else {
  // Namespaced: tsx handles Plinth's own sources (and what they import), while plugins keep Node's
  // own rules for their files (a plain .js plugin in a folder without package.json stays loadable).
  const { register } = await import('tsx/esm/api')
  const api = register({ namespace: 'plinth-source' })
  await api.import('../src/app/main.ts', import.meta.url)
}
