/**
 * Copied into a BullMQ checkout by conformance/run.sh: the shared suite's setup for Loam.
 * Every Queue, Worker, QueueEvents and FlowProducer the suite builds is backed by
 * @loam/bullmq (setDefaultBackendFactory); the test `connection` is an inert stand-in,
 * as in BullMQ's own vitest.postgres.setup.ts.
 */
import { setConnectionFactory } from './tests/utils/connection-factory';
import { setDefaultBackendFactory } from './src/utils/create-backend';
import type { IRedisClient } from './src/interfaces';
// @ts-ignore - resolved from the @loam/bullmq checkout by run.sh
import { createLoamBackend } from '__LOAM_BACKEND__';

setConnectionFactory(() => {
  const client: Record<string, unknown> = {
    isCluster: false,
    status: 'ready',
    options: {},
    connect: async () => undefined,
    disconnect: () => undefined,
    quit: async () => 'OK',
    duplicate: () => client,
    on: () => client,
    once: () => client,
    off: () => client,
    removeListener: () => client,
    emit: () => false,
  };
  return client as unknown as IRedisClient;
});

process.env.BULLMQ_TEST_BACKEND = 'loam';
const url = process.env.LOAM_JOBS_URL;
setDefaultBackendFactory((name: string, opts: any, options: any) =>
  createLoamBackend(name, { ...opts, connection: { url } }, options),
);
