"""`Payloads`: what a new job or a new payload needs before its transaction: checks,
ids, and bytes over the inline limit moved to the blob store (so job records stay
small); and the clean-up of blobs whose transaction did not keep them."""

from __future__ import annotations

import dataclasses

from loam_common import ids, validate
from loam_common.blobs import INLINE_LIMIT, BlobStore, blob_ref
from loam_common.errors import InvalidArgument, JobsError, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import Ok, Outcome
from loam_common.jobs.new_job import Enqueued, NewJob, check_opts, request_hash
from loam_common.validate import Namespace


class Payloads:
    def __init__(self, blobs: BlobStore | None, payload_limit: int) -> None:
        self.blobs = blobs
        self.payload_limit = payload_limit

    async def new_jobs(
        self, ns: Namespace, queue: str, items: list[tuple[pb.TaskSpec, pb.EnqueueOpts, str]]
    ) -> list[NewJob]:
        """Check every job first (bad input writes nothing, not even a blob), then give
        each its id and move payloads over the inline limit to the blob store. `items`
        are (task, opts, the field name errors use)."""
        validate.name("queue", queue)
        limit = self.payload_limit
        news = []
        for (task, opts, field), job_id in zip(items, ids.new_ulids(len(items)), strict=True):
            validate.text(f"{field}.name", task.name, 256, allow_empty=False)
            check_opts(opts, f"{field}.opts")
            payload = task.payload  # each access to a sub-message builds a wrapper: take it once
            size = len(payload.data)
            if size > limit:
                raise PayloadTooLarge(size, limit)
            if payload.blob_ref:
                raise InvalidArgument(f"{field}.payload.blob_ref", "is set by the server; send the data")
            validate.json_payload(f"{field}.payload.data", payload)
            payload.size = size
            news.append(NewJob(job_id, task, opts))
        if self.blobs is not None:
            try:
                for i, new in enumerate(news):
                    if new.task.payload.size > INLINE_LIMIT:
                        if new.opts.job_key or new.opts.HasField("idempotency"):  # compared as sent
                            new = news[i] = dataclasses.replace(
                                new, sent_hash=request_hash(new.task, new.opts)
                            )
                        ref = blob_ref(ns, queue, new.job_id, "payload")
                        await self.blobs.put(ref, new.task.payload.data)
                        new.task.payload.blob_ref = ref
                        new.task.payload.data = b""
            except BaseException:
                await self.drop_unkept(news, None)
                raise
        return news

    async def new_job(
        self, ns: Namespace, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts, field: str
    ) -> NewJob:
        (new,) = await self.new_jobs(ns, queue, [(task, opts, field)])
        return new

    async def drop_unkept(self, news: list[NewJob], results: list[Enqueued | JobsError] | None) -> None:
        """Blobs written for jobs that were not created are nobody's: delete them
        (`results` None: none was). A retry answered by an idempotency key gets the first
        call's answer, `created` and all, for a job of another id: not this one."""
        if self.blobs is None:
            return
        for i, new in enumerate(news):
            ref = new.task.payload.blob_ref
            result = results[i] if results is not None else None
            if ref and not (isinstance(result, Enqueued) and result.created and result.job_id == new.job_id):
                await self.blobs.delete(ref)

    async def replacement(self, ns: Namespace, queue: str, job_id: str, data: pb.Payload) -> pb.Payload:
        """A replacement payload (progress data, updateData), checked like an enqueued
        one; over the inline limit it goes to the blob store, as at enqueue."""
        if data.blob_ref:
            raise InvalidArgument("data.blob_ref", "is set by the server; send the data")
        if len(data.data) > self.payload_limit:
            raise PayloadTooLarge(len(data.data), self.payload_limit)
        validate.json_payload("data.data", data)
        if len(data.data) <= INLINE_LIMIT or self.blobs is None:
            return data
        ref = blob_ref(ns, queue, job_id, f"payload-{ids.new_ulid()}")
        await self.blobs.put(ref, data.data)
        return pb.Payload(blob_ref=ref, content_type=data.content_type, size=len(data.data))

    async def drop(self, data: pb.Payload | None) -> None:
        """A replacement payload's blob whose transaction did not commit is nobody's."""
        if data is not None and data.blob_ref and self.blobs is not None:
            await self.blobs.delete(data.blob_ref)

    async def result(self, ns: Namespace, queue: str, job_id: str, outcome: Outcome) -> Outcome:
        """An outcome whose result is too large to keep inline, with the result moved."""
        r = outcome.result if isinstance(outcome, Ok) else None
        if r is None or len(r.data) <= INLINE_LIMIT or self.blobs is None:
            return outcome
        ref = blob_ref(ns, queue, job_id, f"result-{ids.new_ulid()}")
        await self.blobs.put(ref, r.data)
        stored = pb.Payload(blob_ref=ref, content_type=r.content_type, size=len(r.data))
        return dataclasses.replace(outcome, result=stored)

    async def inline(self, jobs: list[pb.Job]) -> list[pb.Job]:
        """Leased jobs with their payloads read back from the blob store."""
        if self.blobs is not None:
            for job in jobs:
                if job.task.payload.blob_ref:
                    job.task.payload.data = await self.blobs.get(job.task.payload.blob_ref)
        return jobs

    async def inline_values(self, deps: list[pb.Dependency]) -> list[pb.Dependency]:
        """Dependencies with their results read back from the blob store."""
        if self.blobs is not None:
            for dep in deps:
                if dep.value.blob_ref:
                    try:
                        dep.value.data = await self.blobs.get(dep.value.blob_ref)
                    except FileNotFoundError:
                        pass  # the child was removed by retention and its result blob with it
        return deps
