import type { ColumnType } from 'kysely'

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

/**
 * A json/jsonb column: read as a value, written as JSON text (the store stringifies, so a JS array is
 * never sent as a Postgres array). db-types.generated.ts maps both types to it.
 */
export type JsonColumn = ColumnType<JsonValue, string, string>
