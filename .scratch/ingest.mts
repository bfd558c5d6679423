import { openStore } from '../src/store/index.ts'
import { HashingEmbedder, prepareEmbeddings, Ingestor } from '../src/rag/index.ts'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
const engine = process.argv[2] ?? 'pglite'
const store = await openStore(engine === 'pg' ? { databaseUrl: process.env.TEST_DATABASE_URL! } : { dataDir: mkdtempSync(join(tmpdir(), 'ing-')) } as never)
const embedder = new HashingEmbedder()
await prepareEmbeddings(store, embedder)
const log = { info() {}, warn() {}, error() {}, debug() {} } as never
const ing = new Ingestor({ store, embedder, log })
const words = ['alpha','beta','gamma','delta','这是','中文','测试', 'pangolin', 'report']
let s = ''
const size = Number(process.argv[3] ?? 1) * 1024 * 1024
while (s.length < size) { s += words[Math.floor(Math.random()*words.length)] + (Math.random() < 0.1 ? '.\n' : ' ') }
const u = await store.db.insertInto('users').values({ id: 'u1', name: 'u1' } as never).returningAll().executeTakeFirst().catch(() => null)
const p = await store.db.insertInto('projects').values({ id: 'p1', name: 'p', owner_id: 'u1' } as never).execute().catch((e) => console.log(e.message))
let maxLag = 0; let last = performance.now()
const lags: number[] = []; const timer = setInterval(() => { const now = performance.now(); lags.push(now - last); maxLag = Math.max(maxLag, now - last); last = now }, 10)
const t = performance.now()
const item = await ing.addText({ projectId: 'p1', ownerId: 'u1', title: 'big', text: s })
await ing.idle()
clearInterval(timer)
const row = await store.db.selectFrom('knowledge_items').select(['ingest_status', 'chunk_count']).executeTakeFirst()
console.log(engine, 'MiB', size/1048576, 'ms', Math.round(performance.now() - t), row, 'max loop gap', Math.round(maxLag), 'ticks', lags.length, 'gaps>200', lags.filter(l => l > 200).length)
await store.close()
