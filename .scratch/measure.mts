import { chunkMarkdown } from '../src/rag/chunker.ts'
import { HashingEmbedder, embedAll } from '../src/rag/embeddings.ts'
import { toTsvector, cleanText } from '../src/rag/text.ts'
const words = ['alpha','beta','gamma','delta','这是','中文','测试', 'pangolin', 'report']
let s = ''
while (s.length < 15*1024*1024) { s += words[Math.floor(Math.random()*words.length)] + (Math.random() < 0.1 ? '.\n' : ' ') }
let t = performance.now()
const clean = cleanText(s); console.log('clean', performance.now()-t); t = performance.now()
const pieces = chunkMarkdown(clean); console.log('chunk', pieces.length, performance.now()-t); t = performance.now()
const e = new HashingEmbedder()
const emb = await embedAll(e, pieces.slice(0, 2000).map(p => p.text)); console.log('embed 2000', performance.now()-t); t = performance.now()
for (const p of pieces.slice(0,2000)) toTsvector(p.text); console.log('tsv 2000', performance.now()-t)
