// Sums the per-file JSON reports of a conformance run, leaving out the tests that
// excluded.txt lists ("<file> > <full test name>  # reason"). Prints the counts, and the
// failures to failures.txt in the results folder.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [resultsDir, excludedPath] = process.argv.slice(2);
const excluded = new Map();
for (const line of readFileSync(excludedPath, "utf8").split("\n")) {
  const t = line.trim();
  if (!t || t.startsWith("#")) continue;
  const [name, reason = ""] = t.split("  # ");
  excluded.set(name.trim(), reason.trim());
}
let pass = 0, fail = 0, skip = 0, excl = 0, total = 0;
const failures = [];
const perFile = [];
const seenExcluded = new Set();
for (const f of readdirSync(resultsDir).filter((n) => n.endsWith(".json")).sort()) {
  let r;
  try {
    r = JSON.parse(readFileSync(join(resultsDir, f), "utf8"));
  } catch {
    continue;
  }
  for (const file of r.testResults ?? []) {
    const base = file.name.split("/").pop();
    let p = 0, fl = 0, s = 0;
    for (const t of file.assertionResults ?? []) {
      const key = `${base} > ${t.fullName}`;
      total++;
      if (excluded.has(key)) {
        excl++;
        seenExcluded.add(key);
        continue;
      }
      if (t.status === "passed") p++;
      else if (t.status === "failed") {
        fl++;
        failures.push(`${key}\n    ${(t.failureMessages?.[0] ?? "").split("\n")[0].slice(0, 300)}`);
      } else s++;
    }
    pass += p; fail += fl; skip += s;
    perFile.push(`${base.padEnd(36)} ${String(p).padStart(4)} passed ${String(fl).padStart(4)} failed ${String(s).padStart(3)} skipped`);
  }
}
writeFileSync(join(resultsDir, "failures.txt"), failures.join("\n") + "\n");
console.log(perFile.join("\n"));
for (const k of excluded.keys()) if (!seenExcluded.has(k)) console.log(`(excluded.txt names a test not in this run: ${k})`);
console.log(`\nconformance: ${total} tests; ${excl} excluded; of the ${total - excl} others:`);
console.log(`${pass} passed, ${fail} failed, ${skip} skipped`);
