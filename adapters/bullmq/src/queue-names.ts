/**
 * BullMQ queue names ↔ Loam queue names. BullMQ takes any name without ':'; Loam's names
 * are 1-128 of A-Z a-z 0-9 . _ : @ - (they are key segments and metric labels). A BullMQ
 * name that fits is used as is; any other character is written as ':' and two hex digits
 * per UTF-8 byte. BullMQ names never hold ':', so the mapping is reversible, and mapping a
 * Loam name again changes nothing.
 */
const PLAIN = /^[A-Za-z0-9._@-]$/;

export function toLoamQueue(bullName: string): string {
  let out = "";
  for (const ch of bullName) {
    if (PLAIN.test(ch) || ch === ":") out += ch;
    else for (const b of Buffer.from(ch, "utf8")) out += `:${b.toString(16).padStart(2, "0")}`;
  }
  return out;
}

export function toBullQueue(loamName: string): string {
  if (!loamName.includes(":")) return loamName;
  return loamName.replace(/(?::[0-9a-f]{2})+/g, (run) => Buffer.from(run.replaceAll(":", ""), "hex").toString("utf8"));
}
