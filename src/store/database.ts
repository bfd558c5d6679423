import type { ColumnType, InsertType, SelectType, UpdateType } from 'kysely'
import type { DB } from './db-types.generated.js'

export type { JsonValue } from './json-column.js'

/*
 * The tables' types are generated from the migrated schema (db-types.generated.ts, `npm run db:types`).
 * What the schema cannot say is refined here, once per column: values a check constraint keeps to a
 * few strings, and columns never updated. Everything else is as generated.
 */

export type PermissionMode = 'manual' | 'risky' | 'full'
export type MessageRole = 'system' | 'user' | 'assistant' | 'tool'
export type DecisionStatus = 'pending' | 'approved' | 'rejected' | 'expired'
export type DecisionKind = 'approve' | 'connect'
export type RunStatus = 'queued' | 'running' | 'requires_action' | 'completed' | 'failed' | 'cancelled' | 'expired'
export type RunPhase = 'thinking' | 'tool_called' | 'tool_running' | 'tool_done' | 'finalizing'
export type ApprovalPolicy = 'ask' | 'dontAsk'
export type ToolCallKind = 'command' | 'client' | 'unknown'
export type ToolCallStatus =
  | 'pending'
  | 'running'
  | 'awaiting_decision'
  | 'awaiting_output'
  | 'ok'
  | 'error'
  | 'rejected'
  | 'cancelled'
  | 'expired'
  | 'interrupted'
export type KnowledgeStatus = 'draft' | 'published'
export type IngestStatus = 'pending' | 'ready' | 'failed'
export type KnowledgeSource = 'text' | 'file' | 'command'

/**
 * Per table, per column: a value type (the column keeps its nullability and default, its values
 * narrow to it) or a whole `ColumnType` (taken as it is).
 */
interface Refinements {
  conversations: { permission_mode: PermissionMode }
  messages: { role: MessageRole }
  decisions: {
    // Inserted pending; an update only ever decides it.
    status: ColumnType<DecisionStatus, 'pending' | undefined, Exclude<DecisionStatus, 'pending'>>
    scope: 'once' | 'session'
    kind: ColumnType<DecisionKind, DecisionKind | undefined, never>
  }
  runs: { status: RunStatus; phase: RunPhase; approval_policy: ApprovalPolicy }
  run_tool_calls: { kind: ToolCallKind; status: ToolCallStatus }
  knowledge_items: { status: KnowledgeStatus; ingest_status: IngestStatus; source: KnowledgeSource }
  stream_tickets: { expires_at: ColumnType<Date, Date, Date> }
}

/** The store's tables: the generated ones, refined. */
export type Database = {
  [T in keyof DB]: Refined<DB[T], T extends keyof CheckedRefinements ? CheckedRefinements[T] : Record<never, never>>
}

type Refined<Table, R> = {
  [C in keyof Table]: C extends keyof R
    ? R[C] extends ColumnType<unknown, unknown, unknown>
      ? R[C]
      : Narrowed<Table[C], R[C]>
    : C extends 'created_at'
      ? NeverUpdated<Table[C]>
      : Table[C]
}

/** `Value` in place of the column's value, keeping whether it reads or writes null and may be left out. */
type Narrowed<Column, Value> = ColumnType<
  Value | Extract<SelectType<Column>, null>,
  Value | Extract<InsertType<Column>, null | undefined>,
  Value | Extract<UpdateType<Column>, null>
>

/** A row's creation time is written once. */
type NeverUpdated<Column> = ColumnType<SelectType<Column>, InsertType<Column>, never>

/**
 * The refinements, checked against the generated tables: a table or column the schema no longer has,
 * or a type that does not fit in the column's, is a type error here (not a silently unrefined column).
 */
type CheckedRefinements = Checked<Refinements>
type Checked<R extends Fits<R>> = R
type Fits<R> = {
  [T in keyof R]: T extends keyof DB ? { [C in keyof R[T]]: C extends keyof DB[T] ? Fitting<DB[T][C]> : never } : never
}
type Fitting<Column> =
  NonNullable<SelectType<Column>> | ColumnType<SelectType<Column>, InsertType<Column>, UpdateType<Column>>
