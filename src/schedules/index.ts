/** Scheduled runs: a project's schedules, and the firer every instance runs (docs/guides/schedules.md). */
export { ScheduleFirer, type ScheduleFirerOptions } from './schedule-firer.js'
export { ScheduleService, type ScheduleServiceDeps } from './schedule-service.js'
export { nextOccurrence, timingErrors, everyMs, isTimeZone, type ScheduleTiming } from './schedule-spec.js'
