/** Loam's Connect errors, told apart for the backend (which turns them into BullMQ's). */
import { Code, ConnectError } from "@connectrpc/connect";

export type LoamErrorKind = "not_found" | "fenced" | "invalid_state" | "already_exists" | "invalid_argument" | "other";

export function kindOf(code: string | Code, message: string): LoamErrorKind {
  const c = typeof code === "string" ? code : Code[code]?.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
  if (c === "not_found") return "not_found";
  if (c === "already_exists") return "already_exists";
  if (c === "invalid_argument") return "invalid_argument";
  if (c === "failed_precondition") return /is stale/.test(message) ? "fenced" : "invalid_state";
  return "other";
}

export function errKind(e: unknown): LoamErrorKind {
  if (e instanceof ConnectError) return kindOf(e.code, e.rawMessage);
  return "other";
}

/** The state an InvalidState message names ("job X is active; cannot ..."). */
export function stateInMessage(message: string): string | undefined {
  const m = /is ([a-z-]+);/.exec(message);
  return m?.[1];
}

export function isNotFound(e: unknown): boolean {
  return errKind(e) === "not_found";
}

export function isUnimplemented(e: unknown): boolean {
  return e instanceof ConnectError && e.code === Code.Unimplemented;
}

const CODES: Record<string, Code> = {
  invalid_argument: Code.InvalidArgument,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  resource_exhausted: Code.ResourceExhausted,
  unavailable: Code.Unavailable,
  deadline_exceeded: Code.DeadlineExceeded,
  permission_denied: Code.PermissionDenied,
  unauthenticated: Code.Unauthenticated,
};

/** A bulk call's per-item error as the ConnectError a single call would have thrown. */
export function itemError(code: string, message: string): ConnectError {
  return new ConnectError(message, CODES[code] ?? Code.Internal);
}
