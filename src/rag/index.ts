/** Retrieval over project knowledge: ingestion, chunking, embeddings, hybrid search, shared retrieval. */
export {
  defaultMinSimilarity,
  Retriever,
  RetrievalScopeError,
  type RetrievalHit,
  type RetrieveOptions,
} from './retriever.js'
export {
  Ingestor,
  UploadTooLargeError,
  type IngestorOptions,
  type NewFileItem,
  type NewTextItem,
  type StagedUpload,
} from './ingestor.js'
export { Memories, memoryLimits, type MemoryFilter, type MemoryHit, type MemoryInput } from './memories.js'
export { KnowledgeService, type ProjectResolver } from './knowledge-service.js'
export {
  createEmbedder,
  embedAll,
  EmbeddingError,
  HashingEmbedder,
  OpenAIEmbedder,
  type Embedder,
  type EmbeddingSettings,
} from './embeddings.js'
export {
  prepareEmbeddings,
  reembedAll,
  EmbedderMismatchError,
  InterruptedReembedError,
  vectorIndexWarning,
} from './embedder-settings.js'
export {
  defaultExtractLimits,
  detectFormat,
  extractText,
  ExtractError,
  mediaTypeOf,
  type ExtractLimits,
  type SourceFormat,
} from './extract.js'
export { DocumentExtractor, type DocumentExtractorOptions } from './document-extractor.js'
export { chunkMarkdown, type TextChunk, type ChunkOptions } from './chunker.js'
export {
  tokenize,
  toTsvector,
  toTsquery,
  tsqueryStages,
  queryTokens,
  snippet,
  cleanText,
  type Snippet,
} from './text.js'
