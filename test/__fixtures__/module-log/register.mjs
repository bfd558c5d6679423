// Loaded with `--import`: appends the URL of every module the process loads to MODULE_LOG_FILE.
import { register } from 'node:module'

register(new URL('./hooks.mjs', import.meta.url), { data: { file: process.env.MODULE_LOG_FILE } })
