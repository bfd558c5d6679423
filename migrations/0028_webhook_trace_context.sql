-- Tracing (docs/guides/operating.md#tracing): the W3C traceparent of the work that committed an event,
-- kept with each webhook message, so its deliveries continue that trace (null when tracing is off).

alter table webhook_messages add column trace_parent text;
