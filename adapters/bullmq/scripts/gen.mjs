// Generates src/gen from ../../proto (protobuf-es, buf). With --check, generates into a
// scratch folder and fails when src/gen differs: the CI stale-check.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const buf = join(root, "node_modules", ".bin", "buf");
const check = process.argv.includes("--check");

function files(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...files(p));
    else out.push(p);
  }
  return out.sort();
}

function generate(outDir) {
  const tmpl = readFileSync(join(root, "buf.gen.yaml"), "utf8").replace("out: src/gen", `out: ${outDir}`);
  const cfg = join(mkdtempSync(join(tmpdir(), "loam-gen-")), "buf.gen.yaml");
  writeFileSync(cfg, tmpl);
  execFileSync(buf, ["generate", "--template", cfg], { cwd: root, stdio: "inherit", env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH}` } });
}

if (!check) {
  generate(join(root, "src", "gen"));
} else {
  const scratch = mkdtempSync(join(tmpdir(), "loam-gen-out-"));
  generate(scratch);
  const want = files(scratch).map((p) => [relative(scratch, p), readFileSync(p, "utf8")]);
  const have = files(join(root, "src", "gen")).map((p) => [relative(join(root, "src", "gen"), p), readFileSync(p, "utf8")]);
  const stale = JSON.stringify(want) !== JSON.stringify(have);
  rmSync(scratch, { recursive: true, force: true });
  if (stale) {
    console.error("adapters/bullmq/src/gen is stale: run `npm run gen` in adapters/bullmq and commit");
    process.exit(1);
  }
  console.log("adapters/bullmq/src/gen is up to date");
}
