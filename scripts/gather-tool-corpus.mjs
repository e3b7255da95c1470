#!/usr/bin/env node
// Gathers real tool definitions for the schema-fidelity corpus (tests/data/tool-corpus.json):
// installs published MCP servers from the npm registry into a temporary folder (install scripts
// off: no browser downloads), starts each over stdio, and asks it `tools/list` (JSON-RPC).
// Each tool becomes an OpenAI function {name, description, parameters = inputSchema}; the file
// names every package's version and licence (docs/tool-calls.md lists them).
//
//   node scripts/gather-tool-corpus.mjs [--dir /tmp/llb-tool-corpus] [--out tests/data/tool-corpus.json]
//
// Servers need no credentials to list their tools; the placeholder tokens below only get them
// past start-up checks. Nothing is called.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const args = process.argv.slice(2);
const opt = (k, d) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
const dir = opt("--dir", "/tmp/llb-tool-corpus");
const out = opt("--out", path.join(path.dirname(new URL(import.meta.url).pathname), "..", "tests/data/tool-corpus.json"));

// package, extra command-line arguments.
const SERVERS = [
  ["@modelcontextprotocol/server-filesystem", ["/tmp"]],
  ["@modelcontextprotocol/server-everything", ["stdio"]],
  ["@modelcontextprotocol/server-memory", []],
  ["@modelcontextprotocol/server-sequential-thinking", []],
  ["@modelcontextprotocol/server-github", []],
  ["@modelcontextprotocol/server-gitlab", []],
  ["@modelcontextprotocol/server-google-maps", []],
  ["@modelcontextprotocol/server-slack", []],
  ["@modelcontextprotocol/server-brave-search", []],
  ["@modelcontextprotocol/server-puppeteer", []],
  ["@modelcontextprotocol/server-postgres", ["postgresql://127.0.0.1:1/x"]],
  ["@modelcontextprotocol/server-everart", []],
  ["@modelcontextprotocol/server-aws-kb-retrieval", []],
  ["@playwright/mcp", []],
  ["@notionhq/notion-mcp-server", []],
  ["chrome-devtools-mcp", []],
  ["@wonderwhy-er/desktop-commander", []],
  ["mcp-server-kubernetes", []],
  ["firecrawl-mcp", []],
  ["tavily-mcp", []],
  ["@circleci/mcp-server-circleci", []],
  ["@executeautomation/playwright-mcp-server", []],
  ["mongodb-mcp-server", []],
  ["@kazuph/mcp-taskmanager", []],
  ["figma-developer-mcp", ["--stdio"]],
  ["@upstash/context7-mcp", []],
];

const ENV = {
  ...process.env,
  GITHUB_PERSONAL_ACCESS_TOKEN: "placeholder", GITLAB_PERSONAL_ACCESS_TOKEN: "placeholder",
  GOOGLE_MAPS_API_KEY: "placeholder", SLACK_BOT_TOKEN: "xoxb-placeholder", SLACK_TEAM_ID: "T0",
  BRAVE_API_KEY: "placeholder", EVERART_API_KEY: "placeholder", AWS_ACCESS_KEY_ID: "placeholder",
  AWS_SECRET_ACCESS_KEY: "placeholder", AWS_REGION: "us-east-1", FIRECRAWL_API_KEY: "fc-placeholder",
  TAVILY_API_KEY: "tvly-placeholder", CIRCLECI_TOKEN: "placeholder", NOTION_TOKEN: "placeholder",
  EXA_API_KEY: "placeholder", FIGMA_API_KEY: "placeholder", PUPPETEER_SKIP_DOWNLOAD: "1",
};

function install() {
  fs.mkdirSync(dir, { recursive: true });
  if (!fs.existsSync(path.join(dir, "package.json"))) fs.writeFileSync(path.join(dir, "package.json"), "{}");
  const missing = SERVERS.map(([p]) => p).filter((p) => !fs.existsSync(path.join(dir, "node_modules", p, "package.json")));
  if (missing.length) {
    execFileSync("npm", ["install", "--ignore-scripts", "--no-audit", "--no-fund", ...missing], { cwd: dir, stdio: "inherit" });
  }
}

function listTools(pkg, extra) {
  const meta = JSON.parse(fs.readFileSync(path.join(dir, "node_modules", pkg, "package.json"), "utf8"));
  const bin = typeof meta.bin === "string" ? meta.bin : Object.values(meta.bin)[0];
  const entry = path.join(dir, "node_modules", pkg, bin);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [entry, ...extra], { cwd: dir, env: ENV, stdio: ["pipe", "pipe", "ignore"] });
    let buf = "";
    const tools = [];
    const done = (why) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      resolve({ meta, tools, why });
    };
    const timer = setTimeout(() => done("timeout"), 20000);
    const send = (m) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
    child.on("error", (e) => done(String(e)));
    child.on("exit", (c) => done(`exited ${c}`));
    child.stdin.on("error", () => {});
    child.stdout.on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let m;
        try { m = JSON.parse(line); } catch { continue; }
        if (m.id === 1) {
          send({ method: "notifications/initialized" });
          send({ id: 2, method: "tools/list", params: {} });
        } else if (m.id >= 2 && m.result) {
          tools.push(...(m.result.tools || []));
          if (m.result.nextCursor) send({ id: m.id + 1, method: "tools/list", params: { cursor: m.result.nextCursor } });
          else done("ok");
        } else if (m.id >= 2 && m.error) done(JSON.stringify(m.error));
      }
    });
    send({ id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "llb-corpus", version: "1" } } });
  });
}

install();
const sources = [];
for (const [pkg, extra] of SERVERS) {
  const { meta, tools, why } = await listTools(pkg, extra);
  console.error(`${pkg}@${meta.version} (${meta.license}): ${tools.length} tools (${why})`);
  // Only packages that state a licence are committed as test data.
  if (!tools.length || !meta.license) continue;
  sources.push({
    package: pkg, version: meta.version, license: meta.license ?? null, registry: "npm",
    tools: tools.map((t) => ({ name: t.name, description: t.description ?? "", parameters: t.inputSchema ?? { type: "object" } })),
  });
}
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, JSON.stringify({ sources }, null, 1) + "\n");
console.error(`${sources.reduce((n, s) => n + s.tools.length, 0)} tools from ${sources.length} packages -> ${out}`);
