// Bundles src/main.ts and src/styles.css into dist/assets/ under content-hashed names,
// writes dist/index.html pointing at them, and fails when the bundle (JS + CSS,
// gzipped) passes the budget.
import { build } from "esbuild";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const BUDGET_GZIP_BYTES = 200 * 1024;

rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, "assets"), { recursive: true });
const result = await build({
  entryPoints: [join(root, "src/main.ts"), join(root, "src/styles.css")],
  bundle: true,
  minify: true,
  sourcemap: false,
  format: "esm",
  target: "es2022",
  outdir: join(dist, "assets"),
  entryNames: "[name]-[hash]",
  metafile: true,
  logLevel: "warning",
});
const outputs = Object.keys(result.metafile.outputs);
const js = outputs.find((f) => f.endsWith(".js"));
const css = outputs.find((f) => f.endsWith(".css"));
const html = readFileSync(join(root, "src/index.html"), "utf8")
  .replace("%CSS%", `/console/assets/${basename(css)}`)
  .replace("%JS%", `/console/assets/${basename(js)}`);
writeFileSync(join(dist, "index.html"), html);
const gz = outputs.reduce((n, f) => n + gzipSync(readFileSync(join(root, "..", "console", f.replace(/^.*?dist\//, "dist/")))).length, 0);
console.log(`console: dist/ built, ${(gz / 1024).toFixed(1)} kB gzipped (budget ${BUDGET_GZIP_BYTES / 1024} kB)`);
if (gz > BUDGET_GZIP_BYTES) {
  console.error("console: the bundle is over its budget");
  process.exit(1);
}
