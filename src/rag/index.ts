/** Retrieval over project knowledge: ingestion, chunking, embeddings, hybrid search, shared retrieval. */
export { Retriever, RetrievalScopeError, type RetrievalHit, type RetrieveOptions } from './retriever.js'
export { Ingestor, type IngestorOptions, type NewFileItem, type NewTextItem } from './ingestor.js'
export { KnowledgeService, type ProjectResolver } from './knowledge-service.js'
export { createEmbedder, embedAll, EmbeddingError, HashingEmbedder, OpenAIEmbedder, type Embedder, type EmbeddingSettings } from './embeddings.js'
export { prepareEmbeddings, reembedAll, EmbedderMismatchError } from './embedder-settings.js'
export { detectFormat, extractText, ExtractError, mediaTypeOf, type SourceFormat } from './extract.js'
export { chunkMarkdown, type TextChunk, type ChunkOptions } from './chunker.js'
export { tokenize, toTsvector, toTsquery, tsqueryStages, queryTokens, snippet, cleanText, type Snippet } from './text.js'
