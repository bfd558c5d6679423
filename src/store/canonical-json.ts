import canonicalizeModule from 'canonicalize'

// The package is CommonJS with an ES-style default in its typings; take whichever shape loads.
const canonicalize = ((canonicalizeModule as unknown as { default?: unknown }).default ?? canonicalizeModule) as (
  input: unknown,
) => string | undefined

/** Canonical JSON (RFC 8785): equal values give byte-equal text, so hashes of it are stable. */
export function canonicalJson(value: unknown): string {
  return canonicalize(value) ?? ''
}
