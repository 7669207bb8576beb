/**
 * Copied into a BullMQ checkout by conformance/run.sh: the shared suite's setup for Loam.
 * Every Queue, Worker, QueueEvents and FlowProducer the suite builds is backed by
 * @loam/bullmq (setDefaultBackendFactory); the test `connection` is an inert stand-in,
 * as in BullMQ's own vitest.postgres.setup.ts.
 */
import { EventEmitter } from 'node:events';
import { setConnectionFactory } from './tests/utils/connection-factory';
import { setDefaultBackendFactory } from './src/utils/create-backend';
import type { IRedisClient } from './src/interfaces';
// @ts-ignore - resolved from the @loam/bullmq checkout by run.sh
import { createLoamBackend } from '__LOAM_BACKEND__';

// Like a connected ioredis client to the tests that listen to it: `ready` for a listener
// added later (the client is ready), `end` after quit. Loam never uses it.
setConnectionFactory(() => {
  const events = new EventEmitter();
  const client: Record<string, unknown> = {
    isCluster: false,
    status: 'ready',
    options: {},
    connect: async () => undefined,
    disconnect: () => undefined,
    quit: async () => {
      client.status = 'end';
      setImmediate(() => events.emit('end'));
      return 'OK';
    },
    duplicate: () => client,
    on: (event: string, listener: (...a: any[]) => void) => {
      events.on(event, listener);
      if (event === 'ready' && client.status === 'ready') setImmediate(listener);
      return client;
    },
    once: (event: string, listener: (...a: any[]) => void) => {
      events.once(event, listener);
      return client;
    },
    off: (event: string, listener: (...a: any[]) => void) => {
      events.off(event, listener);
      return client;
    },
    removeListener: (event: string, listener: (...a: any[]) => void) => {
      events.removeListener(event, listener);
      return client;
    },
    emit: (event: string, ...args: any[]) => events.emit(event, ...args),
  };
  return client as unknown as IRedisClient;
});

process.env.BULLMQ_TEST_BACKEND = 'loam';
const url = process.env.LOAM_URL || process.env.LOAM_JOBS_URL;
setDefaultBackendFactory((name: string, opts: any, options: any) =>
  createLoamBackend(name, { ...opts, connection: { url } }, options),
);
