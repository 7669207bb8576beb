/** Copied into a BullMQ checkout by conformance/run.sh: the 22 shared test files that
 * exercise a backend (tests/<area>.test.ts; *.redis.test.ts and the Redis-client files
 * are left out), run against Loam. */
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: [
      'tests/{worker,job,flow,job_scheduler,getters,clean,queue,telemetry_interface,deduplication,rate_limiter,job_cancellation,job_cancellation_advanced,lock_manager,events,stalled_jobs,pause,delay,concurrency,job_scheduler_stress,metrics,obliterate,bulk}.test.ts',
    ],
    setupFiles: ['./vitest.loam.setup.ts'],
    globalSetup: ['./vitest.loam.global-setup.ts'],
    testTimeout: 10000,
    hookTimeout: 10000,
    sequence: { concurrent: false },
    globals: false,
  },
});
